#pragma once
// FROST_CHECK: "cannot continue safely" — always on, prints the message and aborts.
// FROST_DCHECK: provable internal invariants, debug builds only. Never for request data.
#include <cstdio>
#include <cstdlib>

#define FROST_CHECK(cond, msg)                                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "FATAL %s:%d: check failed: %s: %s\n", __FILE__, __LINE__, \
                   #cond, (msg));                                                       \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define FROST_DCHECK(cond) \
  do {                     \
  } while (0)
#else
#define FROST_DCHECK(cond) FROST_CHECK(cond, "debug invariant")
#endif
