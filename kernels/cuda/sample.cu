// Sampling on the device (kernels/cuda/ops.h argmax, sample_rows): the host sampler's function
// (core/generate/sampler.cc), one block per logits row, so that only the chosen ids cross the bus.
//
// Greedy is a block argmax. Otherwise, for row r with parameters sp:
//   1. l_max over the row (NaN as −inf);
//   2. top-k: the k-th smallest key (logit desc, id asc) by a radix search over the 64-bit key
//      (~ordered(logit) << 32 | id), 8 bits a pass: the candidates are the keys up to it;
//   3. p_i = exp_nonpositive((l_i − l_max) · (1/T)) for candidates (0 for the rest), with the host's own exp
//      (kernels/cpu/exp.h) operation for operation — __fmaf_rn, rintf and the _rn products, which nvcc never
//      contracts — so the probabilities are the host's bit for bit; stored in `scratch`;
//   4. top-p: the smallest key K (p desc, id asc; or logit desc after top-k, the host's order) whose
//      cumulative mass reaches top_p · total, by the same radix search over masses (double, in shared memory);
//   5. min-p: p_i >= min_p;
//   6. the draw: the first kept token, in the same order (ascending ids when neither top-k nor top-p sorted),
//      whose cumulative mass exceeds u · total.
// The masses are summed in another order than the host's sequential walk: on the same logits and u the token
// is the host's unless u · total lies within double rounding of a cumulative boundary (ref::sample_row is
// the twin; tests/gpu states the check).
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace frost::cuda {
namespace {

constexpr int kThreads = 512, kWarp = 32;

__device__ __forceinline__ float finite_or_ninf(float v) { return isnan(v) ? -INFINITY : v; }

// kernels/cpu/exp.h exp_nonpositive, the same fp32 operations in the same order.
__device__ __forceinline__ float exp_nonpositive(float x) {
  if (!(x >= -87.3f)) return 0.f;
  const float n = rintf(__fmul_rn(x, 1.44269504088896341f));
  float r = __fmaf_rn(n, -0.693359375f, x);
  r = __fmaf_rn(n, 2.12194440e-4f, r);
  float p = __fmaf_rn(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = __fmaf_rn(p, r, 8.3334519073e-3f);
  p = __fmaf_rn(p, r, 4.1665795894e-2f);
  p = __fmaf_rn(p, r, 1.6666665459e-1f);
  p = __fmaf_rn(p, r, 5.0000001201e-1f);
  const float rr = __fmul_rn(r, r);
  float y = __fmaf_rn(p, rr, r);
  y = __fadd_rn(y, 1.f);
  return __fmul_rn(y, __int_as_float((static_cast<int>(n) + 127) << 23));
}

// Float → uint32 in the same order (for non-NaN values; −0 counts as +0, as float comparison does).
__device__ __forceinline__ uint32_t ordered(float f) {
  if (f == 0.f) f = 0.f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Ascending key = (value desc, id asc): the host's candidate order.
__device__ __forceinline__ uint64_t key_desc(float v, int id) {
  return (static_cast<uint64_t>(~ordered(v)) << 32) | static_cast<uint32_t>(id);
}

// (value, id) maximum over the block: larger value wins, ties → lower id. Every thread gets the result.
__device__ void block_argmax(float v, int id, float* out_v, int* out_id) {
  __shared__ float sv[kThreads / kWarp];
  __shared__ int si[kThreads / kWarp];
  __shared__ float rv;
  __shared__ int ri;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (ov > v || (ov == v && oi < id)) v = ov, id = oi;
  }
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sv[w] = v, si[w] = id;
  __syncthreads();
  if (w == 0) {
    const int nw = blockDim.x / kWarp;
    v = lane < nw ? sv[lane] : -INFINITY;
    id = lane < nw ? si[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, id, o);
      if (ov > v || (ov == v && oi < id)) v = ov, id = oi;
    }
    if (lane == 0) rv = v, ri = id;
  }
  __syncthreads();
  *out_v = rv;
  *out_id = ri;
  __syncthreads();
}

// Argmax of a row (ties → lowest id, NaN never wins; all −inf / NaN → 0). Every thread gets it.
__device__ int row_argmax(const float* l, int vocab, float* max_v) {
  float v = -INFINITY;
  int id = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = finite_or_ninf(l[i]);
    if (x > v || (x == v && i < id)) v = x, id = i;
  }
  float bv;
  int bi;
  block_argmax(v, id, &bv, &bi);
  if (max_v) *max_v = bv;
  return bi == INT_MAX || !(bv > -INFINITY) ? 0 : bi;
}

__device__ double block_sum_d(double v) {
  __shared__ double part[kThreads / kWarp];
  __shared__ double total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    double s = lane < static_cast<int>(blockDim.x / kWarp) ? part[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const double r = total;
  __syncthreads();
  return r;
}

__device__ uint64_t block_max_u64(uint64_t v) {
  __shared__ unsigned long long best;
  if (threadIdx.x == 0) best = 0;
  __syncthreads();
  atomicMax(&best, static_cast<unsigned long long>(v));
  __syncthreads();
  const uint64_t r = best;
  __syncthreads();
  return r;
}

// The smallest key K such that the mass of the elements with key(i) <= K is >= target (strict: > target),
// searched 8 bits at a time from the top. *found = false when even all elements fall short (rounding): the
// caller then keeps everything. key(i) and w(i) for i < n.
template <typename KeyFn, typename WFn>
__device__ uint64_t radix_search(int n, KeyFn key, WFn w, double target, bool strict, bool* found) {
  __shared__ double hist[256];
  __shared__ unsigned cnt[256];
  __shared__ unsigned long long prefix_s;
  __shared__ double acc_s;
  __shared__ int ok_s;
  if (threadIdx.x == 0) prefix_s = 0, acc_s = 0.0, ok_s = 1;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0.0, cnt[d] = 0;
    __syncthreads();
    const uint64_t prefix = prefix_s;
    const uint64_t high_mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const uint64_t k = key(i);
      if ((k & high_mask) != prefix) continue;
      const int d = static_cast<int>((k >> shift) & 255u);
      const double wi = w(i);
      if (wi != 0.0) atomicAdd(&hist[d], wi);
      atomicAdd(&cnt[d], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double acc = acc_s;
      int pick = -1, last = -1;
      for (int d = 0; d < 256; ++d) {
        if (cnt[d] == 0) continue;
        last = d;
        const double m = acc + hist[d];
        if (strict ? m > target : m >= target) {
          pick = d;
          break;
        }
        acc = m;
      }
      if (pick < 0) {
        // Nothing reaches the target: at the top level, nothing ever will (keep all); deeper, the coarser
        // level's sum differed by rounding — the largest key in range stands in.
        if (shift == 56) ok_s = 0;
        pick = last < 0 ? 255 : last;
        acc_s = acc;  // approximate; only used below this digit
      } else {
        acc_s = acc;
      }
      prefix_s = prefix | (static_cast<uint64_t>(pick) << shift);
    }
    __syncthreads();
  }
  *found = ok_s != 0;
  const uint64_t r = prefix_s;
  __syncthreads();
  return r;
}

// The draw over ascending ids (no top-k / top-p): contiguous chunks per thread, a scan of their masses locates
// the chunk, which is walked in order. Returns −1 when rounding carries the draw past every kept id.
__device__ int draw_by_id(const float* p, int vocab, double r, const SampleParams& sp) {
  __shared__ double scan[kThreads];
  __shared__ int chosen;
  const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int i0 = min(vocab, static_cast<int>(threadIdx.x) * chunk), i1 = min(vocab, i0 + chunk);
  auto weight = [&](int i) { return sp.min_p > 0.f && p[i] < sp.min_p ? 0.f : p[i]; };
  double s = 0.0;
  for (int i = i0; i < i1; ++i) s += weight(i);
  scan[threadIdx.x] = s;
  if (threadIdx.x == 0) chosen = -1;
  __syncthreads();
  for (int o = 1; o < static_cast<int>(blockDim.x); o <<= 1) {  // inclusive Hillis–Steele scan
    const double add = threadIdx.x >= static_cast<unsigned>(o) ? scan[threadIdx.x - o] : 0.0;
    __syncthreads();
    scan[threadIdx.x] += add;
    __syncthreads();
  }
  const double before = scan[threadIdx.x] - s;
  if (s > 0.0 && before <= r && r < scan[threadIdx.x]) {
    double c = before;
    int pick = -1;
    for (int i = i0; i < i1 && pick < 0; ++i) {
      const float e = weight(i);
      c += e;
      if (e > 0.f && c > r) pick = i;
    }
    if (pick < 0)  // rounding at the chunk's end: its last kept id
      for (int i = i1 - 1; i >= i0 && pick < 0; --i)
        if (weight(i) > 0.f) pick = i;
    chosen = pick;
  }
  __syncthreads();
  const int out = chosen;
  __syncthreads();
  return out;
}

__global__ void argmax_kernel(const float* logits, int vocab, int32_t* out) {
  const int id = row_argmax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, nullptr);
  if (threadIdx.x == 0) out[blockIdx.x] = id;
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int vocab, const SampleParams* params, float* scratch, int32_t* out) {
  const int r = blockIdx.x;
  const SampleParams sp = params[r];
  if (sp.to_host) {
    if (threadIdx.x == 0) out[r] = -1;
    return;
  }
  const float* l = logits + static_cast<int64_t>(r) * vocab;
  float lmax = 0.f;
  const int best = row_argmax(l, vocab, &lmax);
  if (sp.greedy) {
    if (threadIdx.x == 0) out[r] = best;
    return;
  }
  float* p = scratch + static_cast<int64_t>(r) * vocab;
  // 2. top-k: the candidates are the keys up to the k-th smallest (logit desc, id asc)
  const bool use_k = sp.top_k > 0 && sp.top_k < vocab;
  auto key_logit = [l](int i) { return key_desc(finite_or_ninf(l[i]), i); };
  uint64_t kth = ~0ull;
  if (use_k) {
    bool found = true;
    kth = radix_search(vocab, key_logit, [](int) { return 1.0; }, static_cast<double>(sp.top_k), false, &found);
    if (!found) kth = ~0ull;
  }
  // 3. probabilities (the host's exp), 0 outside the candidates
  const bool finite = isfinite(lmax);
  const float inv_t = __fdiv_rn(1.f, sp.temperature);
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = finite_or_ninf(l[i]);
    float pi = 0.f;
    if (!use_k || key_desc(v, i) <= kth) {
      if (!finite)
        pi = v == lmax ? 1.f : 0.f;
      else if (isfinite(inv_t))
        pi = exp_nonpositive(__fmul_rn(__fsub_rn(v, lmax), inv_t));
      else
        pi = expf(__fdiv_rn(__fsub_rn(v, lmax), sp.temperature));
    }
    p[i] = pi;
  }
  __syncthreads();
  // The walk's order: (logit desc, id asc) after top-k, (p desc, id asc) after top-p alone, else ascending ids.
  const bool use_p = sp.top_p < 1.0f;
  auto key_prob = [p](int i) { return key_desc(p[i], i); };
  auto order_key = [&](int i) { return use_k ? key_logit(i) : key_prob(i); };
  // 4. top-p: the nucleus is every key up to the first whose cumulative mass reaches top_p · total
  uint64_t pcut = ~0ull;
  if (use_p) {
    double s = 0.0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) s += p[i];
    const double total = block_sum_d(s);
    bool found = true;
    pcut = radix_search(vocab, order_key, [p](int i) { return static_cast<double>(p[i]); },
                        static_cast<double>(sp.top_p) * total, false, &found);
    if (!found) pcut = ~0ull;
  }
  // 5. min-p, and the kept weights
  auto weight = [&](int i) -> double {
    const float pi = p[i];
    if (pi == 0.f) return 0.0;
    if (sp.min_p > 0.f && pi < sp.min_p) return 0.0;
    if (use_p && order_key(i) > pcut) return 0.0;
    return pi;
  };
  double s = 0.0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) s += weight(i);
  const double total = block_sum_d(s);
  const double target = sp.u * total;
  // 6. the draw
  int id = -1;
  if (!use_k && !use_p) {
    id = draw_by_id(p, vocab, target, sp);
  } else {
    bool found = true;
    const uint64_t k = radix_search(vocab, order_key, weight, target, true, &found);
    if (found) id = static_cast<int>(k & 0xffffffffu);
  }
  if (id < 0) {
    // r rounded up to the total: the last kept token with weight, in the walk's order (the host's fallback)
    uint64_t best_key = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
      if (weight(i) > 0.0) {
        const uint64_t k = use_k || use_p ? order_key(i) : static_cast<uint64_t>(i);
        best_key = k > best_key ? k : best_key;
      }
    const uint64_t m = block_max_u64(best_key);
    id = m > 0 || weight(0) > 0.0 ? static_cast<int>(m & 0xffffffffu) : best;
  }
  if (threadIdx.x == 0) out[r] = id;
}

// Constrained decoding: a masked row's disallowed tokens get -inf before sample_rows_kernel reads the row.
__global__ void apply_token_masks_kernel(float* logits, int vocab, const SampleParams* params, const uint32_t* masks) {
  const int r = blockIdx.x;
  if (!params[r].masked || params[r].to_host) return;
  const uint32_t* m = masks + static_cast<int64_t>(r) * ((vocab + 31) / 32);
  float* l = logits + static_cast<int64_t>(r) * vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    if (!((m[i >> 5] >> (i & 31)) & 1u)) l[i] = -INFINITY;
}

}  // namespace

void apply_token_masks(float* logits, int n_rows, int vocab, const SampleParams* params, const uint32_t* masks,
                       cudaStream_t stream) {
  if (n_rows <= 0) return;
  apply_token_masks_kernel<<<n_rows, kThreads, 0, stream>>>(logits, vocab, params, masks);
  FROST_CUDA_LAUNCHED();
}

void argmax(const float* logits, int n_rows, int vocab, int32_t* out, cudaStream_t stream) {
  if (n_rows <= 0) return;
  argmax_kernel<<<n_rows, kThreads, 0, stream>>>(logits, vocab, out);
  FROST_CUDA_LAUNCHED();
}

void sample_rows(const float* logits, int n_rows, int vocab, const SampleParams* params, float* scratch,
                 int32_t* out, cudaStream_t stream) {
  if (n_rows <= 0) return;
  sample_rows_kernel<<<n_rows, kThreads, 0, stream>>>(logits, vocab, params, scratch, out);
  FROST_CUDA_LAUNCHED();
}

}  // namespace frost::cuda
