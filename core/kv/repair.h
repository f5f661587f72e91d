#pragma once
// Repair operators R_phi for one protected attention layer (docs/kv_repair.md: the pipeline's last stage,
// inside attention). Every option has the form
//   K̂ = K + ((K W_k) ⊙ γ_k(q)) U_kᵀ,   V̂ = V + ((V W_v) ⊙ γ_v(q)) U_vᵀ
// with q the attending head's query, so a head sees its own repaired cache:
//   A  W, U free [D, r]; γ = α(q) = σ(MLP(q)) ∈ (0, 1)^r. Gates (choice): one per K and V, each
//      D → r → r, ReLU, no biases, so the parameter count is exactly the seed's 6·D·r + 2·r².
//   B  W = U = B [D, r]; γ = −(1 − s(q)), s = α_max · σ(MLP(q)) ∈ [0, α_max], α_max < 1:
//      K̂ = K − (K B − (K B) ⊙ s) Bᵀ. One shared gate D → 2r → 2r (s_k | s_v), no biases:
//      2·D·r + 2·D·r + 4·r² = the seed's 4·D·r + 4·r².
//   C  Option A's W, U and gates shared by every protected layer of a model (one RepairShared for
//      all layers), conditioned on learned layer and head embeddings:
//      α = σ(W2 ReLU(W1 q + e_layer[l] + e_head[h])). Count per model with L protected layers:
//      4·D·r (W, U) + 2·(D·r + r²) (gates) + H·r (e_head, shared) + L·r (one e_layer row per layer).
// Parameters are shared across heads (share_across_heads: the seed's default; per-head parameters
// are not implemented). apply_to K, V or KV.
//
// Three paths that tests hold equal:
//   reference  materialise K̂, V̂ for every query (the seed's order), then softmax attention;
//              O(T·D·r) per query and O(H·Tq·T·D) memory.
//   factorised (the design's fast path) q·K̂ⱼ = q·Kⱼ + (Kⱼ W)·(γ ⊙ Uᵀq) and
//              Σⱼ pⱼ V̂ⱼ = pV + ((p (V W)) ⊙ γ) Uᵀ, with K W and V W cacheable per token: O(T·r).
//   folded     (what serving runs) γ depends on the query only, so the key correction is a query
//              correction and the value correction an output correction:
//                q·K̂ⱼ = Kⱼ·q',  q' = q + W_k (γ_k ⊙ U_kᵀ q)
//                Σⱼ pⱼ V̂ⱼ = o + U_v (γ_v ⊙ W_vᵀ o),  o = Σⱼ pⱼ Vⱼ
//              O(D·r) per query and head, independent of T, and no per-token state: the cache holds
//              exactly the codec's bytes and the attention kernel is the unrepaired one. Choice: we
//              serve this form; the factorised one stays as the design's documented twin.
//
// Contraction regularizer (Option A; the seed names it, this defines it): the mean over queries and
// cached rows of relu(‖K̂ⱼ − Kⱼ‖ / ‖Kⱼ‖ − ρ)² (and the same for V), with ρ = contraction_rho
// (default 0.5): corrections larger than half the row are penalised, so the learned map stays a
// small perturbation of the identity. Option B is bounded by construction (s ≤ α_max < 1).
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace frost {

enum class RepairOption { kA, kB, kC };

struct RepairConfig {
  RepairOption option = RepairOption::kA;
  int64_t rank = 8;
  bool repair_k = true, repair_v = true;  // apply_to: K, V or KV
  double alpha_max = 0.9;                 // option B: s ∈ [0, alpha_max], alpha_max < 1
  double contraction_rho = 0.5;
};

// "A" | "B" | "C"; "K" | "V" | "KV".
absl::StatusOr<RepairOption> parse_repair_option(const std::string& s);
const char* repair_option_name(RepairOption o);
std::string repair_apply_to_name(const RepairConfig& c);
// Sets c.repair_k / c.repair_v from "K", "V" or "KV"; false (c unchanged) for anything else.
bool set_repair_apply_to(const std::string& s, RepairConfig& c);

// Option C's parameters shared by all protected layers.
struct RepairShared {
  at::Tensor wk, uk, wv, uv;      // [D, r]
  at::Tensor g1k, g2k, g1v, g2v;  // gates [r, D], [r, r]
  at::Tensor e_head;              // [H, r]
  std::vector<at::Tensor> parameters() const;
  int64_t n_params() const;
};
// Seeded initialisation of the shared part of option C.
std::shared_ptr<RepairShared> make_repair_shared(int64_t head_dim, int64_t n_heads, int64_t rank,
                                                 uint64_t seed);

// What a layer's attention adds to causal softmax attention (the model families, core/model/model_config.h):
// a sliding window (query at p sees keys p − window < j <= p; 0 = none) and soft-capped scores (Gemma 2:
// cap · tanh(s / cap) after scaling, before the mask; 0 = none).
struct AttendShape {
  int64_t window = 0;
  double softcap = 0;
};

class RepairLayer {
 public:
  // Random initialisation (seeded) with small U so the operator starts near the identity.
  // `layer`, `n_layers`, `n_heads` matter only to option C. `shared` must be given for option C.
  RepairLayer(const RepairConfig& cfg, int64_t head_dim, int64_t n_heads, int64_t layer, int64_t n_layers,
              uint64_t seed, std::shared_ptr<RepairShared> shared = nullptr);

  const RepairConfig& cfg() const { return cfg_; }
  // Trainable tensors owned by this layer (option C: only its e_layer row; the rest is shared).
  std::vector<at::Tensor> parameters() const;
  int64_t n_params() const;

  // γ_k, γ_v for queries q [H, Tq, D] → [H, Tq, r] each (zeros for a side that is not repaired).
  std::pair<at::Tensor, at::Tensor> gammas(const at::Tensor& q) const;
  // Repaired rows for every query: K [Hkv, T, D] → K̂ [H, Tq, T, D] (the reference materialisation).
  at::Tensor repaired(const at::Tensor& x, const at::Tensor& gamma, bool is_v, int64_t n_heads) const;

  // Attention of queries q [H, Tq, D] at positions first_pos .. first_pos+Tq-1 over K, V
  // [Hkv, T, D] (causal; `shape`: a sliding window, soft-capped scores), with the cache repaired. Returns
  // [H, Tq, D].
  at::Tensor attend_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              int64_t first_pos, double scale, const AttendShape& shape = {}) const;
  // The same from the factorised form; kw / vw = K W_k, V W_v [Hkv, T, r] (projections()).
  at::Tensor attend_fast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& kw,
                         const at::Tensor& vw, int64_t first_pos, double scale, const AttendShape& shape = {}) const;
  // K W_k and V W_v of cached rows [Hkv, T, D] → [Hkv, T, r] (cacheable per token).
  std::pair<at::Tensor, at::Tensor> projections(const at::Tensor& k, const at::Tensor& v) const;
  // The folded form (LibTorch ops, differentiable): the training and reference-model path.
  at::Tensor attend_folded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t first_pos,
                           double scale, const AttendShape& shape = {}) const;

  // Parameters by name (option C: its e_layer row only; the shared part is RepairShared's):
  //   A: wk uk wv uv g1k g2k g1v g2v   B: bk bv g1 g2   C: e_layer
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;

  // Frozen float copies for the raw-pointer decode path (folded form, one query head at a time).
  struct Fast {
    RepairOption option = RepairOption::kA;
    int64_t d = 0, r = 0, gate_out = 0;  // gate_out: r (A, C) or 2r (B, one shared gate)
    float alpha_max = 0;
    bool repair_k = true, repair_v = true;
    std::vector<float> wk, uk, wv, uv;      // [D, r] row-major
    std::vector<float> g1k, g2k, g1v, g2v;  // [gate_out, D], [gate_out, gate_out]
    std::vector<float> cond;                // C: [H, r] = e_layer + e_head[h]; else empty
    // q_h [D] (head h) → q_out [D] = q'; gv_out [r] = γ_v(q_h). tmp: 4·gate_out floats.
    void query(const float* q_h, int64_t h, float* q_out, float* gv_out, float* tmp) const;
    // o_h [D] += U_v (γ_v ⊙ W_vᵀ o_h). tmp: r floats.
    void output(const float* gv, float* o_h, float* tmp) const;
  };
  Fast fast() const;

  // The contraction regularizer above for queries q over cache K, V (all query/row pairs): computed
  // from Gram matrices (O(H·Tq·T·r²)), and its twin that materialises K̂ − K as written.
  at::Tensor contraction_penalty(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;
  at::Tensor contraction_penalty_reference(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v) const;

 private:
  at::Tensor w(bool is_v) const;
  at::Tensor u(bool is_v) const;

  RepairConfig cfg_;
  int64_t d_, h_, layer_;
  std::shared_ptr<RepairShared> shared_;
  at::Tensor wk_, uk_, wv_, uv_;      // A: own [D, r]; B: bk_ = wk_, bv_ = wv_ (uk_, uv_ unused)
  at::Tensor g1k_, g2k_, g1v_, g2v_;  // A: gates [r, D], [r, r]; B: g1k_ [2r, D], g2k_ [2r, 2r]
  at::Tensor e_layer_;                // C: [r]
};

}  // namespace frost
