#include "core/kv/kvsplice.h"

#include "core/kv/attend.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <ATen/core/grad_mode.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/store/safetensors.h"

namespace frost {
namespace {

constexpr const char* kFormat = "frost.kvsplice.v1";

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("kvsplice file ", path, ": ", what));
}

// softplus⁻¹(1) = log(e − 1): the raw scale that makes σ = 1.
const double kScaleForUnitSigma = std::log(std::exp(1.0) - 1.0);

std::vector<float> to_vec(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

at::Tensor LearnedKvSplice::sigma() const { return at::softplus(scale); }

at::Tensor LearnedKvSplice::encode(const at::Tensor& x) const {
  return at::matmul(x * sigma() + shift, compress.t());
}

at::Tensor LearnedKvSplice::decode(const at::Tensor& c) const {
  return (at::matmul(c, expand.t()) - shift) / sigma();
}

void KvSpliceFast::encode(const float* x, float* c, float* tmp) const {
  for (int64_t i = 0; i < d; ++i)
    tmp[i] = x[i] * sigma[static_cast<size_t>(i)] + shift[static_cast<size_t>(i)];
  for (int64_t k = 0; k < r; ++k) {
    const float* row = compress.data() + k * d;
    float acc = 0;
    for (int64_t i = 0; i < d; ++i) acc += row[i] * tmp[i];
    c[k] = acc;
  }
}

void KvSpliceFast::absorb(const float* q, int64_t col0, int64_t D, float* qt) const {
  std::fill(qt, qt + r, 0.f);
  for (int64_t i = 0; i < D; ++i) {
    const float u = q[i] * inv_sigma[static_cast<size_t>(col0 + i)];
    const float* erow = expand.data() + (col0 + i) * r;
    for (int64_t k = 0; k < r; ++k) qt[k] += u * erow[k];
  }
}

void KvSpliceFast::expand_cols(const float* cbar, int64_t col0, int64_t D, float* out) const {
  for (int64_t i = 0; i < D; ++i) {
    const float* erow = expand.data() + (col0 + i) * r;
    float acc = 0;
    for (int64_t k = 0; k < r; ++k) acc += erow[k] * cbar[k];
    const auto c = static_cast<size_t>(col0 + i);
    out[i] = (acc - shift[c]) * inv_sigma[c];
  }
}

const char* kv_latent_name(KvLatentDtype t) { return t == KvLatentDtype::kF16 ? "fp16" : "int8"; }

absl::StatusOr<KvLatentDtype> parse_kv_latent(const std::string& name) {
  if (name == "fp16") return KvLatentDtype::kF16;
  if (name == "int8") return KvLatentDtype::kI8;
  return absl::InvalidArgumentError(
      absl::StrCat("kvsplice latent dtype \"", name, "\" (expected fp16 or int8)"));
}

std::string KvSpliceRanks::label() const { return k == v ? std::to_string(k) : absl::StrCat(k, "/", v); }

absl::StatusOr<std::shared_ptr<KvSpliceSet>> KvSpliceSet::create(const KvSpliceDims& dims,
                                                                 KvSpliceRanks ranks, uint64_t seed) {
  if (dims.n_layers <= 0 || dims.n_head_kv <= 0 || dims.head_dim <= 0)
    return absl::InvalidArgumentError("kvsplice: model dimensions must be positive");
  for (auto [name, r] : {std::pair<const char*, int64_t>{"rank_k", ranks.k}, {"rank_v", ranks.v}}) {
    if (r < 1 || r > dims.d())
      return absl::InvalidArgumentError(absl::StrCat("kvsplice ", name, ": ", r, " out of range [1, ",
                                                     dims.d(), "] (n_head_kv · head_dim)"));
  }
  std::shared_ptr<KvSpliceSet> s(new KvSpliceSet());
  s->dims_ = dims;
  s->ranks_ = ranks;
  return torch_call([&]() -> std::shared_ptr<KvSpliceSet> {
    at::NoGradGuard ng;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t d = dims.d();
    for (int64_t l = 0; l < dims.n_layers; ++l) {
      for (auto [vec, rank] : {std::pair{&s->k_, ranks.k}, std::pair{&s->v_, ranks.v}}) {
        LearnedKvSplice sp;
        sp.scale = at::full({d}, kScaleForUnitSigma, at::kFloat);
        sp.shift = at::zeros({d}, at::kFloat);
        at::Tensor g = at::randn({d, d}, gen, at::kFloat);
        at::Tensor qm = std::get<0>(at::linalg_qr(g));  // [d, d] orthonormal columns
        sp.expand = qm.narrow(1, 0, rank).contiguous();
        sp.compress = sp.expand.t().contiguous();
        vec->push_back(std::move(sp));
      }
    }
    s->freeze();
    return s;
  });
}

void KvSpliceSet::freeze() {
  at::NoGradGuard ng;
  auto make = [](const LearnedKvSplice& sp) {
    KvSpliceFast f;
    f.d = sp.scale.size(0);
    f.r = sp.compress.size(0);
    f.sigma = to_vec(sp.sigma());
    f.inv_sigma.resize(f.sigma.size());
    for (size_t i = 0; i < f.sigma.size(); ++i) f.inv_sigma[i] = 1.f / f.sigma[i];
    f.shift = to_vec(sp.shift);
    f.compress = to_vec(sp.compress);
    f.expand = to_vec(sp.expand);
    return f;
  };
  fk_.clear();
  fv_.clear();
  for (size_t l = 0; l < k_.size(); ++l) {
    fk_.push_back(make(k_[l]));
    fv_.push_back(make(v_[l]));
  }
}

std::vector<std::pair<std::string, at::Tensor>> KvSpliceSet::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t l = 0; l < k_.size(); ++l) {
    for (auto [kv, sp] : {std::pair<const char*, const LearnedKvSplice*>{"k", &k_[l]}, {"v", &v_[l]}}) {
      const std::string p = absl::StrCat("layers.", l, ".", kv, ".");
      out.emplace_back(p + "scale", sp->scale);
      out.emplace_back(p + "shift", sp->shift);
      out.emplace_back(p + "compress", sp->compress);
      out.emplace_back(p + "expand", sp->expand);
    }
  }
  return out;
}

std::vector<at::Tensor> KvSpliceSet::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t KvSpliceSet::n_params() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

absl::Status KvSpliceSet::save(const std::string& path,
                               const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"rank_k", std::to_string(ranks_.k)},
      {"rank_v", std::to_string(ranks_.v)},
      {"n_layers", std::to_string(dims_.n_layers)},
      {"n_head_kv", std::to_string(dims_.n_head_kv)},
      {"head_dim", std::to_string(dims_.head_dim)},
      {"latent_dtype", kv_latent_name(latent_)},
  };
  if (ranks_.k == ranks_.v) meta["rank"] = std::to_string(ranks_.k);  // readable by single-rank loaders
  for (const auto& [k, v] : extra) {
    if (meta.count(k) || k == "rank")
      return absl::InvalidArgumentError(absl::StrCat("kvsplice save: metadata key ", k, " is reserved"));
    meta[k] = v;
  }
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [n, t] : named_parameters()) ts.emplace_back(n, t.detach().to(at::kFloat).contiguous());
  FROST_ASSIGN_OR_RETURN(std::string bytes, safetensors_serialize(ts, meta));
  return write_file_atomic(path, bytes);
}

absl::StatusOr<std::shared_ptr<KvSpliceSet>> KvSpliceSet::load(const std::string& path,
                                                               const KvSpliceDims& dims) {
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  const auto& m = f->metadata();
  auto int_field = [&](const std::string& k) -> absl::StatusOr<int64_t> {
    auto it = m.find(k);
    if (it == m.end()) return bad(path, absl::StrCat("metadata field ", k, " missing"));
    int64_t x = 0;
    if (!absl::SimpleAtoi(it->second, &x))
      return bad(path, absl::StrCat("metadata ", k, " = \"", it->second, "\" is not an integer"));
    return x;
  };
  auto fmt = m.find("format");
  if (fmt == m.end()) return bad(path, "metadata field format missing");
  if (fmt->second != kFormat)
    return bad(path, absl::StrCat("format \"", fmt->second, "\" (expected ", kFormat, ")"));
  KvLatentDtype latent = KvLatentDtype::kF16;  // files from before int8 latents carry fp16 or nothing
  if (auto dt = m.find("latent_dtype"); dt != m.end()) {
    absl::StatusOr<KvLatentDtype> t = parse_kv_latent(dt->second);
    if (!t.ok()) return bad(path, std::string(t.status().message()));
    latent = *t;
  }
  KvSpliceDims fd;
  FROST_ASSIGN_OR_RETURN(fd.n_layers, int_field("n_layers"));
  FROST_ASSIGN_OR_RETURN(fd.n_head_kv, int_field("n_head_kv"));
  FROST_ASSIGN_OR_RETURN(fd.head_dim, int_field("head_dim"));
  for (auto [name, a, b] : {std::tuple{"n_layers", fd.n_layers, dims.n_layers},
                            std::tuple{"n_head_kv", fd.n_head_kv, dims.n_head_kv},
                            std::tuple{"head_dim", fd.head_dim, dims.head_dim}}) {
    if (a != b)
      return bad(path, absl::StrCat("made for a model with ", name, " = ", a, ", this model has ", b));
  }
  KvSpliceRanks ranks;
  if (m.count("rank_k") || m.count("rank_v")) {
    FROST_ASSIGN_OR_RETURN(ranks.k, int_field("rank_k"));
    FROST_ASSIGN_OR_RETURN(ranks.v, int_field("rank_v"));
    if (auto r = m.find("rank");
        r != m.end() && !(ranks.k == ranks.v && r->second == std::to_string(ranks.k)))
      return bad(path, absl::StrCat("metadata rank = \"", r->second, "\" contradicts rank_k = ", ranks.k,
                                    ", rank_v = ", ranks.v));
  } else {
    FROST_ASSIGN_OR_RETURN(ranks.k, int_field("rank"));
    ranks.v = ranks.k;
  }
  absl::StatusOr<std::shared_ptr<KvSpliceSet>> s = create(dims, ranks, 0);
  if (!s.ok()) return bad(path, std::string(s.status().message()));
  if (absl::Status st = safetensors_load_into(*f, (*s)->named_parameters()); !st.ok())
    return st.code() == absl::StatusCode::kInvalidArgument ? bad(path, std::string(st.message())) : st;
  (*s)->metadata_ = m;
  (*s)->latent_ = latent;
  (*s)->freeze();
  return s;
}

namespace {

// RT: fp16 or int8 latent rows; int8 rows carry a scale per row (ks, vs), applied once per row.
template <typename RT>
void attend_latent(const KvSpliceFast& kf, const KvSpliceFast& vf, const float* q, const KvPagedRows& K, const KvPagedRows& V,
                   const KvPagedRows* ks, const KvPagedRows* vs, int64_t n_head, int64_t n_head_kv, int64_t D, int64_t n,
                   float scale, int64_t h0, int64_t h1, float* out) {
  const int64_t rk = kf.r, rv = vf.r, group = n_head / n_head_kv;
  float* s = kernels::thread_scratch(n + rk + rv);
  float* qt = s + n;
  float* cbar = qt + rk;
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t col0 = (h / group) * D;
    kf.absorb(q + h * D, col0, D, qt);  // q̃ = E[G]ᵀ (q ⊘ σ[G])
    float mx = -std::numeric_limits<float>::infinity();
    K.for_runs(0, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = ks ? reinterpret_cast<const float*>(ks->row(0, t0)) : nullptr;
      for (int64_t i = 0; i < cnt; ++i) {
        const RT* row = reinterpret_cast<const RT*>(p + i * K.row_bytes);
        float acc = 0;
        for (int64_t k = 0; k < rk; ++k) acc += static_cast<float>(row[k]) * qt[k];
        const float x = acc * scale * (sc ? sc[i] : 1.f);
        s[t0 + i] = x;
        mx = std::max(mx, x);
      }
    });
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    const float inv = 1.f / sum;
    std::fill(cbar, cbar + rv, 0.f);
    V.for_runs(0, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {  // Σⱼ pⱼ cⱼ
      const float* sc = vs ? reinterpret_cast<const float*>(vs->row(0, t0)) : nullptr;
      for (int64_t i = 0; i < cnt; ++i) {
        const float pj = s[t0 + i] * inv * (sc ? sc[i] : 1.f);
        const RT* row = reinterpret_cast<const RT*>(p + i * V.row_bytes);
        for (int64_t k = 0; k < rv; ++k) cbar[k] += pj * static_cast<float>(row[k]);
      }
    });
    vf.expand_cols(cbar, col0, D, out + h * D);  // (c̄ E[G]ᵀ − b[G]) ⊘ σ[G]
  }
}

}  // namespace

void kvsplice_attend(const KvSpliceFast& kf, const KvSpliceFast& vf, const float* q, const KvPagedRows& ck,
                     const KvPagedRows& cv, const KvPagedRows& ks, const KvPagedRows& vs, bool int8, int64_t n_head,
                     int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0, int64_t h1,
                     float* out) {
  TORCH_CHECK(kf.d == n_head_kv * head_dim && vf.d == kf.d, "kvsplice_attend: shape mismatch");
  if (int8)
    attend_latent<int8_t>(kf, vf, q, ck, cv, &ks, &vs, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
  else
    attend_latent<c10::Half>(kf, vf, q, ck, cv, nullptr, nullptr, n_head, n_head_kv, head_dim, n, scale, h0, h1,
                             out);
}

absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> load_served_kvsplice(const std::string& path,
                                                                                 const KvSpliceDims& dims,
                                                                                 const std::string& name,
                                                                                 const std::string& model) {
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<KvSpliceSet> set, KvSpliceSet::load(path, dims));
  if (auto m = set->metadata().find("model"); m != set->metadata().end() && m->second != model)
    return bad(path, absl::StrCat("trained on model \"", m->second, "\", this server runs \"", model, "\""));
  auto a = std::make_shared<KvSpliceSlot::Active>();
  a->set = std::move(set);
  a->name = name;
  return std::shared_ptr<const KvSpliceSlot::Active>(std::move(a));
}

}  // namespace frost
