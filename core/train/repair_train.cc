#include "core/train/repair_train.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/model/kv_dims.h"
#include "core/store/safetensors.h"
#include "core/train/train_util.h"

namespace frost {

namespace {

// The one table of KvRepairConfig's fields (core/common/config_fields.h): set_kv_repair_field, the known
// keys, the per-field ranges and kv_repair_config_json all come from it (the dump in this order).
std::vector<ConfigField<KvRepairConfig>> fields() {
  using C = KvRepairConfig;
  using R = ConfigRange;
  return {
      custom_field<C>(
          "option",
          [](C& c, const std::string& v) -> std::string {
            absl::StatusOr<RepairOption> o = parse_repair_option(v);
            if (!o.ok()) return "must be 'A', 'B' or 'C'";
            c.repair.option = *o;
            return "";
          },
          [](const C& c) -> std::string { return repair_option_name(c.repair.option); }),
      int_field<C>(
          "rank", [](auto& c) -> auto& { return c.repair.rank; }, R::in(1, 4096)),
      custom_field<C>(
          "apply_to",
          [](C& c, const std::string& v) -> std::string {
            return set_repair_apply_to(v, c.repair) ? "" : "must be 'K', 'V' or 'KV'";
          },
          [](const C& c) { return repair_apply_to_name(c.repair); }),
      number_field<C>(
          "alpha_max", [](auto& c) -> auto& { return c.repair.alpha_max; }, R::open(0, 1)),
      number_field<C>(
          "contraction_rho", [](auto& c) -> auto& { return c.repair.contraction_rho; }, R::in(0, 1e6)),
      // checked against the model in validate_kv_repair_config
      string_field<C>("layers", &C::layers, {}, /*non_empty=*/true),
      custom_field<C>(
          "codec",
          [](C& c, const std::string& v) -> std::string {
            absl::StatusOr<KvCodecKind> k = parse_kv_codec(v);
            if (!k.ok()) return "must be 'fp32', 'fp16', 'bf16', 'int8' or 'int4'";
            c.codec = *k;  // kvsplice parses; validate_kv_repair_config refuses it with the reason
            return "";
          },
          [](const C& c) -> std::string { return kv_codec_name(c.codec); }),
      custom_field<C>(
          "corruption",
          [](C& c, const std::string& v) -> std::string {
            absl::StatusOr<CorruptionSpec> sp = parse_corruption(v);
            if (!sp.ok()) return absl::StrCat("does not parse (", sp.status().message(), ")");
            c.corruption = *sp;
            return "";
          },
          [](const C& c) { return c.corruption.to_string(); }),
      int_field<C>("window", &C::window, R::in(2, 1 << 16)),
      int_field<C>("steps", &C::steps, R::in(0, 10'000'000)),
      int_field<C>("batch", &C::batch, R::in(1, 4096)),
      number_field<C>("lr", &C::lr, R::in_lo_open(0, 10)),
      number_field<C>("contraction_weight", &C::contraction_weight, R::in(0, 1e6)),  // option A only
      number_field<C>("attention_weight", &C::attention_weight, R::in(0, 1e6)),
      int_field<C>("self_sample_windows", &C::self_sample_windows, R::in(0, 1'000'000)),
      int_field<C>("seed", &C::seed),
  };
}

const ConfigTable<KvRepairConfig>& table() {
  static const ConfigTable<KvRepairConfig> t("kv_repair", fields());
  return t;
}

}  // namespace

absl::Status set_kv_repair_field(KvRepairConfig& c, const std::string& key, const std::string& value) {
  return table().set(c, key, value);
}

std::vector<std::string> kv_repair_config_keys() { return table().keys(); }

absl::Status validate_kv_repair_config(const KvRepairConfig& c, const ModelConfig& m) {
  FROST_RETURN_IF_ERROR(table().check(c));
  if (c.codec == KvCodecKind::kKvSplice)
    return table().error(
        "codec 'kvsplice' is refused: KV repair does not train for the kvsplice codec (expected fp32, fp16, "
        "bf16, int8 or int4)");
  FROST_RETURN_IF_ERROR(parse_repair_layers(c.layers, m.n_layer).status());
  if (c.repair.rank > m.head_dim)
    return table().field_error("rank", std::to_string(c.repair.rank),
                               absl::StrCat("exceeds the model's head_dim ", m.head_dim));
  if (c.window > m.max_pos)
    return table().field_error("window", std::to_string(c.window),
                               absl::StrCat("exceeds the model's max_pos ", m.max_pos));
  return absl::OkStatus();
}

std::string kv_repair_config_json(const KvRepairConfig& c) { return table().to_json(c).dump(); }

absl::StatusOr<std::vector<TokenWindow>> make_text_windows(const Tokenizer& tok,
                                                           const std::vector<std::string>& texts,
                                                           int64_t window, int64_t max_windows) {
  if (window < 2) return absl::InvalidArgumentError(absl::StrCat("window ", window, " < 2"));
  std::vector<int32_t> stream;
  for (const std::string& t : texts) {
    FROST_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(t, /*add_bos=*/true));
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  std::vector<TokenWindow> out;
  for (size_t i = 0; i + static_cast<size_t>(window) <= stream.size(); i += static_cast<size_t>(window)) {
    if (max_windows > 0 && static_cast<int64_t>(out.size()) >= max_windows) break;
    out.emplace_back(stream.begin() + static_cast<std::ptrdiff_t>(i),
                     stream.begin() + static_cast<std::ptrdiff_t>(i) + window);
  }
  return out;
}

absl::StatusOr<std::vector<TokenWindow>> sample_windows(const Transformer& model, int32_t bos, int64_t n,
                                                        int64_t window, uint64_t seed) {
  if (window < 2 || window > model.config().max_pos)
    return absl::InvalidArgumentError(
        absl::StrCat("window ", window, " outside [2, ", model.config().max_pos, "]"));
  return torch_call([&] {
    std::vector<TokenWindow> out;
    std::mt19937_64 rng(seed ^ 0x5a3b1e5ULL);
    std::uniform_real_distribution<double> u(0, 1);
    DecodeScratch scratch;
    const int64_t V = model.config().n_vocab;
    for (int64_t i = 0; i < n; ++i) {
      SequenceKv kv(model.kv_spec(window, KvCodecKind::kF32));
      TokenWindow w{bos >= 0 ? bos : 0};
      while (static_cast<int64_t>(w.size()) < window) {
        const float* logits = model.decode_step(w.back(), kv, scratch);
        float mx = -INFINITY;
        for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[j]);
        double sum = 0;
        for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(logits[j] - mx));
        double x = u(rng) * sum;
        int32_t pick = static_cast<int32_t>(V - 1);
        for (int64_t j = 0; j < V; ++j) {
          x -= std::exp(static_cast<double>(logits[j] - mx));
          if (x <= 0) {
            pick = static_cast<int32_t>(j);
            break;
          }
        }
        w.push_back(pick);
      }
      out.push_back(std::move(w));
    }
    return out;
  });
}

absl::StatusOr<std::shared_ptr<RepairSet>> train_kv_repair(const Transformer& model,
                                                           const KvRepairConfig& cfg,
                                                           const std::vector<TokenWindow>& windows,
                                                           const KvRepairTrainOptions& opts) {
  FROST_RETURN_IF_ERROR(validate_kv_repair_config(cfg, model.config()));
  if (windows.empty()) return absl::InvalidArgumentError("kv_repair: no calibration windows");
  for (const TokenWindow& w : windows)
    if (static_cast<int64_t>(w.size()) != cfg.window)
      return absl::InvalidArgumentError(
          absl::StrCat("kv_repair: a calibration window has ", w.size(), " tokens, expected ", cfg.window));
  FROST_ASSIGN_OR_RETURN(std::vector<int64_t> layers,
                         parse_repair_layers(cfg.layers, model.config().n_layer));
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<RepairSet> set,
                         RepairSet::create(cfg.repair, layers, repair_dims(model.config()), cfg.seed));
  KvAdam opt(set->parameters(), cfg.lr);
  int64_t step = 0;
  if (!opts.checkpoint_path.empty() && std::filesystem::exists(opts.checkpoint_path)) {
    FROST_ASSIGN_OR_RETURN(
        step, load_train_checkpoint(opts.checkpoint_path, "kv_repair", set->named_parameters(), opt));
  }
  const bool use_att = cfg.attention_weight > 0;
  const bool use_contr = cfg.repair.option == RepairOption::kA && cfg.contraction_weight > 0;
  const int64_t batch = std::min<int64_t>(cfg.batch, static_cast<int64_t>(windows.size()));
  while (step < cfg.steps) {
    if (opts.cancel && opts.cancel->stop_requested()) {
      if (!opts.checkpoint_path.empty())
        FROST_RETURN_IF_ERROR(
            save_train_checkpoint(opts.checkpoint_path, set->named_parameters(), opt, step));
      return absl::CancelledError(absl::StrCat("kv_repair: cancelled at step ", step));
    }
    const auto t0 = std::chrono::steady_clock::now();
    // this step's batch: a seeded partial shuffle, identical on resume
    const std::vector<size_t> idx = step_batch(cfg.seed, step, windows.size(), batch);
    double loss_sum = 0, kl_sum = 0;
    FROST_RETURN_IF_ERROR(torch_call([&] {
      opt.zero_grad();
      for (int64_t b = 0; b < batch; ++b) {
        const TokenWindow& w = windows[idx[static_cast<size_t>(b)]];
        KvStudy clean, rep;  // the clean fp32 teacher; the corrupted, repaired student
        clean.taps.attention = use_att;
        rep.corruption = cfg.corruption;
        rep.taps.attention = use_att;
        rep.taps.contraction = use_contr;
        const KvTaps& clean_taps = clean.taps;
        const KvTaps& rep_taps = rep.taps;
        at::Tensor logp;
        {
          at::NoGradGuard ng;
          logp = window_logprobs(model, w, KvCodecKind::kF32, nullptr, &clean);
        }
        at::Tensor logq = window_logprobs(model, w, cfg.codec, set, &rep);
        at::Tensor kl = mean_kl(logp, logq);
        at::Tensor loss = kl;
        if (use_att) {
          for (int64_t l : layers) {
            const at::Tensor& a = rep_taps.attention_out[static_cast<size_t>(l)];
            const at::Tensor& c = clean_taps.attention_out[static_cast<size_t>(l)];
            loss = loss + cfg.attention_weight * (a - c).pow(2).sum() / (c.pow(2).sum() + 1e-12);
          }
        }
        if (use_contr && rep_taps.contraction_sum.defined())
          loss = loss + cfg.contraction_weight * rep_taps.contraction_sum;
        (loss / static_cast<double>(batch)).backward();
        loss_sum += loss.item<double>();
        kl_sum += kl.item<double>();
      }
      clip_grad_norm(opt.params, 1.0);
      opt.step();
    }));
    ++step;
    if (opts.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      opts.progress({step, cfg.steps, loss_sum / static_cast<double>(batch),
                     kl_sum / static_cast<double>(batch), s > 0 ? static_cast<double>(batch) / s : 0});
    }
    if (!opts.checkpoint_path.empty() && opts.checkpoint_every > 0 && step % opts.checkpoint_every == 0 &&
        step < cfg.steps)
      FROST_RETURN_IF_ERROR(save_train_checkpoint(opts.checkpoint_path, set->named_parameters(), opt, step));
  }
  set->freeze();
  return set;
}

absl::StatusOr<std::vector<KvEval>> evaluate_kv(const Transformer& model,
                                                const std::vector<TokenWindow>& windows,
                                                const std::vector<KvEvalCase>& cases) {
  if (windows.empty()) return absl::InvalidArgumentError("evaluate_kv: no windows");
  return torch_call([&] {
    at::NoGradGuard ng;
    std::vector<KvStudy> studies(cases.size());  // no taps: reused across windows
    for (size_t c = 0; c < cases.size(); ++c) {
      studies[c].corruption = cases[c].corruption;
      studies[c].temporal = cases[c].temporal;
    }
    std::vector<double> nll(cases.size(), 0), kl(cases.size(), 0);
    int64_t n = 0;
    for (const TokenWindow& w : windows) {
      at::Tensor logp = window_logprobs(model, w, KvCodecKind::kF32);
      at::Tensor next = at::tensor(std::vector<int64_t>(w.begin() + 1, w.end()), at::kLong);
      const int64_t T = logp.size(0);
      for (size_t c = 0; c < cases.size(); ++c) {
        const bool clean = cases[c].codec == KvCodecKind::kF32 &&
                           cases[c].corruption.kind == CorruptionKind::kNone && !cases[c].repair &&
                           !cases[c].temporal;
        at::Tensor logq =
            clean ? logp
                  : window_logprobs(model, w, cases[c].codec, cases[c].repair, &studies[c], cases[c].splice);
        nll[c] -= logq.narrow(0, 0, T - 1).gather(1, next.unsqueeze(1)).sum().item<double>();
        kl[c] += (logp.exp() * (logp - logq)).sum().item<double>();
      }
      n += T;
    }
    const int64_t pred = n - static_cast<int64_t>(windows.size());
    std::vector<KvEval> out(cases.size());
    for (size_t c = 0; c < cases.size(); ++c) {
      out[c].ppl = std::exp(nll[c] / static_cast<double>(pred));
      out[c].mean_kl = kl[c] / static_cast<double>(n);
      out[c].positions = n;
    }
    return out;
  });
}

absl::StatusOr<KvEval> evaluate_kv(const Transformer& model, const std::vector<TokenWindow>& windows,
                                   KvCodecKind codec, const CorruptionSpec& corruption,
                                   std::shared_ptr<const RepairSet> repair) {
  FROST_ASSIGN_OR_RETURN(
      std::vector<KvEval> e,
      evaluate_kv(model, windows, {KvEvalCase{codec, corruption, std::move(repair), nullptr}}));
  return e[0];
}

// ---------------------------------------------------------------- train_util.h

KvAdam::KvAdam(std::vector<at::Tensor> ps, double lr_) : params(std::move(ps)), lr(lr_) {
  for (const at::Tensor& p : params) {
    m.push_back(at::zeros_like(p).detach());
    v.push_back(at::zeros_like(p).detach());
  }
}

void KvAdam::zero_grad() {
  for (const at::Tensor& p : params)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

void KvAdam::step() {
  at::NoGradGuard ng;
  ++t;
  const double c1 = 1 - std::pow(b1, static_cast<double>(t)), c2 = 1 - std::pow(b2, static_cast<double>(t));
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor g = params[i].grad();
    if (!g.defined()) continue;
    m[i].mul_(b1).add_(g, 1 - b1);
    v[i].mul_(b2).addcmul_(g, g, 1 - b2);
    params[i].sub_((m[i] / c1) / ((v[i] / c2).sqrt() + eps) * lr);
  }
}

at::Tensor window_logprobs(const Transformer& model, const TokenWindow& w, KvCodecKind codec,
                           std::shared_ptr<const RepairSet> repair, KvStudy* study,
                           std::shared_ptr<const KvSpliceSet> splice) {
  SequenceKv kv(model.kv_spec(static_cast<int64_t>(w.size()), codec, std::move(splice)));
  kv.set_repair(std::move(repair));
  at::Tensor ids = at::tensor(std::vector<int64_t>(w.begin(), w.end()), at::kLong);
  KvStudy none;
  at::Tensor logits = model.forward(ids, kv, study ? *study : none);
  return at::log_softmax(logits, -1);
}

at::Tensor window_logits_as_served(const Transformer& model, const TokenWindow& w) {
  const int64_t n = static_cast<int64_t>(w.size()), V = model.config().n_vocab;
  SequenceKv kv(model.kv_spec(n, KvCodecKind::kF32));
  if (model.weight_format() != WeightDtype::kW8A8)
    return model.forward(at::tensor(std::vector<int64_t>(w.begin(), w.end()), at::kLong), kv);
  DecodeScratch scratch;
  at::Tensor logits = at::empty({n, V});
  for (int64_t t = 0; t < n; ++t) {
    const float* l = model.decode_step(w[static_cast<size_t>(t)], kv, scratch);
    std::copy(l, l + V, logits[t].data_ptr<float>());
  }
  return logits;
}

at::Tensor mean_kl(const at::Tensor& logp, const at::Tensor& logq) {
  return (logp.exp() * (logp - logq)).sum(-1).mean();
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  double sq = 0;
  for (const at::Tensor& p : params)
    if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (norm > max_norm) {
    at::NoGradGuard ng;
    for (const at::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().mul_(max_norm / norm);
  }
  return norm;
}

std::vector<size_t> step_batch(uint64_t seed, int64_t step, size_t n, int64_t batch) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 1);
  for (int64_t i = 0; i < batch && static_cast<size_t>(i) < n; ++i) {
    std::uniform_int_distribution<size_t> d(static_cast<size_t>(i), n - 1);
    std::swap(idx[static_cast<size_t>(i)], idx[d(rng)]);
  }
  return idx;
}

absl::Status save_train_checkpoint(const std::string& path,
                                   const std::vector<std::pair<std::string, at::Tensor>>& named,
                                   const KvAdam& opt, int64_t step) {
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (size_t i = 0; i < named.size(); ++i) {
    ts.emplace_back("param/" + named[i].first, named[i].second.detach().contiguous());
    ts.emplace_back("adam.m/" + named[i].first, opt.m[i]);
    ts.emplace_back("adam.v/" + named[i].first, opt.v[i]);
  }
  FROST_ASSIGN_OR_RETURN(std::string bytes, safetensors_serialize(ts, {{"step", std::to_string(step)},
                                                                       {"adam_t", std::to_string(opt.t)}}));
  return write_file_atomic(path, bytes);
}

absl::StatusOr<int64_t> load_train_checkpoint(const std::string& path, const std::string& what,
                                              const std::vector<std::pair<std::string, at::Tensor>>& named,
                                              KvAdam& opt) {
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  int64_t step = 0, t = 0;
  auto it = f->metadata().find("step"), jt = f->metadata().find("adam_t");
  if (it == f->metadata().end() || jt == f->metadata().end() || !absl::SimpleAtoi(it->second, &step) ||
      !absl::SimpleAtoi(jt->second, &t))
    return absl::DataLossError(absl::StrCat(what, " checkpoint ", path, ": step metadata missing"));
  at::NoGradGuard ng;
  for (size_t i = 0; i < named.size(); ++i) {
    for (auto [prefix, dst] : {std::pair<std::string, at::Tensor>{"param/", named[i].second},
                               {"adam.m/", opt.m[i]},
                               {"adam.v/", opt.v[i]}}) {
      const StTensorInfo* info = f->find(prefix + named[i].first);
      if (!info || f->view(*info).sizes() != dst.sizes())
        return absl::DataLossError(absl::StrCat(what, " checkpoint ", path, ": tensor ", prefix,
                                                named[i].first, " missing or resized"));
      dst.copy_(f->view(*info));
    }
  }
  opt.t = t;
  return step;
}

}  // namespace frost
