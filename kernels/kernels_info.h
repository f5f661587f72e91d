#pragma once
// Which kernel back ends this build carries. CUDA kernels (kernels/*.cu) are compiled
// only with -DFROST_CUDA=ON; every kernel keeps a CPU reference twin in this folder.
namespace frost::kernels {
// True when this binary was built with FROST_CUDA=ON.
bool built_with_cuda();

#ifdef FROST_WITH_CUDA
// Number of visible CUDA devices (0 on error). kernels/cuda_smoke.cu
int cuda_device_count();
// Runs a tiny kernel and checks its result on the first device.
bool cuda_axpy_smoke();
#endif
}  // namespace frost::kernels
