#pragma once
// KvCodec: one layer's K/V storage. The attention layer talks to the cache only through
// this interface (DESIGN.md, "The KV pipeline", step 2).
//
// Shapes: Hkv = kv heads, D = head_dim, Tmax = capacity, T = new tokens, S = stored tokens.
// Storage is preallocated as [Hkv, Tmax, D] for K and for V and written by index: no
// concatenation, no per-step allocation on the fast path.
//
// Mutation: only append()/append_token() write, and only the rows they are given.
// Later codecs (int8/int4 with per-token per-head scales, kvsplice latents) implement the same
// interface; the corruption and repair stages of the pipeline sit between append and attend
// in KvLayer (later issue) and read through keys()/values().
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "core/kv/kv_spec.h"

namespace frost {

struct KvSpliceFast;
struct LearnedKvSplice;

class KvCodec {
 public:
  virtual ~KvCodec() = default;

  // Stores k, v [T, Hkv, D] (float32, any strides) at positions pos .. pos+T-1.
  virtual void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) = 0;
  // Stores one token: k, v point at Hkv*D contiguous floats. Fast path; no allocation.
  virtual void append_token(const float* k, const float* v, int64_t pos) = 0;

  // Decoded float32 K / V of positions [0, n): [Hkv, n, D]. For fp32 storage a view into
  // the cache (valid until the next append); otherwise a fresh tensor.
  virtual at::Tensor keys(int64_t n) const = 0;
  virtual at::Tensor values(int64_t n) const = 0;

  // Raw storage for fused kernels: [Hkv, Tmax, D] of storage_dtype() (float codecs); for int8
  // [Hkv, Tmax, D] int8 (kChar) and for int4 [Hkv, Tmax, D/2] packed nibbles (kByte), with the
  // per-token per-head scales [Hkv, Tmax] from raw_key_scales() / raw_value_scales().
  virtual const void* raw_keys() const = 0;
  virtual const void* raw_values() const = 0;
  virtual at::ScalarType storage_dtype() const = 0;
  virtual const float* raw_key_scales() const { return nullptr; }
  virtual const float* raw_value_scales() const { return nullptr; }

  // kvsplice: the layer's K and V splices (raw_keys()/raw_values() are the latents [Tmax, r_k], [Tmax, r_v]),
  // and for int8 latents their per-row scales [Tmax] (nullptr for fp16 latents).
  virtual const KvSpliceFast* splice_k() const { return nullptr; }
  virtual const KvSpliceFast* splice_v() const { return nullptr; }
  virtual const float* splice_scales_k() const { return nullptr; }
  virtual const float* splice_scales_v() const { return nullptr; }
  // kvsplice: the differentiable splices (training); nullptr otherwise.
  virtual const LearnedKvSplice* learned_k() const { return nullptr; }
  virtual const LearnedKvSplice* learned_v() const { return nullptr; }

  virtual KvCodecKind kind() const = 0;
  virtual int64_t bytes_per_token() const = 0;  // K + V, all heads, this layer
  virtual int64_t capacity() const = 0;
};

// fp32 / fp16 / bf16 storage (core/kv/codec_float.cc).
std::unique_ptr<KvCodec> make_float_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          int64_t max_tokens);
// int8 / int4 storage with per-token per-head scales (core/kv/codec_quant.cc).
std::unique_ptr<KvCodec> make_quant_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          int64_t max_tokens);
// kvsplice storage for layer `layer` of `set` (core/kv/codec_kvsplice.cc).
std::unique_ptr<KvCodec> make_kvsplice_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                             int64_t max_tokens);
// Any kind but kvsplice.
std::unique_ptr<KvCodec> make_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                    int64_t max_tokens);

}  // namespace frost
