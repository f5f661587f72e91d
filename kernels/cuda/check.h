#pragma once
// Error checking for CUDA runtime and cuBLAS calls: a failed call throws std::runtime_error naming the
// call, the error and where it was made.
#include <cuda_runtime_api.h>

namespace frost::cuda {
[[noreturn]] void throw_cuda_error(int code, const char* name, const char* expr, const char* file, int line);
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
