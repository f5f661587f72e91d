#pragma once
// CpuExecutor: the engine's step on the host — Transformer::forward_batch over host KV pages
// (core/kv/block_storage.h HostKvStorage). Every row's logits go back to the host sampler; a sequence's
// logits never depend on what shares its step (core/model/transformer.h), so the CPU results are those of
// the engine before the device seam, bit for bit.
#include <atomic>
#include <memory>
#include <string>

#include "core/exec/step_executor.h"
#include "core/model/model_loader.h"

namespace frost {

class CpuExecutor final : public StepExecutor {
 public:
  // `model` is shared read-only and outlives nothing: the executor keeps it alive.
  explicit CpuExecutor(std::shared_ptr<const LoadedModel> model) : model_(std::move(model)) {}

  std::string device() const override { return "cpu"; }
  int64_t kv_block_bytes(int64_t block_tokens) const override;
  int64_t default_kv_pool_bytes(int64_t full_context_bytes, int32_t max_running) const override;
  absl::Status allocate_kv(const Plan& plan) override;
  const KvBlockStorage& kv_storage() const override { return *storage_; }
  absl::Status check_request(KvCodecKind, bool) const override { return absl::OkStatus(); }
  bool runs_kv_repair() const override { return true; }
  bool samples_on_device() const override { return false; }
  int64_t max_logit_rows() const override { return max_rows_; }
  absl::Status execute(const ExecStep& step, ExecResult* out) override;
  absl::Status health() const override { return absl::OkStatus(); }
  ExecutorStats stats() const override;

 private:
  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<HostKvStorage> storage_;
  BatchScratch scratch_;
  int64_t max_rows_ = 0;  // Plan::max_rows
  std::atomic<uint64_t> rows_on_host_{0};
};

}  // namespace frost
