#include "core/kv/repair.h"

#include <cmath>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"

namespace frost {

namespace {

at::Tensor init(at::Generator& g, std::vector<int64_t> shape, double std) {
  return (at::randn(shape, g, at::TensorOptions().dtype(at::kFloat)) * std).requires_grad_(true);
}

int64_t numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += t.numel();
  return n;
}

// Expands [Hkv, ...] to [H, ...] by GQA group.
at::Tensor by_head(const at::Tensor& x, int64_t n_heads) {
  const int64_t hkv = x.size(0);
  return hkv == n_heads ? x : x.repeat_interleave(n_heads / hkv, 0);
}

at::Tensor causal_mask(int64_t tq, int64_t t, int64_t first_pos, int64_t window) {
  // query i (absolute position first_pos + i) sees cached rows j <= first_pos + i (and, with a sliding window W,
  // j > first_pos + i − W)
  at::Tensor qi = at::arange(tq, at::kLong).unsqueeze(1) + first_pos;
  at::Tensor kj = at::arange(t, at::kLong).unsqueeze(0);
  return window > 0 ? at::logical_or(kj > qi, kj <= qi - window) : kj > qi;  // true = masked
}

// The scores' soft cap (Gemma 2: cap · tanh(s / cap)) and the mask.
at::Tensor cap_and_mask(const at::Tensor& scores, int64_t first_pos, const AttendShape& shape) {
  const int64_t tq = scores.size(1), t = scores.size(2);
  at::Tensor s = shape.softcap > 0 ? at::tanh(scores / shape.softcap) * shape.softcap : scores;
  return s.masked_fill(causal_mask(tq, t, first_pos, shape.window).unsqueeze(0),
                       -std::numeric_limits<float>::infinity());
}

}  // namespace

const char* repair_option_name(RepairOption o) {
  switch (o) {
    case RepairOption::kA:
      return "A";
    case RepairOption::kB:
      return "B";
    case RepairOption::kC:
      return "C";
  }
  return "?";
}

std::string repair_apply_to_name(const RepairConfig& c) {
  return std::string(c.repair_k ? "K" : "") + (c.repair_v ? "V" : "");
}

bool set_repair_apply_to(const std::string& s, RepairConfig& c) {
  if (s != "K" && s != "V" && s != "KV") return false;
  c.repair_k = s != "V";
  c.repair_v = s != "K";
  return true;
}

absl::StatusOr<RepairOption> parse_repair_option(const std::string& s) {
  if (s == "A") return RepairOption::kA;
  if (s == "B") return RepairOption::kB;
  if (s == "C") return RepairOption::kC;
  return absl::InvalidArgumentError(
      absl::StrCat("repair option: unknown value \"", s, "\" (expected A|B|C)"));
}

std::vector<at::Tensor> RepairShared::parameters() const {
  return {wk, uk, wv, uv, g1k, g2k, g1v, g2v, e_head};
}
int64_t RepairShared::n_params() const { return numel(parameters()); }

std::shared_ptr<RepairShared> make_repair_shared(int64_t head_dim, int64_t n_heads, int64_t rank,
                                                 uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x5eed5a11ULL);
  auto s = std::make_shared<RepairShared>();
  const double sd = 1.0 / std::sqrt(static_cast<double>(head_dim));
  s->wk = init(g, {head_dim, rank}, sd);
  s->uk = init(g, {head_dim, rank}, 0.01);
  s->wv = init(g, {head_dim, rank}, sd);
  s->uv = init(g, {head_dim, rank}, 0.01);
  s->g1k = init(g, {rank, head_dim}, sd);
  s->g2k = init(g, {rank, rank}, 1.0 / std::sqrt(static_cast<double>(rank)));
  s->g1v = init(g, {rank, head_dim}, sd);
  s->g2v = init(g, {rank, rank}, 1.0 / std::sqrt(static_cast<double>(rank)));
  s->e_head = init(g, {n_heads, rank}, 0.1);
  return s;
}

RepairLayer::RepairLayer(const RepairConfig& cfg, int64_t head_dim, int64_t n_heads, int64_t layer,
                         int64_t n_layers, uint64_t seed, std::shared_ptr<RepairShared> shared)
    : cfg_(cfg), d_(head_dim), h_(n_heads), layer_(layer), shared_(std::move(shared)) {
  TORCH_CHECK(cfg.rank >= 1 && cfg.rank <= head_dim, "repair rank ", cfg.rank, " outside [1, ", head_dim,
              "]");
  TORCH_CHECK(cfg.option != RepairOption::kB || (cfg.alpha_max > 0 && cfg.alpha_max < 1),
              "repair option B needs 0 < alpha_max < 1, got ", cfg.alpha_max);
  TORCH_CHECK(layer >= 0 && layer < std::max<int64_t>(n_layers, 1), "repair layer ", layer, " of ", n_layers);
  const int64_t r = cfg.rank;
  at::Generator g =
      at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + static_cast<uint64_t>(layer));
  const double sd = 1.0 / std::sqrt(static_cast<double>(head_dim)),
               sr = 1.0 / std::sqrt(static_cast<double>(r));
  switch (cfg.option) {
    case RepairOption::kA:
      wk_ = init(g, {d_, r}, sd);
      uk_ = init(g, {d_, r}, 0.01);
      wv_ = init(g, {d_, r}, sd);
      uv_ = init(g, {d_, r}, 0.01);
      g1k_ = init(g, {r, d_}, sd);
      g2k_ = init(g, {r, r}, sr);
      g1v_ = init(g, {r, d_}, sd);
      g2v_ = init(g, {r, r}, sr);
      break;
    case RepairOption::kB: {
      // Orthonormal-ish bases: QR of a Gaussian, so K B Bᵀ is a projection at initialisation.
      at::NoGradGuard ng;
      wk_ = std::get<0>(at::linalg_qr(at::randn({d_, r}, g))).contiguous().requires_grad_(true);
      wv_ = std::get<0>(at::linalg_qr(at::randn({d_, r}, g))).contiguous().requires_grad_(true);
      g1k_ = init(g, {2 * r, d_}, sd);
      g2k_ = init(g, {2 * r, 2 * r}, 1.0 / std::sqrt(2.0 * static_cast<double>(r)));
      break;
    }
    case RepairOption::kC:
      TORCH_CHECK(shared_ && shared_->wk.size(1) == r && shared_->e_head.size(0) == n_heads,
                  "repair option C needs a RepairShared of rank ", r, " and ", n_heads, " heads");
      e_layer_ = init(g, {r}, 0.1);
      break;
  }
}

std::vector<at::Tensor> RepairLayer::parameters() const {
  switch (cfg_.option) {
    case RepairOption::kA:
      return {wk_, uk_, wv_, uv_, g1k_, g2k_, g1v_, g2v_};
    case RepairOption::kB:
      return {wk_, wv_, g1k_, g2k_};
    case RepairOption::kC:
      return {e_layer_};
  }
  return {};
}

int64_t RepairLayer::n_params() const { return numel(parameters()); }

at::Tensor RepairLayer::w(bool is_v) const {
  if (cfg_.option == RepairOption::kC) return is_v ? shared_->wv : shared_->wk;
  return is_v ? wv_ : wk_;
}

at::Tensor RepairLayer::u(bool is_v) const {
  if (cfg_.option == RepairOption::kC) return is_v ? shared_->uv : shared_->uk;
  if (cfg_.option == RepairOption::kB) return is_v ? wv_ : wk_;  // W = U = B
  return is_v ? uv_ : uk_;
}

std::pair<at::Tensor, at::Tensor> RepairLayer::gammas(const at::Tensor& q) const {
  const int64_t r = cfg_.rank;
  at::Tensor gk, gv;
  switch (cfg_.option) {
    case RepairOption::kA:
      gk = at::sigmoid(at::matmul(at::relu(at::matmul(q, g1k_.t())), g2k_.t()));
      gv = at::sigmoid(at::matmul(at::relu(at::matmul(q, g1v_.t())), g2v_.t()));
      break;
    case RepairOption::kB: {
      at::Tensor s = cfg_.alpha_max * at::sigmoid(at::matmul(at::relu(at::matmul(q, g1k_.t())), g2k_.t()));
      gk = s.narrow(-1, 0, r) - 1.0;  // γ = −(1 − s)
      gv = s.narrow(-1, r, r) - 1.0;
      break;
    }
    case RepairOption::kC: {
      // [H, Tq, r] + e_layer [r] + e_head [H, 1, r]
      at::Tensor cond = e_layer_ + shared_->e_head.unsqueeze(1);
      gk = at::sigmoid(at::matmul(at::relu(at::matmul(q, shared_->g1k.t()) + cond), shared_->g2k.t()));
      gv = at::sigmoid(at::matmul(at::relu(at::matmul(q, shared_->g1v.t()) + cond), shared_->g2v.t()));
      break;
    }
  }
  if (!cfg_.repair_k) gk = at::zeros_like(gk);
  if (!cfg_.repair_v) gv = at::zeros_like(gv);
  return {gk, gv};
}

at::Tensor RepairLayer::repaired(const at::Tensor& x, const at::Tensor& gamma, bool is_v,
                                 int64_t n_heads) const {
  // x [Hkv, T, D] → per head [H, 1, T, D]; (x W) [H, 1, T, r] ⊙ γ [H, Tq, 1, r] → [H, Tq, T, r] · Uᵀ
  at::Tensor xh = by_head(x, n_heads).unsqueeze(1);
  at::Tensor c = at::matmul(xh, w(is_v)) * gamma.unsqueeze(2);
  return xh + at::matmul(c, u(is_v).t());
}

at::Tensor RepairLayer::attend_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         int64_t first_pos, double scale, const AttendShape& shape) const {
  const int64_t H = q.size(0);
  auto [gk, gv] = gammas(q);
  at::Tensor kh = repaired(k, gk, false, H);  // [H, Tq, T, D]
  at::Tensor vh = repaired(v, gv, true, H);
  at::Tensor scores = cap_and_mask(at::matmul(kh, q.unsqueeze(-1)).squeeze(-1) * scale, first_pos, shape);
  at::Tensor p = at::softmax(scores, -1);
  return at::matmul(p.unsqueeze(2), vh).squeeze(2);  // [H, Tq, D]
}

std::pair<at::Tensor, at::Tensor> RepairLayer::projections(const at::Tensor& k, const at::Tensor& v) const {
  return {at::matmul(k, w(false)), at::matmul(v, w(true))};
}

at::Tensor RepairLayer::attend_fast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& kw, const at::Tensor& vw, int64_t first_pos,
                                    double scale, const AttendShape& shape) const {
  const int64_t H = q.size(0);
  auto [gk, gv] = gammas(q);
  at::Tensor kh = by_head(k, H), vh = by_head(v, H), kwh = by_head(kw, H), vwh = by_head(vw, H);
  // q·K̂ⱼ = q·Kⱼ + (Kⱼ W)·(γ ⊙ Uᵀq)
  at::Tensor uq = at::matmul(q, u(false)) * gk;  // [H, Tq, r]
  at::Tensor scores = cap_and_mask(
      (at::matmul(q, kh.transpose(1, 2)) + at::matmul(uq, kwh.transpose(1, 2))) * scale, first_pos, shape);
  at::Tensor p = at::softmax(scores, -1);  // [H, Tq, T]
  // Σⱼ pⱼ V̂ⱼ = pV + ((p (V W)) ⊙ γ) Uᵀ
  return at::matmul(p, vh) + at::matmul(at::matmul(p, vwh) * gv, u(true).t());
}

at::Tensor RepairLayer::attend_folded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      int64_t first_pos, double scale, const AttendShape& shape) const {
  const int64_t H = q.size(0);
  auto [gk, gv] = gammas(q);
  at::Tensor q2 = q + at::matmul(at::matmul(q, u(false)) * gk, w(false).t());  // q' = q + W_k(γ_k ⊙ U_kᵀq)
  at::Tensor scores = cap_and_mask(at::matmul(q2, by_head(k, H).transpose(1, 2)) * scale, first_pos, shape);
  at::Tensor o = at::matmul(at::softmax(scores, -1), by_head(v, H));  // [H, Tq, D]
  return o + at::matmul(at::matmul(o, w(true)) * gv, u(true).t());
}

std::vector<std::pair<std::string, at::Tensor>> RepairLayer::named_parameters() const {
  switch (cfg_.option) {
    case RepairOption::kA:
      return {{"wk", wk_},   {"uk", uk_},   {"wv", wv_},   {"uv", uv_},
              {"g1k", g1k_}, {"g2k", g2k_}, {"g1v", g1v_}, {"g2v", g2v_}};
    case RepairOption::kB:
      return {{"bk", wk_}, {"bv", wv_}, {"g1", g1k_}, {"g2", g2k_}};
    case RepairOption::kC:
      return {{"e_layer", e_layer_}};
  }
  return {};
}

namespace {
std::vector<float> floats(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kFloat).contiguous().cpu();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
// y[o] = Σ_i m[o, i] x[i], m row-major [n_out, n_in]
void mv(const float* m, const float* x, float* y, int64_t n_out, int64_t n_in) {
  for (int64_t o = 0; o < n_out; ++o) {
    float acc = 0;
    for (int64_t i = 0; i < n_in; ++i) acc += m[o * n_in + i] * x[i];
    y[o] = acc;
  }
}
float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
// y += back (γ ⊙ projᵀ x), with proj and back row-major [d, r]; c: r floats of scratch. y may alias x
// (c is complete before y changes).
void add_lowrank(const float* proj, const float* back, const float* gamma, const float* x, float* y,
                 int64_t d, int64_t r, float* c) {
  for (int64_t j = 0; j < r; ++j) c[j] = 0;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < r; ++j) c[j] += proj[i * r + j] * x[i];
  for (int64_t j = 0; j < r; ++j) c[j] *= gamma[j];
  for (int64_t i = 0; i < d; ++i) {
    float acc = 0;
    for (int64_t j = 0; j < r; ++j) acc += back[i * r + j] * c[j];
    y[i] += acc;
  }
}
}  // namespace

RepairLayer::Fast RepairLayer::fast() const {
  Fast f;
  f.option = cfg_.option;
  f.d = d_;
  f.r = cfg_.rank;
  f.gate_out = cfg_.option == RepairOption::kB ? 2 * cfg_.rank : cfg_.rank;
  f.alpha_max = static_cast<float>(cfg_.alpha_max);
  f.repair_k = cfg_.repair_k;
  f.repair_v = cfg_.repair_v;
  f.wk = floats(w(false));
  f.uk = floats(u(false));
  f.wv = floats(w(true));
  f.uv = floats(u(true));
  if (cfg_.option == RepairOption::kC) {
    f.g1k = floats(shared_->g1k);
    f.g2k = floats(shared_->g2k);
    f.g1v = floats(shared_->g1v);
    f.g2v = floats(shared_->g2v);
    f.cond = floats(e_layer_.unsqueeze(0) + shared_->e_head);
  } else {
    f.g1k = floats(g1k_);
    f.g2k = floats(g2k_);
    if (cfg_.option == RepairOption::kA) {
      f.g1v = floats(g1v_);
      f.g2v = floats(g2v_);
    }
  }
  return f;
}

void RepairLayer::Fast::query(const float* q_h, int64_t h, float* q_out, float* gv_out, float* tmp) const {
  const int64_t g = gate_out;
  float* a = tmp;            // [g] hidden
  float* gk = tmp + g;       // [g] gate output (B: s_k | s_v)
  float* c = tmp + 2 * g;    // [r] (γ_k ⊙ U_kᵀ q)
  float* gv2 = tmp + 3 * g;  // [g]
  const float* cond_h = cond.empty() ? nullptr : cond.data() + h * r;
  auto gate = [&](const std::vector<float>& g1, const std::vector<float>& g2, float* out) {
    mv(g1.data(), q_h, a, g, d);
    for (int64_t i = 0; i < g; ++i) a[i] = std::max(0.f, a[i] + (cond_h ? cond_h[i] : 0.f));
    mv(g2.data(), a, out, g, g);
  };
  const float* gkv = nullptr;  // γ_k [r]
  if (option == RepairOption::kB) {
    gate(g1k, g2k, gk);  // s = α_max σ(·), γ = s − 1 for K (first r) and V (last r)
    for (int64_t i = 0; i < g; ++i) gk[i] = alpha_max * sigmoid(gk[i]) - 1.f;
    gkv = gk;
    for (int64_t i = 0; i < r; ++i) gv_out[i] = repair_v ? gk[r + i] : 0.f;
  } else {
    gate(g1k, g2k, gk);
    for (int64_t i = 0; i < r; ++i) gk[i] = sigmoid(gk[i]);
    gkv = gk;
    if (repair_v) {
      gate(g1v, g2v, gv2);
      for (int64_t i = 0; i < r; ++i) gv_out[i] = sigmoid(gv2[i]);
    } else {
      for (int64_t i = 0; i < r; ++i) gv_out[i] = 0.f;
    }
  }
  for (int64_t i = 0; i < d; ++i) q_out[i] = q_h[i];
  if (!repair_k) return;
  // q' = q + W_k (γ_k ⊙ U_kᵀ q)
  add_lowrank(uk.data(), wk.data(), gkv, q_h, q_out, d, r, c);
}

void RepairLayer::Fast::output(const float* gv, float* o_h, float* tmp) const {
  if (!repair_v) return;
  // o += U_v (γ_v ⊙ W_vᵀ o)
  add_lowrank(wv.data(), uv.data(), gv, o_h, o_h, d, r, tmp);
}

at::Tensor RepairLayer::contraction_penalty_reference(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v) const {
  const int64_t H = q.size(0);
  auto [gk, gv] = gammas(q);
  at::Tensor total = at::zeros({}, at::kFloat);
  for (int side = 0; side < 2; ++side) {
    const at::Tensor& x = side ? v : k;
    at::Tensor xh = by_head(x, H).unsqueeze(1);                         // [H, 1, T, D]
    at::Tensor delta = repaired(x, side ? gv : gk, side == 1, H) - xh;  // [H, Tq, T, D]
    at::Tensor ratio = delta.norm(2, -1) / (xh.norm(2, -1) + 1e-6);
    total = total + at::relu(ratio - cfg_.contraction_rho).pow(2).mean();
  }
  return total;
}

at::Tensor RepairLayer::contraction_penalty(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v) const {
  // ‖ΔXⱼ‖² for query q = ‖((Xⱼ W) ⊙ γ_q) Uᵀ‖² = (γ_q ⊗ γ_q) · vec((cⱼ cⱼᵀ) ⊙ UᵀU), cⱼ = Xⱼ W: one
  // [Tq, r²] × [r², T] product per head instead of materialising [H, Tq, T, D].
  const int64_t H = q.size(0);
  auto [gk, gv] = gammas(q);
  at::Tensor total = at::zeros({}, at::kFloat);
  for (int side = 0; side < 2; ++side) {
    const at::Tensor& x = side ? v : k;
    const at::Tensor& g = side ? gv : gk;
    at::Tensor xh = by_head(x, H);                                         // [H, T, D]
    at::Tensor c = at::matmul(xh, w(side == 1));                           // [H, T, r]
    at::Tensor gram = at::matmul(u(side == 1).t(), u(side == 1));          // [r, r]
    at::Tensor m = (c.unsqueeze(-1) * c.unsqueeze(-2) * gram).flatten(2);  // [H, T, r²]
    at::Tensor gg = (g.unsqueeze(-1) * g.unsqueeze(-2)).flatten(2);        // [H, Tq, r²]
    at::Tensor sq = at::matmul(gg, m.transpose(1, 2)).clamp_min(0);        // [H, Tq, T]
    at::Tensor ratio = (sq + 1e-12).sqrt() / (xh.norm(2, -1).unsqueeze(1) + 1e-6);
    total = total + at::relu(ratio - cfg_.contraction_rho).pow(2).mean();
  }
  return total;
}

}  // namespace frost
