// Architecture variants: reference (at ops) and fast (raw pointer) forms. See variants.h.
#include "core/model/variants.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "core/model/cpu_kernels.h"

namespace frost {

bool VariantLayerWeights::ctx_active() const {
  return ctx_down.defined() && (!route_gate.defined() || route_gate.data_ptr<float>()[0] < 0.5f);
}

std::vector<const at::Tensor*> VariantLayerWeights::tensors() const {
  return {&router_w1, &router_b1, &router_w2, &router_b2, &proj_full, &proj_full_b,
          &proj_ra,   &proj_ra_b, &ctx_down,  &ctx_up,    &ctx_alpha, &route_gate};
}

namespace variants {
namespace {

const float* fptr(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// Reference math is fp32 activations × (upcast) weights, as Transformer::linear.
at::Tensor up(const at::Tensor& w) { return w.scalar_type() == at::kFloat ? w : w.to(at::kFloat); }

void check_sba_stages(const SequenceKv& kv, bool corrupted, int64_t l) {
  TORCH_CHECK(
      !kv.repair() && !corrupted, "SBA layer ", l,
      ": the KV corruption and repair stages are not supported with symmetric bidirectional attention "
      "(they act on one K/V store per layer; SBA keeps two)");
}

KvCodec& reverse_store(SequenceKv& kv, int64_t l) {
  KvCodec* rev = kv.reverse(l);
  TORCH_CHECK(
      rev != nullptr, "SBA layer ", l,
      " has no reverse store: create the SequenceKv from Transformer::kv_spec (KvSpec::reverse_layers)");
  return *rev;
}

float gelu_erf(float h) { return 0.5f * h * (1.f + std::erf(h * 0.7071067811865476f)); }

}  // namespace

void size_scratch(const ModelConfig& cfg, int64_t max_tokens, VariantScratch* s) {
  const VariantConfig& v = cfg.variants;
  const auto C = static_cast<size_t>(cfg.dim);
  *s = VariantScratch();
  if (!v.router_layers.empty()) {
    s->e_tok.resize(C);
    s->out_full.resize(C);
    s->out_ra.resize(C);
    s->router_h.resize(static_cast<size_t>(v.router_hidden));
  }
  if (!v.sba_layers.empty()) {
    s->att_rev.resize(static_cast<size_t>(cfg.q_dim()));
  }
  if (!v.mlp_ctx_layers.empty()) {
    s->ctx_summary.resize(C);
    s->ctx_r.resize(static_cast<size_t>(v.mlp_ctx_rank));
    s->ctx_h.resize(static_cast<size_t>(cfg.ffn_dim));
  }
}

void check_layer_weights(const ModelConfig& cfg, int64_t l, const VariantLayerWeights& w, bool has_wo) {
  const VariantConfig& v = cfg.variants;
  const int64_t C = cfg.dim, D = cfg.head_dim, H = cfg.n_head;
  auto shape_is = [&](const at::Tensor& t, const char* name, std::vector<int64_t> shape, bool fp32) {
    TORCH_CHECK(t.defined(), "layer ", l, ": variant weight ", name, " is missing");
    TORCH_CHECK(t.sizes().vec() == shape, "layer ", l, ": variant weight ", name, " has shape ", t.sizes(),
                ", expected ", at::IntArrayRef(shape));
    TORCH_CHECK(
        t.is_contiguous() && (t.scalar_type() == at::kFloat || (!fp32 && t.scalar_type() == at::kBFloat16)),
        "layer ", l, ": variant weight ", name, " must be contiguous ", fp32 ? "fp32" : "fp32/bf16");
  };
  auto absent = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK(!t.defined(), "layer ", l, ": variant weight ", name,
                " is set but the config does not declare it");
  };
  if (v.is_router(l)) {
    const int64_t nr = v.router_ra_heads, nf = H - nr, hid = v.router_hidden;
    TORCH_CHECK(!has_wo, "layer ", l,
                ": a router layer has proj_full/proj_ra instead of the output projection");
    shape_is(w.router_w1, "router.fc1.weight", {hid, 4}, true);
    shape_is(w.router_b1, "router.fc1.bias", {hid}, true);
    shape_is(w.router_w2, "router.fc2.weight", {2, hid}, true);
    shape_is(w.router_b2, "router.fc2.bias", {2}, true);
    shape_is(w.proj_full, "proj_full.weight", {C, nf * D}, false);
    shape_is(w.proj_full_b, "proj_full.bias", {C}, true);
    shape_is(w.proj_ra, "proj_ra.weight", {C, nr * D}, false);
    shape_is(w.proj_ra_b, "proj_ra.bias", {C}, true);
  } else {
    TORCH_CHECK(has_wo, "layer ", l, ": the output projection is missing");
    for (auto [t, n] : {std::pair{&w.router_w1, "router.fc1.weight"},
                        {&w.router_b1, "router.fc1.bias"},
                        {&w.router_w2, "router.fc2.weight"},
                        {&w.router_b2, "router.fc2.bias"},
                        {&w.proj_full, "proj_full.weight"},
                        {&w.proj_full_b, "proj_full.bias"},
                        {&w.proj_ra, "proj_ra.weight"},
                        {&w.proj_ra_b, "proj_ra.bias"}})
      absent(*t, n);
  }
  if (v.has_mlp_ctx(l)) {
    const int64_t R = v.mlp_ctx_rank, F = cfg.ffn_dim;
    shape_is(w.ctx_down, "mlp.ctx_down.weight", {R, C}, false);
    shape_is(w.ctx_up, "mlp.ctx_up.weight", {F, R}, false);
    shape_is(w.ctx_alpha, "mlp.ctx_alpha", {}, true);
    const float a = w.ctx_alpha.data_ptr<float>()[0];
    TORCH_CHECK(a >= 0.f && a <= 1.f, "layer ", l, ": mlp.ctx_alpha must be in [0, 1], got ", a);
    if (v.mlp_ctx_conductor) {
      shape_is(w.route_gate, "mlp.route_gate", {}, true);
      const float g = w.route_gate.data_ptr<float>()[0];
      TORCH_CHECK(g >= 0.f && g <= 1.f, "layer ", l, ": mlp.route_gate must be in [0, 1], got ", g);
    } else {
      absent(w.route_gate, "mlp.route_gate");
    }
  } else {
    for (auto [t, n] : {std::pair{&w.ctx_down, "mlp.ctx_down.weight"},
                        {&w.ctx_up, "mlp.ctx_up.weight"},
                        {&w.ctx_alpha, "mlp.ctx_alpha"},
                        {&w.route_gate, "mlp.route_gate"}})
      absent(*t, n);
  }
}

// ---- reference path ----

at::Tensor sba_attend(const ModelConfig& cfg, int64_t l, SequenceKv& kv, bool corrupted,
                      const at::Tensor& att_fwd, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, int64_t pos, const at::Tensor& mask, double scale) {
  check_sba_stages(kv, corrupted, l);
  KvCodec& rev = reverse_store(kv, l);
  const int64_t S = pos + q.size(0);
  rev.append(q.detach(), v.detach(), pos);              // K slot ← q rows, V slot ← v rows
  const at::Tensor Q = rev.keys(S), V = rev.values(S);  // [H, S, D]
  at::Tensor scores = at::matmul(k.transpose(0, 1), Q.transpose(1, 2)) * scale;  // [H, T, S]: k_i·q_j
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  const at::Tensor att_rev = at::matmul(at::softmax(scores, -1), V);
  const double a = cfg.variants.sba_alpha;
  return a * att_fwd + (1.0 - a) * att_rev;
}

at::Tensor router_features(const at::Tensor& x, const at::Tensor& e) {
  return at::cat(
      {(x - e).norm(2, {-1}, true), x.norm(2, {-1}, true), e.norm(2, {-1}, true), (x * e).sum(-1, true)}, 1);
}

at::Tensor router_probs(const VariantLayerWeights& w, const at::Tensor& x, const at::Tensor& e) {
  const at::Tensor h = at::gelu(at::addmm(w.router_b1, router_features(x, e), w.router_w1.t()));
  return at::softmax(at::addmm(w.router_b2, h, w.router_w2.t()), -1);  // [T, 2] = (p_ra, p_full)
}

at::Tensor router_out(const VariantLayerWeights& w, const at::Tensor& o, const at::Tensor& x,
                      const at::Tensor& e) {
  const int64_t nf = w.proj_full.size(1);
  const at::Tensor out_full = at::addmm(w.proj_full_b, o.narrow(1, 0, nf), up(w.proj_full).t());
  const at::Tensor out_ra = at::addmm(w.proj_ra_b, o.narrow(1, nf, o.size(1) - nf), up(w.proj_ra).t());
  const at::Tensor p = router_probs(w, x, e);
  return p.narrow(1, 0, 1) * out_ra + p.narrow(1, 1, 1) * out_full;
}

at::Tensor mlp_ctx_mix(const VariantLayerWeights& w, const at::Tensor& u, const at::Tensor& summary) {
  const at::Tensor ctx_h = at::mm(at::mm(summary, up(w.ctx_down).t()), up(w.ctx_up).t());  // [T, F]
  const double a = w.alpha();
  return (1.0 - a) * u + a * ctx_h;
}

// ---- fast path ----

void sba_step(const ModelConfig& cfg, int64_t l, SequenceKv& kv, const float* q, const float* k,
              const float* v, int64_t pos, float scale, VariantScratch& s, float* att) {
  check_sba_stages(kv, /*corrupted=*/false, l);  // the fast path has no corruption stage
  KvCodec& rev = reverse_store(kv, l);
  const int64_t H = cfg.n_head, D = cfg.head_dim;
  rev.append_token(q, v, pos);
  attend_all_heads(rev, k, H, D, pos + 1, scale, s.att_rev.data());
  const auto a = static_cast<float>(cfg.variants.sba_alpha);
  for (int64_t i = 0; i < H * D; ++i) att[i] = a * att[i] + (1.f - a) * s.att_rev[static_cast<size_t>(i)];
}

void router_step(const ModelConfig& cfg, const VariantLayerWeights& w, const float* att, const float* x,
                 const float* e, VariantScratch& s, float* out) {
  const int64_t C = cfg.dim, nf = w.proj_full.size(1), nr = w.proj_ra.size(1);
  const int64_t hid = w.router_w1.size(0);
  TORCH_CHECK(static_cast<int64_t>(s.router_h.size()) >= hid && static_cast<int64_t>(s.e_tok.size()) >= C,
              "router: scratch too small");
  kernels::matvec(w.proj_full.data_ptr(), w.proj_full.scalar_type(), att, fptr(w.proj_full_b),
                  s.out_full.data(), C, nf);
  kernels::matvec(w.proj_ra.data_ptr(), w.proj_ra.scalar_type(), att + nf, fptr(w.proj_ra_b), s.out_ra.data(),
                  C, nr);
  // features [‖x − e‖, ‖x‖, ‖e‖, ⟨x, e⟩]
  double dd = 0, xx = 0, ee = 0, xe = 0;
  for (int64_t i = 0; i < C; ++i) {
    const double d = static_cast<double>(x[i]) - e[i];
    dd += d * d;
    xx += static_cast<double>(x[i]) * x[i];
    ee += static_cast<double>(e[i]) * e[i];
    xe += static_cast<double>(x[i]) * e[i];
  }
  const float f[4] = {static_cast<float>(std::sqrt(dd)), static_cast<float>(std::sqrt(xx)),
                      static_cast<float>(std::sqrt(ee)), static_cast<float>(xe)};
  const float* w1 = w.router_w1.data_ptr<float>();
  const float* b1 = w.router_b1.data_ptr<float>();
  for (int64_t j = 0; j < hid; ++j) {
    float h = b1[j];
    for (int c = 0; c < 4; ++c) h += w1[j * 4 + c] * f[c];
    s.router_h[static_cast<size_t>(j)] = gelu_erf(h);
  }
  const float* w2 = w.router_w2.data_ptr<float>();
  const float* b2 = w.router_b2.data_ptr<float>();
  float logit[2];
  for (int c = 0; c < 2; ++c) {
    float z = b2[c];
    for (int64_t j = 0; j < hid; ++j) z += w2[c * hid + j] * s.router_h[static_cast<size_t>(j)];
    logit[c] = z;
  }
  const float m = std::max(logit[0], logit[1]);
  const float e0 = std::exp(logit[0] - m), e1 = std::exp(logit[1] - m);
  const float p_ra = e0 / (e0 + e1), p_full = e1 / (e0 + e1);
  for (int64_t i = 0; i < C; ++i)
    out[i] = p_ra * s.out_ra[static_cast<size_t>(i)] + p_full * s.out_full[static_cast<size_t>(i)];
}

void mlp_ctx_step(const ModelConfig& cfg, const VariantLayerWeights& w, const float* summary,
                  VariantScratch& s, float* h_in) {
  const int64_t C = cfg.dim, F = cfg.ffn_dim, R = w.ctx_down.size(0);
  TORCH_CHECK(static_cast<int64_t>(s.ctx_r.size()) >= R, "mlp_ctx: scratch too small");
  kernels::matvec(w.ctx_down.data_ptr(), w.ctx_down.scalar_type(), summary, nullptr, s.ctx_r.data(), R, C);
  kernels::matvec(w.ctx_up.data_ptr(), w.ctx_up.scalar_type(), s.ctx_r.data(), nullptr, s.ctx_h.data(), F, R);
  const float a = w.alpha();
  for (int64_t i = 0; i < F; ++i) h_in[i] = (1.f - a) * h_in[i] + a * s.ctx_h[static_cast<size_t>(i)];
}

// ---- parameter counts ----

VariantParams variant_params(const ModelConfig& cfg) {
  const VariantConfig& v = cfg.variants;
  const int64_t C = cfg.dim, hid = v.router_hidden;
  VariantParams p;
  const bool o_bias = cfg.arch == Arch::kGpt2 || cfg.attention_bias;
  for (size_t i = 0; i < v.router_layers.size(); ++i) {
    p.router_mlp += (4 * hid + hid) + (2 * hid + 2);
    // proj_full + proj_ra cover the same C × H·D weights as the output projection, plus a bias each
    p.router_proj += 2 * C - (o_bias ? C : 0);
  }
  for (size_t i = 0; i < v.mlp_ctx_layers.size(); ++i) {
    p.mlp_ctx += mlp_ctx_params_per_layer(C, cfg.ffn_dim, v.mlp_ctx_rank);
    p.mlp_ctx_scalars += v.mlp_ctx_conductor ? 2 : 1;
  }
  return p;
}

SeedCtxAccounting seed_ctx_accounting(int64_t C, int64_t n_layer, int64_t mult, int64_t R) {
  SeedCtxAccounting a;
  const int64_t F = mult * C;
  a.attn_per_layer = 4 * C * C;
  a.mlp_per_layer = 2 * C * F;
  a.baseline_per_layer = a.attn_per_layer + a.mlp_per_layer;
  a.baseline_total = a.baseline_per_layer * n_layer;
  a.ctx_down = R * C;
  a.ctx_up = F * R;
  a.ctx_per_layer = mlp_ctx_params_per_layer(C, F, R);
  a.ctx_total = a.ctx_per_layer * n_layer;
  a.lowrank_per_layer = a.baseline_per_layer + a.ctx_per_layer;
  a.lowrank_total = a.lowrank_per_layer * n_layer;
  a.fullrank_ctx_per_layer = C * F;
  a.fullrank_total = (a.baseline_per_layer + a.fullrank_ctx_per_layer) * n_layer;
  return a;
}

}  // namespace variants
}  // namespace frost
