#include "kernels/kernels_info.h"

namespace frost::kernels {
bool built_with_cuda() {
#ifdef FROST_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef FROST_WITH_CUDA
int cuda_device_count() { return 0; }
#endif
}  // namespace frost::kernels
