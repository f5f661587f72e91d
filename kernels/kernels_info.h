#pragma once
// Which kernel back ends this build carries. CUDA kernels (kernels/*.cu) are compiled
// only with -DFROST_CUDA=ON; every kernel keeps a CPU reference twin in this folder.
namespace frost::kernels {
// True when this binary was built with FROST_CUDA=ON.
bool built_with_cuda();
}  // namespace frost::kernels
