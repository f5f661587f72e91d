#pragma once
// KVSplice: a learned low-rank latent KV cache (docs/kvsplice.md, "The codec"; the codec stage of the KV
// pipeline, docs/kv_repair.md "Pipeline, per attention layer").
//
// Per layer, one LearnedKVSplice for K and one for V, each over the layer's whole K (or V) row
// x ∈ R^d, d = n_head_kv · head_dim (all kv heads together, so the latent is shared by every head):
//   transform  x' = x ⊙ σ + b,   σ = softplus(scale) > 0  (the learned monotonic transform)
//   compress   c  = x' Cᵀ        C = compress [r, d]
//   expand     y  = c Eᵀ         E = expand   [d, r]
//   inverse    x̂  = (y − b) ⊘ σ
// The cache stores only c for K (r_k numbers) and c for V (r_v numbers) per token per layer. The two
// ranks may differ (choice: K and V have different spectra — on stories260K post-RoPE K keeps ~96% of
// its variance at r = d/2, V only ~85% — so a fixed latent budget r_k + r_v is better split unevenly);
// r_k = r_v = r is the seed's single rank. Choice (the seed leaves the latent's storage open): latents
// are stored as fp16 (like the fp16 codec) — (r_k + r_v)·2 bytes per token per layer against fp16's
// 2·d·2, a compression of 2d / (r_k + r_v) — or, with latent dtype int8, as int8 with one fp32 scale
// per latent row (s = max|c| / 127, c ≈ s·round(c / s), like the int8 codec but over the whole latent
// instead of per head): r_k + r_v + 8 bytes. int8 latents stack quantisation on the rank reduction; the
// calibration trains through it (the cache's values in the forward, straight-through gradients).
//
// Attention in the latent space (what decode_step runs). For query head h of kv group g (columns
// G = g·D .. g·D + D − 1 of the row):
//   q·x̂ⱼ[G] = cⱼ · (E[G]ᵀ (q ⊘ σ[G])) − (q ⊘ σ[G])·b[G]
// the last term is the same for every j and drops out of softmax, so the score of row j is
// cⱼ · q̃ with the absorbed query q̃ = E[G]ᵀ (q ⊘ σ[G]) ∈ R^r, and the head's output is
//   Σⱼ pⱼ x̂ⱼ[G] = ((Σⱼ pⱼ cⱼ) E[G]ᵀ − b[G]) ⊘ σ[G]
// (the values are expanded once per step, not once per row). Cost per head and step: O(S·r + D·r).
// The reference path (Transformer::forward) instead expands every cached row (KvCodec::keys()) and
// attends as for any codec; tests hold the two equal.
//
// Initialisation (choice, the seed's "hybrid approach"): σ = 1 (scale = softplus⁻¹(1)),
// b = −mean(x) (centres the calibration rows), C = U_rᵀ and E = U_r with U_r the top-r right singular
// vectors of the centred rows: exactly PCA. Fine-tuning (core/train/kvsplice_train.h) then moves all four.
//
// File (kvsplice.safetensors): tensors "layers.<l>.{k,v}.{scale,shift,compress,expand}" F32; metadata
// format "frost.kvsplice.v1", rank_k, rank_v, rank (only when rank_k == rank_v; a file with rank alone
// means both), n_layers, n_head_kv, head_dim, latent_dtype "fp16", plus whatever the writer adds (model,
// report figures) under other keys.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/active_slot.h"
#include "core/kv/kv_pages.h"

namespace frost {

struct KvSpliceDims {
  int64_t n_layers = 0, n_head_kv = 0, head_dim = 0;
  int64_t d() const { return n_head_kv * head_dim; }
};
// kvsplice_dims(ModelConfig) lives in core/model/kv_dims.h (kv sits below the model).

// One LearnedKVSplice (LibTorch, differentiable in its four tensors).
struct LearnedKvSplice {
  at::Tensor scale, shift;  // [d]
  at::Tensor compress;      // [r, d]
  at::Tensor expand;        // [d, r]

  at::Tensor sigma() const;                      // softplus(scale)
  at::Tensor encode(const at::Tensor& x) const;  // [..., d] → c [..., r]
  at::Tensor decode(const at::Tensor& c) const;  // [..., r] → x̂ [..., d]
  at::Tensor reconstruct(const at::Tensor& x) const { return decode(encode(x)); }
};

// Frozen raw-pointer copy of one LearnedKvSplice for the fast path.
struct KvSpliceFast {
  int64_t d = 0, r = 0;
  std::vector<float> sigma, inv_sigma, shift;  // [d]
  std::vector<float> compress;                 // [r, d] row-major
  std::vector<float> expand;                   // [d, r] row-major

  // c[r] = C (x ⊙ σ + b); tmp needs d floats.
  void encode(const float* x, float* c, float* tmp) const;
  // q̃[r] = E[G]ᵀ (q ⊘ σ[G]) for the D columns starting at col0.
  void absorb(const float* q, int64_t col0, int64_t D, float* qt) const;
  // out[D] = (E[G] cbar − b[G]) ⊘ σ[G] for the D columns starting at col0.
  void expand_cols(const float* cbar, int64_t col0, int64_t D, float* out) const;
};

// How the cache stores the latents (see above).
enum class KvLatentDtype { kF16, kI8 };
const char* kv_latent_name(KvLatentDtype t);                             // "fp16" / "int8"
absl::StatusOr<KvLatentDtype> parse_kv_latent(const std::string& name);  // INVALID_ARGUMENT names it

// Latent sizes of the K and the V splices (the same for every layer).
struct KvSpliceRanks {
  int64_t k = 0, v = 0;
  bool operator==(const KvSpliceRanks& o) const { return k == o.k && v == o.v; }
  // "16" when equal, else "k/v", e.g. "12/20" (logs, the metrics label, reports)
  std::string label() const;
};

class KvSpliceSet {
 public:
  // σ = 1, b = 0, C = Eᵀ = the first r rows of a seeded random orthonormal basis (a valid but
  // untrained splice; calibration replaces it). 1 <= rank <= d.
  static absl::StatusOr<std::shared_ptr<KvSpliceSet>> create(const KvSpliceDims& dims, KvSpliceRanks ranks,
                                                             uint64_t seed = 0);
  static absl::StatusOr<std::shared_ptr<KvSpliceSet>> create(const KvSpliceDims& dims, int64_t rank,
                                                             uint64_t seed = 0) {
    return create(dims, KvSpliceRanks{rank, rank}, seed);
  }
  static absl::StatusOr<std::shared_ptr<KvSpliceSet>> load(const std::string& path, const KvSpliceDims& dims);
  absl::Status save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;

  const KvSpliceRanks& ranks() const { return ranks_; }
  KvLatentDtype latent() const { return latent_; }
  void set_latent(KvLatentDtype t) { latent_ = t; }  // before the set serves (it is shared const then)
  int64_t rank_k() const { return ranks_.k; }
  int64_t rank_v() const { return ranks_.v; }
  const KvSpliceDims& dims() const { return dims_; }
  const LearnedKvSplice& k(int64_t l) const { return k_[static_cast<size_t>(l)]; }
  const LearnedKvSplice& v(int64_t l) const { return v_[static_cast<size_t>(l)]; }
  LearnedKvSplice& mutable_k(int64_t l) { return k_[static_cast<size_t>(l)]; }
  LearnedKvSplice& mutable_v(int64_t l) { return v_[static_cast<size_t>(l)]; }
  // Fast copies; valid after freeze() (create/load freeze; call again after changing the tensors).
  const KvSpliceFast& fast_k(int64_t l) const { return fk_[static_cast<size_t>(l)]; }
  const KvSpliceFast& fast_v(int64_t l) const { return fv_[static_cast<size_t>(l)]; }
  void freeze();

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  int64_t n_params() const;
  // KV cache bytes per token of one layer: (r_k + r_v)·2 for fp16 latents, r_k + r_v + 2·4 for int8.
  int64_t bytes_per_token_layer() const {
    return latent_ == KvLatentDtype::kF16 ? (ranks_.k + ranks_.v) * 2 : ranks_.k + ranks_.v + 8;
  }
  int64_t bytes_per_token() const { return dims_.n_layers * bytes_per_token_layer(); }  // all layers
  // The compression against an fp16 cache (2·d·2 bytes per token per layer).
  double compression_vs_fp16() const {
    return 4.0 * static_cast<double>(dims_.d()) / static_cast<double>(bytes_per_token_layer());
  }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  KvSpliceSet() = default;
  KvSpliceDims dims_;
  KvSpliceRanks ranks_;
  KvLatentDtype latent_ = KvLatentDtype::kF16;
  std::vector<LearnedKvSplice> k_, v_;
  std::vector<KvSpliceFast> fk_, fv_;
  std::map<std::string, std::string> metadata_;
};

// Decode attention of query heads [h0, h1) of one query row q [H·D] over n latent rows read through a
// sequence's block table (core/kv/kv_pages.h): ck, cv the [block_tokens, r_k] / [block_tokens, r_v] regions,
// fp16 rows, or int8 rows (int8 = true) with their per-row scales in ks, vs. Works in the latent space (see
// above); out [H·D] receives those heads' slices. Serial; scratch is per thread.
void kvsplice_attend(const KvSpliceFast& kf, const KvSpliceFast& vf, const float* q, const KvPagedRows& ck,
                     const KvPagedRows& cv, const KvPagedRows& ks, const KvPagedRows& vs, bool int8, int64_t n_head,
                     int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0, int64_t h1,
                     float* out);

// The KVSplice a server stores new sequences with when they ask for the kvsplice codec; hot-swappable
// (a sequence keeps the Active it started with).
struct KvSpliceActive {
  std::shared_ptr<const KvSpliceSet> set;
  std::string name;  // "kvsplice/3" or "file:<path>"
};
using KvSpliceSlot = ActiveSlot<KvSpliceActive>;

// Loads a kvsplice file for serving; a "model" metadata entry, when present, must equal `model`.
absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> load_served_kvsplice(const std::string& path,
                                                                                 const KvSpliceDims& dims,
                                                                                 const std::string& name,
                                                                                 const std::string& model);

}  // namespace frost
