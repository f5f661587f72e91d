#include "core/prototype/net.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frost::prototype {

// ---------------------------------------------------------------------------------- ParamSet

at::Tensor ParamSet::add(const std::string& name, at::Tensor t, bool trainable, at::ScalarType dtype) {
  t = t.contiguous().to(device_, dtype);  // the same tensor when already there in that dtype
  if (trainable) t.set_requires_grad(true);
  items_.emplace_back(name, t);
  trainable_.push_back(trainable);
  return t;
}

bool ParamSet::trainable(const std::string& name) const {
  for (size_t i = 0; i < items_.size(); ++i)
    if (items_[i].first == name) return trainable_[i];
  return false;
}

at::Tensor ParamSet::get(const std::string& name) const {
  for (const auto& [n, t] : items_)
    if (n == name) return t;
  return {};
}

std::vector<std::pair<std::string, at::Tensor>> ParamSet::trainable_with_prefix(
    const std::vector<std::string>& prefixes) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (!trainable_[i]) continue;
    for (const std::string& p : prefixes) {
      if (items_[i].first.rfind(p, 0) == 0) {
        out.push_back(items_[i]);
        break;
      }
    }
  }
  return out;
}

absl::Status ParamSet::load(const std::vector<std::pair<std::string, at::Tensor>>& values) {
  std::vector<const at::Tensor*> src(items_.size(), nullptr);
  for (size_t i = 0; i < items_.size(); ++i) {
    for (const auto& [n, t] : values) {
      if (n == items_[i].first) src[i] = &t;
    }
    if (!src[i]) return absl::InvalidArgumentError(absl::StrCat("tensor '", items_[i].first, "' is missing"));
    if (src[i]->sizes() != items_[i].second.sizes())
      return absl::InvalidArgumentError(absl::StrCat("tensor '", items_[i].first, "' has shape [",
                                                     absl::StrJoin(src[i]->sizes(), ", "), "], expected [",
                                                     absl::StrJoin(items_[i].second.sizes(), ", "), "]"));
  }
  at::NoGradGuard ng;
  for (size_t i = 0; i < items_.size(); ++i) items_[i].second.copy_(*src[i]);
  return absl::OkStatus();
}

int64_t ParamSet::numel() const {
  int64_t n = 0;
  for (const auto& [name, t] : items_) n += t.numel();
  return n;
}

// ---------------------------------------------------------------------------------- modules

at::Tensor Linear::operator()(const at::Tensor& x) const { return at::linear(x, w, b); }

at::Tensor LayerNorm::operator()(const at::Tensor& x) const {
  return at::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
}

at::Tensor Attention::operator()(const at::Tensor& q_in, const at::Tensor& kv, const at::Tensor& key_mask,
                                 at::Tensor* probs_out, const at::Tensor& bias) const {
  const int64_t B = q_in.size(0), nq = q_in.size(1), d = q_in.size(2);
  const int64_t Bk = kv.size(0), nk = kv.size(1), dh = d / heads;
  // [B, nq, d] → [B, H, nq, dh]
  at::Tensor kh = k(kv).view({Bk, nk, heads, dh}).transpose(1, 2);
  at::Tensor vh = v(kv).view({Bk, nk, heads, dh}).transpose(1, 2);
  if (Bk == 1 && B > 1 && !key_mask.defined()) {
    // Shared memory (Stage B prototypes, Predict): fold the batch into the query rows, so the
    // [H, nk, dh] keys are used as they are instead of being broadcast-copied B times.
    at::Tensor qh = q(q_in).view({B * nq, heads, dh}).transpose(0, 1).unsqueeze(0);  // [1, H, B*nq, dh]
    at::Tensor scores = at::matmul(qh, kh.transpose(2, 3)) / std::sqrt(static_cast<double>(dh));
    if (bias.defined())
      scores =
          (scores.view({1, heads, B, nq, nk}) + bias.view({1, 1, B, 1, nk})).view({1, heads, B * nq, nk});
    at::Tensor p = at::softmax(scores, -1);  // [1, H, B*nq, nk]
    if (probs_out) *probs_out = p.view({heads, B, nq, nk}).transpose(0, 1);
    at::Tensor out = at::matmul(p, vh).squeeze(0).transpose(0, 1).reshape({B, nq, d});
    return o(out);
  }
  at::Tensor qh = q(q_in).view({B, nq, heads, dh}).transpose(1, 2);
  at::Tensor scores = at::matmul(qh, kh.transpose(2, 3)) / std::sqrt(static_cast<double>(dh));  // [B,H,nq,nk]
  if (bias.defined()) scores = scores + bias.view({B, 1, 1, nk});
  if (key_mask.defined())
    scores = scores.masked_fill(key_mask.logical_not().view({Bk, 1, 1, nk}),
                                -std::numeric_limits<float>::infinity());
  at::Tensor p = at::softmax(scores, -1);
  if (probs_out) *probs_out = p;
  at::Tensor out = at::matmul(p, vh).transpose(1, 2).reshape({B, nq, d});
  return o(out);
}

at::Tensor FFN::operator()(const at::Tensor& x) const {
  at::Tensor h = fc1(x);
  return fc2(relu ? at::relu(h) : at::gelu(h));
}

at::Tensor Compressor::operator()(const at::Tensor& x, const at::Tensor& mask) const {
  const int64_t B = x.size(0);
  at::Tensor z0 = latents.unsqueeze(0).expand({B, latents.size(0), latents.size(1)});
  at::Tensor z = z0 + attn(ln_q(z0), ln_kv(x), mask);
  z = z + ffn(ln_ff(z));
  return ln_out(z);
}

at::Tensor InferenceHead::operator()(const at::Tensor& q_tokens, const at::Tensor& mem,
                                     std::vector<at::Tensor>* mem_probs, const at::Tensor& mem_bias) const {
  const int64_t B = q_tokens.size(0), d = r0.size(0);
  at::Tensor r = r0.view({1, 1, d}).expand({B, 1, d});
  for (const HeadLayer& l : layers) {
    r = r + l.att_q(l.ln_r1(r), l.ln_q(q_tokens), at::Tensor());
    at::Tensor p;
    r = r + l.att_mem(l.ln_r2(r), l.ln_mem(mem), at::Tensor(), mem_probs ? &p : nullptr, mem_bias);
    if (mem_probs) mem_probs->push_back(p);
    r = r + l.ffn(l.ln_ff(r));
  }
  at::Tensor h = ln_out(r.select(1, 0));
  return out2(at::gelu(out1(h))).squeeze(-1);
}

void RestrStats::add(const RestrStats& o) {
  applied += o.applied;
  fallback_shape += o.fallback_shape;
  fallback_nonfinite += o.fallback_nonfinite;
  fallback_norm += o.fallback_norm;
}

at::Tensor ResTR::operator()(const at::Tensor& z, const at::Tensor& alpha, const at::Tensor& beta,
                             double norm_eps, RestrStats* stats, at::Tensor* fallback_out,
                             at::Tensor* inflation_out) const {
  const int64_t B = z.size(0);
  at::Tensor a = alpha.view({B, 1, 1}), bt = beta.view({B, 1, 1});
  at::Tensor z1 = z + a * attn(z, z, at::Tensor());
  at::Tensor out = z1 + bt * ffn(z1);
  if (inflation_out) *inflation_out = out.flatten(1).norm(2, 1) / (z.flatten(1).norm(2, 1) + 1e-12);
  RestrStats st;
  at::Tensor keep;
  if (out.sizes() != z.sizes()) {  // cannot happen with these modules; guarded as the seed demands
    st.fallback_shape = B;
    keep = at::zeros({B}, z.options().dtype(at::kBool));
  } else {
    at::NoGradGuard ng;
    at::Tensor finite = at::isfinite(out).flatten(1).all(1);
    at::Tensor n_in = z.flatten(1).norm(2, 1), n_out = out.flatten(1).norm(2, 1);
    at::Tensor bounded = n_out <= n_in * (1.0 + norm_eps);
    keep = finite.logical_and(bounded);
    st.fallback_nonfinite = finite.logical_not().sum().item<int64_t>();
    st.fallback_norm = finite.logical_and(bounded.logical_not()).sum().item<int64_t>();
    at::Tensor active = (alpha > 0).logical_or(beta > 0);
    st.applied = keep.logical_and(active).sum().item<int64_t>();
  }
  if (stats) stats->add(st);
  if (fallback_out) *fallback_out = keep.logical_not();
  if (out.sizes() != z.sizes()) return z;
  // where(), not arithmetic mixing: a NaN in a rejected row must not leak into the result
  return at::where(keep.view({B, 1, 1}), out, z);
}

at::Tensor prototype_memory(const at::Tensor& mem, const at::Tensor& label_tokens) {
  const int64_t K = mem.size(0), m = mem.size(1), d = mem.size(2);
  return at::cat({mem, label_tokens.unsqueeze(1)}, 1).reshape({1, K * (m + 1), d});
}

at::Tensor block_key_bias(const at::Tensor& q_keys, const at::Tensor& proto_keys, int64_t block,
                          double gamma) {
  if (gamma == 0) return {};
  at::Tensor cos = at::matmul(q_keys, proto_keys.t()) * gamma;  // [B, K]
  return cos.unsqueeze(-1).expand({cos.size(0), cos.size(1), block}).reshape({cos.size(0), -1});
}

at::Tensor huber(const at::Tensor& pred, const at::Tensor& target, double delta) {
  at::Tensor d = (pred - target).abs();
  return at::where(d <= delta, 0.5 * d * d, delta * (d - 0.5 * delta));
}

// ---------------------------------------------------------------------------------- PrototypeNet

namespace {

struct Builder {
  ParamSet& ps;
  at::Generator gen;

  Linear linear(const std::string& name, int64_t in, int64_t out, bool bias = true) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    Linear l;
    l.w = ps.add(name + ".weight", at::rand({out, in}, gen) * (2 * bound) - bound);
    if (bias) l.b = ps.add(name + ".bias", at::rand({out}, gen) * (2 * bound) - bound);
    return l;
  }
  LayerNorm norm(const std::string& name, int64_t d) {
    return {ps.add(name + ".weight", at::ones({d})), ps.add(name + ".bias", at::zeros({d}))};
  }
  at::Tensor normal(const std::string& name, at::IntArrayRef shape, double std) {
    return ps.add(name, at::randn(shape, gen) * std);
  }
  Attention attention(const std::string& name, int64_t d, int64_t heads) {
    Attention a;
    a.q = linear(name + ".q", d, d);
    a.k = linear(name + ".k", d, d);
    a.v = linear(name + ".v", d, d);
    a.o = linear(name + ".o", d, d);
    a.heads = heads;
    return a;
  }
  FFN ffn(const std::string& name, int64_t d, int64_t f, bool relu) {
    FFN x;
    x.fc1 = linear(name + ".fc1", d, f);
    x.fc2 = linear(name + ".fc2", f, d);
    x.relu = relu;
    return x;
  }
  Compressor compressor(const std::string& name, int64_t n, const PrototypeConfig& c) {
    Compressor x;
    x.latents = normal(name + ".latents", {n, c.d_h}, 0.02);
    x.ln_q = norm(name + ".ln_q", c.d_h);
    x.ln_kv = norm(name + ".ln_kv", c.d_h);
    x.attn = attention(name + ".attn", c.d_h, c.H);
    x.ln_ff = norm(name + ".ln_ff", c.d_h);
    x.ffn = ffn(name + ".ffn", c.d_h, c.ffn_dim(), false);
    x.ln_out = norm(name + ".ln_out", c.d_h);
    return x;
  }
};

}  // namespace

PrototypeNet::PrototypeNet(const PrototypeConfig& cfg, int64_t d_model, double a, double b, double mu,
                           double sigma, at::Device device)
    : cfg_(cfg), d_model_(d_model), a_(a), b_(b), ps_(device) {
  at::NoGradGuard ng;
  Builder bd{ps_, at::make_generator<at::CPUGeneratorImpl>(cfg.seed)};
  const int64_t d = cfg.d_h;
  w_m_ = bd.linear("w_m", d_model, d, /*bias=*/false);
  w_q_ = bd.linear("w_q", d_model, d, /*bias=*/false);
  mem_comp_ = bd.compressor("mem_comp", cfg.m, cfg);
  query_comp_ = bd.compressor("query_comp", cfg.m_q, cfg);
  q_key_ = bd.normal("key_readout.query", {1, d}, 0.02);
  key_attn_ = bd.attention("key_readout.attn", d, cfg.H);
  e1_ = bd.linear("label_embed.fc1", 1, cfg.label_hidden);
  e2_ = bd.linear("label_embed.fc2", cfg.label_hidden, d);
  label_mu_ = ps_.add("label_embed.mu", at::full({1}, mu), /*trainable=*/false);
  label_sigma_ = ps_.add("label_embed.sigma", at::full({1}, sigma), /*trainable=*/false);
  g1_ = bd.linear("g_emb.fc1", d, d);
  g2_ = bd.linear("g_emb.fc2", d, d);
  head_.r0 = bd.normal("head.r0", {d}, 0.02);
  for (int64_t l = 0; l < cfg.L; ++l) {
    const std::string p = absl::StrCat("head.layers.", l);
    HeadLayer hl;
    hl.ln_r1 = bd.norm(p + ".ln_r1", d);
    hl.ln_q = bd.norm(p + ".ln_q", d);
    hl.att_q = bd.attention(p + ".att_q", d, cfg.H);
    hl.ln_r2 = bd.norm(p + ".ln_r2", d);
    hl.ln_mem = bd.norm(p + ".ln_mem", d);
    hl.att_mem = bd.attention(p + ".att_mem", d, cfg.H);
    hl.ln_ff = bd.norm(p + ".ln_ff", d);
    hl.ffn = bd.ffn(p + ".ffn", d, cfg.ffn_dim(), false);
    head_.layers.push_back(std::move(hl));
  }
  head_.ln_out = bd.norm("head.ln_out", d);
  head_.out1 = bd.linear("head.out1", d, d);
  head_.out2 = bd.linear("head.out2", d, 1);
  restr_.attn = bd.attention("restr.attn", d, cfg.H);
  restr_.ffn = bd.ffn("restr.ffn", d, cfg.ffn_dim(), true);
  slots_ = bd.normal("slots", {cfg.K, d}, 1.0);
  // Zero starts after every draw, so the other tensors keep the values the seed's init gives them.
  if (cfg.restr_guard_weight > 0) {
    // resTR starts as the identity for every α, β and grows only as far as Stage B asks.
    restr_.attn.o.w.zero_();
    restr_.attn.o.b.zero_();
    restr_.ffn.fc2.w.zero_();
    restr_.ffn.fc2.b.zero_();
  }
  if (cfg.probe == "ridge") {
    // The head starts as the probe: its residual logit is 0 until training moves it.
    head_.out2.w.zero_();
    head_.out2.b.zero_();
    probe_w_ = ps_.add("probe.w", at::zeros({d_model}), /*trainable=*/false, at::kDouble);
    probe_b_ = ps_.add("probe.bias", at::zeros({1}), /*trainable=*/false, at::kDouble);
    probe_scale_ = ps_.add("probe.scale", at::ones({1}), /*trainable=*/false, at::kDouble);
    probe_offset_ = ps_.add("probe.offset", at::zeros({1}), /*trainable=*/false, at::kDouble);
  }
}

at::Tensor PrototypeNet::probe_logit(const at::Tensor& h, const at::Tensor& mask) const {
  const int64_t B = h.size(0);
  if (!has_probe()) return at::zeros({B}, h.options());
  at::Tensor hd = h.detach().to(at::kDouble);                     // the probe is frozen
  at::Tensor m = mask.to(at::kDouble).unsqueeze(-1);              // [B, S, 1]
  at::Tensor pooled = (hd * m).sum(1) / m.sum(1).clamp_min(1.0);  // [B, C]
  at::Tensor y = at::matmul(pooled, probe_w_) + probe_b_;         // [B]
  at::Tensor u = ((y - a_) / (b_ - a_)).clamp(1e-4, 1.0 - 1e-4);
  return at::log(u) - at::log1p(-u);
}

at::Tensor PrototypeNet::output(const at::Tensor& z_head, const at::Tensor& z_probe) const {
  if (!has_probe()) return bound(z_head);
  return bound(z_probe.to(at::kDouble) + probe_offset_ + probe_scale_ * z_head.to(at::kDouble));
}

void PrototypeNet::set_probe(const at::Tensor& w, double bias) {
  at::NoGradGuard ng;
  probe_w_.copy_(w.to(at::kDouble).view({-1}));
  probe_b_.fill_(bias);
}

void PrototypeNet::set_probe_scale(double s) {
  at::NoGradGuard ng;
  if (probe_scale_.defined()) probe_scale_.fill_(s);
}

double PrototypeNet::probe_scale() const {
  return probe_scale_.defined() ? probe_scale_.item<double>() : 1.0;
}

void PrototypeNet::set_probe_offset(double c) {
  at::NoGradGuard ng;
  if (probe_offset_.defined()) probe_offset_.fill_(c);
}

double PrototypeNet::probe_offset() const {
  return probe_offset_.defined() ? probe_offset_.item<double>() : 0.0;
}

std::vector<std::pair<std::string, at::Tensor>> PrototypeNet::stage_a_params() const {
  return ps_.trainable_with_prefix(
      {"w_m.", "w_q.", "mem_comp.", "query_comp.", "key_readout.", "label_embed.", "g_emb.", "head."});
}

std::vector<std::pair<std::string, at::Tensor>> PrototypeNet::stage_b_params() const {
  return ps_.trainable_with_prefix({"slots", "w_q.", "query_comp.", "label_embed.", "head.", "restr."});
}

at::Tensor PrototypeNet::query_tokens(const at::Tensor& h, const at::Tensor& mask) const {
  return query_comp_(w_q_(h), mask);
}

at::Tensor PrototypeNet::memory_tokens(const at::Tensor& h, const at::Tensor& mask) const {
  return mem_comp_(w_m_(h), mask);
}

at::Tensor PrototypeNet::key(const at::Tensor& mem) const {
  const int64_t B = mem.size(0);
  at::Tensor q = q_key_.unsqueeze(0).expand({B, 1, cfg_.d_h});
  return key_attn_(q, mem, at::Tensor()).select(1, 0);
}

at::Tensor PrototypeNet::normalize(const at::Tensor& k) const {
  return k / (k.norm(2, -1, /*keepdim=*/true) + cfg_.norm_eps);
}

at::Tensor PrototypeNet::label_embed(const at::Tensor& y) const {
  at::Tensor yn = (y.to(at::kFloat).unsqueeze(-1) - label_mu_) / (label_sigma_ + cfg_.norm_eps);
  return e2_(at::gelu(e1_(yn)));
}

at::Tensor PrototypeNet::emb_predict(const at::Tensor& k) const { return g2_(at::gelu(g1_(k))); }

at::Tensor PrototypeNet::bound(const at::Tensor& z) const { return a_ + (b_ - a_) * at::sigmoid(z); }

}  // namespace frost::prototype
