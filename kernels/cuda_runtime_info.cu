// The CUDA runtime as frost_kernels sees it (kernels/kernels_info.h). The kernels themselves and the device
// decoder live in kernels/cuda/ (library frost_cuda).
#include <cuda_runtime.h>

#include "kernels/kernels_info.h"

namespace frost::kernels {

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace frost::kernels
