#pragma once
// Error checking for CUDA runtime and cuBLAS calls: a failed call throws CudaError naming the call, the error
// and where it was made, and whether the error is sticky — one that leaves the CUDA context unusable (an
// illegal address, a failed or timed-out launch, an uncorrectable ECC error): every later call fails too, so
// the process must stop serving from this device.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace frost::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& what, int code, bool sticky) : std::runtime_error(what), code_(code), sticky_(sticky) {}
  int code() const { return code_; }
  bool sticky() const { return sticky_; }

 private:
  int code_;
  bool sticky_;
};

// Whether a cudaError_t leaves the context unusable (CUDA's "sticky" errors).
bool is_sticky(cudaError_t e);
[[noreturn]] void throw_cuda_error(int code, const char* name, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* name, const char* expr, const char* file, int line);

}  // namespace frost::cuda

#define FROST_CUDA_CHECK(expr)                                                                         \
  do {                                                                                                 \
    const cudaError_t frost_e_ = (expr);                                                               \
    if (frost_e_ != cudaSuccess)                                                                       \
      ::frost::cuda::throw_cuda_error(static_cast<int>(frost_e_), cudaGetErrorString(frost_e_), #expr, \
                                      __FILE__, __LINE__);                                             \
  } while (0)

// After a kernel launch: the launch itself (bad configuration) fails here, not at the next sync.
#define FROST_CUDA_LAUNCHED() FROST_CUDA_CHECK(cudaGetLastError())
