#include "core/exec/device_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"

namespace frost {

absl::StatusOr<cuda::KvFormat> device_kv_format(KvCodecKind codec, const std::string& device) {
  switch (codec) {
    case KvCodecKind::kF32: return cuda::KvFormat::kF32;
    case KvCodecKind::kF16: return cuda::KvFormat::kF16;
    case KvCodecKind::kBF16: return cuda::KvFormat::kBF16;
    case KvCodecKind::kInt8: return cuda::KvFormat::kInt8;
    case KvCodecKind::kInt4: return cuda::KvFormat::kInt4;
    case KvCodecKind::kKvSplice: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("engine.kv_codec: kvsplice runs only on model.device cpu (",
                                                 device, " stores fp32, fp16, bf16, int8 or int4)"));
}

KvLayout DeviceKvStorage::layout(const KvSpec& spec) const {
  KvLayout out;
  out.block_bytes = layout_.block_bytes();
  if (spec.codec != codec_ || spec.n_layer != layout_.n_layer || spec.n_head_kv != layout_.n_head_kv ||
      spec.head_dim != layout_.head_dim || !spec.reverse_layers.empty())
    return out;  // block_tokens 0: not this pool's format
  out.block_tokens = layout_.block_tokens;
  const int64_t lbb = layout_.layer_block_bytes(), rows = layout_.rows_bytes(), sc = layout_.scales_bytes();
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    KvLayerFormat f;
    f.k = KvRegion{l * lbb, layout_.n_head_kv, layout_.row_bytes()};
    f.v = KvRegion{l * lbb + rows, layout_.n_head_kv, layout_.row_bytes()};
    if (sc > 0) {
      f.ks = KvRegion{l * lbb + 2 * rows, layout_.n_head_kv, 4};
      f.vs = KvRegion{l * lbb + 2 * rows + sc, layout_.n_head_kv, 4};
    }
    out.layers.push_back(f);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<DeviceExecutor>> DeviceExecutor::create(std::shared_ptr<const LoadedModel> model,
                                                                       std::unique_ptr<DeviceDecoder> decoder,
                                                                       std::string device, KvCodecKind codec) {
  if (!model || !decoder) return absl::InvalidArgumentError("device executor: no model or decoder");
  absl::StatusOr<cuda::KvFormat> f = device_kv_format(codec, device);
  if (!f.ok()) return f.status();
  if (*f == cuda::KvFormat::kInt4 && model->config.head_dim % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("engine.kv_codec: int4 needs an even head_dim, the model has ",
                                                   model->config.head_dim));
  std::unique_ptr<DeviceExecutor> e(new DeviceExecutor(std::move(model), std::move(decoder), std::move(device), codec, *f));
  return e;
}

cuda::KvLayout DeviceExecutor::layout_for(int64_t block_tokens) const {
  cuda::KvLayout l;
  l.format = format_;
  l.n_layer = static_cast<int>(model_->config.n_layer);
  l.n_head_kv = static_cast<int>(model_->config.n_head_kv);
  l.head_dim = static_cast<int>(model_->config.head_dim);
  l.block_tokens = static_cast<int>(block_tokens);
  return l;
}

int64_t DeviceExecutor::kv_block_bytes(int64_t block_tokens) const { return layout_for(block_tokens).block_bytes(); }

int64_t DeviceExecutor::default_kv_pool_bytes(int64_t full_context_bytes, int32_t max_running) const {
  // Twice what max_running full-context sequences need (the rest serves the prefix cache), within 80% of the
  // device memory still free after the weights (the step buffers take a little of the rest); at least one
  // full context. The host reference device: within 1 GiB.
  const int64_t want = 2 * std::max<int64_t>(1, max_running) * full_context_bytes;
  const DeviceMemory m = decoder_->memory();
  const int64_t cap = m.device_free_bytes > 0 ? m.device_free_bytes / 10 * 8 : int64_t{1} << 30;
  return std::max(full_context_bytes, std::min(want, cap));
}

absl::Status DeviceExecutor::allocate_kv(const Plan& plan) {
  if (storage_) return absl::FailedPreconditionError("device executor: the KV pool is already allocated");
  if (plan.n_blocks > (int64_t{1} << 30) || plan.max_rows > (int64_t{1} << 20))
    return absl::InvalidArgumentError(absl::StrCat("device executor: ", plan.n_blocks, " blocks, ", plan.max_rows,
                                                   " rows per step is not a valid size"));
  const cuda::KvLayout layout = layout_for(plan.block_tokens);
  const int64_t max_blocks = (model_->config.max_pos + plan.block_tokens - 1) / plan.block_tokens;
  try {
    decoder_->allocate(layout, static_cast<int>(plan.n_blocks), static_cast<int>(plan.max_rows), plan.max_seqs,
                       static_cast<int>(max_blocks));
  } catch (const DeviceError& e) {
    return absl::ResourceExhaustedError(absl::StrCat("model.device ", device_, ": ", e.what()));
  }
  storage_ = std::make_unique<DeviceKvStorage>(plan.n_blocks, layout, codec_, device_);
  max_seqs_ = plan.max_seqs;
  host_logits_.assign(static_cast<size_t>(plan.max_seqs) * static_cast<size_t>(model_->config.n_vocab), 0.f);
  refresh_stats();
  return absl::OkStatus();
}

absl::Status DeviceExecutor::check_request(KvCodecKind codec, bool repair) const {
  if (codec != codec_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv.codec: ", kv_codec_name(codec), " is not served on ", device_, ", whose KV pool stores ",
        kv_codec_name(codec_), " (engine.kv_codec); other codecs, kvsplice included, run on model.device cpu"));
  }
  if (repair) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.repair: ON but KV repair operators run only on model.device cpu (this server runs on ", device_, ")"));
  }
  return absl::OkStatus();
}

absl::Status DeviceExecutor::health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

void DeviceExecutor::refresh_stats() {
  const DeviceMemory m = decoder_->memory();
  absl::MutexLock lock(&mu_);
  stats_.device = device_;
  stats_.device_name = m.name;
  stats_.weight_bytes = m.weight_bytes;
  stats_.kv_pool_bytes = m.kv_pool_bytes;
  stats_.device_bytes = m.device_bytes;
  stats_.device_total_bytes = m.device_total_bytes;
  stats_.graphs = m.graphs;
  stats_.healthy = health_.ok();
}

ExecutorStats DeviceExecutor::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Status DeviceExecutor::execute(const ExecStep& step, ExecResult* out) {
  if (absl::Status h = health(); !h.ok()) return absl::UnavailableError(h.message());
  const std::vector<StepSeq>& seqs = *step.seqs;
  DeviceStep& ds = dstep_;
  ds.token.clear();
  ds.seq.clear();
  ds.pos.clear();
  ds.logit_rows.clear();
  if (static_cast<int64_t>(seqs.size()) > max_seqs_)
    return absl::InternalError(absl::StrCat("device executor: ", seqs.size(), " sequences in a step of at most ",
                                            max_seqs_));
  params_.clear();
  uint64_t on_device = 0, on_host = 0;
  try {
    // Sequence i of the step is block-table slot i.
    for (size_t i = 0; i < seqs.size(); ++i) {
      const StepSeq& q = seqs[i];
      if (q.kv->resident())
        return absl::InternalError("device executor: a sequence's KV lives in host memory, not on the device");
      const std::vector<int32_t>& table = q.kv->block_table();
      decoder_->set_blocks(static_cast<int>(i), table.data(), static_cast<int>(table.size()));
      const int64_t p0 = q.kv->n_tokens();
      for (int64_t j = 0; j < q.n_tokens; ++j) {
        ds.token.push_back(q.tokens[j]);
        ds.seq.push_back(static_cast<int32_t>(i));
        ds.pos.push_back(static_cast<int32_t>(p0 + j));
      }
      for (int64_t j = q.n_logit_rows(); j > 0; --j)
        ds.logit_rows.push_back(static_cast<int32_t>(static_cast<int64_t>(ds.token.size()) - j));
    }
    if (ds.logit_rows.size() != step.sampling.size())
      return absl::InternalError("device executor: one RowSampling per logits row");
    if (static_cast<int64_t>(ds.logit_rows.size()) > max_seqs_)
      return absl::InternalError(absl::StrCat("device executor: ", ds.logit_rows.size(),
                                              " logits rows in a step of at most ", max_seqs_));
    // A constrained row sampled on the device: its mask rides along (DeviceDecoder::set_masks), row i of
    // masks_ for logit row i; rows without one are left zero (not read).
    const size_t W = (static_cast<size_t>(model_->config.n_vocab) + 31) / 32;
    size_t masked_rows = 0;
    for (size_t i = 0; i < step.sampling.size(); ++i)
      if (step.sampling[i].on_device && step.sampling[i].mask) masked_rows = i + 1;
    if (masked_rows > 0) masks_.assign(masked_rows * W, 0u);
    for (const RowSampling& rs : step.sampling) {
      cuda::SampleParams sp;
      if (rs.on_device && rs.mask) {
        std::copy(rs.mask, rs.mask + W, masks_.begin() + static_cast<std::ptrdiff_t>(params_.size() * W));
        sp.masked = 1;
      }
      sp.to_host = rs.on_device ? 0 : 1;
      sp.greedy = rs.greedy ? 1 : 0;
      sp.temperature = rs.temperature;
      sp.top_k = rs.top_k;
      sp.top_p = rs.top_p;
      sp.min_p = rs.min_p;
      sp.u = rs.u;
      params_.push_back(sp);
      (rs.on_device ? on_device : on_host) += 1;
    }
    ids_.assign(params_.size(), -1);
    if (masked_rows > 0) decoder_->set_masks(masks_.data(), static_cast<int>(masked_rows));
    if (!ds.logit_rows.empty()) {
      decoder_->forward(ds, params_, ids_.data(), host_logits_.data());
    } else {
      // A step of prompt chunks only (no logits row): run it for its KV, sampling nothing.
      ds.logit_rows.push_back(static_cast<int32_t>(ds.token.size() - 1));
      const std::vector<cuda::SampleParams> greedy(1);
      int32_t dropped = -1;
      decoder_->forward(ds, greedy, &dropped, nullptr);
      ds.logit_rows.clear();
    }
  } catch (const DeviceError& e) {
    if (!e.sticky()) return absl::InternalError(absl::StrCat("device step failed: ", e.what()));
    FROST_LOG_ERROR("device executor %s: sticky device error: %s", device_.c_str(), e.what());
    {
      absl::MutexLock lock(&mu_);
      health_ = absl::UnavailableError(e.what());
      stats_.healthy = false;
    }
    return absl::UnavailableError(e.what());
  }
  for (const StepSeq& q : seqs) q.kv->advance(q.n_tokens);
  out->ids = ids_;
  out->row.assign(ids_.size(), -1);
  int32_t next = 0;
  for (size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i] < 0) out->row[i] = next++;
  out->logits = host_logits_.data();
  {
    absl::MutexLock lock(&mu_);
    stats_.rows_sampled_on_device += on_device;
    stats_.rows_sampled_on_host += on_host;
  }
  if (++n_steps_ % 64 == 1) refresh_stats();  // graphs captured, device memory: cheap enough every 64 steps
  return absl::OkStatus();
}

}  // namespace frost
