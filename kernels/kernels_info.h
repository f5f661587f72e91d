#pragma once
// Which kernel back ends this build carries. CUDA kernels (kernels/cuda/) are compiled only with
// -DFROST_CUDA=ON; every kernel keeps a CPU reference twin (kernels/cuda/reference.h).
namespace frost::kernels {
// True when this binary was built with FROST_CUDA=ON.
bool built_with_cuda();

// Number of visible CUDA devices (0 on error, or in a build without CUDA). kernels/cuda_runtime_info.cu
int cuda_device_count();
}  // namespace frost::kernels
