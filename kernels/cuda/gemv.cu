// The GEMV kernels of the decoder step (kernels/cuda/ops.h gemv), one template over the weight storage (fp32,
// bf16, fp16, int8): W read once per step with 16-byte loads, 1–8 activation rows, RMSNorm or SwiGLU fused
// into the input. Split from ops.cu (which keeps the other kernels) along this seam.
//
// Numerics: the products are fp32 (fp32 weights × fp32 x), or, for 2-byte weights, the weight widened exactly
// to fp32 times x rounded to the weight's format (round to nearest even; fp16: |x| ≥ 65520 becomes ±inf,
// IEEE, as __float2half_rn does), summed in fp32 — what cuBLAS computes for the GEMM path above kGemvMaxRows
// (core/exec/cuda_decoder.cc), and what the CPU twin ref::linear computes in double. int8 (weight-only): the
// weight is float(q) · scale in fp32 (kernels/cpu/quant.h dequantize(), the CPU int8 model's value bit for
// bit) times x as it is (activations are not rounded), summed in fp32; twin ref::linear_q8.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace frost::cuda {

namespace {

template <typename T>
struct Vec16;  // 16 bytes of weights, as fp32
template <>
struct Vec16<float> {
  static constexpr int kN = 4;
  __device__ static void load(const void* p, float* o) {
    const float4 v = *static_cast<const float4*>(p);
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  }
};
template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void load(const void* p, float* o) {
    const uint4 v = *static_cast<const uint4*>(p);
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = __uint_as_float(u[i] << 16);
      o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};
template <>
struct Vec16<__half> {
  static constexpr int kN = 8;
  __device__ static void load(const void* p, float* o) {
    const uint4 v = *static_cast<const uint4*>(p);
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // element 2i in the low half (little-endian), 2i + 1 in the high half
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      o[2 * i] = f.x;
      o[2 * i + 1] = f.y;
    }
  }
};

// 16 int8 weights as exact fp32 values q (the scale is applied by the kernel): each byte, xor 0x80 = q + 128,
// becomes the low mantissa byte of 2²³ (byte_perm → 0x4B0000xx = 2²³ + q + 128), minus 2²³ + 128 — one PRMT
// and one FADD a weight instead of an int-to-float conversion, whose lower throughput would bound the batch-1
// GEMV as weights stream in at 16 a load.
template <>
struct Vec16<int8_t> {
  static constexpr int kN = 16;
  __device__ static void load(const void* p, float* o) {
    const uint4 v = *static_cast<const uint4*>(p);
    const uint32_t u[4] = {v.x ^ 0x80808080u, v.y ^ 0x80808080u, v.z ^ 0x80808080u, v.w ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)  // byte j of u[i] (little-endian: element 4i + j)
        o[4 * i + j] = __uint_as_float(__byte_perm(u[i], 0x4B000000u, 0x7540u + j)) - 8388736.f;
  }
};

// One weight, as fp32 (the path without 16-byte loads).
template <typename T>
__device__ __forceinline__ float w_value(T w) {
  if constexpr (std::is_same_v<T, float>)
    return w;
  else if constexpr (std::is_same_v<T, int8_t>)
    return static_cast<float>(w);  // times its scale, in the kernel
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(w);
  else
    return __bfloat162float(w);
}

constexpr int kGemvWarps = 8;

// The activation as the product sees it: bf16 / fp16 weights multiply activations rounded to the same format,
// nearest even (the cuBLAS GEMM's inputs, ops.h to_half), so the GEMV and its GEMM twin compute the same
// function. fp32 and int8 weights take the activation as it is.
template <typename T>
__device__ __forceinline__ float act(float v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, int8_t>)
    return v;
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(__float2half_rn(v));
  else
    return __bfloat162float(__float2bfloat16_rn(v));
}
template <typename T>
__device__ __forceinline__ float4 act(float4 v) {
  return make_float4(act<T>(v.x), act<T>(v.y), act<T>(v.z), act<T>(v.w));
}

// Output rows per block (the block's 8 warps split the inputs between them): more when fewer activation rows,
// so that each thread has 8–16 independent 16-byte weight loads in flight and blocks are few and long.
template <int R>
__host__ __device__ constexpr int gemv_outs() {
  return R == 1 ? 16 : R <= 4 ? 8 : 4;
}
// How many parts of the block split its outputs: 1, or 2 for int8 — a 16-byte load holds 16 int8 weights, so
// a row of 2048 inputs is only 128 loads, half a block: each half of the block takes half the outputs, every
// thread loads, and a thread holds as many weights in registers as with bf16 (8 outputs × 16 vs 16 × 8).
template <typename T>
__host__ __device__ constexpr int gemv_parts() {
  return std::is_same_v<T, int8_t> ? 2 : 1;
}

// x[r, k] as the product reads it: plain, RMS-normalised (inv[r] · w[k], the rmsnorm kernel's order of
// operations) or SwiGLU of gate|up (the swiglu kernel's), then rounded as act<T>.
template <typename T, GemvInput kIn>
__device__ __forceinline__ float gemv_x(const float* x, int r, int k, int n_in, const float* inv,
                                        const float* nw) {
  if constexpr (kIn == GemvInput::kPlain) {
    return act<T>(x[static_cast<int64_t>(r) * n_in + k]);
  } else if constexpr (kIn == GemvInput::kRmsNorm) {
    return act<T>(x[static_cast<int64_t>(r) * n_in + k] * inv[r] * nw[k]);
  } else {
    const float g = x[static_cast<int64_t>(r) * 2 * n_in + k],
                u = x[static_cast<int64_t>(r) * 2 * n_in + n_in + k];
    return act<T>(g / (1.f + expf(-g)) * u);
  }
}

// Block per kGemvOuts output rows; its 256 threads (int8: each half of them, for half the outputs) stride
// over the input chunks (16 bytes of W each), so that a long row keeps many loads in flight; partial sums
// meet in shared memory. int8: scales [n_out, ceil(n_in / group)] (unused otherwise).
template <typename T, int R, bool kVec, GemvInput kIn>
__global__ void __launch_bounds__(kGemvWarps* kWarp)
    gemv_kernel(const T* w, const float* x, int n_out, int n_in, const float* bias, bool accumulate, float* y,
                const float* nw, float eps, const float* scales, int group) {
  constexpr bool kQ8 = std::is_same_v<T, int8_t>;
  constexpr int NT = kGemvWarps * kWarp, kGemvOuts = gemv_outs<R>(), kParts = gemv_parts<T>();
  constexpr int kOuts = kGemvOuts / kParts, NTP = NT / kParts, kPartWarps = kGemvWarps / kParts;
  const int n0 = blockIdx.x * kGemvOuts, tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  // this thread's part and outputs p0 + o (one part: the whole block, folded at compile time)
  const int part = kParts == 1 ? 0 : tid / NTP, ptid = kParts == 1 ? tid : tid % NTP, p0 = n0 + part * kOuts;
  __shared__ float inv[R];
  __shared__ float red[kGemvWarps][kGemvOuts * R];
  if constexpr (kIn == GemvInput::kRmsNorm) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float* xr = x + static_cast<int64_t>(r) * n_in;
      float ss = 0.f;
      for (int k = tid; k < n_in; k += NT) ss += xr[k] * xr[k];
      ss = block_sum(ss);
      if (tid == 0) inv[r] = rsqrtf(ss / static_cast<float>(n_in) + eps);
    }
    __syncthreads();
  }
  const T* wr[kOuts];
#pragma unroll
  for (int o = 0; o < kOuts; ++o) wr[o] = w + static_cast<int64_t>(min(p0 + o, n_out - 1)) * n_in;
  [[maybe_unused]] const float* sr[kOuts];  // int8: each output's scales
  if constexpr (kQ8) {
    const int n_groups = (n_in + group - 1) / group;
#pragma unroll
    for (int o = 0; o < kOuts; ++o) sr[o] = scales + static_cast<int64_t>(min(p0 + o, n_out - 1)) * n_groups;
  }
  float acc[kOuts][R];
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[o][r] = 0.f;
  if constexpr (kVec) {
    constexpr int E = Vec16<T>::kN;
    const int chunks = n_in / E;
#pragma unroll 2
    for (int c = ptid; c < chunks; c += NTP) {
      float wv[kOuts][E];
#pragma unroll
      for (int o = 0; o < kOuts; ++o) Vec16<T>::load(wr[o] + static_cast<int64_t>(c) * E, wv[o]);
      // int8: float(q) · scale, the CPU's dequantized weight (group % 16 == 0: a chunk lies in one group)
      if constexpr (kQ8) {
        const int g = c * E / group;
#pragma unroll
        for (int o = 0; o < kOuts; ++o) {
          const float sc = sr[o][g];
#pragma unroll
          for (int e = 0; e < E; ++e) wv[o][e] *= sc;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float xv[E];
        if constexpr (kIn == GemvInput::kPlain) {
          const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(r) * n_in + c * E);
#pragma unroll
          for (int e4 = 0; e4 < E / 4; ++e4) {
            const float4 v = act<T>(xp[e4]);
            xv[4 * e4] = v.x, xv[4 * e4 + 1] = v.y, xv[4 * e4 + 2] = v.z, xv[4 * e4 + 3] = v.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) xv[e] = gemv_x<T, kIn>(x, r, c * E + e, n_in, inv, nw);
        }
#pragma unroll
        for (int o = 0; o < kOuts; ++o)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[o][r] += wv[o][e] * xv[e];
      }
    }
  } else {
    for (int k = ptid; k < n_in; k += NTP) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float xv = gemv_x<T, kIn>(x, r, k, n_in, inv, nw);
#pragma unroll
        for (int o = 0; o < kOuts; ++o) {
          if constexpr (kQ8)
            acc[o][r] += w_value(wr[o][k]) * sr[o][k / group] * xv;
          else
            acc[o][r] += w_value(wr[o][k]) * xv;
        }
      }
    }
  }
  // Output o of the block (part o / kOuts) sums the partials of its part's warps, in warp order.
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = warp_sum(acc[o][r]);
      if (lane == 0) red[warp][(part * kOuts + o) * R + r] = v;
    }
  __syncthreads();
  if (tid < kGemvOuts * R) {
    const int o = tid / R, r = tid % R, n = n0 + o, w0 = kParts == 1 ? 0 : o / kOuts * kPartWarps;
    if (n < n_out) {
      float s = 0.f;
#pragma unroll
      for (int wi = 0; wi < kPartWarps; ++wi) s += red[w0 + wi][tid];
      const float v = bias ? s + bias[n] : s;
      float* yp = y + static_cast<int64_t>(r) * n_out + n;
      *yp = accumulate ? *yp + v : v;
    }
  }
}

// The int8 weights' scales and group size, passed through to the kernel (unused by the other formats).
struct Q8 {
  const float* scales;
  int group;
};

template <typename T, int R, GemvInput kIn>
void launch_gemv_in(const void* w, const float* x, int n_out, int n_in, const float* bias, bool acc, float* y,
                    const float* nw, float eps, Q8 q8, cudaStream_t st) {
  const int grid = blocks_for(n_out, gemv_outs<R>());
  const int64_t x_stride = kIn == GemvInput::kSwiGlu ? 2LL * n_in : n_in;
  const bool vec = (static_cast<int64_t>(n_in) * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   (x_stride * 4) % 16 == 0 && (!std::is_same_v<T, int8_t> || q8.group % 16 == 0);
  if (vec)
    gemv_kernel<T, R, true, kIn><<<grid, kGemvWarps * kWarp, 0, st>>>(
        static_cast<const T*>(w), x, n_out, n_in, bias, acc, y, nw, eps, q8.scales, q8.group);
  else
    gemv_kernel<T, R, false, kIn><<<grid, kGemvWarps * kWarp, 0, st>>>(
        static_cast<const T*>(w), x, n_out, n_in, bias, acc, y, nw, eps, q8.scales, q8.group);
}

template <typename T, int R>
void launch_gemv_r(const void* w, const float* x, int n_out, int n_in, const float* bias, bool acc, float* y,
                   GemvInput in, const float* nw, float eps, Q8 q8, cudaStream_t st) {
  switch (in) {
    case GemvInput::kPlain:
      launch_gemv_in<T, R, GemvInput::kPlain>(w, x, n_out, n_in, bias, acc, y, nw, eps, q8, st);
      break;
    case GemvInput::kRmsNorm:
      launch_gemv_in<T, R, GemvInput::kRmsNorm>(w, x, n_out, n_in, bias, acc, y, nw, eps, q8, st);
      break;
    case GemvInput::kSwiGlu:
      launch_gemv_in<T, R, GemvInput::kSwiGlu>(w, x, n_out, n_in, bias, acc, y, nw, eps, q8, st);
      break;
  }
}

template <typename T>
void launch_gemv(const void* w, const float* x, int rows, int n_out, int n_in, const float* bias, bool acc,
                 float* y, GemvInput in, const float* nw, float eps, Q8 q8, cudaStream_t st) {
  switch (rows) {
    case 1:
      launch_gemv_r<T, 1>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 2:
      launch_gemv_r<T, 2>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 3:
      launch_gemv_r<T, 3>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 4:
      launch_gemv_r<T, 4>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 5:
      launch_gemv_r<T, 5>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 6:
      launch_gemv_r<T, 6>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 7:
      launch_gemv_r<T, 7>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    case 8:
      launch_gemv_r<T, 8>(w, x, n_out, n_in, bias, acc, y, in, nw, eps, q8, st);
      break;
    default:
      throw std::invalid_argument("gemv: rows must be 1.." + std::to_string(kGemvMaxRows));
  }
}

}  // namespace

void gemv(const void* w, DType dt, const float* x, int n_rows, int n_out, int n_in, const float* bias,
          bool accumulate, float* y, cudaStream_t stream, GemvInput in, const float* norm_w, float eps,
          const float* scales, int group) {
  if (in == GemvInput::kRmsNorm && !norm_w)
    throw std::invalid_argument("gemv: RMS-norm input without its weight");
  if (dt == DType::kInt8 && (!scales || group <= 0))
    throw std::invalid_argument("gemv: int8 weights need their scales and a group > 0, got group " +
                                std::to_string(group));
  const Q8 q8{scales, group};
  switch (dt) {
    case DType::kF32:
      launch_gemv<float>(w, x, n_rows, n_out, n_in, bias, accumulate, y, in, norm_w, eps, q8, stream);
      break;
    case DType::kBF16:
      launch_gemv<__nv_bfloat16>(w, x, n_rows, n_out, n_in, bias, accumulate, y, in, norm_w, eps, q8, stream);
      break;
    case DType::kF16:
      launch_gemv<__half>(w, x, n_rows, n_out, n_in, bias, accumulate, y, in, norm_w, eps, q8, stream);
      break;
    case DType::kInt8:
      launch_gemv<int8_t>(w, x, n_rows, n_out, n_in, bias, accumulate, y, in, norm_w, eps, q8, stream);
      break;
  }
  FROST_CUDA_LAUNCHED();
}

}  // namespace frost::cuda
