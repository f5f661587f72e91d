#include "core/prototype/selection.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>

namespace frost::prototype {

namespace {

at::Tensor normalize_rows(const at::Tensor& x, double eps) { return x / (x.norm(2, -1, true) + eps); }

// Mean of the strict upper triangle of a [K, K] matrix: 2/(K(K-1)) Σ_{k<j}.
at::Tensor upper_mean(const at::Tensor& m) {
  const int64_t K = m.size(0);
  at::Tensor upper = at::ones({K, K}, at::TensorOptions().dtype(at::kBool).device(m.device())).triu(1);
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

  // Pass 1: hard picks on plain floats, on the CPU (a copy of the K x T scores when the head computes on a
  // device).
  at::Tensor score = (s.logits.detach() + g).contiguous().to(at::kCPU);
  at::Tensor cand = s.cand.contiguous().to(at::kCPU);
  const float* sc = score.data_ptr<float>();
  const int64_t* ci = cand.data_ptr<int64_t>();
  at::Tensor taken = at::zeros({K, T}, at::kBool);
  bool* tk = taken.data_ptr<bool>();
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
  s.taken = taken.to(slots.device());

  // Pass 2: soft distributions and straight-through weights for every slot at once.
  at::Tensor masked = s.logits.masked_fill(s.taken, -std::numeric_limits<float>::infinity());
  s.p = at::softmax((masked + g) / tau, 1);
  at::Tensor onehot = at::zeros({K, T}, at::TensorOptions().device(slots.device()));
  onehot.scatter_(1, at::tensor(s.hard_t, at::kLong).to(slots.device()).view({K, 1}), 1.0);
  s.w = onehot - s.p.detach() + s.p;
  return s;
}

namespace {

// Σ_t w[k,t] · table[cand[k,t]] as one autograd node whose cost follows what Stage B needs
// (docs/prototype.md, "Stage B speed"):
//  * forward: with few non-zero weights, only those rows are gathered. The straight-through weights
//    are exactly 0 off the hard pick ((0 - p) + p == 0 in IEEE arithmetic), so M~_k costs K rows
//    instead of K·T; skipping a zero term leaves a float sum unchanged. Dense weights (p_k) are
//    scattered into [K, N] and multiplied by the table.
//  * backward to the weights: grad_w[k,t] = <g_k, table[cand[k,t]]>, read from table · g^T
//    ([N, K], one pass over the table). LibTorch 1.13's _embedding_bag computed the K·T dot
//    products one sample at a time, over K·T gathered rows, and took most of a Stage B step.
//  * backward to the table (only when it needs one): index_add of w[k,t] g_k over the non-zero
//    weights, in a fixed order.
// Everything is a fixed sequence of ATen ops, so a step is as deterministic as before.
struct WeightedRowsFn : public torch::autograd::Function<WeightedRowsFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& table,
                            const at::Tensor& cand, const at::Tensor& w) {
    const int64_t K = cand.size(0), T = cand.size(1), N = table.size(0);
    at::Tensor wf = w.reshape({-1}).to(table.scalar_type());
    at::Tensor nz = wf.nonzero().view({-1});  // ascending positions k*T + t
    at::Tensor out;
    if (nz.size(0) * 4 <= N) {  // straight-through weights: gather the few rows that count
      at::Tensor rows = cand.reshape({-1}).index_select(0, nz);
      at::Tensor slot = at::floor_divide(nz, T);
      out = at::zeros({K, table.size(1)}, table.options());
      out.index_add_(0, slot, table.index_select(0, rows) * wf.index_select(0, nz).unsqueeze(1));
    } else {  // dense weights (p_k): one [K, N] x [N, F] product instead of a K·T-row gather
      at::Tensor dense = at::zeros({K, N}, table.options()).scatter_add_(1, cand, wf.view({K, T}));
      out = at::matmul(dense, table);
    }
    ctx->save_for_backward({table, cand, w});
    ctx->saved_data["table_grad"] = table.requires_grad();
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& table = saved[0];
    const at::Tensor& cand = saved[1];
    const at::Tensor& w = saved[2];
    const int64_t K = cand.size(0), T = cand.size(1);
    at::Tensor g = grads[0].contiguous();  // [K, F]
    // <g_k, table_i> for every row i at once ([N, F] x [F, K], one streaming pass over the table),
    // then the K·T candidates' entries. Gathering the K·T rows instead moves K·T/N times more memory.
    at::Tensor gw = at::matmul(table, g.t()).t().gather(1, cand);  // [K, T]
    at::Tensor gt;
    if (ctx->saved_data["table_grad"].toBool()) {
      at::Tensor wf = w.reshape({-1}).to(table.scalar_type());
      at::Tensor nz = wf.nonzero().view({-1});
      at::Tensor slot = at::floor_divide(nz, T);
      gt = at::zeros_like(table);
      gt.index_add_(0, cand.reshape({-1}).index_select(0, nz),
                    g.index_select(0, slot) * wf.index_select(0, nz).unsqueeze(1));
    }
    return {gt, at::Tensor(), gw.to(w.scalar_type())};
  }
};

}  // namespace

at::Tensor weighted_rows(const at::Tensor& table, const at::Tensor& cand, const at::Tensor& weights) {
  return WeightedRowsFn::apply(table, cand, weights);
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
  const at::Tensor k = keys.to(at::kCPU, at::kDouble);  // the draws use a CPU generator: seeding on the CPU
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
  at::Tensor logits = at::matmul(normalize_rows(slots, norm_eps), keys.t()).contiguous().to(at::kCPU);
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

}  // namespace frost::prototype
