#include "kernels/kernels_info.h"

namespace frost::kernels {
bool built_with_cuda() {
#ifdef FROST_WITH_CUDA
  return true;
#else
  return false;
#endif
}
}  // namespace frost::kernels
