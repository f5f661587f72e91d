#pragma once
// Shared pieces of the KV training loops (kv_repair: core/train/repair_train.cc; kvsplice:
// core/train/kvsplice_train.cc): Adam with plain-tensor moments (so checkpoints are safetensors),
// teacher-forced window log-probabilities, mean KL, the global-norm clip and the seeded batch draw.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/kv/kv_spec.h"
#include "core/kv/sequence_kv.h"
#include "core/model/transformer.h"

namespace frost {

using TokenWindow = std::vector<int32_t>;

// Adam (β 0.9/0.999, ε 1e-8, no weight decay, constant lr).
struct KvAdam {
  std::vector<at::Tensor> params, m, v;
  int64_t t = 0;
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  KvAdam(std::vector<at::Tensor> ps, double lr_);
  void zero_grad();
  void step();
};

// log-probabilities [T, V] of a fresh sequence over `w` stored with `codec` (`splice` for kvsplice), with the
// repair operator `repair` (null = off), run by the reference forward() under `study` (null = none; its taps'
// flags select what to collect, and the taps receive it).
at::Tensor window_logprobs(const Transformer& model, const TokenWindow& w, KvCodecKind codec,
                           std::shared_ptr<const RepairSet> repair = nullptr, KvStudy* study = nullptr,
                           std::shared_ptr<const KvSpliceSet> splice = nullptr);

// Next-token logits [w.size(), V] of `model` over `w` (fp32 KV) as its weight format serves them: the
// reference path (forward) for every format but w8a8, whose int8 activations exist only on the fast path
// (the packed GEMM), so there decode_step runs token by token. For scoring formats against each other.
at::Tensor window_logits_as_served(const Transformer& model, const TokenWindow& w);

// mean over positions of KL(p ‖ q) from log-probabilities [T, V].
at::Tensor mean_kl(const at::Tensor& logp, const at::Tensor& logq);

// Scales the gradients so their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

// The indices of step `step`'s batch: a partial shuffle of [0, n) seeded with (seed, step), so a resumed
// run draws the same batches.
std::vector<size_t> step_batch(uint64_t seed, int64_t step, size_t n, int64_t batch);

// Training checkpoints: safetensors of "param/<name>", "adam.m/<name>", "adam.v/<name>" with the step
// and Adam's t in the metadata, written atomically. load restores parameters and moments in place and
// returns the step to resume at (DATA_LOSS naming `what` and the path when the file does not match).
absl::Status save_train_checkpoint(const std::string& path,
                                   const std::vector<std::pair<std::string, at::Tensor>>& named,
                                   const KvAdam& opt, int64_t step);
absl::StatusOr<int64_t> load_train_checkpoint(const std::string& path, const std::string& what,
                                              const std::vector<std::pair<std::string, at::Tensor>>& named,
                                              KvAdam& opt);

}  // namespace frost
