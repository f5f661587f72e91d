#pragma once
// Stage B prototype selection (seed §"K-Slot Prototype Selector"), its soft regularizers and the
// final greedy decoding.
//
// Masked sequential Gumbel-softmax, computed in two passes that give exactly the seed's result:
//  1. the hard picks, slot by slot: slot k's pick is argmax_t (v'_{k,t} + g_{k,t}) over its
//     candidates still available after the picks of slots 1..k-1 (argmax of p_k, since
//     softmax(·/τ) is monotone). This loop is on plain floats, outside autograd: picks carry no
//     gradient in the seed either.
//  2. p_k = softmax((v'_k + g_k)/τ) for all slots at once, with v' = -inf where a candidate was
//     already taken by an earlier slot (the availability mask a^(k) of the seed), and the
//     straight-through weights w_k = onehot(t*_k) - sg(p_k) + p_k.
// The picks are unique by construction: a picked index is masked for every later slot, and
// T >= K guarantees each slot keeps an available candidate. Tests check pass 1+2 against a
// direct slot-by-slot transcription of the seed.
//
// Memory-weighted sums Σ_t w_{k,t} M_{I_k[t]} use embedding_bag with per-sample weights (sum
// mode): the K×T×(m·d) gather is never materialised and gradients reach w (hence the slots).
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frost::prototype {

struct Selection {
  at::Tensor cand;            // [K, T] int64: I_k, the top-T dataset indices of each slot (descending logit)
  at::Tensor logits;          // [K, T] cosine logits v_k (autograd through the slots)
  at::Tensor taken;           // [K, T] bool: candidate unavailable at slot k (masked to -inf)
  at::Tensor p;               // [K, T] p_k (autograd)
  at::Tensor w;               // [K, T] straight-through weights (autograd)
  std::vector<int64_t> hard;  // i*_k, K unique dataset indices
  std::vector<int64_t> hard_t;  // t*_k positions in cand
};

// Gumbel noise g = -log(-log(u + eps) + eps) of uniforms u (any shape).
at::Tensor gumbel_from_uniform(const at::Tensor& u, double eps);

// slots [K, d] (raw, normalised here with norm_eps); keys [N, d] (already normalised, no grad);
// T <= N; u [K, T] uniforms for the Gumbel noise; tau > 0.
Selection select_prototypes(const at::Tensor& slots, const at::Tensor& keys, int64_t T, double tau,
                            const at::Tensor& u, double norm_eps, double gumbel_eps);

// Σ_t weights[k,t] · table[cand[k,t]] for every k: table [N, F] → [K, F]. Differentiable in
// `weights` and in `table`.
at::Tensor weighted_rows(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& weights);

// L_ov = 2/(K(K-1)) Σ_{k<j} q_k·q_j with q_k the sparse distribution of p_k over the dataset.
at::Tensor overlap_loss(const at::Tensor& cand, const at::Tensor& p, int64_t N);
// L_rep = 2/(K(K-1)) Σ_{k<j} max(0, cos(k̃_k, k̃_j) - m_cos), k̃_k = Σ_i q_{k,i} k̄_i.
at::Tensor repulsion_loss(const at::Tensor& cand, const at::Tensor& p, const at::Tensor& keys, double m_cos,
                          double norm_eps);

// k-means++ seeding over unit keys [N, d]: K distinct row indices, the first uniform, each next
// drawn with probability ∝ min over the chosen of ||k_i - k_c||² (= 2 - 2 cos). When every
// remaining key coincides with a chosen one, the next is uniform over the unchosen. K <= N.
std::vector<int64_t> kmeanspp_indices(const at::Tensor& keys, int64_t K, at::Generator gen);

// Final prototypes: i_k = argmax_{i not in i_1..i_{k-1}} s̄_k·k̄_i, slot by slot (greedy masked
// decoding over the full dataset). Requires K <= N.
std::vector<int64_t> finalize_prototypes(const at::Tensor& slots, const at::Tensor& keys, double norm_eps);

}  // namespace frost::prototype
