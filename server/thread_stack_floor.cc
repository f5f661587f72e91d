// A floor under explicitly requested thread stack sizes, for every thread frostd starts.
//
// Why: glibc carves a thread's static TLS block out of its stack. LibTorch's dependency closure brings more
// than 64 KiB of static TLS, so a thread created with a small explicit stack size fails in pthread_create
// with EINVAL. civetweb (under prometheus-cpp's Exposer, which served /metrics until /metrics became
// server/metrics_https.h) requested such a stack for its workers, and /metrics then failed to start with
// "null context when constructing CivetServer". Kept as a guard for any library that asks for a small stack.
// Reproduce: LD_PRELOAD=libtorch_cpu.so with any program that creates a thread with a 64 KiB stack.
//
// The executable defines pthread_attr_setstacksize, so the dynamic linker binds every library's calls here
// first; we raise the request to kMinStack and forward to glibc. Larger requests and
// threads without an explicit size are untouched.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

namespace {
constexpr std::size_t kMinStack = std::size_t{1} << 20;  // 1 MiB: TLS + a real stack.
using SetStackSizeFn = int (*)(pthread_attr_t*, std::size_t);
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, std::size_t size) noexcept {
  static const auto real = reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (real == nullptr) return 22;  // EINVAL: cannot happen with glibc.
  return real(attr, std::max(size, kMinStack));
}
