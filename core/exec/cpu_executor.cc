#include "core/exec/cpu_executor.h"

#include <unistd.h>

#include <algorithm>

#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/kv/sequence_kv.h"

namespace frost {

int64_t CpuExecutor::kv_block_bytes(int64_t block_tokens) const {
  // block_tokens positions of the widest codec (fp32): compact codecs fit proportionally more.
  return kv_pool_block_bytes(model_->model->kv_spec(1, KvCodecKind::kF32), block_tokens);
}

int64_t CpuExecutor::default_kv_pool_bytes(int64_t full_context_bytes, int32_t max_running) const {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t phys = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{4} << 30;
  // Twice what max_running full-context fp32 sequences need (the rest serves the prefix cache and compact
  // codecs' extra sequences), within a quarter of the memory and 4 GiB; at least one full context.
  const int64_t want = 2 * std::max<int64_t>(1, max_running) * full_context_bytes;
  const int64_t cap = std::min<int64_t>(phys / 4, int64_t{4} << 30);
  return std::max(full_context_bytes, std::min(want, cap));
}

absl::Status CpuExecutor::allocate_kv(const Plan& plan) {
  if (storage_) return absl::FailedPreconditionError("cpu executor: the KV pool is already allocated");
  FROST_ASSIGN_OR_RETURN(storage_,
                         HostKvStorage::create(plan.n_blocks, kv_block_bytes(plan.block_tokens), plan.prefault));
  max_rows_ = plan.max_rows;
  return absl::OkStatus();
}

absl::Status CpuExecutor::execute(const ExecStep& step, ExecResult* out) {
  const float* logits = nullptr;
  FROST_RETURN_IF_ERROR(torch_call([&] { logits = model_->model->forward_batch(*step.seqs, scratch_); }));
  const size_t n = step.sampling.size();
  out->ids.assign(n, -1);
  out->row.resize(n);
  for (size_t i = 0; i < n; ++i) out->row[i] = static_cast<int32_t>(i);
  out->logits = logits;
  rows_on_host_.fetch_add(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

ExecutorStats CpuExecutor::stats() const {
  ExecutorStats s;
  s.device = "cpu";
  s.device_name = "host";
  s.weight_bytes = model_->model->served_weight_bytes();
  s.kv_pool_bytes = storage_ ? storage_->n_blocks() * storage_->block_bytes() : 0;
  s.rows_sampled_on_host = rows_on_host_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace frost
