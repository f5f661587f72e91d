#include "core/train/kvsplice_train.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/model/kv_dims.h"

namespace frost {
namespace {

// The one table of KvSpliceConfig's fields (core/common/config_fields.h): set_kvsplice_field, the known keys,
// the per-field ranges and kvsplice_config_json all come from it (the dump in this order).
std::vector<ConfigField<KvSpliceConfig>> fields() {
  using C = KvSpliceConfig;
  using R = ConfigRange;
  return {
      int_field<C>("rank", &C::rank, R::in(0, 1 << 16)),
      int_field<C>("k_rank", &C::k_rank, R::in(0, 1 << 16)),
      int_field<C>("v_rank", &C::v_rank, R::in(0, 1 << 16)),
      enum_field<C>("latent", &C::latent,
                    std::vector<std::pair<std::string, KvLatentDtype>>{
                        {kv_latent_name(KvLatentDtype::kF16), KvLatentDtype::kF16},
                        {kv_latent_name(KvLatentDtype::kI8), KvLatentDtype::kI8}}),
      enum_field<C>("pca_metric", &C::pca_metric,
                    std::vector<std::pair<std::string, KvPcaMetric>>{{"attention", KvPcaMetric::kAttention},
                                                                     {"euclidean", KvPcaMetric::kEuclidean}}),
      int_field<C>("window", &C::window, R::in(2, 1 << 16)),
      int_field<C>("steps", &C::steps, R::in(0, 1'000'000)),
      int_field<C>("batch", &C::batch, R::in(1, 1024)),
      number_field<C>("lr", &C::lr, R::in(1e-7, 1.0)),
      int_field<C>("pca_windows", &C::pca_windows, R::in(0, 1 << 20)),
      int_field<C>("self_sample_windows", &C::self_sample_windows, R::in(0, 1 << 16)),
      number_field<C>("fisher_threshold", &C::fisher_threshold, R::in(0.01, 1.0)),
      int_field<C>("fim_rank", &C::fim_rank, R::in(0, 1 << 16)),
      int_field<C>("seed", &C::seed),
  };
}

const ConfigTable<KvSpliceConfig>& table() {
  static const ConfigTable<KvSpliceConfig> t("kvsplice", fields());
  return t;
}

}  // namespace

absl::Status set_kvsplice_field(KvSpliceConfig& c, const std::string& key, const std::string& value) {
  return table().set(c, key, value);
}

std::vector<std::string> kvsplice_config_keys() { return table().keys(); }

absl::Status validate_kvsplice_config(const KvSpliceConfig& c, const ModelConfig& m) {
  FROST_RETURN_IF_ERROR(table().check(c));
  const int64_t d = m.n_head_kv * m.head_dim;
  if (c.rank > d)
    return table().field_error(
        "rank", std::to_string(c.rank),
        absl::StrCat("must be in [1, ", d, "] (n_head_kv · head_dim), or 0 for the Fisher-suggested rank"));
  for (auto [key, r] : {std::pair<const char*, int64_t>{"k_rank", c.k_rank}, {"v_rank", c.v_rank}}) {
    if (r > d)
      return table().field_error(
          key, std::to_string(r),
          absl::StrCat("must be in [1, ", d, "] (n_head_kv · head_dim), or 0 for rank's value"));
  }
  if (c.window > m.max_pos)
    return table().field_error("window", std::to_string(c.window),
                               absl::StrCat("must be in [2, ", m.max_pos, "]"));
  if (c.fim_rank > c.window)
    return table().field_error(
        "fim_rank", std::to_string(c.fim_rank),
        absl::StrCat("must be at most the window (", c.window, ") as a temporal rank"));
  return absl::OkStatus();
}

std::string kvsplice_config_json(const KvSpliceConfig& c) { return table().to_json(c).dump(); }

absl::StatusOr<KvRows> collect_kv_rows(const Transformer& model, const std::vector<TokenWindow>& windows) {
  if (windows.empty()) return absl::InvalidArgumentError("kvsplice: no calibration windows");
  return torch_call([&] {
    at::NoGradGuard ng;
    const ModelConfig& mc = model.config();
    const int64_t L = mc.n_layer, d = mc.n_head_kv * mc.head_dim;
    const int64_t H = mc.n_head, Hkv = mc.n_head_kv, D = mc.head_dim, group = H / Hkv;
    std::vector<std::vector<at::Tensor>> ks(static_cast<size_t>(L)), vs(static_cast<size_t>(L));
    std::vector<at::Tensor> qq(static_cast<size_t>(L));  // Σ q qᵀ per kv group [Hkv, D, D] (double)
    int64_t n_rows = 0;
    for (const TokenWindow& w : windows) {
      const auto T = static_cast<int64_t>(w.size());
      SequenceKv kv(model.kv_spec(T, KvCodecKind::kF32));
      KvStudy study;
      study.taps.queries = true;
      model.forward(at::tensor(std::vector<int64_t>(w.begin(), w.end()), at::kLong), kv, study,
                    /*last_only=*/true);
      TORCH_CHECK(static_cast<int64_t>(study.taps.query_rows.size()) == L,
                  "collect_kv_rows: query tap missing");
      for (int64_t l = 0; l < L; ++l) {  // [Hkv, T, D] → [T, d]
        ks[static_cast<size_t>(l)].push_back(kv.layer(l).keys(T).transpose(0, 1).reshape({T, d}));
        vs[static_cast<size_t>(l)].push_back(kv.layer(l).values(T).transpose(0, 1).reshape({T, d}));
        // queries [T, H, D] → per group g: the T·group rows of its heads
        const at::Tensor q =
            study.taps.query_rows[static_cast<size_t>(l)].to(at::kDouble).view({T, Hkv, group, D});
        const at::Tensor g = at::einsum("tgha,tghb->gab", {q, q});
        at::Tensor& acc = qq[static_cast<size_t>(l)];
        acc = acc.defined() ? acc + g : g;
      }
      n_rows += T;
    }
    KvRows rows;
    for (int64_t l = 0; l < L; ++l) {
      rows.k.push_back(at::cat(ks[static_cast<size_t>(l)], 0));
      rows.v.push_back(at::cat(vs[static_cast<size_t>(l)], 0));
      // K: E[(q·δk)²] summed over the group's query heads = δkᵀ (E[q qᵀ]) δk, block-diagonal over groups
      rows.k_metric.push_back(
          at::block_diag(at::unbind(qq[static_cast<size_t>(l)] / static_cast<double>(n_rows), 0)));
      // V: a head's output error is W_o[:, h] δv; summed over the group's heads, the metric is
      // Σ_h W_o[:, h]ᵀ W_o[:, h]. Router layers have no single W_o: Euclidean there.
      const at::Tensor& wo = model.weights().layers[static_cast<size_t>(l)].wo;
      if (wo.defined()) {
        const at::Tensor w = wo.to(at::kDouble).view({wo.size(0), Hkv, group, D});
        rows.v_metric.push_back(at::block_diag(at::unbind(at::einsum("cgha,cghb->gab", {w, w}), 0)));
      } else {
        rows.v_metric.push_back(at::eye(d, at::kDouble));
      }
    }
    return rows;
  });
}

absl::StatusOr<std::shared_ptr<KvSpliceSet>> kvsplice_from_pca(const KvSpliceDims& dims, KvSpliceRanks ranks,
                                                               const KvRows& rows,
                                                               std::vector<std::array<double, 2>>* energy,
                                                               bool whiten, bool metric) {
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<KvSpliceSet> set, KvSpliceSet::create(dims, ranks));
  if (static_cast<int64_t>(rows.k.size()) != dims.n_layers || rows.v.size() != rows.k.size())
    return absl::InvalidArgumentError("kvsplice_from_pca: rows for the wrong number of layers");
  if (energy) energy->assign(static_cast<size_t>(dims.n_layers), {0, 0});
  FROST_RETURN_IF_ERROR(torch_call([&] {
    at::NoGradGuard ng;
    for (int64_t l = 0; l < dims.n_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const at::Tensor& x = (kv == 0 ? rows.k : rows.v)[static_cast<size_t>(l)].to(at::kDouble);
        TORCH_CHECK(x.dim() == 2 && x.size(1) == dims.d(), "kvsplice_from_pca: rows of layer ", l, " are ",
                    x.sizes(), ", expected [N, ", dims.d(), "]");
        const at::Tensor mean = x.mean(0);
        // Attention-aware PCA (when a metric M is given): PCA of the rows mapped by A = M^½, so the kept
        // subspace minimises E‖A(x − x̂)‖², the error attention sees, not E‖x − x̂‖². A is regularised
        // (eigenvalues floored at 1e-4 of the mean) so A⁻¹ stays bounded. Without M, A = I: plain PCA.
        const std::vector<at::Tensor>& metrics = kv == 0 ? rows.k_metric : rows.v_metric;
        at::Tensor A, A_inv;
        if (metric && !metrics.empty()) {
          const at::Tensor M = metrics[static_cast<size_t>(l)].to(at::kDouble);
          TORCH_CHECK(M.sizes() == at::IntArrayRef({dims.d(), dims.d()}),
                      "kvsplice_from_pca: metric of layer ", l, " is ", M.sizes());
          auto [lam, Q] = at::linalg_eigh((M + M.t()) / 2);
          // scaled to mean eigenvalue 1 (the subspace does not depend on the scale; C and E then keep
          // magnitudes like plain PCA's, which the fine-tuning's fixed learning rate expects)
          lam = (lam / std::max(lam.mean().item<double>(), 1e-30)).clamp_min(1e-4);
          A = at::matmul(Q * lam.sqrt().unsqueeze(0), Q.t());
          A_inv = at::matmul(Q * lam.rsqrt().unsqueeze(0), Q.t());
        } else {
          A = A_inv = at::eye(dims.d(), at::kDouble);
        }
        const at::Tensor xc = at::matmul(x - mean, A);  // A symmetric
        // right singular vectors of the centred rows = eigenvectors of the covariance
        auto [U, S, Vh] = at::linalg_svd(xc, /*full_matrices=*/false);
        const int64_t rank = kv == 0 ? ranks.k : ranks.v;
        const int64_t k = std::min<int64_t>(rank, Vh.size(0));
        at::Tensor basis = at::zeros({dims.d(), rank}, at::kDouble);
        basis.narrow(1, 0, k).copy_(Vh.narrow(0, 0, k).t());
        // compress C = Uᵣᵀ A, expand E = A⁻¹ Uᵣ (as [d, r] columns: "in" = A Uᵣ, "out" = A⁻¹ Uᵣ)
        const at::Tensor in = at::matmul(A, basis), out = at::matmul(A_inv, basis);
        LearnedKvSplice& sp = kv == 0 ? set->mutable_k(l) : set->mutable_v(l);
        sp.shift.copy_(-mean);  // σ = 1 from create()
        if (whiten) {
          // C = diag(1/sᵢ) Uᵀ, E = U diag(sᵢ) with sᵢ the std of component i: the same reconstruction, but
          // every latent component has unit variance, so one int8 scale per row suits all of them.
          at::Tensor sd = at::ones({rank}, at::kDouble);
          const double n_rows = static_cast<double>(std::max<int64_t>(x.size(0), 1));
          sd.narrow(0, 0, k).copy_((S.narrow(0, 0, k) / std::sqrt(n_rows)).clamp_min(1e-6));
          sp.expand.copy_(out * sd.unsqueeze(0));
          sp.compress.copy_((in / sd.unsqueeze(0)).t());
        } else {
          sp.expand.copy_(out);
          sp.compress.copy_(in.t());
        }
        if (energy) {
          const at::Tensor s2 = S.pow(2);
          const double total = s2.sum().item<double>();
          (*energy)[static_cast<size_t>(l)][static_cast<size_t>(kv)] =
              total > 0 ? s2.narrow(0, 0, k).sum().item<double>() / total : 1.0;
        }
      }
    }
  }));
  set->freeze();
  return set;
}

absl::StatusOr<std::shared_ptr<KvSpliceSet>> train_kvsplice(const Transformer& model,
                                                            const KvSpliceConfig& cfg,
                                                            const std::vector<TokenWindow>& windows,
                                                            const KvRepairTrainOptions& opts,
                                                            std::shared_ptr<KvSpliceSet>* pca_init) {
  FROST_RETURN_IF_ERROR(validate_kvsplice_config(cfg, model.config()));
  if (cfg.ranks().k < 1 || cfg.ranks().v < 1)
    return absl::InvalidArgumentError("kvsplice: the rank must be resolved before training");
  if (windows.empty()) return absl::InvalidArgumentError("kvsplice: no calibration windows");
  for (const TokenWindow& w : windows)
    if (static_cast<int64_t>(w.size()) != cfg.window)
      return absl::InvalidArgumentError(
          absl::StrCat("kvsplice: a calibration window has ", w.size(), " tokens, expected ", cfg.window));
  const size_t n_pca =
      cfg.pca_windows > 0 ? std::min(windows.size(), static_cast<size_t>(cfg.pca_windows)) : windows.size();
  FROST_ASSIGN_OR_RETURN(KvRows rows, collect_kv_rows(model, std::vector<TokenWindow>(
                                                                 windows.begin(), windows.begin() + n_pca)));
  auto from_pca = [&]() -> absl::StatusOr<std::shared_ptr<KvSpliceSet>> {
    FROST_ASSIGN_OR_RETURN(std::shared_ptr<KvSpliceSet> s,
                           kvsplice_from_pca(kvsplice_dims(model.config()), cfg.ranks(), rows, nullptr,
                                             /*whiten=*/cfg.latent == KvLatentDtype::kI8,
                                             /*metric=*/cfg.pca_metric == KvPcaMetric::kAttention));
    s->set_latent(cfg.latent);  // the fine-tuning runs through the latents as the cache stores them
    return s;
  };
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<KvSpliceSet> set, from_pca());
  if (pca_init) {  // a second set from the same rows (only the SVDs again, not the forward passes)
    FROST_ASSIGN_OR_RETURN(*pca_init, from_pca());
  }
  if (cfg.steps == 0) return set;
  std::vector<at::Tensor> params = set->parameters();
  for (at::Tensor& p : params) p.requires_grad_(true);
  KvAdam opt(params, cfg.lr);
  int64_t step = 0;
  if (!opts.checkpoint_path.empty() && std::filesystem::exists(opts.checkpoint_path)) {
    FROST_ASSIGN_OR_RETURN(
        step, load_train_checkpoint(opts.checkpoint_path, "kvsplice", set->named_parameters(), opt));
  }
  const int64_t batch = std::min<int64_t>(cfg.batch, static_cast<int64_t>(windows.size()));
  auto finish = [&] {
    for (at::Tensor& p : params) p.requires_grad_(false);
    set->freeze();
  };
  while (step < cfg.steps) {
    if (opts.cancel && opts.cancel->stop_requested()) {
      if (!opts.checkpoint_path.empty())
        FROST_RETURN_IF_ERROR(
            save_train_checkpoint(opts.checkpoint_path, set->named_parameters(), opt, step));
      finish();
      return absl::CancelledError(absl::StrCat("kvsplice: cancelled at step ", step));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<size_t> idx = step_batch(cfg.seed, step, windows.size(), batch);
    double kl_sum = 0;
    FROST_RETURN_IF_ERROR(torch_call([&] {
      opt.zero_grad();
      for (int64_t b = 0; b < batch; ++b) {
        const TokenWindow& w = windows[idx[static_cast<size_t>(b)]];
        at::Tensor logp;
        {
          at::NoGradGuard ng;
          logp = window_logprobs(model, w, KvCodecKind::kF32);
        }
        at::Tensor logq = window_logprobs(model, w, KvCodecKind::kKvSplice, nullptr, nullptr, set);
        at::Tensor kl = mean_kl(logp, logq);
        (kl / static_cast<double>(batch)).backward();
        kl_sum += kl.item<double>();
      }
      clip_grad_norm(opt.params, 1.0);
      opt.step();
    }));
    ++step;
    if (opts.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double kl = kl_sum / static_cast<double>(batch);
      opts.progress({step, cfg.steps, kl, kl, s > 0 ? static_cast<double>(batch) / s : 0});
    }
    if (!opts.checkpoint_path.empty() && opts.checkpoint_every > 0 && step % opts.checkpoint_every == 0 &&
        step < cfg.steps)
      FROST_RETURN_IF_ERROR(save_train_checkpoint(opts.checkpoint_path, set->named_parameters(), opt, step));
  }
  finish();
  return set;
}

absl::StatusOr<FisherAccumulator> accumulate_fisher(const Transformer& model,
                                                    const std::vector<TokenWindow>& windows) {
  if (windows.empty()) return absl::InvalidArgumentError("fisher: no windows");
  const ModelConfig& mc = model.config();
  FisherAccumulator acc(mc.n_layer, mc.n_head);
  for (const TokenWindow& w : windows) {
    KvStudy study;
    study.taps.probs = true;
    const KvTaps& taps = study.taps;
    FROST_RETURN_IF_ERROR(torch_call([&] {
      at::NoGradGuard ng;
      window_logprobs(model, w, KvCodecKind::kF32, nullptr, &study);
    }));
    if (static_cast<int64_t>(taps.attention_probs.size()) != mc.n_layer)
      return absl::InternalError("fisher: the model did not report every layer's attention probabilities");
    for (int64_t l = 0; l < mc.n_layer; ++l)
      FROST_RETURN_IF_ERROR(acc.add(l, taps.attention_probs[static_cast<size_t>(l)]));
  }
  return acc;
}

}  // namespace frost
