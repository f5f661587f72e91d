#include "core/prototype/predictor.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/prototype/baselines.h"
#include "core/prototype/features.h"

namespace frost::prototype {

absl::StatusOr<at::Tensor> population_reference(const at::Tensor& keys, int64_t k) {
  const int64_t N = keys.size(0);
  if (N < 2) return absl::InvalidArgumentError("population reference needs at least 2 training keys");
  const int kk = static_cast<int>(std::min<int64_t>(k, N - 1));
  FROST_ASSIGN_OR_RETURN(KnnResult nn,
                         knn_topk(keys.to(at::kFloat), keys.to(at::kFloat), kk, /*exclude_self=*/true));
  return torch_call([&] { return std::get<0>(nn.values.mean(1).sort()).contiguous(); });
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::create(PrototypeArtifact art,
                                                             const LoadedModel& model) {
  return create(std::move(art), model, compute_device(model));
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::create(PrototypeArtifact art, const LoadedModel& model,
                                                             ComputeDevice device) {
  BackboneId have = backbone_id(model);
  if (!have.same_backbone(art.backbone))
    return absl::FailedPreconditionError(absl::StrCat("prototype artifact was trained on backbone ",
                                                      art.backbone.describe(), ", but the loaded model is ",
                                                      have.describe()));
  if (art.d_model != model.config.dim)
    return absl::FailedPreconditionError(
        absl::StrCat("prototype artifact expects d_model ", art.d_model, ", model has ", model.config.dim));
  std::unique_ptr<Predictor> p(new Predictor());
  p->model_ = &model;
  p->dev_ = std::move(device);
  const at::Device dev = p->dev_.device;
  absl::Status load_status;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    p->net_ = std::make_unique<PrototypeNet>(art.cfg, art.d_model, art.bounds.a, art.bounds.b, art.label_mu,
                                             art.label_sigma, dev);
    load_status = p->net_->params().load(art.tensors);
    if (!load_status.ok()) return;
    at::NoGradGuard ng;
    for (const auto& [name, t] : p->net_->params().items()) t.set_requires_grad(false);
    const PrototypeConfig& c = art.cfg;
    at::Tensor mem = art.tensor("proto.memory").to(dev, at::kFloat);  // [K, m, d]
    p->mem_fixed_ =
        prototype_memory(mem, p->net_->label_embed(art.tensor("proto.labels").to(dev))).contiguous();
    at::Tensor mean_labels = at::full({c.K}, art.label_mu, at::TensorOptions().dtype(at::kFloat).device(dev));
    p->mem_hidden_ = prototype_memory(mem, p->net_->label_embed(mean_labels)).contiguous();
    p->keys_ = art.tensor("cache.keys").to(dev, at::kFloat).contiguous();
    std::vector<int64_t> proto_idx;
    for (const PrototypeEntry& e : art.prototypes) proto_idx.push_back(e.index);
    p->proto_keys_ =
        p->keys_.index_select(0, at::tensor(proto_idx, at::kLong).to(dev)).contiguous();  // [K, d]
    p->labels_ = art.tensor("cache.labels").to(dev, at::kFloat).contiguous();
    p->population_ = art.tensor("rlcs.population").to(dev).contiguous();
  }));
  if (!load_status.ok())
    return absl::InvalidArgumentError(absl::StrCat("prototype artifact: ", load_status.message()));
  p->art_ = std::move(art);
  return p;
}

RestrStats Predictor::restr_stats() const {
  RestrStats s;
  s.applied = n_applied_.load();
  s.fallback_shape = n_fb_shape_.load();
  s.fallback_nonfinite = n_fb_nonfinite_.load();
  s.fallback_norm = n_fb_norm_.load();
  return s;
}

absl::StatusOr<std::vector<Prediction>> Predictor::predict(const std::vector<std::string>& texts,
                                                           int top_k) const {
  std::vector<at::Tensor> hs;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<FeatureBatch> fb = encode_texts(*model_, {texts[i]}, art_.cfg.max_tokens);
    if (!fb.ok()) return absl::InvalidArgumentError(absl::StrCat("texts[", i, "]: ", fb.status().message()));
    hs.push_back(fb->h);
  }
  if (texts.empty()) return std::vector<Prediction>{};
  FROST_ASSIGN_OR_RETURN(
      FeatureBatch all, torch_call([&] {
        int64_t smax = 0;
        for (const at::Tensor& h : hs) smax = std::max(smax, h.size(1));
        const int64_t B = static_cast<int64_t>(hs.size());
        FeatureBatch fb{at::zeros({B, smax, art_.d_model}), at::zeros({B, smax}, at::kBool)};
        for (int64_t b = 0; b < B; ++b) {
          const int64_t n = hs[static_cast<size_t>(b)].size(1);
          fb.h[b].narrow(0, 0, n).copy_(hs[static_cast<size_t>(b)][0]);
          fb.mask[b].narrow(0, 0, n).fill_(true);
        }
        return fb;
      }));
  return predict_features(all.h, all.mask, top_k);
}

absl::StatusOr<std::vector<Prediction>> Predictor::predict_features(const at::Tensor& h,
                                                                    const at::Tensor& mask, int top_k) const {
  const PrototypeConfig& c = art_.cfg;
  if (top_k < 0 || top_k > c.K)
    return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " outside [0, ", c.K, "]"));
  const int64_t B = h.size(0);
  if (B == 0) return std::vector<Prediction>{};
  const int kk = static_cast<int>(std::min<int64_t>(c.rlcs_k, keys_.size(0)));
  // The k nearest training keys of each query, outside torch_call (it returns a Status).
  at::Tensor q_tokens, q_key, z_probe;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    at::NoGradGuard ng;
    const at::Tensor hd = h.to(dev_.device), md = mask.to(dev_.device);  // the same tensors on the CPU
    q_tokens = net_->query_tokens(hd, md);
    z_probe = net_->probe_logit(hd, md);
    q_key = net_->normalize(net_->key(net_->memory_tokens(hd, md)));
  }));
  FROST_ASSIGN_OR_RETURN(KnnResult nn, knn_topk(keys_, q_key, kk));  // cosines on keys_' device
  std::vector<Prediction> out(static_cast<size_t>(B));
  FROST_RETURN_IF_ERROR(torch_call([&] {
    at::NoGradGuard ng;
    const double a = art_.bounds.a, b = art_.bounds.b;
    // RLCS scores
    at::Tensor sim = nn.values.to(dev_.device, at::kFloat);  // [B, k]
    at::Tensor pop_score = sim.mean(1);                      // [B]
    at::Tensor pop =
        at::searchsorted(population_, pop_score, /*out_int32=*/false, /*right=*/true).to(at::kDouble) /
        static_cast<double>(population_.size(0));
    at::Tensor w = sim.clamp_min(0) + 1e-6;
    at::Tensor knn =
        (w * labels_.index_select(0, nn.indices.to(dev_.device).reshape({-1})).view({B, kk})).sum(1) /
        w.sum(1);
    at::Tensor bias = block_key_bias(q_key, proto_keys_, c.m + 1, c.key_bias);
    at::Tensor y0 = net_->output(net_->head()(q_tokens, mem_fixed_, nullptr, bias), z_probe);
    at::Tensor agree = (1.0 - (y0 - knn).abs() / (b - a)).clamp(0.0, 1.0);
    at::Tensor ood = pop < c.ood_quantile;
    at::Tensor gate = agree.masked_fill(ood, 0.0).to(at::kFloat);
    at::Tensor alpha = gate * c.restr_alpha_max, beta = gate * c.restr_beta_max;
    RestrStats st;
    at::Tensor fell_back;
    at::Tensor qr = net_->restr()(q_tokens, alpha, beta, c.restr_norm_eps, &st, &fell_back);
    n_applied_ += st.applied;
    n_fb_shape_ += st.fallback_shape;
    n_fb_nonfinite_ += st.fallback_nonfinite;
    n_fb_norm_ += st.fallback_norm;
    std::vector<at::Tensor> probs;
    at::Tensor y = net_->output(net_->head()(qr, mem_fixed_, &probs, bias), z_probe);
    at::Tensor reliance = (y - net_->output(net_->head()(qr, mem_hidden_, nullptr, bias), z_probe)).abs();
    // attribution: mean over layers and heads → [B, K(m+1)] → per prototype block [B, K]
    at::Tensor att = at::stack(probs, 0).mean(0).mean(1).select(1, 0);
    at::Tensor per_proto = att.view({B, c.K, c.m + 1}).sum(2).to(at::kCPU, at::kDouble).contiguous();
    // Back to the host once per batch (on the CPU these are the same tensors).
    for (at::Tensor* t : {&y, &y0, &knn, &pop, &agree, &alpha, &beta, &ood, &fell_back, &reliance})
      *t = t->to(at::kCPU);
    for (int64_t i = 0; i < B; ++i) {
      Prediction& pr = out[static_cast<size_t>(i)];
      pr.value = y[i].item<double>();
      pr.value_unrefined = y0[i].item<double>();
      pr.knn_value = knn[i].item<double>();
      pr.population_consistency = pop[i].item<double>();
      pr.agreement_consistency = agree[i].item<double>();
      pr.alpha = alpha[i].item<double>();
      pr.beta = beta[i].item<double>();
      pr.out_of_distribution = ood[i].item<bool>();
      pr.restr_fallback = fell_back[i].item<bool>();
      pr.label_reliance = reliance[i].item<double>();
      const double* wp = per_proto[i].data_ptr<double>();
      pr.weights.assign(wp, wp + c.K);
      std::vector<int64_t> order(static_cast<size_t>(c.K));
      for (int64_t k = 0; k < c.K; ++k) order[static_cast<size_t>(k)] = k;
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y2) { return wp[x] > wp[y2]; });
      for (int t = 0; t < top_k; ++t) {
        const PrototypeEntry& e = art_.prototypes[static_cast<size_t>(order[static_cast<size_t>(t)])];
        pr.top.push_back({e.slot, e.index, e.id, e.text, e.label, wp[order[static_cast<size_t>(t)]]});
      }
    }
  }));
  return out;
}

}  // namespace frost::prototype
