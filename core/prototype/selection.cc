#include "core/prototype/selection.h"

#include <limits>

namespace frost::proto {

namespace {

at::Tensor normalize_rows(const at::Tensor& x, double eps) { return x / (x.norm(2, -1, true) + eps); }

// Mean of the strict upper triangle of a [K, K] matrix: 2/(K(K-1)) Σ_{k<j}.
at::Tensor upper_mean(const at::Tensor& m) {
  const int64_t K = m.size(0);
  at::Tensor upper = at::ones({K, K}, at::kBool).triu(1);
  return m.masked_select(upper).sum() * (2.0 / static_cast<double>(K * (K - 1)));
}

}  // namespace

at::Tensor gumbel_from_uniform(const at::Tensor& u, double eps) { return -at::log(-at::log(u + eps) + eps); }

Selection select_prototypes(const at::Tensor& slots, const at::Tensor& keys, int64_t T, double tau,
                            const at::Tensor& u, double norm_eps, double gumbel_eps) {
  const int64_t K = slots.size(0);
  TORCH_CHECK(T >= K && T <= keys.size(0), "select_prototypes: need K <= T <= N, got K=", K, " T=", T,
              " N=", keys.size(0));
  Selection s;
  at::Tensor all = at::matmul(normalize_rows(slots, norm_eps), keys.t());  // [K, N]
  at::Tensor top_idx;
  {
    at::NoGradGuard ng;
    top_idx = std::get<1>(all.topk(T, 1, /*largest=*/true, /*sorted=*/true));
  }
  s.cand = top_idx;
  s.logits = all.gather(1, top_idx);  // [K, T], gradient to the slots
  at::Tensor g = gumbel_from_uniform(u, gumbel_eps);

  // Pass 1: hard picks on plain floats.
  at::Tensor score = (s.logits.detach() + g).contiguous();
  at::Tensor cand = s.cand.contiguous();
  const float* sc = score.data_ptr<float>();
  const int64_t* ci = cand.data_ptr<int64_t>();
  s.taken = at::zeros({K, T}, at::kBool);
  bool* tk = s.taken.data_ptr<bool>();
  std::vector<int64_t> picked;
  picked.reserve(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t idx = ci[k * T + t];
      bool avail = true;
      for (int64_t p : picked) {
        if (p == idx) {
          avail = false;
          break;
        }
      }
      if (!avail) {
        tk[k * T + t] = true;
        continue;
      }
      if (best < 0 || sc[k * T + t] > sc[k * T + best]) best = t;
    }
    TORCH_CHECK(best >= 0, "select_prototypes: slot ", k, " has no available candidate");
    picked.push_back(ci[k * T + best]);
    s.hard_t.push_back(best);
  }
  s.hard = picked;

  // Pass 2: soft distributions and straight-through weights for every slot at once.
  at::Tensor masked = s.logits.masked_fill(s.taken, -std::numeric_limits<float>::infinity());
  s.p = at::softmax((masked + g) / tau, 1);
  at::Tensor onehot = at::zeros({K, T});
  onehot.scatter_(1, at::tensor(s.hard_t, at::kLong).view({K, 1}), 1.0);
  s.w = onehot - s.p.detach() + s.p;
  return s;
}

at::Tensor weighted_rows(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& weights) {
  const int64_t K = cand.size(0), T = cand.size(1);
  at::Tensor offsets = at::arange(0, K * T, T, at::kLong);
  // _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode=0 (sum), sparse,
  //                per_sample_weights, include_last_offset, padding_idx). Called directly: LibTorch
  // 1.13's embedding_bag() dispatches to a forward-only kernel whenever `weight` needs no
  // gradient, even when the per-sample weights do, and then fails an autograd assertion.
  return std::get<0>(at::_embedding_bag(table, cand.reshape({-1}), offsets, false, 0, false,
                                        weights.reshape({-1}).to(table.scalar_type()), false, -1));
}

at::Tensor overlap_loss(const at::Tensor& cand, const at::Tensor& p, int64_t N) {
  const int64_t K = cand.size(0);
  at::Tensor q = at::zeros({K, N}, p.options()).scatter(1, cand, p);  // sparse q_k as dense rows
  return upper_mean(at::matmul(q, q.t()));
}

at::Tensor repulsion_loss(const at::Tensor& cand, const at::Tensor& p, const at::Tensor& keys, double m_cos,
                          double norm_eps) {
  at::Tensor kt = normalize_rows(weighted_rows(keys, cand, p), norm_eps);  // [K, d]
  return upper_mean(at::relu(at::matmul(kt, kt.t()) - m_cos));
}

std::vector<int64_t> kmeanspp_indices(const at::Tensor& keys, int64_t K, at::Generator gen) {
  const int64_t N = keys.size(0);
  TORCH_CHECK(K >= 1 && K <= N, "kmeanspp_indices: need 1 <= K <= N, got K=", K, " N=", N);
  at::NoGradGuard ng;
  const at::Tensor k = keys.to(at::kDouble);
  std::vector<int64_t> out;
  at::Tensor chosen = at::zeros({N}, at::kBool);
  at::Tensor d2 = at::full({N}, 1.0, at::kDouble);  // before the first pick: uniform
  for (int64_t j = 0; j < K; ++j) {
    at::Tensor w = d2.masked_fill(chosen, 0.0).clamp_min(0.0);
    if (!(w.sum().item<double>() > 0)) w = chosen.logical_not().to(at::kDouble);
    const int64_t i = at::multinomial(w, 1, /*replacement=*/false, gen).item<int64_t>();
    out.push_back(i);
    chosen[i] = true;
    at::Tensor di = (k - k[i]).pow(2).sum(1);
    d2 = j == 0 ? di : at::minimum(d2, di);
  }
  return out;
}

std::vector<int64_t> finalize_prototypes(const at::Tensor& slots, const at::Tensor& keys, double norm_eps) {
  at::NoGradGuard ng;
  const int64_t K = slots.size(0), N = keys.size(0);
  TORCH_CHECK(K <= N, "finalize_prototypes: K=", K, " > N=", N);
  at::Tensor logits = at::matmul(normalize_rows(slots, norm_eps), keys.t()).contiguous();
  const float* lg = logits.data_ptr<float>();
  std::vector<char> taken(static_cast<size_t>(N), 0);
  std::vector<int64_t> out;
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    for (int64_t i = 0; i < N; ++i) {
      if (taken[static_cast<size_t>(i)]) continue;
      if (best < 0 || lg[k * N + i] > lg[k * N + best]) best = i;
    }
    taken[static_cast<size_t>(best)] = 1;
    out.push_back(best);
  }
  return out;
}

}  // namespace frost::proto
