#pragma once
// Generator: prefill + decode loop for one sequence at a time (the reference loop used by
// tests, benchmarks and the demo; the server's engine thread drives the same steps).
// Not thread-safe: one generate() at a time per Generator. The model is shared read-only.
#include <memory>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/common/clock.h"
#include "core/generate/request.h"
#include "core/kv/kv_spec.h"
#include "core/model/model_loader.h"

namespace frost {

struct GeneratorConfig {
  KvCodecKind kv_codec = KvCodecKind::kF32;
  int64_t max_context = 0;        // 0 = the model's max_position_embeddings
  bool fast_decode = true;        // decode with Transformer::decode_step (else forward())
  int64_t max_prompt_tokens = 0;  // cap on prompt length in tokens; 0 = the context length
  SamplingLimits limits;
  // The KVSplice that requests with the kvsplice codec store their KV with; null = such requests fail
  // FAILED_PRECONDITION.
  std::shared_ptr<const KvSpliceSet> kv_splice;
};

class Generator {
 public:
  // `model` must outlive the Generator.
  Generator(const LoadedModel& model, GeneratorConfig cfg, const Clock* clock = &RealClock::get());

  // Validates the request (INVALID_ARGUMENT naming field and value; FAILED_PRECONDITION for a
  // text prompt on a model without tokenizer), then runs prefill and decode, calling
  // `on_token` for every event. `cancel` is polled before every forward pass: after a
  // cancellation or deadline at most one more token is computed. Returns the result with
  // its finish reason; errors only for invalid requests or internal failures.
  absl::StatusOr<GenerationResult> generate(const GenerationRequest& req, const TokenCallback& on_token,
                                            const CancelToken& cancel);

  // Tokenizes and validates without running the model; returns the prompt ids.
  absl::StatusOr<std::vector<int32_t>> prepare(const GenerationRequest& req) const;

  int64_t max_context() const { return max_context_; }
  const SequenceKv* kv() const { return kv_.get(); }

 private:
  const LoadedModel& model_;
  GeneratorConfig cfg_;
  const Clock* clock_;
  int64_t max_context_;
  std::unique_ptr<SequenceKv> kv_;  // allocated once at max_context, reused across requests
  DecodeScratch scratch_;
};

}  // namespace frost
