#pragma once
// Device helpers the CUDA kernel files share (kernels/cuda/ops.cu, gemv.cu): warp and block reductions, the
// grid size of a launch. Internal linkage (an unnamed namespace): every .cu gets its own copy, as before the
// split.
#include <cuda_runtime.h>

#include <cstdint>

namespace frost::cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  v = warp_sum(v);
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    float s = lane < static_cast<int>(blockDim.x / kWarp) ? part[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

inline int blocks_for(int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

}  // namespace
}  // namespace frost::cuda
