// Smallest real CUDA translation unit: proves the FROST_CUDA build plumbing (nvcc flags,
// architectures, linking cudart) until the first production kernels (KV quantisation,
// repair-aware attention) land here with their CPU reference twins.
#include <cuda_runtime.h>

#include "kernels/kernels_info.h"

namespace frost::kernels {
namespace {
__global__ void axpy_kernel(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
}  // namespace

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool cuda_axpy_smoke() {
  constexpr int n = 256;
  float *x = nullptr, *y = nullptr;
  if (cudaMallocManaged(&x, n * sizeof(float)) != cudaSuccess) return false;
  if (cudaMallocManaged(&y, n * sizeof(float)) != cudaSuccess) {
    cudaFree(x);
    return false;
  }
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.f;
  }
  axpy_kernel<<<(n + 127) / 128, 128>>>(2.f, x, y, n);
  bool ok = cudaDeviceSynchronize() == cudaSuccess;
  for (int i = 0; ok && i < n; ++i) ok = y[i] == 1.f + 2.f * static_cast<float>(i);
  cudaFree(x);
  cudaFree(y);
  return ok;
}
}  // namespace frost::kernels
