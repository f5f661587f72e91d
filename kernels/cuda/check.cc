#include "kernels/cuda/check.h"

namespace frost::cuda {

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

void throw_cuda_error(int code, const char* name, const char* expr, const char* file, int line) {
  const bool sticky = is_sticky(static_cast<cudaError_t>(code));
  throw CudaError(std::string("CUDA error ") + std::to_string(code) + " (" + name + ") in " + expr + " at " + file +
                      ":" + std::to_string(line) + (sticky ? " [sticky: the CUDA context is unusable]" : ""),
                  code, sticky);
}

void throw_cublas_error(int status, const char* name, const char* expr, const char* file, int line) {
  // A cuBLAS failure is sticky only when the context under it is: ask the runtime.
  const cudaError_t rt = cudaPeekAtLastError();
  const bool sticky = is_sticky(rt);
  throw CudaError(std::string("cuBLAS error ") + std::to_string(status) + " (" + name + ") in " + expr + " at " +
                      file + ":" + std::to_string(line) + (sticky ? " [sticky: the CUDA context is unusable]" : ""),
                  status, sticky);
}

}  // namespace frost::cuda
