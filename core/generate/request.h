#pragma once
// Generation request, streamed token events and the final result.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/constrain/constraint.h"
#include "core/generate/sampler.h"
#include "core/generate/sampling_params.h"
#include "core/generate/spec_options.h"
#include "core/kv/kv_spec.h"

namespace frost {

enum class FinishReason { kStop, kLength, kCancelled, kDeadline };
const char* finish_reason_name(FinishReason r);  // "stop" | "length" | "cancelled" | "deadline"

// Refusals of a request carry their field (core/common/field_error.h) under these canonical names, which the
// transports map to theirs (server/generation_codec.h name_request_field, server/openai_api.h engine_error):
// "prompt" (the text, or the prompt as a whole: its length, the context), "prompt_ids" (subscript "[i]"), the
// SamplingParams fields by their names ("top_p", "max_new_tokens", "stop" and "stop_token_ids" with "[i]",
// ...), "constraint", "kv.codec", "kv.repair", "speculative.num_tokens".
struct GenerationRequest {
  std::string prompt;               // text; used when prompt_ids is empty
  std::vector<int32_t> prompt_ids;  // token ids, used as given (no BOS added)
  bool add_bos = true;              // for text prompts, when the tokenizer has a BOS
  SamplingParams params;
  // KV storage for this request; unset = engine default. kKvSplice needs an active KVSplice
  // (EngineConfig::kv_splice / GeneratorConfig::kv_splice; FAILED_PRECONDITION otherwise).
  std::optional<KvCodecKind> kv_codec;
  // KV repair (core/kv/repair_set.h RepairSlot): kAuto applies the active operator when it was trained
  // for this request's codec; kOn requires that (FAILED_PRECONDITION otherwise); kOff never repairs.
  enum class KvRepair { kAuto, kOn, kOff } kv_repair = KvRepair::kAuto;
  // Structured output (core/constrain/constraint.h): the completion is forced into a JSON Schema, any JSON
  // object, a regex or a GBNF grammar. Compiled at submit (cached per spec); a spec that does not compile
  // is INVALID_ARGUMENT "constraint: <why, where>". kNone = unconstrained.
  constrain::ConstraintSpec constraint;
  // Speculative decoding (spec_options.h): kServer = the server's method; num_tokens 0 = the server's k
  // (at most EngineOptions::speculative.num_tokens either way). Never changes the output: greedy and seeded
  // outputs are token for token those of plain decoding (core/generate/spec_verify.h).
  SpecMethod spec_method = SpecMethod::kServer;
  int32_t spec_num_tokens = 0;
};

// One streamed event. id >= 0: a generated token, with the text it released (valid UTF-8,
// possibly empty while a multi-byte character or a possible stop-string prefix is held
// back). id == -1: no token, only text released at the end (the held-back tail).
struct TokenEvent {
  int32_t id = -1;
  int32_t index = 0;  // 0-based position in the completion
  std::string text;
  float logprob = 0;                       // of `id` (when params.logprobs >= 0)
  std::vector<TokenLogprob> top_logprobs;  // when params.logprobs > 0
};

// Called on the generating thread, once per event, in order. Must not block for long.
using TokenCallback = std::function<void(const TokenEvent&)>;

struct GenerationResult {
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_reason;          // matched stop string, or "token:<id>" for a stop token
  std::vector<int32_t> prompt_ids;  // as fed to the model (BOS included)
  std::vector<int32_t> ids;         // completion ids (stop token excluded)
  std::string text;                 // completion text, exactly the concatenated event texts
  int32_t n_prompt = 0;
  int32_t n_completion = 0;
  double t_queue_s = 0;        // waiting for admission (Engine only)
  double t_prefill_s = 0;      // prompt forward pass
  double t_decode_s = 0;       // all decode steps after the prefill
  int32_t n_decode_steps = 0;   // forward passes after the prefill that produced tokens
  int32_t n_decode_tokens = 0;  // tokens they produced (more than the steps when drafts were accepted)
  std::string kv_codec;        // the KV storage codec this sequence used
  std::string kv_repair;       // the repair operator it used ("" = none)
  std::string kv_splice;       // the KVSplice it stored its KV with (kvsplice codec; "" = none)
  double t_first_token_s = 0;  // from start of generate() to the first token
  int32_t n_draft_tokens = 0;     // speculative decoding: tokens drafted for it (jump-forward included)
  int32_t n_accepted_tokens = 0;  // of those, accepted (each saved one step)
  double prefill_tok_s() const { return t_prefill_s > 0 ? n_prompt / t_prefill_s : 0; }
  double decode_tok_s() const { return t_decode_s > 0 ? n_decode_tokens / t_decode_s : 0; }
};

}  // namespace frost
