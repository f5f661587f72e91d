// Stands in for core/kv/attend.cc in the fuzz build. core/kv/kvsplice.cc's decode kernel
// (kvsplice_attend) takes its per-thread scratch from kernels::thread_scratch, defined in attend.cc, and
// attend.cc does not compile with clang 14 (its AVX-512 intrinsics sit in lambdas and templates that do
// not inherit the enclosing function's target attribute; GCC accepts it). The fuzz targets read KVSplice
// files and never run attention, so this definition only has to satisfy the linker; it aborts if called.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/kv/attend.h"

namespace frost::kernels {

float* thread_scratch(int64_t n) {
  std::fprintf(stderr, "fuzz build: kernels::thread_scratch(%lld) called; attention is not part of it\n",
               static_cast<long long>(n));
  std::abort();
}

}  // namespace frost::kernels
