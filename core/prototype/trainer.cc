#include "core/prototype/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/prototype/baselines.h"
#include "core/prototype/metrics.h"
#include "core/prototype/predictor.h"
#include "core/prototype/residual_choice.h"
#include "core/prototype/selection.h"
#include "core/store/safetensors.h"

namespace frost::prototype {

namespace {

constexpr int kStageA = 1, kStageB = 2, kStageDone = 3;

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The generator of one (stage, epoch, step); step = -1 is the epoch's shuffle.
at::Generator gen_for(uint64_t seed, int stage, int64_t epoch, int64_t step) {
  uint64_t s = splitmix(seed);
  s = splitmix(s ^ static_cast<uint64_t>(stage));
  s = splitmix(s ^ static_cast<uint64_t>(epoch));
  s = splitmix(s ^ static_cast<uint64_t>(step + 1));
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

// VmHWM (peak RSS) of this process in bytes; 0 when unreadable.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return 0;
}

// Resets VmHWM to the current RSS so the next reading is this stage's peak (Linux >= 4.0).
void reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// AdamW over a named parameter list; moments are plain tensors so checkpoints are safetensors.
struct PrototypeTrainer::Opt {
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::vector<at::Tensor> m, v;
  std::vector<bool> decay;
  int64_t t = 0;
  double lr = 1e-3, wd = 0, clip = 0, b1 = 0.9, b2 = 0.999, eps = 1e-8;

  Opt(std::vector<std::pair<std::string, at::Tensor>> ps, const PrototypeConfig& c)
      : params(std::move(ps)), lr(c.lr), wd(c.weight_decay), clip(c.grad_clip) {
    for (const auto& [name, p] : params) {
      m.push_back(at::zeros_like(p));
      v.push_back(at::zeros_like(p));
      // decay Linear matrices only: not norms, biases, latents, r_0 or slots
      decay.push_back(p.dim() == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0);
    }
  }
  void zero_grad() {
    for (auto& [name, p] : params) p.mutable_grad() = at::Tensor();
  }
  void step() {
    at::NoGradGuard ng;
    ++t;
    double scale = 1.0;
    if (clip > 0) {
      double sq = 0;
      for (auto& [name, p] : params)
        if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
      const double norm = std::sqrt(sq);
      if (norm > clip) scale = clip / (norm + 1e-6);
    }
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor& p = params[i].second;
      if (!p.grad().defined()) continue;
      at::Tensor g = scale == 1.0 ? p.grad() : p.grad() * scale;
      m[i].mul_(b1).add_(g, 1 - b1);
      v[i].mul_(b2).addcmul_(g, g, 1 - b2);
      if (decay[i] && wd > 0) p.mul_(1 - lr * wd);
      p.addcdiv_(m[i], (v[i] / bc2).sqrt_().add_(eps), -lr / bc1);
    }
  }
};

MinibatchLoss stage_a_loss(const PrototypeNet& net, const at::Tensor& h, const at::Tensor& mask,
                           const at::Tensor& y) {
  const PrototypeConfig& c = net.cfg();
  MinibatchLoss l;
  at::Tensor q = net.query_tokens(h, mask);
  at::Tensor mem = net.memory_tokens(h, mask);  // Mem^(A) = M(x): no label token
  l.yhat = net.output(net.head()(q, mem), net.probe_logit(h, mask)).to(at::kFloat);
  l.reg = huber(l.yhat, y, c.huber_delta).mean();
  at::Tensor ehat = net.emb_predict(net.key(mem));
  at::Tensor e_y = net.label_embed(y);  // target only: never an input to ŷ
  l.aux = (ehat - e_y).pow(2).sum(-1).mean() / static_cast<double>(c.d_h);
  l.loss = l.reg + c.lambda_emb * l.aux;
  return l;
}

MinibatchLoss stage_b_loss(const PrototypeNet& net, const at::Tensor& h, const at::Tensor& mask,
                           const at::Tensor& y, const at::Tensor& q_keys, const at::Tensor& alpha,
                           const at::Tensor& beta, const at::Tensor& keys, const at::Tensor& mem_flat,
                           const at::Tensor& labels, const at::Tensor& u, double tau) {
  const PrototypeConfig& c = net.cfg();
  const int64_t N = keys.size(0), T = std::min(c.T, N);
  MinibatchLoss l;
  at::Tensor inflation;
  at::Tensor q = net.restr()(net.query_tokens(h, mask), alpha, beta, c.restr_norm_eps, nullptr, nullptr,
                             c.restr_guard_weight > 0 ? &inflation : nullptr);
  l.sel = select_prototypes(net.slots(), keys, T, tau, u, c.norm_eps, c.gumbel_eps);
  at::Tensor mt = weighted_rows(mem_flat, l.sel.cand, l.sel.w).view({c.K, c.m, c.d_h});  // M~_k
  // l~_k: E runs once per distinct label value (emobank's N = 7,925 rows hold a few hundred), and
  // the candidates index those rows: the same tokens as E over all N labels, for less.
  at::Tensor uniq, inv;
  {
    at::NoGradGuard ng;
    auto u = at::_unique2(labels, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
    uniq = std::get<0>(u);
    inv = std::get<1>(u);
  }
  at::Tensor lt = weighted_rows(net.label_embed(uniq),
                                inv.index_select(0, l.sel.cand.reshape({-1})).view_as(l.sel.cand), l.sel.w);
  at::Tensor mem = prototype_memory(mt, lt);
  // key_bias: the selected keys k~_k use the same straight-through weights as M~_k and l~_k
  at::Tensor bias = block_key_bias(q_keys, weighted_rows(keys, l.sel.cand, l.sel.w), c.m + 1, c.key_bias);
  l.yhat = net.output(net.head()(q, mem, nullptr, bias), net.probe_logit(h, mask)).to(at::kFloat);
  l.reg = huber(l.yhat, y, c.huber_delta).mean();
  l.aux = c.lambda_ov * overlap_loss(l.sel.cand, l.sel.p, N) +
          c.lambda_rep * repulsion_loss(l.sel.cand, l.sel.p, keys, c.m_cos, c.norm_eps);
  if (c.restr_guard_weight > 0)  // resTR learns to stay inside its guard (docs/prototype.md)
    l.aux = l.aux + c.restr_guard_weight * at::relu(inflation - (1.0 + c.restr_train_eps)).pow(2).mean();
  l.loss = l.reg + l.aux;
  return l;
}

absl::StatusOr<std::unique_ptr<PrototypeTrainer>> PrototypeTrainer::create(const LoadedModel& model,
                                                                           RegressionData train,
                                                                           LabelBounds bounds,
                                                                           PrototypeConfig cfg) {
  return create(model, std::move(train), bounds, std::move(cfg), compute_device(model));
}

absl::StatusOr<std::unique_ptr<PrototypeTrainer>> PrototypeTrainer::create(const LoadedModel& model,
                                                                           RegressionData train,
                                                                           LabelBounds bounds,
                                                                           PrototypeConfig cfg,
                                                                           ComputeDevice device) {
  FROST_RETURN_IF_ERROR(validate(cfg));
  FROST_RETURN_IF_ERROR(validate_bounds(bounds));
  const int64_t N = train.size();
  if (N < 2) return absl::InvalidArgumentError(absl::StrCat("training data: need at least 2 rows, got ", N));
  if (cfg.K > N)
    return absl::InvalidArgumentError(
        absl::StrCat("prototype config: K (", cfg.K, ") exceeds the ", N, " training rows"));
  if (train.labels.size() != train.texts.size())
    return absl::InvalidArgumentError("training data: texts and labels differ in length");
  for (int64_t i = 0; i < N; ++i) {
    const float y = train.labels[static_cast<size_t>(i)];
    if (!std::isfinite(y) || y < bounds.a || y > bounds.b)
      return absl::InvalidArgumentError(absl::StrCat("training data: row ", i, " label ", y, " is outside [",
                                                     bounds.a, ", ", bounds.b, "]"));
  }
  std::unique_ptr<PrototypeTrainer> t(new PrototypeTrainer());
  t->model_ = &model;
  t->dev_ = std::move(device);
  // Held-out rows (val_fraction): a pure function of (N, seed). Too few rows to spare → none.
  int64_t n_val = static_cast<int64_t>(std::llround(cfg.val_fraction * static_cast<double>(N)));
  if (n_val < 2 || N - n_val < std::max<int64_t>(cfg.K, 2)) n_val = 0;
  {
    std::vector<int64_t> perm(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) perm[static_cast<size_t>(i)] = i;
    std::mt19937_64 rng(splitmix(cfg.seed ^ 0x76616c5f73706c74ULL));
    if (n_val > 0) std::shuffle(perm.begin(), perm.end(), rng);
    t->val_idx_.assign(perm.begin(), perm.begin() + n_val);
    t->fit_idx_.assign(perm.begin() + n_val, perm.end());
    std::sort(t->val_idx_.begin(), t->val_idx_.end());
    std::sort(t->fit_idx_.begin(), t->fit_idx_.end());
  }
  const int64_t n_fit = static_cast<int64_t>(t->fit_idx_.size());
  // T is the seed's candidate pool; a dataset smaller than T offers every row to every slot.
  cfg.T = std::min(cfg.T, n_fit);
  t->cfg_ = cfg;
  t->bounds_ = bounds;
  t->backbone_ = backbone_id(model);
  double sum = 0, sq = 0;
  for (float y : train.labels) sum += y;
  t->mu_ = sum / static_cast<double>(N);
  for (float y : train.labels) sq += (y - t->mu_) * (y - t->mu_);
  t->sigma_ = std::sqrt(sq / static_cast<double>(N));
  t->data_ = std::move(train);
  FROST_RETURN_IF_ERROR(torch_call([&] {
    t->labels_ = at::tensor(t->data_.labels, at::kFloat).to(t->dev_.device);
    t->net_ = std::make_unique<PrototypeNet>(t->cfg_, model.config.dim, bounds.a, bounds.b, t->mu_, t->sigma_,
                                             t->dev_.device);
  }));
  return t;
}

int64_t PrototypeTrainer::steps_per_epoch() const {
  return (static_cast<int64_t>(fit_idx_.size()) + cfg_.batch_size - 1) / cfg_.batch_size;
}

void PrototypeTrainer::emit(const TrainHooks& hooks, const TrainProgress& p) const {
  if (hooks.on_progress) hooks.on_progress(p);
}

at::Tensor PrototypeTrainer::index(const std::vector<int64_t>& idx) const {
  return at::tensor(idx, at::kLong).to(dev_.device);  // the same tensor on the CPU
}

std::string PrototypeTrainer::run_fingerprint() const {
  nlohmann::json c = to_json(cfg_);
  c.erase("spill_dir");
  c.erase("feature_cache_bytes");
  c.erase("eval_batch");
  c.erase("probe_margin");  // the report's verdict threshold, not part of training
  std::string s = c.dump();
  s += backbone_.fingerprint;
  for (int64_t i = 0; i < data_.size(); ++i) {
    s += data_.texts[static_cast<size_t>(i)];
    s.push_back('\0');
    s += absl::StrFormat("%.9g", data_.labels[static_cast<size_t>(i)]);
    s.push_back('\n');
  }
  return sha256_hex(s);
}

absl::Status PrototypeTrainer::build_features(const TrainHooks& hooks) {
  FeatureCache::Options o;
  o.max_tokens = cfg_.max_tokens;
  o.budget_bytes = cfg_.feature_cache_bytes;
  o.spill_dir = cfg_.spill_dir;
  o.device = dev_.device;
  const int64_t N = data_.size();
  int64_t last = 0;
  FROST_ASSIGN_OR_RETURN(
      features_, FeatureCache::build(*model_, data_.texts, o, hooks.cancel, [&](int64_t done, int64_t total) {
        if (done - last >= 256 || done == total) {
          last = done;
          TrainProgress p;
          p.stage = "features";
          p.step = done;
          p.steps = N;
          emit(hooks, p);
        }
      }));
  return absl::OkStatus();
}

absl::Status PrototypeTrainer::build_cache() {
  return torch_call([&] {
    at::NoGradGuard ng;
    const int64_t N = data_.size(), d = cfg_.d_h;
    const at::TensorOptions half = at::TensorOptions().dtype(at::kHalf).device(dev_.device);
    mem16_ = at::empty({N, cfg_.m, d}, half);
    keys16_ = at::empty({N, d}, half);
    for (int64_t s = 0; s < N; s += cfg_.eval_batch) {
      std::vector<int64_t> idx;
      for (int64_t i = s; i < std::min(N, s + cfg_.eval_batch); ++i) idx.push_back(i);
      FeatureBatch fb = features_->batch(idx);
      at::Tensor M = net_->memory_tokens(fb.h, fb.mask);
      at::Tensor k = net_->normalize(net_->key(M));
      mem16_.narrow(0, s, static_cast<int64_t>(idx.size())).copy_(M.to(at::kHalf));
      keys16_.narrow(0, s, static_cast<int64_t>(idx.size())).copy_(k.to(at::kHalf));
    }
    // Stage B trains on exactly the stored (fp16) values.
    mem_flat_ = mem16_.to(at::kFloat).reshape({N, cfg_.m * d}).contiguous();
    keys_ = keys16_.to(at::kFloat).contiguous();
    // Stage B selects among the rows it trains on: held-out rows are never prototypes.
    if (!val_idx_.empty()) {
      at::Tensor fi = index(fit_idx_);
      mem_flat_ = mem_flat_.index_select(0, fi).contiguous();
      keys_fit_ = keys_.index_select(0, fi).contiguous();
      labels_fit_ = labels_.index_select(0, fi).contiguous();
    } else {
      keys_fit_ = keys_;
      labels_fit_ = labels_;
    }
  });
}

absl::Status PrototypeTrainer::fit_probe() {
  if (!net_->has_probe()) return absl::OkStatus();
  const int64_t N = data_.size();
  at::Tensor X;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    std::vector<at::Tensor> rows;
    for (int64_t i = 0; i < N; ++i) rows.push_back(features_->mean_pooled(i));
    X = at::stack(rows).to(at::kCPU, at::kDouble);  // the ridge fit runs on the CPU
  }));
  // The same fit as the ridge_mean_pooled baseline of the evaluation report (default lambdas,
  // folds and seed), so at s = 0 the head predicts exactly what the linear probe does.
  FROST_ASSIGN_OR_RETURN(RidgeModel r, fit_ridge_cv(X, data_.labels));
  return torch_call([&] {
    at::Tensor w = r.w / r.x_scale;  // raw feature space: x·w + bias
    const double bias = r.bias - at::dot(r.x_mean, w).item<double>();
    net_->set_probe(w, bias);
    report_["probe"] = {{"kind", "ridge_mean_pooled"}, {"lambda", r.lambda}, {"cv_rmse", r.cv_rmse}};
  });
}

std::vector<int64_t> PrototypeTrainer::final_prototypes() const {
  std::vector<int64_t> idx = finalize_prototypes(net_->slots().detach(), keys_fit_, cfg_.norm_eps);
  for (int64_t& i : idx) i = fit_idx_[static_cast<size_t>(i)];
  return idx;
}

absl::StatusOr<std::pair<std::vector<double>, std::vector<double>>> PrototypeTrainer::val_logits(
    bool stage_a) const {
  std::vector<double> zp, zh;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    at::NoGradGuard ng;
    at::Tensor mem_fixed, proto_keys;
    if (!stage_a) {
      at::Tensor it = index(final_prototypes());
      mem_fixed = prototype_memory(mem16_.index_select(0, it).to(at::kFloat),
                                   net_->label_embed(labels_.index_select(0, it)));
      proto_keys = keys_.index_select(0, it);
    }
    const int64_t n = static_cast<int64_t>(val_idx_.size());
    for (int64_t s = 0; s < n; s += cfg_.eval_batch) {
      std::vector<int64_t> idx(val_idx_.begin() + s, val_idx_.begin() + std::min(n, s + cfg_.eval_batch));
      FeatureBatch fb = features_->batch(idx);
      at::Tensor q = net_->query_tokens(fb.h, fb.mask), z;
      if (stage_a) {
        z = net_->head()(q, net_->memory_tokens(fb.h, fb.mask));
      } else {
        at::Tensor qk = keys_.index_select(0, index(idx));
        z = net_->head()(q, mem_fixed, nullptr, block_key_bias(qk, proto_keys, cfg_.m + 1, cfg_.key_bias));
      }
      at::Tensor p = net_->probe_logit(fb.h, fb.mask).to(at::kCPU, at::kDouble).contiguous();
      z = z.to(at::kCPU, at::kDouble).contiguous();
      zp.insert(zp.end(), p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
      zh.insert(zh.end(), z.data_ptr<double>(), z.data_ptr<double>() + z.numel());
    }
  }));
  return std::make_pair(std::move(zp), std::move(zh));
}

absl::StatusOr<nlohmann::json> PrototypeTrainer::val_report(bool stage_a, bool choose_scale) {
  if (val_idx_.empty()) return nlohmann::json();
  FROST_ASSIGN_OR_RETURN(auto z, val_logits(stage_a));
  std::vector<double> truth;
  for (int64_t i : val_idx_) truth.push_back(data_.labels[static_cast<size_t>(i)]);
  auto at_scale = [&](double s) -> absl::StatusOr<RegressionMetrics> {
    std::vector<double> pred(truth.size());
    for (size_t i = 0; i < pred.size(); ++i) {
      const double x = net_->has_probe() ? z.first[i] + s * z.second[i] : z.second[i];
      pred[i] = bounds_.a + (bounds_.b - bounds_.a) / (1.0 + std::exp(-x));
    }
    return regression_metrics(pred, truth);
  };
  nlohmann::json out;
  out["n"] = truth.size();
  FROST_ASSIGN_OR_RETURN(RegressionMetrics head, at_scale(1.0));
  out["head"] = to_json(head);
  if (!net_->has_probe()) return out;
  FROST_ASSIGN_OR_RETURN(RegressionMetrics probe, at_scale(0.0));
  out["probe"] = to_json(probe);
  if (!choose_scale) return out;
  // What Predict serves on top of the probe: the head's residual, only its level, or nothing, as
  // far as the held-out rows show it helps (residual_choice.h).
  FROST_ASSIGN_OR_RETURN(ResidualChoice rc, choose_residual(z.first, z.second, truth, bounds_.a, bounds_.b));
  FROST_RETURN_IF_ERROR(torch_call([&] {
    net_->set_probe_scale(rc.scale);
    net_->set_probe_offset(rc.offset);
  }));
  out["scale_grid"] = rc.grid;
  out["mode"] = rc.mode;
  out["scale"] = rc.scale;
  out["offset"] = rc.offset;
  return out;
}

absl::Status PrototypeTrainer::save_checkpoint(const std::string& path, int stage, int64_t epoch,
                                               int64_t step) const {
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (const auto& [name, t] : net_->params().items()) ts.emplace_back("net/" + name, t.detach());
  if (opt_) {
    for (size_t i = 0; i < opt_->params.size(); ++i) {
      ts.emplace_back("adam.m/" + opt_->params[i].first, opt_->m[i]);
      ts.emplace_back("adam.v/" + opt_->params[i].first, opt_->v[i]);
    }
  }
  nlohmann::json meta = {
      {"stage", stage},           {"epoch", epoch},   {"step", step}, {"adam_t", opt_ ? opt_->t : 0},
      {"run", run_fingerprint()}, {"report", report_}};
  FROST_ASSIGN_OR_RETURN(std::string bytes,
                         safetensors_serialize(ts, {{"frost.prototype.checkpoint", meta.dump()}}));
  return write_file_atomic(path, bytes);
}

absl::StatusOr<std::array<int64_t, 3>> PrototypeTrainer::load_checkpoint(const std::string& path) {
  FROST_ASSIGN_OR_RETURN(auto st, SafetensorsFile::open(path));
  auto it = st->metadata().find("frost.prototype.checkpoint");
  if (it == st->metadata().end())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a prototype checkpoint (no metadata)"));
  nlohmann::json meta = nlohmann::json::parse(it->second, nullptr, false);
  if (meta.is_discarded() || !meta.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint metadata is not JSON"));
  std::array<int64_t, 3> pos{};
  int64_t adam_t = 0;
  try {
    if (meta.at("run").get<std::string>() != run_fingerprint())
      return absl::FailedPreconditionError(absl::StrCat(
          path,
          ": checkpoint belongs to another run (different data, config or backbone); refusing to resume"));
    pos = {meta.at("stage").get<int64_t>(), meta.at("epoch").get<int64_t>(), meta.at("step").get<int64_t>()};
    adam_t = meta.at("adam_t").get<int64_t>();
    report_ = meta.value("report", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint metadata: ", e.what()));
  }
  if (pos[0] < kStageA || pos[0] > kStageDone)
    return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint stage ", pos[0], " is not 1..3"));
  std::vector<std::pair<std::string, at::Tensor>> net_vals;
  std::map<std::string, at::Tensor> adam;
  for (const StTensorInfo& info : st->tensors()) {
    at::Tensor t = st->view(info).clone();
    if (info.name.rfind("net/", 0) == 0)
      net_vals.emplace_back(info.name.substr(4), t);
    else
      adam.emplace(info.name, t);
  }
  if (absl::Status s = net_->params().load(net_vals); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  if (pos[0] != kStageDone) {
    opt_ = std::make_shared<Opt>(pos[0] == kStageA ? net_->stage_a_params() : net_->stage_b_params(), cfg_);
    opt_->t = adam_t;
    for (size_t i = 0; i < opt_->params.size(); ++i) {
      const std::string& n = opt_->params[i].first;
      auto m = adam.find("adam.m/" + n), v = adam.find("adam.v/" + n);
      if (m == adam.end() || v == adam.end() || m->second.sizes() != opt_->m[i].sizes() ||
          v->second.sizes() != opt_->v[i].sizes())
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": optimizer state for '", n, "' missing or misshapen"));
      opt_->m[i].copy_(m->second);
      opt_->v[i].copy_(v->second);
    }
  }
  return pos;
}

absl::Status PrototypeTrainer::run_stage(int stage, const TrainHooks& hooks, int64_t start_epoch,
                                         int64_t start_step) {
  const int64_t N = static_cast<int64_t>(fit_idx_.size()), B = cfg_.batch_size, spe = steps_per_epoch();
  const int64_t epochs = stage == kStageA ? cfg_.epochs_a : cfg_.epochs_b;
  const int64_t total_steps = (cfg_.epochs_a + cfg_.epochs_b) * spe;
  const int64_t stage_offset = stage == kStageA ? 0 : cfg_.epochs_a * spe;
  const double t0 = now_s();
  int64_t steps_run = 0;
  double last_loss = 0;
  for (int64_t e = start_epoch; e < epochs; ++e) {
    at::Tensor perm = at::randperm(N, gen_for(cfg_.seed, stage, e, -1), at::kLong);
    const int64_t* pp = perm.data_ptr<int64_t>();
    const double tau = tau_for_epoch(cfg_, e + 1);
    double epoch_loss = 0;
    int64_t epoch_n = 0;
    for (int64_t s = (e == start_epoch ? start_step : 0); s < spe; ++s) {
      if (hooks.cancel && hooks.cancel->stop_requested()) {
        if (!hooks.checkpoint_path.empty())
          FROST_RETURN_IF_ERROR(save_checkpoint(hooks.checkpoint_path, stage, e, s));
        return absl::CancelledError(absl::StrCat("prototype training cancelled at ",
                                                 stage == kStageA ? "stage A" : "stage B", " epoch ", e + 1,
                                                 " step ", s));
      }
      std::vector<int64_t> idx;
      for (int64_t j = s * B; j < std::min(N, (s + 1) * B); ++j)
        idx.push_back(fit_idx_[static_cast<size_t>(pp[j])]);
      TrainProgress pr;
      FROST_RETURN_IF_ERROR(torch_call([&] {
        at::Generator g = gen_for(cfg_.seed, stage, e, s);
        FeatureBatch fb = features_->batch(idx);
        at::Tensor y = labels_.index_select(0, index(idx));
        opt_->zero_grad();
        MinibatchLoss l;
        if (stage == kStageA) {
          l = stage_a_loss(*net_, fb.h, fb.mask, y);
        } else {
          const int64_t Bq = static_cast<int64_t>(idx.size());
          // drawn on the CPU generator in this order, then moved: the same numbers on every device
          at::Tensor alpha = at::rand({Bq}, g), beta = at::rand({Bq}, g);
          at::Tensor u = at::rand({cfg_.K, cfg_.T}, g);
          alpha = alpha.to(dev_.device);
          beta = beta.to(dev_.device);
          u = u.to(dev_.device);
          at::Tensor q_keys = keys_.index_select(0, index(idx));
          // label_flip_p: reflect this minibatch's targets and every prototype label through the
          // middle of [a, b] (drawn after u, so the other draws do not depend on the option)
          const bool flip = cfg_.label_flip_p > 0 && at::rand({1}, g).item<double>() < cfg_.label_flip_p;
          const double ab = bounds_.a + bounds_.b;
          l = stage_b_loss(*net_, fb.h, fb.mask, flip ? ab - y : y, q_keys, alpha, beta, keys_fit_, mem_flat_,
                           flip ? ab - labels_fit_ : labels_fit_, u, tau);
        }
        at::Tensor loss = l.loss, l_reg = l.reg, l_aux = l.aux;
        loss.backward();
        opt_->step();
        pr.loss = loss.item<double>();
        pr.loss_reg = l_reg.item<double>();
        pr.loss_aux = l_aux.item<double>();
      }));
      if (!std::isfinite(pr.loss))
        return absl::InternalError(absl::StrCat("prototype training diverged: loss ", pr.loss, " at ",
                                                stage == kStageA ? "stage A" : "stage B", " epoch ", e + 1,
                                                " step ", s + 1, " (lower lr?)"));
      ++steps_run;
      epoch_loss += pr.loss * static_cast<double>(idx.size());
      epoch_n += static_cast<int64_t>(idx.size());
      last_loss = pr.loss;
      const double el = now_s() - t0;
      pr.stage = stage == kStageA ? "stage_a" : "stage_b";
      pr.epoch = e + 1;
      pr.epochs = epochs;
      pr.step = s + 1;
      pr.steps = spe;
      pr.global_step = stage_offset + e * spe + s + 1;
      pr.total_steps = total_steps;
      pr.tau = stage == kStageB ? tau : 0;
      pr.examples_per_s = el > 0 ? static_cast<double>(steps_run * B) / el : 0;
      pr.eta_s = el / static_cast<double>(steps_run) * static_cast<double>(total_steps - pr.global_step);
      emit(hooks, pr);
      if (hooks.checkpoint_every > 0 && !hooks.checkpoint_path.empty() &&
          pr.global_step % hooks.checkpoint_every == 0) {
        const bool epoch_end = s + 1 == spe;
        FROST_RETURN_IF_ERROR(
            save_checkpoint(hooks.checkpoint_path, stage, epoch_end ? e + 1 : e, epoch_end ? 0 : s + 1));
      }
    }
    if (epoch_n > 0) {
      report_[stage == kStageA ? "stage_a_epoch_loss" : "stage_b_epoch_loss"].push_back(
          epoch_loss / static_cast<double>(epoch_n));
    }
  }
  (void)last_loss;
  return absl::OkStatus();
}

absl::StatusOr<PrototypeArtifact> PrototypeTrainer::run(const TrainHooks& hooks) {
  std::array<int64_t, 3> pos{kStageA, 0, 0};
  bool resumed = false;
  if (!hooks.checkpoint_path.empty()) {
    absl::StatusOr<std::array<int64_t, 3>> p = load_checkpoint(hooks.checkpoint_path);
    if (p.ok()) {
      pos = *p;
      resumed = true;
      FROST_LOG_INFO("prototype: resuming from %s at stage %lld epoch %lld step %lld",
                     hooks.checkpoint_path.c_str(), static_cast<long long>(pos[0]),
                     static_cast<long long>(pos[1] + 1), static_cast<long long>(pos[2]));
    } else if (p.status().code() != absl::StatusCode::kNotFound) {
      return p.status();
    }
  }
  report_["resumed"] = resumed;
  report_["compute_device"] = dev_.name;
  FROST_LOG_INFO("prototype: training on %s (%s)", dev_.name.c_str(), dev_.reason.c_str());
  auto stage_report = [&](const char* name, double t0) {
    report_["stages"][name] = {{"seconds", now_s() - t0}, {"peak_rss_bytes", peak_rss_bytes()}};
  };

  reset_peak_rss();
  double t = now_s();
  FROST_RETURN_IF_ERROR(build_features(hooks));
  stage_report("features", t);
  report_["feature_cache"] = {{"bytes", features_->bytes()}, {"spilled", features_->spilled()}};
  report_["n_val"] = static_cast<int64_t>(val_idx_.size());
  if (!resumed) FROST_RETURN_IF_ERROR(fit_probe());

  if (pos[0] == kStageA) {
    if (!resumed) opt_ = std::make_shared<Opt>(net_->stage_a_params(), cfg_);
    reset_peak_rss();
    t = now_s();
    FROST_RETURN_IF_ERROR(run_stage(kStageA, hooks, pos[1], pos[2]));
    stage_report("stage_a", t);
    // Diagnosis: Stage A's head (each row's own memory) on the held-out rows.
    FROST_ASSIGN_OR_RETURN(report_["val_stage_a"], val_report(/*stage_a=*/true, /*choose_scale=*/false));
    pos = {kStageB, 0, 0};
    opt_ = std::make_shared<Opt>(net_->stage_b_params(), cfg_);
    if (!hooks.checkpoint_path.empty())
      FROST_RETURN_IF_ERROR(save_checkpoint(hooks.checkpoint_path, kStageB, 0, 0));
  }
  reset_peak_rss();
  t = now_s();
  {
    TrainProgress p;
    p.stage = "cache";
    emit(hooks, p);
  }
  FROST_RETURN_IF_ERROR(build_cache());
  stage_report("cache", t);

  if (pos[0] == kStageB && pos[1] == 0 && pos[2] == 0 && cfg_.slot_init == "kmeans++") {
    // Stage B starts here (fresh or from the checkpoint written at its start): slots from the
    // KeyCache, a pure function of the cache and the seed, so a resumed run draws the same.
    FROST_RETURN_IF_ERROR(torch_call([&] {
      at::NoGradGuard ng;
      std::vector<int64_t> idx = kmeanspp_indices(keys_fit_, cfg_.K, gen_for(cfg_.seed, kStageB, -1, -2));
      net_->slots().copy_(keys_fit_.index_select(0, index(idx)));
    }));
  }
  if (pos[0] == kStageB) {
    reset_peak_rss();
    t = now_s();
    FROST_RETURN_IF_ERROR(run_stage(kStageB, hooks, pos[1], pos[2]));
    stage_report("stage_b", t);
    FROST_ASSIGN_OR_RETURN(report_["val_stage_b"], val_report(/*stage_a=*/false, /*choose_scale=*/true));
    opt_.reset();
    if (!hooks.checkpoint_path.empty())
      FROST_RETURN_IF_ERROR(save_checkpoint(hooks.checkpoint_path, kStageDone, 0, 0));
  }

  reset_peak_rss();
  t = now_s();
  {
    TrainProgress p;
    p.stage = "finalize";
    emit(hooks, p);
  }
  PrototypeArtifact art;
  art.cfg = cfg_;
  art.backbone = backbone_;
  art.bounds = bounds_;
  art.label_mu = mu_;
  art.label_sigma = sigma_;
  art.d_model = model_->config.dim;
  art.n_train = data_.size();
  FROST_ASSIGN_OR_RETURN(at::Tensor population, population_reference(keys_, cfg_.rlcs_k));
  FROST_RETURN_IF_ERROR(torch_call([&] {
    std::vector<int64_t> idx = final_prototypes();
    at::Tensor it = index(idx);
    // The artifact is CPU tensors whatever the compute device: a clone on the CPU, a copy from a device.
    auto host = [](const at::Tensor& x) { return x.is_cpu() ? x.clone() : x.to(at::kCPU); };
    for (const auto& [name, p] : net_->params().items()) art.tensors.emplace_back(name, host(p.detach()));
    art.tensors.emplace_back("proto.memory", mem16_.index_select(0, it).contiguous().to(at::kCPU));
    art.tensors.emplace_back("proto.labels", labels_.index_select(0, it).contiguous().to(at::kCPU));
    art.tensors.emplace_back("cache.keys", host(keys16_));
    art.tensors.emplace_back("cache.labels", host(labels_));
    art.tensors.emplace_back("rlcs.population", population.to(at::kCPU));
    for (size_t k = 0; k < idx.size(); ++k) {
      const size_t i = static_cast<size_t>(idx[k]);
      art.prototypes.push_back({static_cast<int64_t>(k), idx[k], data_.ids.size() > i ? data_.ids[i] : "",
                                data_.texts[i], data_.labels[i]});
    }
  }));
  stage_report("finalize", t);
  report_["n_params"] = net_->params().numel();
  report_["n_train"] = data_.size();
  art.report = report_;
  TrainProgress p;
  p.stage = "done";
  emit(hooks, p);
  return art;
}

}  // namespace frost::prototype
