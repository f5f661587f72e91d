#pragma once
// DeviceExecutor: the engine's step on a device (core/exec/step_executor.h) through a DeviceDecoder — the CUDA
// GPU (core/exec/cuda_decoder.h) or the host reference device (core/exec/reference_decoder.h).
//
// What it maps, step by step:
//   KV    the engine's books hand out block ids; the pool's bytes live in the decoder's memory in the device's
//         layout (kernels/cuda/layout.h), one format for the whole pool (engine.kv_codec), kv_block_tokens
//         positions per block (the device's layout sets the geometry: DeviceKvStorage). Each step, sequence i
//         of the batch is block-table slot i: its table is set, its rows are (token, slot i, position).
//   sampling  rows whose RowSampling allows it (greedy / temperature / top-k / top-p / min-p, no penalties or
//         logprobs) are sampled on the device with the sequence's own uniform draw — a constrained row's
//         token mask applied there first —; the rest come back as logits for the host sampler (hybrid), and
//         only those rows are copied.
//   refusals  a request for another KV codec (kv.codec, kvsplice included) or one that requires a repair
//         operator (kv.repair ON) is refused at submit; repair operators and KVSplice sets are not attached.
//   errors  a DeviceError that is sticky makes health() fail for good (the engine then fails every request
//         with UNAVAILABLE and the server turns NOT_SERVING); any other fails only that step (INTERNAL).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/exec/device_decoder.h"
#include "core/exec/step_executor.h"
#include "core/model/model_loader.h"

namespace frost {

// The device's pages as the engine's KV storage: no host address; the layout of the one KV format.
class DeviceKvStorage final : public KvBlockStorage {
 public:
  DeviceKvStorage(int64_t n_blocks, const cuda::KvLayout& layout, KvCodecKind codec, std::string where)
      : n_blocks_(n_blocks), layout_(layout), codec_(codec), where_(std::move(where)) {}
  int64_t n_blocks() const override { return n_blocks_; }
  int64_t block_bytes() const override { return layout_.block_bytes(); }
  uint8_t* host_base() const override { return nullptr; }
  // The device layout as regions of a block (layer l at l · layer_block_bytes: K rows, V rows, scales);
  // block_tokens 0 for a spec of another codec (the pool stores one).
  KvLayout layout(const KvSpec& spec) const override;
  std::string where() const override { return where_; }

 private:
  int64_t n_blocks_;
  cuda::KvLayout layout_;
  KvCodecKind codec_;
  std::string where_;
};

// The device format of a KV codec; INVALID_ARGUMENT naming engine.kv_codec for kvsplice.
absl::StatusOr<cuda::KvFormat> device_kv_format(KvCodecKind codec, const std::string& device);

class DeviceExecutor final : public StepExecutor {
 public:
  // `decoder` holds the model's weights on the device; `codec` is the pool's one KV format (engine.kv_codec).
  static absl::StatusOr<std::unique_ptr<DeviceExecutor>> create(std::shared_ptr<const LoadedModel> model,
                                                                std::unique_ptr<DeviceDecoder> decoder,
                                                                std::string device, KvCodecKind codec);

  std::string device() const override { return device_; }
  int64_t kv_block_bytes(int64_t block_tokens) const override;
  int64_t default_kv_pool_bytes(int64_t full_context_bytes, int32_t max_running) const override;
  absl::Status allocate_kv(const Plan& plan) override;
  const KvBlockStorage& kv_storage() const override { return *storage_; }
  absl::Status check_request(KvCodecKind codec, bool repair) const override;
  bool runs_kv_repair() const override { return false; }
  bool samples_on_device() const override { return true; }
  int64_t max_logit_rows() const override { return max_seqs_; }
  absl::Status execute(const ExecStep& step, ExecResult* out) override;
  absl::Status health() const override;
  ExecutorStats stats() const override;

  DeviceDecoder& decoder() { return *decoder_; }

 private:
  DeviceExecutor(std::shared_ptr<const LoadedModel> model, std::unique_ptr<DeviceDecoder> decoder, std::string device,
                 KvCodecKind codec, cuda::KvFormat format)
      : model_(std::move(model)), decoder_(std::move(decoder)), device_(std::move(device)), codec_(codec),
        format_(format) {}
  cuda::KvLayout layout_for(int64_t block_tokens) const;
  void refresh_stats();

  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<DeviceDecoder> decoder_;
  std::string device_;
  KvCodecKind codec_;
  cuda::KvFormat format_;
  std::unique_ptr<DeviceKvStorage> storage_;
  int32_t max_seqs_ = 0;
  uint64_t n_steps_ = 0;
  // Step buffers (engine thread).
  DeviceStep dstep_;
  std::vector<cuda::SampleParams> params_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> masks_;     // [masked rows, ceil(V / 32)]: constrained rows sampled on the device
  std::vector<float> host_logits_;  // [max_seqs, V]

  mutable absl::Mutex mu_;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  ExecutorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost
