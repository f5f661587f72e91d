// The decoder step's CUDA kernels (kernels/cuda/ops.h) but the GEMV (gemv.cu) and the sampler (sample.cu).
// Written for correctness first, with the memory access patterns that matter for decode: attention reads each
// K/V row once per (row, kv head) for all of its query heads.
//
// Rounding: products and sums that must equal the CPU bit for bit (RoPE, the int8/int4 row quantizer) use
// the _rn intrinsics, which nvcc never contracts into an FMA; the rest is ordinary fp32 with the stated
// test tolerances (tests/gpu/cuda_ops_test.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace frost::cuda {

namespace {

__device__ __forceinline__ float load_w(const void* w, DType dt, int64_t i) {
  if (dt == DType::kF32) return static_cast<const float*>(w)[i];
  if (dt == DType::kF16) return __half2float(static_cast<const __half*>(w)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]);
}

// ---------------------------------------------------------------------------------------------- embed
__global__ void embed_kernel(const void* table, DType dt, const float* pos_embed, StepRows rows, int dim,
                             float* out) {
  const int r = blockIdx.x;
  const int64_t tok = rows.token[r];
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = load_w(table, dt, tok * dim + i);
    if (pos_embed) v += pos_embed[static_cast<int64_t>(rows.pos[r]) * dim + i];
    out[static_cast<int64_t>(r) * dim + i] = v;
  }
}

// ---------------------------------------------------------------------------------------------- norms
__global__ void rmsnorm_kernel(const float* x, const float* w, int dim, float eps, float* out) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * inv * w[i];
}

__global__ void layernorm_kernel(const float* x, const float* w, const float* b, int dim, float eps,
                                 float* out) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float s = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(dim);
  float v = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const float inv = rsqrtf(block_sum(v) / static_cast<float>(dim) + eps);
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

// ------------------------------------------------------------------------------------ rope + KV append
__device__ __forceinline__ uint8_t* kv_block(uint8_t* pool, const KvLayout& kv, int layer,
                                             const StepRows& rows, int r, int* slot) {
  const int p = rows.pos[r];
  const int b = rows.block_table[static_cast<int64_t>(rows.seq[r]) * rows.max_blocks + p / kv.block_tokens];
  *slot = p % kv.block_tokens;
  return pool + (static_cast<int64_t>(b) * kv.n_layer + layer) * kv.layer_block_bytes();
}

// One warp writes one head row x[0..D) (already rotated) into dst / scale.
__device__ void encode_row_warp(const float* x, int d, KvFormat f, uint8_t* dst, float* scale) {
  const int lane = threadIdx.x % kWarp;
  switch (f) {
    case KvFormat::kF32:
      for (int i = lane; i < d; i += kWarp) reinterpret_cast<float*>(dst)[i] = x[i];
      return;
    case KvFormat::kF16:
      for (int i = lane; i < d; i += kWarp) reinterpret_cast<__half*>(dst)[i] = __float2half_rn(x[i]);
      return;
    case KvFormat::kBF16:
      for (int i = lane; i < d; i += kWarp)
        reinterpret_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(x[i]);
      return;
    case KvFormat::kInt8:
    case KvFormat::kInt4: {
      // kernels/cpu/kv_quant_row.h, operation for operation.
      float amax = 0.f;
      for (int i = lane; i < d; i += kWarp) amax = fmaxf(amax, fabsf(x[i]));
      amax = warp_max(amax);
      const int qm = f == KvFormat::kInt8 ? 127 : 7;
      const float s = amax > 0.f && isfinite(amax) ? __fdiv_rn(amax, static_cast<float>(qm)) : 0.f;
      const float inv = s > 0.f ? __fdiv_rn(1.f, s) : 0.f;
      auto quant = [&](float xi) {
        const float q = rintf(__fmul_rn(xi, inv));
        return static_cast<int>(fminf(fmaxf(q, static_cast<float>(-qm)), static_cast<float>(qm)));
      };
      if (f == KvFormat::kInt8) {
        for (int i = lane; i < d; i += kWarp)
          reinterpret_cast<int8_t*>(dst)[i] = static_cast<int8_t>(quant(x[i]));
      } else {
        for (int j = lane; j < d / 2; j += kWarp) {
          const int lo = quant(x[2 * j]), hi = quant(x[2 * j + 1]);
          dst[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        }
      }
      if (lane == 0) *scale = s;
      return;
    }
  }
}

// A warp per head of a row (grid: rows × head groups of 8): q heads are rotated in place; k heads rotated,
// then encoded into the pool; v heads encoded. No warp reads another's output, so no block barrier.
__global__ void rope_kv_append_kernel(float* qkv, const float* rope_cos, const float* rope_sin, StepRows rows,
                                      int n_head, KvLayout kv, int layer, uint8_t* pool) {
  const int r = blockIdx.x, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int D = kv.head_dim, Hkv = kv.n_head_kv, half = D / 2;
  if (h >= n_head + 2 * Hkv) return;
  float* x = qkv + static_cast<int64_t>(r) * (n_head + 2 * Hkv) * D + static_cast<int64_t>(h) * D;
  const int p = rows.pos[r];
  if (rope_cos && h < n_head + Hkv) {
    // (x1, x2) → (x1·c − x2·s, x2·c + x1·s), unfused as on the CPU.
    for (int j = lane; j < half; j += kWarp) {
      const float c = rope_cos[static_cast<int64_t>(p) * half + j],
                  s = rope_sin[static_cast<int64_t>(p) * half + j];
      const float x1 = x[j], x2 = x[j + half];
      x[j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      x[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
    __syncwarp();
  }
  if (h < n_head) return;
  const int i = h - n_head;  // 0..2·Hkv: k heads, then v heads
  int slot = 0;
  uint8_t* base = kv_block(pool, kv, layer, rows, r, &slot);
  const bool is_v = i >= Hkv;
  const int g = is_v ? i - Hkv : i;
  const int64_t idx = static_cast<int64_t>(g) * kv.block_tokens + slot;
  uint8_t* dst = base + (is_v ? kv.rows_bytes() : 0) + idx * kv.row_bytes();
  float* scale = reinterpret_cast<float*>(base + 2 * kv.rows_bytes() + (is_v ? kv.scales_bytes() : 0)) + idx;
  encode_row_warp(x, D, kv.format, dst, scale);
}

// ------------------------------------------------------------------------------------------ attention
__device__ __forceinline__ float kv_load(const uint8_t* row, KvFormat f, int i, float s) {
  switch (f) {
    case KvFormat::kF32:
      return reinterpret_cast<const float*>(row)[i];
    case KvFormat::kF16:
      return __half2float(reinterpret_cast<const __half*>(row)[i]);
    case KvFormat::kBF16:
      return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
    case KvFormat::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(row)[i]) * s;
    case KvFormat::kInt4: {
      const int b = row[i / 2];
      int n = (i % 2 == 0) ? (b & 0xF) : ((b >> 4) & 0xF);
      n = n >= 8 ? n - 16 : n;
      return static_cast<float>(n) * s;
    }
  }
  return 0.f;
}

// Eight consecutive elements d0..d0+7 of an encoded row (d0 % 8 == 0), decoded: one 4- to 32-byte load.
__device__ __forceinline__ void kv_load8(const uint8_t* row, KvFormat f, int d0, float s, float* o) {
  switch (f) {
    case KvFormat::kF32: {
      const float4 a = *reinterpret_cast<const float4*>(row + 4 * d0),
                   b = *reinterpret_cast<const float4*>(row + 4 * d0 + 16);
      o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
      return;
    }
    case KvFormat::kF16:
    case KvFormat::kBF16: {
      const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * d0);
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (f == KvFormat::kBF16) {
          o[2 * i] = __uint_as_float(u[i] << 16);
          o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else {
          o[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[i] & 0xffffu)));
          o[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[i] >> 16)));
        }
      }
      return;
    }
    case KvFormat::kInt8: {
      const uint2 v = *reinterpret_cast<const uint2*>(row + d0);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t w = i < 4 ? v.x : v.y;
        o[i] = static_cast<float>(static_cast<int8_t>((w >> (8 * (i % 4))) & 0xffu)) * s;
      }
      return;
    }
    case KvFormat::kInt4: {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(row + d0 / 2);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int n = static_cast<int>((w >> (4 * i)) & 0xFu);  // byte i/2: low nibble even, high odd
        o[i] = static_cast<float>((n ^ 8) - 8) * s;
      }
      return;
    }
  }
}

constexpr int kAttnThreads = 128, kAttnWarpsN = kAttnThreads / kWarp;

// Block (row, kv head, split) for the G query heads of the kv head over positions [split·L, split·L + L) of
// the row's 0..pos (flash-decoding: splits spread even one short sequence over many multiprocessors):
//   1. scores: a thread per position, the whole K row read with 8-wide loads, dotted with the G queries;
//   2. per head, the split's maximum m and Σ exp(s − m) = l (a warp per head);
//   3. values: warps take positions, lanes take dims; each V element read once for all G heads;
//   4. the warps' sums added; one split → out = acc / l, else (acc, m, l) to `part` for attention_combine.
template <int G>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const float* qkv, StepRows rows, int n_head, KvLayout kv, int layer, const uint8_t* pool,
                     float scale, int L, float* out, float* part) {
  const int r = blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x, warp = tid / kWarp,
            lane = tid % kWarp;
  const int n_pos = rows.pos[r] + 1, start = sp * L;
  if (start >= n_pos) return;
  const int n = min(L, n_pos - start), n_splits = (n_pos + L - 1) / L;
  const int D = kv.head_dim, Hkv = kv.n_head_kv, bt = kv.block_tokens;
  __shared__ float q_s[G * 128];
  __shared__ float s_s[G * kAttnMaxSplit];
  __shared__ int64_t voff_s[kAttnMaxSplit];
  __shared__ float vsc_s[kAttnMaxSplit];
  __shared__ float m_s[G], l_s[G];
  __shared__ float red[kAttnWarpsN * G * 128];
  const float* qrow =
      qkv + static_cast<int64_t>(r) * (n_head + 2 * Hkv) * D + static_cast<int64_t>(kvh) * G * D;
  for (int i = tid; i < G * D; i += kAttnThreads) q_s[i] = qrow[i] * scale;
  __syncthreads();
  const int32_t* table = rows.block_table + static_cast<int64_t>(rows.seq[r]) * rows.max_blocks;
  const int64_t rb = kv.row_bytes(), lbb = kv.layer_block_bytes(), rows_b = kv.rows_bytes();
  const bool scaled = kv_has_scales(kv.format);
  for (int j = tid; j < n; j += kAttnThreads) {  // 1. scores
    const int p = start + j;
    const int64_t base = (static_cast<int64_t>(table[p / bt]) * kv.n_layer + layer) * lbb;
    const int64_t idx = static_cast<int64_t>(kvh) * bt + p % bt;
    const uint8_t* krow = pool + base + idx * rb;
    float ks = 0.f, vs = 0.f;
    if (scaled) {
      const float* sc = reinterpret_cast<const float*>(pool + base + 2 * rows_b);
      ks = sc[idx];
      vs = sc[kv.scales_bytes() / 4 + idx];
    }
    vsc_s[j] = vs;
    voff_s[j] = base + rows_b + idx * rb;
    float dot[G];
#pragma unroll
    for (int g = 0; g < G; ++g) dot[g] = 0.f;
#pragma unroll 4
    for (int d0 = 0; d0 < D; d0 += 8) {
      float k8[8];
      kv_load8(krow, kv.format, d0, ks, k8);
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < 8; ++e) dot[g] += q_s[g * D + d0 + e] * k8[e];
    }
#pragma unroll
    for (int g = 0; g < G; ++g) s_s[g * kAttnMaxSplit + j] = dot[g];
  }
  __syncthreads();
  for (int g = warp; g < G; g += kAttnWarpsN) {  // 2. the split's softmax statistics
    float mx = -INFINITY;
    for (int j = lane; j < n; j += kWarp) mx = fmaxf(mx, s_s[g * kAttnMaxSplit + j]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int j = lane; j < n; j += kWarp) {
      const float e = expf(s_s[g * kAttnMaxSplit + j] - mx);
      s_s[g * kAttnMaxSplit + j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) m_s[g] = mx, l_s[g] = sum;
  }
  __syncthreads();
  float acc[G][4];  // 3. values: dims d = lane + 32 i
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[g][i] = 0.f;
#pragma unroll 4
  for (int j = warp; j < n; j += kAttnWarpsN) {
    const uint8_t* vrow = pool + voff_s[j];
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + kWarp * i;
      v[i] = d < D ? kv_load(vrow, kv.format, d, vsc_s[j]) : 0.f;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float pg = s_s[g * kAttnMaxSplit + j];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[g][i] += pg * v[i];
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + kWarp * i;
      if (d < D) red[(warp * G + g) * 128 + d] = acc[g][i];
    }
  __syncthreads();
  for (int o = tid; o < G * D; o += kAttnThreads) {  // 4. the warps' sums
    const int g = o / D, d = o % D;
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < kAttnWarpsN; ++w) a += red[(w * G + g) * 128 + d];
    const int h = kvh * G + g;
    if (n_splits == 1) {
      out[static_cast<int64_t>(r) * n_head * D + static_cast<int64_t>(h) * D + d] = a / l_s[g];
    } else {
      float* pp = part + ((static_cast<int64_t>(r) * n_head + h) * kAttnSplits + sp) * (D + 2);
      pp[d] = a;
      if (d == 0) pp[D] = m_s[g], pp[D + 1] = l_s[g];
    }
  }
}

// out = Σ_s acc_s e^(m_s − M) / Σ_s l_s e^(m_s − M) over a row's splits (rows with one split were written).
__global__ void attention_combine_kernel(StepRows rows, int n_head, int D, int L, const float* part,
                                         float* out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const int n_splits = (rows.pos[r] + 1 + L - 1) / L;
  if (n_splits == 1) return;
  const float* pp = part + (static_cast<int64_t>(r) * n_head + h) * kAttnSplits * (D + 2);
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, pp[s * (D + 2) + D]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.f, den = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float f = expf(pp[s * (D + 2) + D] - M);
      num += pp[s * (D + 2) + d] * f;
      den += pp[s * (D + 2) + D + 1] * f;
    }
    out[static_cast<int64_t>(r) * n_head * D + static_cast<int64_t>(h) * D + d] = num / den;
  }
}

// ------------------------------------------------------------------------------------- elementwise
__global__ void swiglu_kernel(const float* gu, int n_rows, int F, float* out) {
  const int64_t n = static_cast<int64_t>(n_rows) * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, j = i % F;
    const float g = gu[r * 2 * F + j], u = gu[r * 2 * F + F + j];
    out[i] = g / (1.f + expf(-g)) * u;
  }
}

__global__ void gelu_new_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = x[i];
    x[i] = 0.5f * u * (1.f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u)));
  }
}

__global__ void add_bias_kernel(float* y, const float* b, int n_rows, int n) {
  const int64_t total = static_cast<int64_t>(n_rows) * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += b[i % n];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* idx, int n, float* dst) {
  const float* s = src + static_cast<int64_t>(idx[blockIdx.x]) * n;
  float* d = dst + static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// fp32 → bf16 / fp16, round to nearest even (fp16: ±inf from 65520 on, as __float2half_rn).
template <typename T>
__global__ void to_half_kernel(const float* src, int64_t n, T* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, __half>)
      dst[i] = __float2half_rn(src[i]);
    else
      dst[i] = __float2bfloat16_rn(src[i]);
  }
}

__device__ __forceinline__ uint64_t splitmix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(void* dst, DType dt, int64_t n, uint64_t seed, float a, float mean) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix(seed * 0x100000001B3ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    const float v = mean + a * u;
    if (dt == DType::kF32)
      static_cast<float*>(dst)[i] = v;
    else if (dt == DType::kF16)
      static_cast<__half*>(dst)[i] = __float2half_rn(v);
    else
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
  }
}

// One block per output row (no 64-bit division per element).
__global__ void dequantize_int8_kernel(const int8_t* q, const float* scales, int n_in, int group,
                                       float* out) {
  const int64_t o = blockIdx.x;
  const int n_groups = (n_in + group - 1) / group;
  for (int k = threadIdx.x; k < n_in; k += blockDim.x)
    out[o * n_in + k] = static_cast<float>(q[o * n_in + k]) * scales[o * n_groups + k / group];
}

// One thread per (row, group), the CPU's quantize_int8 operation for operation.
__global__ void quantize_int8_kernel(const float* w, int64_t n_out, int n_in, int group, int8_t* q,
                                     float* scales) {
  const int n_groups = (n_in + group - 1) / group;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_out * n_groups) return;
  const int64_t o = i / n_groups;
  const int k0 = static_cast<int>(i % n_groups) * group, k1 = min(n_in, k0 + group);
  const float* row = w + o * n_in;
  float amax = 0.f;
  for (int k = k0; k < k1; ++k) amax = fmaxf(amax, fabsf(row[k]));
  const float s = amax / 127.f;
  scales[i] = s;
  for (int k = k0; k < k1; ++k) {
    const float v = s > 0.f ? roundf(row[k] / s) : 0.f;
    q[o * n_in + k] = static_cast<int8_t>(fminf(fmaxf(v, -127.f), 127.f));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------- launchers
void embed(const void* table, DType dt, const float* pos_embed, const StepRows& rows, int n_rows, int dim,
           float* out, cudaStream_t stream) {
  if (dt == DType::kInt8) throw std::invalid_argument("embed: an int8 model's table is fp32");
  if (n_rows <= 0) return;
  embed_kernel<<<n_rows, 256, 0, stream>>>(table, dt, pos_embed, rows, dim, out);
  FROST_CUDA_LAUNCHED();
}

void rmsnorm(const float* x, const float* w, int n_rows, int dim, float eps, float* out,
             cudaStream_t stream) {
  if (n_rows <= 0) return;
  rmsnorm_kernel<<<n_rows, dim >= 1024 ? 512 : 128, 0, stream>>>(x, w, dim, eps, out);
  FROST_CUDA_LAUNCHED();
}

void layernorm(const float* x, const float* w, const float* b, int n_rows, int dim, float eps, float* out,
               cudaStream_t stream) {
  if (n_rows <= 0) return;
  layernorm_kernel<<<n_rows, dim >= 1024 ? 512 : 128, 0, stream>>>(x, w, b, dim, eps, out);
  FROST_CUDA_LAUNCHED();
}

void rope_kv_append(float* qkv, const float* rope_cos, const float* rope_sin, const StepRows& rows,
                    int n_rows, int n_head, const KvLayout& kv, int layer, uint8_t* pool,
                    cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (kv.format == KvFormat::kInt4 && kv.head_dim % 2 != 0)
    throw std::invalid_argument("rope_kv_append: int4 needs an even head_dim, got " +
                                std::to_string(kv.head_dim));
  const dim3 grid(n_rows, (n_head + 2 * kv.n_head_kv + 7) / 8);
  rope_kv_append_kernel<<<grid, 256, 0, stream>>>(qkv, rope_cos, rope_sin, rows, n_head, kv, layer, pool);
  FROST_CUDA_LAUNCHED();
}

int64_t attention_partials_floats(int max_rows, int n_head, int head_dim) {
  return static_cast<int64_t>(max_rows) * n_head * kAttnSplits * (head_dim + 2);
}

void attention(const float* qkv, const StepRows& rows, int n_rows, int n_head, const KvLayout& kv, int layer,
               const uint8_t* pool, float scale, AttentionSplit split, float* partials, float* out,
               cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (n_head % kv.n_head_kv != 0)
    throw std::invalid_argument("attention: n_head " + std::to_string(n_head) +
                                " is not a multiple of n_head_kv " + std::to_string(kv.n_head_kv));
  if (kv.head_dim % 8 != 0 || kv.head_dim > 128)
    throw std::invalid_argument("attention: head_dim must be a multiple of 8 up to 128, got " +
                                std::to_string(kv.head_dim));
  if (split.split_len < 1 || split.split_len > kAttnMaxSplit || split.n_splits < 1 ||
      split.n_splits > kAttnSplits)
    throw std::invalid_argument("attention: split of " + std::to_string(split.n_splits) + " × " +
                                std::to_string(split.split_len) + " positions out of range");
  const dim3 grid(n_rows, kv.n_head_kv, split.n_splits);
  const int L = split.split_len;
  switch (n_head / kv.n_head_kv) {
    case 1:
      attention_kernel<1>
          <<<grid, kAttnThreads, 0, stream>>>(qkv, rows, n_head, kv, layer, pool, scale, L, out, partials);
      break;
    case 2:
      attention_kernel<2>
          <<<grid, kAttnThreads, 0, stream>>>(qkv, rows, n_head, kv, layer, pool, scale, L, out, partials);
      break;
    case 4:
      attention_kernel<4>
          <<<grid, kAttnThreads, 0, stream>>>(qkv, rows, n_head, kv, layer, pool, scale, L, out, partials);
      break;
    case 8:
      attention_kernel<8>
          <<<grid, kAttnThreads, 0, stream>>>(qkv, rows, n_head, kv, layer, pool, scale, L, out, partials);
      break;
    default:
      throw std::invalid_argument("attention: query heads per kv head must be 1, 2, 4 or 8, got " +
                                  std::to_string(n_head / kv.n_head_kv));
  }
  FROST_CUDA_LAUNCHED();
  if (split.n_splits > 1) {
    attention_combine_kernel<<<dim3(n_rows, n_head), 128, 0, stream>>>(rows, n_head, kv.head_dim, L, partials,
                                                                       out);
    FROST_CUDA_LAUNCHED();
  }
}

void swiglu(const float* gu, int n_rows, int ffn, float* out, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(n_rows) * ffn;
  if (n <= 0) return;
  swiglu_kernel<<<std::min<int64_t>(blocks_for(n, 256), 65535), 256, 0, stream>>>(gu, n_rows, ffn, out);
  FROST_CUDA_LAUNCHED();
}

void gelu_new(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_new_kernel<<<std::min<int64_t>(blocks_for(n, 256), 65535), 256, 0, stream>>>(x, n);
  FROST_CUDA_LAUNCHED();
}

void add_bias(float* y, const float* b, int n_rows, int n, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n_rows) * n;
  if (total <= 0) return;
  add_bias_kernel<<<std::min<int64_t>(blocks_for(total, 256), 65535), 256, 0, stream>>>(y, b, n_rows, n);
  FROST_CUDA_LAUNCHED();
}

void gather_rows(const float* src, const int32_t* idx, int n_idx, int n, float* dst, cudaStream_t stream) {
  if (n_idx <= 0) return;
  gather_rows_kernel<<<n_idx, 256, 0, stream>>>(src, idx, n, dst);
  FROST_CUDA_LAUNCHED();
}

void to_half(const float* src, int64_t n, DType dt, uint16_t* dst, cudaStream_t stream) {
  if (n <= 0) return;
  const int grid = static_cast<int>(std::min<int64_t>(blocks_for(n, 256), 65535));
  if (dt == DType::kF16)
    to_half_kernel<<<grid, 256, 0, stream>>>(src, n, reinterpret_cast<__half*>(dst));
  else if (dt == DType::kBF16)
    to_half_kernel<<<grid, 256, 0, stream>>>(src, n, reinterpret_cast<__nv_bfloat16*>(dst));
  else
    throw std::invalid_argument("to_half: fp32 is no 2-byte format");
  FROST_CUDA_LAUNCHED();
}

void fill_uniform(void* dst, DType dt, int64_t n, uint64_t seed, float a, float mean, cudaStream_t stream) {
  if (dt == DType::kInt8) throw std::invalid_argument("fill_uniform: int8 is made by quantize_int8");
  if (n <= 0) return;
  fill_uniform_kernel<<<std::min<int64_t>(blocks_for(n, 256), 65535), 256, 0, stream>>>(dst, dt, n, seed, a,
                                                                                        mean);
  FROST_CUDA_LAUNCHED();
}

void dequantize_int8(const int8_t* q, const float* scales, int64_t n_out, int n_in, int group, float* out,
                     cudaStream_t stream) {
  if (n_out <= 0 || n_in <= 0) return;
  if (group <= 0) throw std::invalid_argument("dequantize_int8: group must be > 0");
  if (n_out > 0x7fffffff) throw std::invalid_argument("dequantize_int8: too many rows");
  dequantize_int8_kernel<<<static_cast<unsigned>(n_out), 256, 0, stream>>>(q, scales, n_in, group, out);
  FROST_CUDA_LAUNCHED();
}

void quantize_int8(const float* w, int64_t n_out, int n_in, int group, int8_t* q, float* scales,
                   cudaStream_t stream) {
  if (n_out <= 0 || n_in <= 0) return;
  if (group <= 0) throw std::invalid_argument("quantize_int8: group must be > 0");
  const int64_t n = n_out * ((n_in + group - 1) / group);
  quantize_int8_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(w, n_out, n_in, group, q, scales);
  FROST_CUDA_LAUNCHED();
}

}  // namespace frost::cuda
