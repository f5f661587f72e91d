#include "core/kv/attend.h"

#include "kernels/cpu/exp.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "kernels/cpu/isa.h"

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h reductions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace frost::kernels {
namespace {

template <typename T>
inline float load_elem(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}


// q·k with 16 independent partial sums, so the compiler vectorises it at the build's baseline (AVX2 at
// x86-64-v3) without -ffast-math. (AVX-512 CPUs run the kernels below for head_dim = 16·k <= 256 and 8, 24, 40,
// 56.)
template <typename T>
inline float dot(const float* q, const T* k, int64_t d) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += q[i + j] * load_elem(k, i + j);
  float s = 0;
  for (; i < d; ++i) s += q[i] * load_elem(k, i);
  for (float a : acc) s += a;
  return s;
}

// o += p · v over d elements.
template <typename T>
inline void axpy(float p, const T* v, float* o, int64_t d) {
  for (int64_t i = 0; i < d; ++i) o[i] += p * load_elem(v, i);
}

// s[t] ← exp(s[t] − mx) over the n scores of one head (mx = their maximum); returns 1 / Σ s, the
// factor that turns them into softmax probabilities.
inline float softmax_unnormalised(float* s, int64_t n, float mx) {
  float sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = std::exp(s[t] - mx);
    sum += s[t];
  }
  return 1.f / sum;
}

// Parallel over heads only when there is enough work to pay for waking the pool.
inline int64_t attend_grain(int64_t n, int64_t head_dim, int64_t n_head) {
  return n * head_dim * n_head < (int64_t{1} << 15) ? n_head : 1;
}

// Soft-capped score (Gemma 2): cap · tanh(s / cap); cap 0 leaves s as it is.
inline float soft_cap(float s, float cap) { return cap > 0 ? cap * std::tanh(s / cap) : s; }

// Heads [h0, h1) of one query row over positions [start, n) (start > 0: a sliding window), scores soft-capped
// when softcap > 0. start 0 and softcap 0 is the plain kernel, arithmetic unchanged.
template <typename T>
void attend_heads(const float* q, const KvPagedRows& k, const KvPagedRows& v, int64_t n_head, int64_t n_head_kv, int64_t d,
                  int64_t start, int64_t n, float scale, float softcap, int64_t h0, int64_t h1, float* out) {
  const int64_t group = n_head / n_head_kv, m = n - start;
  float* s = thread_scratch(m);
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * d;
    // scores: s[t − start] = scale · q·K[t]
    float mx = -INFINITY;
    k.for_runs_from(g, start, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const T* kr = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < cnt; ++i) {
        const float sc = soft_cap(dot(qh, kr + i * d, d) * scale, softcap);
        s[t0 - start + i] = sc;
        mx = std::max(mx, sc);
      }
    });
    const float inv = softmax_unnormalised(s, m, mx);
    // out = Σ p_t V[t]
    float* o = out + h * d;
    for (int64_t i = 0; i < d; ++i) o[i] = 0;
    v.for_runs_from(g, start, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const T* vr = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < cnt; ++i) axpy(s[t0 - start + i] * inv, vr + i * d, o, d);
    });
  }
}

// One quantised row as floats (the integer values; the scale is applied by the caller).
inline void unpack_row(const uint8_t* row, int bits, int64_t d, float* dst) {
  if (bits == 8) {
    const int8_t* r = reinterpret_cast<const int8_t*>(row);
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<float>(r[i]);
  } else {
    for (int64_t j = 0; j < d / 2; ++j) {
      const int lo = row[j] & 0xF, hi = row[j] >> 4;
      dst[2 * j] = static_cast<float>(lo >= 8 ? lo - 16 : lo);
      dst[2 * j + 1] = static_cast<float>(hi >= 8 ? hi - 16 : hi);
    }
  }
}


// ---- The AVX-512 kernels, compiled for AVX-512 whatever the build's baseline (-march) and run only when the CPU
// has it (kernels::active_isa(), at run time: one binary for every machine). A target pragma rather than
// per-function attributes, so the lambdas the kernels pass to KvPagedRows::for_runs are AVX-512 code too.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
// ---- the AVX-512 kernels for head_dim = 16·NV (NV <= 16; 8·NV in 8-lane registers for NV = 1, 3, 5, 7): the
// query and the output stay in registers, four scores share one horizontal reduction, exp is the vectorised one
// of kernels/cpu/exp.h. ----

// 16 elements [16j, 16j + 16) of one stored row as fp32 lanes.
struct LoadF32 {
  static constexpr int64_t kBytes8 = 32;  // 8 elements
  static __m512 load(const uint8_t* row, int j) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * j); }
  static __m256 load8(const uint8_t* row, int j) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + 8 * j); }
};
struct LoadF16 {
  static constexpr int64_t kBytes8 = 16;  // 8 elements
  static __m512 load(const uint8_t* row, int j) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + j));
  }
  static __m256 load8(const uint8_t* row, int j) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + j));
  }
};
struct LoadBF16 {
  static constexpr int64_t kBytes8 = 16;  // 8 elements
  static __m512 load(const uint8_t* row, int j) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + j);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m256 load8(const uint8_t* row, int j) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + j);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
struct LoadI8 {
  static constexpr int64_t kBytes8 = 8;  // 8 elements
  static __m512 load(const uint8_t* row, int j) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * j));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  static __m256 load8(const uint8_t* row, int j) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 8 * j))));
  }
};
struct LoadI4 {
  static constexpr int64_t kBytes8 = 4;  // 8 elements
  static __m512 load(const uint8_t* row, int j) {
    // 8 bytes → 16 nibbles in element order (low nibble first), sign-extended: (x ^ 8) − 8.
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 8 * j));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    const __m512i x = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    const __m512i eight = _mm512_set1_epi32(8);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_xor_si512(x, eight), eight));
  }
  static __m256 load8(const uint8_t* row, int j) {
    // 4 bytes → 8 nibbles, as load() does for 16.
    int32_t w;
    std::memcpy(&w, row + 4 * j, sizeof(w));
    const __m128i b = _mm_cvtsi32_si128(w);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    const __m256i x = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    const __m256i eight = _mm256_set1_epi32(8);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_xor_si256(x, eight), eight));
  }
};

// The kernels' vector width: 16 fp32 lanes (head_dim = 16·NV) or 8 (head_dim = 8·NV, NV odd: stories260K's 8,
// 24, 40, ...). reduce4(a, b, c, d) = [sum a, sum b, sum c, sum d]; hsum = the sum of one register's lanes.
struct W16 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V loadq(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  template <class L>
  static V load(const uint8_t* row, int j) { return L::load(row, j); }
  static float hsum(V a) { return _mm512_reduce_add_ps(a); }
  static __m128 reduce4(V a, V b, V c, V d) {
    const V ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const V cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const V abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }
};
struct W8 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V loadq(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  template <class L>
  static V load(const uint8_t* row, int j) { return L::load8(row, j); }
  static float hsum(V a) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 p = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
  }
  static __m128 reduce4(V a, V b, V c, V d) {
    const V ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    const V cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    const V abcd = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))),
                                 _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab), _mm256_castps_pd(cd))));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
  }
};

constexpr int kMaxTileRows = 32;  // query rows of one sequence per call (the callers' tile)

// Pass 2 of the kernels below: each row's scores s[r][0, n[r]) become their softmax numerators in place
// (exp(s − max), max from the row's running maxima vmax[r]) and sum[r] their sum: 16 lane sums over whole
// groups of 16 positions, reduced, then the tail in position order.
inline void softmax_rows(float* const* s, const int64_t* n, int rows, const __m128* vmax, float* sum) {
  for (int r = 0; r < rows; ++r) {
    const __m128 m = _mm_max_ps(vmax[r], _mm_movehl_ps(vmax[r], vmax[r]));
    const float mx = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
    softmax::exp_shifted_avx512(s[r], n[r], mx, 1.f, s[r]);
    __m512 lanes = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n[r]; i += 16) lanes = _mm512_add_ps(lanes, _mm512_loadu_ps(s[r] + i));
    float t = _mm512_reduce_add_ps(lanes);
    for (; i < n[r]; ++i) t += s[r][i];
    sum[r] = t;
  }
}

// One head for up to kMaxTileRows query rows of one sequence: row r has query q[r] (this head's D floats)
// and attends positions [0, n[r]). Pass 1 computes each row's scores against group g's K rows (times their
// scales when ks is given), pass 2 the softmax numerators, pass 3 out[r] = Σ p_t (scale_t ·) V[t] / Σ p_t.
// Every K and V row is loaded once per group of rows instead of once per row (prefill chunks).
//
// Arithmetic, per row, independent of the other rows and of how many there are: scores of positions taken
// four at a time from the start of each block run (one shared horizontal reduction, reduce4) and one at a
// time for the last n % 4 of a run (a full reduction); the maximum; exp of kernels/cpu/exp.h; the sum (16 lane
// sums, then the tail in position order); the weighted V sum in position order in fp32 lanes (per chain, below).
// A decode row (alone) and the same row in a prefill chunk therefore get bit-identical outputs.
template <class L, class W, int NV>
void head_rows_v(const float* const* q, const int64_t* n, int rows, const KvPagedRows& k, const KvPagedRows* ks,
                 const KvPagedRows& v, const KvPagedRows* vs, int64_t g, float scale, float* const* s,
                 float* const* out) {
  int64_t n_max = 0;
  for (int r = 0; r < rows; ++r) n_max = std::max(n_max, n[r]);
  __m128 vmax[kMaxTileRows];
  for (int r = 0; r < rows; ++r) vmax[r] = _mm_set1_ps(-INFINITY);
  // Pass 1: scores.
  k.for_runs(g, n_max, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
    const float* sc = ks ? reinterpret_cast<const float*>(ks->row(g, t0)) : nullptr;
    const int64_t rb = k.row_bytes;
    int64_t c[kMaxTileRows];  // positions of this run each row attends
    for (int r = 0; r < rows; ++r) c[r] = std::clamp<int64_t>(n[r] - t0, 0, cnt);
    for (int64_t i = 0; i < cnt; i += 4) {
      const uint8_t* kr = p + i * rb;
      // Rows whose count covers this whole group of four: four scores per reduction, four rows at a time.
      for (int r0 = 0; r0 < rows; r0 += 4) {
        int live[4], n_live = 0;
        for (int r = r0; r < std::min(rows, r0 + 4); ++r)
          if (i + 4 <= c[r]) live[n_live++] = r;
        if (n_live == 0) continue;
        typename W::V acc[4][4];
        for (int x = 0; x < n_live; ++x) acc[x][0] = acc[x][1] = acc[x][2] = acc[x][3] = W::zero();
        for (int j = 0; j < NV; ++j) {
          const typename W::V k0 = W::template load<L>(kr, j), k1 = W::template load<L>(kr + rb, j),
                             k2 = W::template load<L>(kr + 2 * rb, j), k3 = W::template load<L>(kr + 3 * rb, j);
          for (int x = 0; x < n_live; ++x) {
            const typename W::V qj = W::loadq(q[live[x]] + W::kLanes * j);
            acc[x][0] = W::fmadd(qj, k0, acc[x][0]);
            acc[x][1] = W::fmadd(qj, k1, acc[x][1]);
            acc[x][2] = W::fmadd(qj, k2, acc[x][2]);
            acc[x][3] = W::fmadd(qj, k3, acc[x][3]);
          }
        }
        for (int x = 0; x < n_live; ++x) {
          const int r = live[x];
          __m128 sx = _mm_mul_ps(W::reduce4(acc[x][0], acc[x][1], acc[x][2], acc[x][3]), _mm_set1_ps(scale));
          if (sc) sx = _mm_mul_ps(sx, _mm_loadu_ps(sc + i));
          _mm_storeu_ps(s[r] + t0 + i, sx);
          vmax[r] = _mm_max_ps(vmax[r], sx);
        }
      }
      // Rows that end inside this group (or a run shorter than four): one score at a time.
      for (int r = 0; r < rows; ++r) {
        if (i + 4 <= c[r] || i >= c[r]) continue;
        for (int64_t t = i; t < c[r]; ++t) {
          const uint8_t* row = p + t * rb;
          typename W::V a0 = W::zero();
          for (int j = 0; j < NV; ++j)
            a0 = W::fmadd(W::loadq(q[r] + W::kLanes * j), W::template load<L>(row, j), a0);
          float x = W::hsum(a0) * scale;
          if (sc) x *= sc[t];
          s[r][t0 + t] = x;
          vmax[r] = _mm_max_ps(vmax[r], _mm_set1_ps(x));
        }
      }
    }
  });
  // Pass 2: softmax numerators and their sums, per row.
  float sum[kMaxTileRows];
  softmax_rows(s, n, rows, vmax, sum);
  // Pass 3: Σ p_t V[t], RT rows at a time so their accumulators stay in registers. A narrow head (NV < 4) keeps
  // C chains of accumulators, position t in chain t % C (summed (c0 + c1) + (c2 + c3) at the end), so its
  // fused multiply-adds do not wait on each other's latency.
  constexpr int C = NV == 1 ? 4 : NV <= 3 ? 2 : 1;
  constexpr int RT = std::max(1, std::min(8, 24 / (NV * C)));
  for (int r0 = 0; r0 < rows; r0 += RT) {
    const int nr = std::min(RT, rows - r0);
    int64_t n_lo = n[r0], n_hi = n[r0];
    for (int x = 1; x < nr; ++x) {
      n_lo = std::min(n_lo, n[r0 + x]);
      n_hi = std::max(n_hi, n[r0 + x]);
    }
    typename W::V ov[RT][C][NV];
    for (int x = 0; x < nr; ++x)
      for (int c = 0; c < C; ++c)
        for (int j = 0; j < NV; ++j) ov[x][c][j] = W::zero();
    v.for_runs(g, n_hi, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = vs ? reinterpret_cast<const float*>(vs->row(g, t0)) : nullptr;
      for (int64_t i = 0; i < cnt; ++i) {
        const int64_t t = t0 + i;
        const int c = static_cast<int>(t % C);
        const uint8_t* row = p + i * v.row_bytes;
        typename W::V pv[RT];
        for (int x = 0; x < nr; ++x) {
          const float pt = t < n[r0 + x] ? s[r0 + x][t] : 0.f;
          pv[x] = W::set1(sc ? pt * sc[i] : pt);
        }
        if (t < n_lo) {
          for (int j = 0; j < NV; ++j) {
            const typename W::V vj = W::template load<L>(row, j);
            for (int x = 0; x < nr; ++x) ov[x][c][j] = W::fmadd(pv[x], vj, ov[x][c][j]);
          }
        } else {  // past some rows' end: those rows skip (an fma with 0 could turn -0 into +0)
          for (int j = 0; j < NV; ++j) {
            const typename W::V vj = W::template load<L>(row, j);
            for (int x = 0; x < nr; ++x)
              if (t < n[r0 + x]) ov[x][c][j] = W::fmadd(pv[x], vj, ov[x][c][j]);
          }
        }
      }
    });
    for (int x = 0; x < nr; ++x) {
      const typename W::V inv = W::set1(1.f / sum[r0 + x]);
      for (int j = 0; j < NV; ++j) {
        typename W::V o = ov[x][0][j];
        if constexpr (C == 2) o = W::add(o, ov[x][1][j]);
        if constexpr (C == 4) o = W::add(W::add(o, ov[x][1][j]), W::add(ov[x][2][j], ov[x][3][j]));
        W::store(out[r0 + x] + W::kLanes * j, W::mul(o, inv));
      }
    }
  }
}

// head_dim = 8 (stories260K): two positions per 16-lane register. Rows t and t + 1 of a run are adjacent, so one
// L::load(row_t, 0) holds both (the caller checks the rows are dense: row_bytes = L::kBytes8). Same structure and
// per-row arithmetic as head_rows_v (a row alone and in a tile agree bit for bit), with:
//   pass 1, positions eight at a time from the start of each run: four loads of two rows, per query row four
//     products with [q, q] and one reduction tree to the eight scores in position order; the rest of a run
//     (and a row ending inside a group of eight) one position at a time (an 8-lane product, summed);
//   pass 3, positions in pairs from the start of each run: [p_t ×8, p_t+1 ×8] · (V_t, V_t+1) into one of two
//     chains (chosen by t / 2), a row's last unpaired position alone into the low half (masked, so nothing is
//     added to the other lanes); at the end (chain 0 + chain 1), then low half + high half.
template <class L>
void head_rows_d8(const float* const* q, const int64_t* n, int rows, const KvPagedRows& k, const KvPagedRows* ks,
                  const KvPagedRows& v, const KvPagedRows* vs, int64_t g, float scale, float* const* s,
                  float* const* out) {
  int64_t n_max = 0;
  for (int r = 0; r < rows; ++r) n_max = std::max(n_max, n[r]);
  __m128 vmax[kMaxTileRows];
  __m512 qq[kMaxTileRows];
  __m256 q8[kMaxTileRows];
  for (int r = 0; r < rows; ++r) {
    vmax[r] = _mm_set1_ps(-INFINITY);
    q8[r] = _mm256_loadu_ps(q[r]);
    qq[r] = _mm512_insertf32x8(_mm512_castps256_ps512(q8[r]), q8[r], 1);
  }
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Pass 1: scores.
  k.for_runs(g, n_max, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
    const float* sc = ks ? reinterpret_cast<const float*>(ks->row(g, t0)) : nullptr;
    const int64_t rb = k.row_bytes;
    for (int64_t i = 0; i < cnt; i += 8) {
      const uint8_t* kr = p + i * rb;
      const bool full = i + 8 <= cnt;
      __m512 k01, k23, k45, k67;
      if (full) {
        k01 = L::load(kr, 0);
        k23 = L::load(kr + 2 * rb, 0);
        k45 = L::load(kr + 4 * rb, 0);
        k67 = L::load(kr + 6 * rb, 0);
      }
      for (int r = 0; r < rows; ++r) {
        const int64_t c = std::clamp<int64_t>(n[r] - t0, 0, cnt);
        if (i >= c) continue;
        if (full && i + 8 <= c) {
          const __m512 a = _mm512_mul_ps(k01, qq[r]), b = _mm512_mul_ps(k23, qq[r]), cc = _mm512_mul_ps(k45, qq[r]),
                       d = _mm512_mul_ps(k67, qq[r]);
          const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
          const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(cc, d), _mm512_unpackhi_ps(cc, d));
          const __m512 abcd =
              _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
          // 128-bit block j holds the four registers' sums over block j: blocks 0 + 1 are positions 0, 2, 4, 6,
          // blocks 2 + 3 positions 1, 3, 5, 7.
          const __m512 sum = _mm512_add_ps(abcd, _mm512_shuffle_f32x4(abcd, abcd, _MM_SHUFFLE(2, 3, 0, 1)));
          const __m256 evens_odds = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm512_castps512_ps128(sum)),
                                                         _mm512_extractf32x4_ps(sum, 2), 1);
          __m256 sx = _mm256_mul_ps(_mm256_permutevar8x32_ps(evens_odds, order), _mm256_set1_ps(scale));
          if (sc) sx = _mm256_mul_ps(sx, _mm256_loadu_ps(sc + i));
          _mm256_storeu_ps(s[r] + t0 + i, sx);
          vmax[r] = _mm_max_ps(vmax[r], _mm_max_ps(_mm256_castps256_ps128(sx), _mm256_extractf128_ps(sx, 1)));
          continue;
        }
        for (int64_t t = i; t < std::min<int64_t>(c, i + 8); ++t) {
          float x = W8::hsum(_mm256_mul_ps(q8[r], L::load8(p + t * rb, 0))) * scale;
          if (sc) x *= sc[t];
          s[r][t0 + t] = x;
          vmax[r] = _mm_max_ps(vmax[r], _mm_set1_ps(x));
        }
      }
    }
  });
  // Pass 2: as head_rows_v.
  float sum[kMaxTileRows];
  softmax_rows(s, n, rows, vmax, sum);
  // Pass 3: Σ p_t V[t], RT rows at a time.
  constexpr int RT = 8;
  for (int r0 = 0; r0 < rows; r0 += RT) {
    const int nr = std::min(RT, rows - r0);
    int64_t n_hi = 0;
    for (int x = 0; x < nr; ++x) n_hi = std::max(n_hi, n[r0 + x]);
    __m512 ov[RT][2];
    for (int x = 0; x < nr; ++x) ov[x][0] = ov[x][1] = _mm512_setzero_ps();
    v.for_runs(g, n_hi, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = vs ? reinterpret_cast<const float*>(vs->row(g, t0)) : nullptr;
      const int64_t rb = v.row_bytes;
      for (int64_t i = 0; i < cnt; i += 2) {
        const int64_t t = t0 + i;
        const int ch = static_cast<int>((t >> 1) & 1);
        const uint8_t* row = p + i * rb;
        const bool pair = i + 2 <= cnt;
        const __m512 v2 = pair ? L::load(row, 0) : _mm512_zextps256_ps512(L::load8(row, 0));
        for (int x = 0; x < nr; ++x) {
          const int64_t nx = n[r0 + x];
          if (t >= nx) continue;
          const float* px = s[r0 + x];
          if (pair && t + 1 < nx) {
            const float a = sc ? px[t] * sc[i] : px[t], b = sc ? px[t + 1] * sc[i + 1] : px[t + 1];
            const __m512 pv = _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
            ov[x][ch] = _mm512_fmadd_ps(pv, v2, ov[x][ch]);
          } else {
            const __m512 pv = _mm512_set1_ps(sc ? px[t] * sc[i] : px[t]);
            ov[x][ch] = _mm512_mask3_fmadd_ps(pv, v2, ov[x][ch], 0x00FF);
          }
        }
      }
    });
    for (int x = 0; x < nr; ++x) {
      const __m512 o = _mm512_add_ps(ov[x][0], ov[x][1]);
      const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(o), _mm512_extractf32x8_ps(o, 1));
      _mm256_storeu_ps(out[r0 + x], _mm256_mul_ps(h, _mm256_set1_ps(1.f / sum[r0 + x])));
    }
  }
}

// Heads [h0, h1) of `rows` query rows (q[r]: [H·D], n[r] positions, out[r]: [H·D]); false when head_dim has no
// vectorised kernel here (the caller falls back).
template <class L>
bool heads_rows_v(const float* const* q, const int64_t* n, int64_t rows, const KvPagedRows& k, const KvPagedRows* ks,
                  const KvPagedRows& v, const KvPagedRows* vs, int64_t n_head, int64_t n_head_kv, int64_t d,
                  float scale, int64_t h0, int64_t h1, float* const* out) {
  const bool wide = d % 16 == 0 && d <= 256, narrow = d % 16 == 8 && d <= 56;
  if (!wide && !narrow) return false;
  const int64_t group = n_head / n_head_kv;
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxTileRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kMaxTileRows, rows - r0));
    int64_t n_max = 0;
    for (int r = 0; r < nr; ++r) n_max = std::max(n_max, n[r0 + r]);
    float* scratch = thread_scratch(nr * (n_max + 16));
    const float* qh[kMaxTileRows];
    float* oh[kMaxTileRows];
    float* sr[kMaxTileRows];
    for (int r = 0; r < nr; ++r) sr[r] = scratch + r * (n_max + 16);
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t g = h / group;
      for (int r = 0; r < nr; ++r) {
        qh[r] = q[r0 + r] + h * d;
        oh[r] = out[r0 + r] + h * d;
      }
      if (d == 8 && k.row_bytes == L::kBytes8 && v.row_bytes == L::kBytes8) {
        head_rows_d8<L>(qh, n + r0, nr, k, ks, v, vs, g, scale, sr, oh);
        continue;
      }
      switch (wide ? d / 16 : 16 + d / 8) {
#define FROST_HEAD_CASE(NV) \
  case NV: head_rows_v<L, W16, NV>(qh, n + r0, nr, k, ks, v, vs, g, scale, sr, oh); break;
        FROST_HEAD_CASE(1) FROST_HEAD_CASE(2) FROST_HEAD_CASE(3) FROST_HEAD_CASE(4) FROST_HEAD_CASE(5)
        FROST_HEAD_CASE(6) FROST_HEAD_CASE(7) FROST_HEAD_CASE(8) FROST_HEAD_CASE(9) FROST_HEAD_CASE(10)
        FROST_HEAD_CASE(11) FROST_HEAD_CASE(12) FROST_HEAD_CASE(13) FROST_HEAD_CASE(14) FROST_HEAD_CASE(15)
        FROST_HEAD_CASE(16)
#undef FROST_HEAD_CASE
#define FROST_NARROW_CASE(NV) \
  case 16 + NV: head_rows_v<L, W8, NV>(qh, n + r0, nr, k, ks, v, vs, g, scale, sr, oh); break;
        FROST_NARROW_CASE(1) FROST_NARROW_CASE(3) FROST_NARROW_CASE(5) FROST_NARROW_CASE(7)
#undef FROST_NARROW_CASE
        default: return false;
      }
    }
  }
  return true;
}
#pragma GCC pop_options

}  // namespace

float* thread_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(std::max<int64_t>(n, 1024)));
  return buf.data();
}

void attend_paged(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype, int64_t n_head,
                  int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0, int64_t h1,
                  float* out) {
  attend_paged_rows(&q, &n, 1, k, v, kv_dtype, n_head, n_head_kv, head_dim, scale, h0, h1, &out);
}

void attend_paged_rows(const float* const* q, const int64_t* n, int64_t n_rows, const KvPagedRows& k,
                       const KvPagedRows& v, c10::ScalarType kv_dtype, int64_t n_head, int64_t n_head_kv,
                       int64_t head_dim, float scale, int64_t h0, int64_t h1, float* const* out) {
  const bool done =
      active_isa() == Isa::kAvx512 && (kv_dtype == c10::kFloat
          ? heads_rows_v<LoadF32>(q, n, n_rows, k, nullptr, v, nullptr, n_head, n_head_kv, head_dim, scale, h0, h1, out)
      : kv_dtype == c10::kHalf
          ? heads_rows_v<LoadF16>(q, n, n_rows, k, nullptr, v, nullptr, n_head, n_head_kv, head_dim, scale, h0, h1, out)
      : kv_dtype == c10::kBFloat16
          ? heads_rows_v<LoadBF16>(q, n, n_rows, k, nullptr, v, nullptr, n_head, n_head_kv, head_dim, scale, h0, h1, out)
          : false);
  if (done) return;
  for (int64_t r = 0; r < n_rows; ++r) attend_paged_generic(q[r], k, v, kv_dtype, n_head, n_head_kv, head_dim, n[r], scale, h0, h1, out[r]);
}

void attend_paged_generic(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype,
                          int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0,
                          int64_t h1, float* out) {
  attend_paged_span(q, k, v, kv_dtype, n_head, n_head_kv, head_dim, 0, n, scale, 0.f, h0, h1, out);
}

void attend_paged_span(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype,
                       int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t start, int64_t n, float scale,
                       float softcap, int64_t h0, int64_t h1, float* out) {
  switch (kv_dtype) {
    case c10::kFloat:
      return attend_heads<float>(q, k, v, n_head, n_head_kv, head_dim, start, n, scale, softcap, h0, h1, out);
    case c10::kHalf:
      return attend_heads<c10::Half>(q, k, v, n_head, n_head_kv, head_dim, start, n, scale, softcap, h0, h1, out);
    case c10::kBFloat16:
      return attend_heads<c10::BFloat16>(q, k, v, n_head, n_head_kv, head_dim, start, n, scale, softcap, h0, h1, out);
    default:
      TORCH_CHECK(false, "attend_paged: unsupported kv dtype ", kv_dtype);
  }
}

void attend_paged_quant(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v, const KvPagedRows& vs,
                        int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n, float scale,
                        int64_t h0, int64_t h1, float* out) {
  attend_paged_quant_rows(&q, &n, 1, k, ks, v, vs, bits, n_head, n_head_kv, head_dim, scale, h0, h1, &out);
}

void attend_paged_quant_rows(const float* const* q, const int64_t* n, int64_t n_rows, const KvPagedRows& k,
                             const KvPagedRows& ks, const KvPagedRows& v, const KvPagedRows& vs, int bits,
                             int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, int64_t h0, int64_t h1,
                             float* const* out) {
  TORCH_CHECK(bits == 8 || (bits == 4 && head_dim % 2 == 0), "attend_paged_quant: bits ", bits, ", head_dim ",
              head_dim);
  if (active_isa() == Isa::kAvx512 &&
      (bits == 8 ? heads_rows_v<LoadI8>(q, n, n_rows, k, &ks, v, &vs, n_head, n_head_kv, head_dim, scale, h0, h1, out)
                 : heads_rows_v<LoadI4>(q, n, n_rows, k, &ks, v, &vs, n_head, n_head_kv, head_dim, scale, h0, h1, out)))
    return;
  for (int64_t r = 0; r < n_rows; ++r)
    attend_paged_quant_generic(q[r], k, ks, v, vs, bits, n_head, n_head_kv, head_dim, n[r], scale, h0, h1, out[r]);
}

void attend_paged_quant_generic(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v,
                                const KvPagedRows& vs, int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                int64_t n, float scale, int64_t h0, int64_t h1, float* out) {
  attend_paged_quant_span(q, k, ks, v, vs, bits, n_head, n_head_kv, head_dim, 0, n, scale, 0.f, h0, h1, out);
}

void attend_paged_quant_span(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v,
                             const KvPagedRows& vs, int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                             int64_t start, int64_t n, float scale, float softcap, int64_t h0, int64_t h1, float* out) {
  const int64_t group = n_head / n_head_kv, m = n - start;
  float* s = thread_scratch(m + head_dim);
  float* row = s + m;
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * head_dim;
    float mx = -INFINITY;
    // K rows and their scales sit in the same block at the same row index: walk both runs together.
    k.for_runs_from(g, start, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = reinterpret_cast<const float*>(ks.row(g, t0));
      for (int64_t i = 0; i < cnt; ++i) {
        unpack_row(p + i * k.row_bytes, bits, head_dim, row);
        const float x = soft_cap(dot(qh, row, head_dim) * sc[i] * scale, softcap);
        s[t0 - start + i] = x;
        mx = std::max(mx, x);
      }
    });
    const float inv = softmax_unnormalised(s, m, mx);
    float* o = out + h * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) o[i] = 0;
    v.for_runs_from(g, start, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = reinterpret_cast<const float*>(vs.row(g, t0));
      for (int64_t i = 0; i < cnt; ++i) {
        unpack_row(p + i * v.row_bytes, bits, head_dim, row);
        axpy(s[t0 - start + i] * inv * sc[i], row, o, head_dim);
      }
    });
  }
}

void attend_one(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                float* /*scores*/, float* out) {
  const int64_t rb = head_dim * static_cast<int64_t>(c10::elementSize(kv_dtype));
  const KvPagedRows kr = KvPagedRows::contiguous(k, t_max, rb), vr = KvPagedRows::contiguous(v, t_max, rb);
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    attend_paged(q, kr, vr, kv_dtype, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
  });
}

void attend_one_quant(const float* q, const void* k, const float* ks, const void* v, const float* vs, int bits,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                      float* /*scores*/, float* out) {
  const int64_t rb = bits == 8 ? head_dim : head_dim / 2;
  const KvPagedRows kr = KvPagedRows::contiguous(k, t_max, rb), vr = KvPagedRows::contiguous(v, t_max, rb);
  const KvPagedRows ksr = KvPagedRows::contiguous(ks, t_max, 4), vsr = KvPagedRows::contiguous(vs, t_max, 4);
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    attend_paged_quant(q, kr, ksr, vr, vsr, bits, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
  });
}

void attend_one_ref(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                    int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* out) {
  auto elem = [&](const void* base, int64_t idx) -> double {
    switch (kv_dtype) {
      case c10::kFloat: return static_cast<const float*>(base)[idx];
      case c10::kHalf: return static_cast<float>(static_cast<const c10::Half*>(base)[idx]);
      case c10::kBFloat16: return static_cast<float>(static_cast<const c10::BFloat16*>(base)[idx]);
      default: TORCH_CHECK(false, "attend_one_ref: unsupported kv dtype ", kv_dtype);
    }
  };
  const int64_t group = n_head / n_head_kv;
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / group;
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < head_dim; ++i) acc += q[h * head_dim + i] * elem(k, (g * t_max + t) * head_dim + i);
      s[t] = acc * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0;
    for (int64_t t = 0; t < n; ++t) sum += (s[t] = std::exp(s[t] - mx));
    for (int64_t i = 0; i < head_dim; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < n; ++t) acc += s[t] / sum * elem(v, (g * t_max + t) * head_dim + i);
      out[h * head_dim + i] = static_cast<float>(acc);
    }
  }
}

}  // namespace frost::kernels
