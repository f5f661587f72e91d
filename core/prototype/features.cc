#include "core/prototype/features.h"

#include <ATen/core/grad_mode.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/kv/sequence_kv.h"

namespace frost::prototype {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

void fnv(uint64_t& h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= kFnvPrime;
  }
}

void fnv_tensor(uint64_t& h, const at::Tensor& t) {
  if (!t.defined()) {
    fnv(h, "-", 1);
    return;
  }
  at::Tensor c = t.contiguous().cpu();
  const int64_t d[2] = {c.numel(), static_cast<int64_t>(c.scalar_type())};
  fnv(h, d, sizeof(d));
  fnv(h, c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

}  // namespace

std::string BackboneId::describe() const {
  return absl::StrFormat("%s (%s, dim %d, %d layers, vocab %d, %s weights %s)", name, arch, dim, n_layer,
                         n_vocab, weights, fingerprint);
}

BackboneId backbone_id(const LoadedModel& model) {
  const ModelConfig& c = model.config;
  BackboneId id;
  id.name = model.name;
  id.arch = arch_name(c.arch);
  id.dim = c.dim;
  id.n_layer = c.n_layer;
  id.n_vocab = c.n_vocab;
  id.weights = weight_dtype_name(model.model->weight_format());
  // Every weight byte in load order: two checkpoints share a fingerprint only when the
  // hidden states they produce are the same function of the tokens.
  uint64_t h = kFnvOffset;
  const int64_t sizes[] = {c.dim, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.ffn_dim, c.n_vocab};
  fnv(h, sizes, sizeof(sizes));
  const ModelWeights& w = model.model->weights();
  fnv_tensor(h, w.tok_embed);
  fnv_tensor(h, w.pos_embed);
  const VariantConfig& v = c.variants;
  if (v.any()) {  // architecture variants change the function (plain models keep their fingerprint)
    for (const std::vector<int64_t>* ls :
         {&v.ra_layers, &v.sba_layers, &v.router_layers, &v.mlp_ctx_layers}) {
      const int64_t n = static_cast<int64_t>(ls->size());
      fnv(h, &n, sizeof(n));
      fnv(h, ls->data(), ls->size() * sizeof(int64_t));
    }
    const int64_t knobs[] = {v.router_ra_heads, v.router_hidden, v.mlp_ctx_rank, v.mlp_ctx_conductor ? 1 : 0};
    fnv(h, knobs, sizeof(knobs));
    fnv(h, &v.sba_alpha, sizeof(v.sba_alpha));
  }
  for (const LayerWeights& l : w.layers) {
    for (const at::Tensor* t : {&l.attn_norm_w, &l.attn_norm_b, &l.wqkv, &l.bqkv, &l.wo, &l.bo, &l.mlp_norm_w,
                                &l.mlp_norm_b, &l.w_in, &l.b_in, &l.w_out, &l.b_out})
      fnv_tensor(h, *t);
    if (v.any())
      for (const at::Tensor* t : l.var.tensors()) fnv_tensor(h, *t);
  }
  fnv_tensor(h, w.final_norm_w);
  fnv_tensor(h, w.final_norm_b);
  fnv_tensor(h, w.lm_head);
  id.fingerprint = absl::StrFormat("%016x", h);
  return id;
}

absl::StatusOr<std::vector<int32_t>> tokenize_truncated(const LoadedModel& model, const std::string& text,
                                                        int64_t max_tokens) {
  FROST_ASSIGN_OR_RETURN(std::vector<int32_t> ids, model.tokenizer->encode(text, /*add_bos=*/true));
  FROST_RETURN_IF_ERROR(check_token_ids(ids, model.config.n_vocab, "text (as tokenized)"));
  const int64_t cap = std::min<int64_t>(max_tokens, model.config.max_pos);
  if (static_cast<int64_t>(ids.size()) > cap) ids.resize(static_cast<size_t>(cap));
  if (ids.empty()) return absl::InvalidArgumentError("text has no tokens and the tokenizer has no BOS");
  return ids;
}

absl::StatusOr<at::Tensor> backbone_hidden(const LoadedModel& model, const std::vector<int32_t>& tokens) {
  if (model.hidden_source) return model.hidden_source->hidden(tokens);  // the served device's decoder
  return torch_call([&] {
    const int64_t n = static_cast<int64_t>(tokens.size());
    SequenceKv kv(model.model->kv_spec(n, KvCodecKind::kF32));
    at::Tensor ids = at::from_blob(const_cast<int32_t*>(tokens.data()), {n}, at::kInt).to(at::kLong);
    at::Tensor hidden;
    at::NoGradGuard ng;
    model.model->forward(ids, kv, /*last_only=*/true, &hidden);
    return hidden;  // [n, C] fp32
  });
}

absl::StatusOr<FeatureBatch> encode_texts(const LoadedModel& model, const std::vector<std::string>& texts,
                                          int64_t max_tokens) {
  std::vector<at::Tensor> rows;
  int64_t smax = 0;
  for (const std::string& t : texts) {
    FROST_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenize_truncated(model, t, max_tokens));
    FROST_ASSIGN_OR_RETURN(at::Tensor h, backbone_hidden(model, ids));
    // Round through fp16 as the training-time feature cache does: Predict sees the same
    // numbers for a text that training saw.
    rows.push_back(h.to(at::kHalf).to(at::kFloat));
    smax = std::max(smax, h.size(0));
  }
  return torch_call([&] {
    const int64_t B = static_cast<int64_t>(rows.size()), C = model.config.dim;
    FeatureBatch fb{at::zeros({B, smax, C}), at::zeros({B, smax}, at::kBool)};
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = rows[static_cast<size_t>(b)].size(0);
      fb.h[b].narrow(0, 0, n).copy_(rows[static_cast<size_t>(b)]);
      fb.mask[b].narrow(0, 0, n).fill_(true);
    }
    return fb;
  });
}

FeatureCache::~FeatureCache() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<FeatureCache>> FeatureCache::build(const LoadedModel& model,
                                                                  const std::vector<std::string>& texts,
                                                                  const Options& opts,
                                                                  const CancelToken* cancel,
                                                                  const ProgressFn& progress) {
  std::unique_ptr<FeatureCache> fc(new FeatureCache());
  fc->d_model_ = model.config.dim;
  fc->device_ = opts.device;
  std::vector<std::vector<int32_t>> toks;
  toks.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenize_truncated(model, texts[i], opts.max_tokens);
    if (!ids.ok())
      return absl::Status(ids.status().code(), absl::StrCat("text ", i, ": ", ids.status().message()));
    fc->offsets_.push_back(fc->total_rows_);
    fc->lengths_.push_back(static_cast<int64_t>(ids->size()));
    fc->total_rows_ += static_cast<int64_t>(ids->size());
    toks.push_back(std::move(*ids));
  }
  const int64_t row_bytes = fc->d_model_ * 2;
  if (fc->bytes() <= opts.budget_bytes) {
    fc->memory_ =
        at::empty({fc->total_rows_, fc->d_model_}, at::TensorOptions().dtype(at::kHalf).device(fc->device_));
  } else {
    std::string dir = opts.spill_dir;
    if (dir.empty()) {
      const char* t = std::getenv("TMPDIR");
      dir = t && *t ? t : "/tmp";
    }
    std::string path = dir + "/frost_features_XXXXXX";
    int fd = ::mkstemp(path.data());
    if (fd < 0)
      return absl::UnavailableError(
          absl::StrCat("feature cache: cannot create a spill file in ", dir, ": ", std::strerror(errno)));
    ::unlink(path.c_str());  // the file lives as long as the descriptor: nothing left behind on a crash
    fc->fd_ = fd;
    fc->spill_path_ = path;
  }
  for (size_t i = 0; i < toks.size(); ++i) {
    if (cancel && cancel->stop_requested()) return absl::CancelledError("feature cache: cancelled");
    FROST_ASSIGN_OR_RETURN(at::Tensor h, backbone_hidden(model, toks[i]));
    at::Tensor h16 = h.to(at::kHalf).contiguous();  // host memory (the device decoder copies its rows back)
    if (fc->fd_ < 0) {
      fc->memory_.narrow(0, fc->offsets_[i], fc->lengths_[i]).copy_(h16);
    } else {
      const char* p = static_cast<const char*>(h16.data_ptr());
      size_t n = static_cast<size_t>(h16.numel()) * 2;
      off_t off = static_cast<off_t>(fc->offsets_[i] * row_bytes);
      while (n > 0) {
        ssize_t w = ::pwrite(fc->fd_, p, n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
          return absl::ResourceExhaustedError(
              absl::StrCat("feature cache: writing the spill file failed: ", std::strerror(errno)));
        p += w;
        n -= static_cast<size_t>(w);
        off += w;
      }
    }
    if (progress) progress(static_cast<int64_t>(i) + 1, static_cast<int64_t>(toks.size()));
  }
  return fc;
}

at::Tensor FeatureCache::row(int64_t i) const {
  const int64_t n = lengths_[static_cast<size_t>(i)];
  if (fd_ < 0) return memory_.narrow(0, offsets_[static_cast<size_t>(i)], n);
  at::Tensor out = at::empty({n, d_model_}, at::kHalf);
  char* p = static_cast<char*>(out.data_ptr());
  size_t left = static_cast<size_t>(n * d_model_ * 2);
  off_t off = static_cast<off_t>(offsets_[static_cast<size_t>(i)] * d_model_ * 2);
  while (left > 0) {
    ssize_t r = ::pread(fd_, p, left, off);
    if (r < 0 && errno == EINTR) continue;
    TORCH_CHECK(r > 0, "feature cache: reading the spill file failed: ", std::strerror(errno));
    p += r;
    left -= static_cast<size_t>(r);
    off += r;
  }
  return out;
}

FeatureBatch FeatureCache::batch(const std::vector<int64_t>& indices) const {
  int64_t smax = 1;
  for (int64_t i : indices) smax = std::max(smax, length(i));
  const int64_t B = static_cast<int64_t>(indices.size());
  const at::TensorOptions on = at::TensorOptions().device(device_);
  FeatureBatch fb{at::zeros({B, smax, d_model_}, on), at::zeros({B, smax}, on.dtype(at::kBool))};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)], n = length(i);
    fb.h[b].narrow(0, 0, n).copy_(row(i));
    fb.mask[b].narrow(0, 0, n).fill_(true);
  }
  return fb;
}

at::Tensor FeatureCache::mean_pooled(int64_t i) const { return row(i).to(at::kDouble).mean(0); }

}  // namespace frost::prototype
