#pragma once
// KvCodec: one layer's K/V storage. The attention layer talks to the cache only through this interface
// (docs/kv_repair.md, "Pipeline, per attention layer": the codec stage): it writes rows, reads them back decoded (reference path), or asks
// the codec to attend a query over them with its own kernel (fast paths).
//
// Shapes: Hkv = kv heads, D = head_dim, H = query heads, T = new tokens, n = positions read.
// Storage lives in blocks (core/kv/kv_pages.h): a codec made by SequenceKv reads and writes its sequence's
// block table; a standalone codec (make_codec / make_kvsplice_codec with a capacity) owns one private
// block of that capacity — the classic preallocated [Hkv, Tmax, D] cache. Rows are written by index: no
// concatenation, no allocation per step.
//
// Mutation: only append()/append_token() write, and only the rows they are given; positions must lie
// inside the blocks the sequence holds (capacity()).
//
// The interface is what every codec must do: write rows, read them back, attend over them; the facts every
// codec has (kind, storage dtype, bytes per token, the pages it reads) are plain data of the base. What is
// particular to one codec stays behind it: KVSplice's latent bases are the KvSpliceSet of the sequence's
// KvSpec (core/kv/kvsplice.h; `spec.splice->k(l)` is layer l's K splice), which the code that needs them
// (KVSplice training through the reference forward) reads from there, not through the codec.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "core/kv/kv_pages.h"
#include "core/kv/kv_spec.h"

namespace frost {

class KvCodec {
 public:
  virtual ~KvCodec() = default;

  // Stores k, v [T, Hkv, D] (float32, any strides) at positions pos .. pos+T-1.
  virtual void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) = 0;
  // Stores one token: k, v point at Hkv*D contiguous floats. Fast path; no allocation.
  virtual void append_token(const float* k, const float* v, int64_t pos) = 0;

  // Decoded float32 K / V of positions [0, n): [Hkv, n, D] (the reference path). For fp32 storage in one
  // block a view into the cache (valid until the next append); otherwise a fresh tensor. Refused (c10::Error)
  // when a sliding window released the first blocks (core/kv/kv_pages.h): use keys_span.
  at::Tensor keys(int64_t n) const { return keys_span(0, n); }
  at::Tensor values(int64_t n) const { return values_span(0, n); }
  // The same for positions [start, n) only: [Hkv, n - start, D]; refused when [start, n) reaches a released block.
  virtual at::Tensor keys_span(int64_t start, int64_t n) const = 0;
  virtual at::Tensor values_span(int64_t start, int64_t n) const = 0;

  // Fast path: softmax(scale · q_h·K[g]ᵀ) V[g] over positions [0, n) for query heads [h0, h1) of one
  // query row q [n_head·D] (head h reads kv head g = h / (n_head / Hkv)), written to out[h·D .. h·D+D).
  // The codec's own kernel reads its storage through the block table (int8/int4 rows are never
  // dequantised into memory; KVSplice attends in the latent space). Serial and allocation-free after the
  // first call on a thread: callers parallelise over rows and heads.
  virtual void attend(const float* q, int64_t n_head, int64_t n, float scale, int64_t h0, int64_t h1,
                      float* out) const = 0;
  // The same for several query rows of this sequence at once (a prefill chunk): row r's query q[r] attends
  // positions [0, n[r]) into out[r]. Bit-identical to attend() row by row; the float and int8/int4 kernels
  // read each K / V row once per group of rows. Default: attend() per row.
  virtual void attend_rows(const float* const* q, const int64_t* n, int64_t n_rows, int64_t n_head,
                           float scale, int64_t h0, int64_t h1, float* const* out) const {
    for (int64_t r = 0; r < n_rows; ++r) attend(q[r], n_head, n[r], scale, h0, h1, out[r]);
  }

  // Positions [start, n) only (a sliding window) and, when softcap > 0, the scores soft-capped as
  // cap · tanh(s / cap) before the softmax (Gemma 2); otherwise attend()'s contract. The float and int8 / int4
  // codecs run the portable span kernels (core/kv/attend.h); the default decodes the rows [start, n) only
  // (keys_span() / values_span()), which KVSplice uses.
  virtual void attend_window(const float* q, int64_t n_head, int64_t start, int64_t n, float scale, float softcap,
                             int64_t h0, int64_t h1, float* out) const;

  KvCodecKind kind() const { return kind_; }
  at::ScalarType storage_dtype() const { return dtype_; }       // element type of the stored rows
  int64_t bytes_per_token() const { return bytes_per_token_; }  // K + V (+ scales), all heads, this layer
  // Positions that can be written now: the blocks held × positions per block.
  int64_t capacity() const { return pages_->capacity(); }

 protected:
  // `pages` (the block table the codec reads and writes) must outlive the codec; it may be a member of the
  // derived class not yet constructed (only the address is kept here).
  KvCodec(KvCodecKind kind, at::ScalarType dtype, int64_t bytes_per_token, const KvPages* pages)
      : pages_(pages), kind_(kind), dtype_(dtype), bytes_per_token_(bytes_per_token) {}

  const KvPages* const pages_;

  // The attention entry checks every codec makes (c10::Error naming the positions): attend / attend_rows read
  // positions [0, n), which must lie within capacity and be held; attend_window reads [start, n), the same.
  void check_attend(int64_t n) const;
  void check_window(int64_t start, int64_t n) const;

 private:
  const KvCodecKind kind_;
  const at::ScalarType dtype_;
  const int64_t bytes_per_token_;
};

// The regions one layer of `kind` needs per position (core/kv/kv_pages.h). kvsplice needs `splice`.
KvLayerFormat kv_layer_format(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                              const KvSpliceSet* splice);

// Codecs over a sequence's pages (SequenceKv): `pages` outlives the codec; `fmt` carries the offsets.
std::unique_ptr<KvCodec> make_paged_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt,
                                          std::shared_ptr<const KvSpliceSet> splice, int64_t layer);

// Standalone codecs with one private block of max_tokens positions.
std::unique_ptr<KvCodec> make_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                    int64_t max_tokens);
std::unique_ptr<KvCodec> make_kvsplice_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                             int64_t max_tokens);

// Internal (codec_*.cc): the concrete codecs over pages.
std::unique_ptr<KvCodec> make_float_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt);
std::unique_ptr<KvCodec> make_quant_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt);
std::unique_ptr<KvCodec> make_kvsplice_paged_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                                   const KvPages* pages, const KvLayerFormat& fmt);

// Gathers region `r` of positions [start, n) as a [groups, n - start, row_bytes / elem_size] tensor of `dtype`:
// a view when the rows sit in one block, else a copy (the reference path's read). Refuses (c10::Error, naming
// the positions) rows of blocks a sliding window released.
at::Tensor kv_gather(const KvPages& pages, const KvRegion& r, int64_t start, int64_t n, at::ScalarType dtype);

}  // namespace frost
