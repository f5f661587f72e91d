#include "server/generation_codec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/field_error.h"
#include "core/common/utf8.h"
#include "kernels/cpu/isa.h"
#include "server/proto_fields.h"

namespace frost::server {
namespace {

absl::Status invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

v1::FinishReason finish_reason_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

const std::vector<std::string>& sampling_fields_by_hand() {
  // The lists: their caps are checked before they are copied (a huge list never reaches the engine).
  // logprobs: the wire's range is [0, limits.max_logprobs] (unset = none), the core's -1 = none is not sent.
  // The constraint oneof: one ConstraintSpec of four kinds.
  static const std::vector<std::string> names = {"stop",        "stop_token_ids", "logprobs", "json_schema",
                                                 "json_object", "regex",          "grammar"};
  return names;
}

absl::Status check_prompt_text(const std::string& field, const std::string& text,
                               const LimitsSection& limits) {
  if (text.empty()) return invalid(absl::StrCat(field, ": must not be empty"));
  if (text.size() > static_cast<size_t>(limits.max_prompt_bytes)) {
    return invalid(absl::StrCat(field, ": ", text.size(),
                                " bytes is over limits.max_prompt_bytes = ", limits.max_prompt_bytes));
  }
  if (const size_t bad = utf8_valid_prefix(text); bad < text.size()) {
    return invalid(
        absl::StrCat(field, ": not valid UTF-8 (invalid byte at offset ", bad, " of ", text.size(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerationRequest> to_generation_request(const v1::GenerateRequest& req,
                                                        const LimitsSection& limits,
                                                        const SamplingParams& defaults) {
  if (req.request_id().size() > kMaxRequestIdBytes) {
    return invalid(absl::StrCat("request_id: ", req.request_id().size(), " bytes is over the limit of ",
                                kMaxRequestIdBytes));
  }
  if (!is_valid_utf8(req.request_id())) return invalid("request_id: not valid UTF-8");

  GenerationRequest out;
  out.params = defaults;
  // Chat (messages) is rendered later, with the served model's ChatPrompt (server/generation_chat.h); here
  // only its exclusivity with the other prompt forms and the fields that need messages.
  const bool chat = req.messages_size() > 0;
  if (chat && req.prompt_case() != v1::GenerateRequest::PROMPT_NOT_SET) {
    return invalid(absl::StrCat(req.prompt_case() == v1::GenerateRequest::kText ? "text" : "token_ids",
                                " and messages: mutually exclusive (send the prompt as text, token_ids or "
                                "messages, not two of them)"));
  }
  if (!chat) {
    if (req.tools_size() > 0) return invalid("tools: only with messages (chat)");
    if (req.has_tool_choice()) return invalid("tool_choice: only with messages (chat)");
    if (req.has_parallel_tool_calls()) return invalid("parallel_tool_calls: only with messages (chat)");
    if (req.has_add_generation_prompt()) return invalid("add_generation_prompt: only with messages (chat)");
    if (!req.chat_template_kwargs().empty())
      return invalid("chat_template_kwargs: only with messages (chat)");
  }
  switch (chat ? v1::GenerateRequest::PROMPT_NOT_SET : req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      absl::Status st = check_prompt_text("text", req.text(), limits);
      if (!st.ok()) return st;
      out.prompt = req.text();
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      if (req.token_ids().ids().empty()) return invalid("token_ids.ids: must not be empty");
      if (const int n = req.token_ids().ids_size(); n > kMaxPromptTokenIds) {
        return invalid(
            absl::StrCat("token_ids.ids: ", n, " ids is more than the cap of ", kMaxPromptTokenIds));
      } else if (limits.max_prompt_tokens > 0 && n > limits.max_prompt_tokens) {
        return invalid(absl::StrCat("token_ids.ids: ", n,
                                    " ids is more than limits.max_prompt_tokens=", limits.max_prompt_tokens));
      }
      out.prompt_ids.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      if (!chat)
        return invalid("prompt: one of text, token_ids or messages must be set (messages: none given)");
      break;
  }
  if (req.has_add_bos()) out.add_bos = req.add_bos();

  // Unset optional fields keep the defaults (SamplingParams' under the checkpoint's generation_config.json).
  // The plain fields are sampling_params_table()'s rows, read by name through reflection
  // (server/proto_fields.h); the rest, sampling_fields_by_hand(), follow.
  const v1::SamplingParams& s = req.sampling();
  SamplingParams& p = out.params;
  if (absl::Status st =
          read_proto_fields(s, sampling_params_table(), sampling_fields_by_hand(), "sampling.", &p);
      !st.ok())
    return st;
  // Early, cheap checks on repeated fields, before they are copied, so a huge list never reaches the engine.
  if (s.stop_size() > limits.max_stop_strings) {
    return invalid(
        absl::StrCat("sampling.stop: at most ", limits.max_stop_strings, " strings, got ", s.stop_size()));
  }
  if (s.stop_token_ids_size() > limits.max_stop_token_ids) {
    return invalid(absl::StrCat("sampling.stop_token_ids: at most ", limits.max_stop_token_ids,
                                " ids (limits.max_stop_token_ids), got ", s.stop_token_ids_size()));
  }
  p.stop.assign(s.stop().begin(), s.stop().end());
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  if (s.has_logprobs()) {
    if (s.logprobs() < 0 || s.logprobs() > limits.max_logprobs) {
      return invalid(
          absl::StrCat("sampling.logprobs must be in [0, ", limits.max_logprobs, "], got ", s.logprobs()));
    }
    p.logprobs = s.logprobs();
  }
  switch (s.constraint_case()) {
    case v1::SamplingParams::kJsonSchema:
      out.constraint = {constrain::ConstraintSpec::Kind::kJsonSchema, s.json_schema()};
      break;
    case v1::SamplingParams::kJsonObject:
      if (s.json_object()) out.constraint = {constrain::ConstraintSpec::Kind::kJsonObject, ""};
      break;
    case v1::SamplingParams::kRegex:
      out.constraint = {constrain::ConstraintSpec::Kind::kRegex, s.regex()};
      break;
    case v1::SamplingParams::kGrammar:
      out.constraint = {constrain::ConstraintSpec::Kind::kGrammar, s.grammar()};
      break;
    case v1::SamplingParams::CONSTRAINT_NOT_SET:
      break;
  }
  if (req.kv().has_codec()) {
    absl::StatusOr<KvCodecKind> codec = parse_kv_codec(req.kv().codec());
    if (!codec.ok()) {
      return invalid(absl::StrCat("kv.codec: unknown value \"", req.kv().codec(),
                                  "\" (expected fp32|fp16|bf16|int8|int4|kvsplice)"));
    }
    out.kv_codec = *codec;
  }
  if (req.kv().has_repair()) {
    switch (req.kv().repair()) {
      case v1::KV_REPAIR_MODE_AUTO:
        out.kv_repair = GenerationRequest::KvRepair::kAuto;
        break;
      case v1::KV_REPAIR_MODE_ON:
        out.kv_repair = GenerationRequest::KvRepair::kOn;
        break;
      case v1::KV_REPAIR_MODE_OFF:
        out.kv_repair = GenerationRequest::KvRepair::kOff;
        break;
      default:
        return invalid(absl::StrCat("kv.repair: unknown value ", static_cast<int>(req.kv().repair()),
                                    " (expected KV_REPAIR_MODE_AUTO|ON|OFF)"));
    }
  }
  // Speculative decoding: the transport only carries the choice. The engine clamps num_tokens to the server's
  // engine.speculative.num_tokens and checks it again; a negative value is refused here, naming the field.
  if (req.has_speculative()) {
    const v1::Speculative& sp = req.speculative();
    switch (sp.method()) {
      case v1::SPEC_METHOD_UNSPECIFIED:
        out.spec_method = SpecMethod::kServer;
        break;
      case v1::SPEC_METHOD_OFF:
        out.spec_method = SpecMethod::kOff;
        break;
      case v1::SPEC_METHOD_NGRAM:
        out.spec_method = SpecMethod::kNgram;
        break;
      case v1::SPEC_METHOD_SUFFIX:
        out.spec_method = SpecMethod::kSuffix;
        break;
      default:
        return invalid(absl::StrCat("speculative.method: unknown value ", static_cast<int>(sp.method()),
                                    " (expected SPEC_METHOD_UNSPECIFIED|OFF|NGRAM|SUFFIX)"));
    }
    if (sp.num_tokens() < 0)
      return invalid(absl::StrCat("speculative.num_tokens: must be >= 0, got ", sp.num_tokens()));
    out.spec_num_tokens = sp.num_tokens();
  }
  return out;
}

void append_token(const TokenEvent& ev, bool with_logprobs, v1::TokenChunk* chunk) {
  chunk->mutable_text()->append(ev.text);
  if (ev.id < 0) return;
  chunk->add_token_ids(ev.id);
  if (!with_logprobs) return;
  v1::TokenLogprobs* lp = chunk->add_logprobs();
  lp->mutable_sampled()->set_token_id(ev.id);
  lp->mutable_sampled()->set_logprob(ev.logprob);
  for (const TokenLogprob& alt : ev.top_logprobs) {
    v1::TokenLogprob* t = lp->add_top();
    t->set_token_id(alt.id);
    t->set_logprob(alt.logprob);
  }
}

v1::GenerateResponse final_message(const GenerationResult& r) {
  v1::GenerateResponse msg;
  v1::Final* f = msg.mutable_final();
  f->set_finish_reason(finish_reason_proto(r.finish_reason));
  f->set_stop_reason(r.stop_reason);
  f->set_prompt_tokens(r.n_prompt);
  f->set_completion_tokens(r.n_completion);
  f->set_kv_codec(r.kv_codec);
  f->set_kv_repair(r.kv_repair);
  f->set_kv_splice(r.kv_splice);
  f->set_draft_tokens(r.n_draft_tokens);
  f->set_accepted_tokens(r.n_accepted_tokens);
  v1::Timings* t = f->mutable_timings();
  t->set_queue_s(r.t_queue_s);
  t->set_prefill_s(r.t_prefill_s);
  t->set_decode_s(r.t_decode_s);
  t->set_time_to_first_token_s(r.t_first_token_s);
  t->set_decode_tokens_per_s(r.decode_tok_s());
  return msg;
}

RequestFields request_fields(const v1::GenerateRequest& req, const std::string& constraint_field) {
  RequestFields f;
  if (req.messages_size() > 0) {
    f.prompt = "messages";
  } else if (req.prompt_case() == v1::GenerateRequest::kTokenIds) {
    f.prompt = "token_ids";
  }
  static constexpr const char* kConstraint[] = {"sampling", "sampling.json_schema", "sampling.json_object",
                                                "sampling.regex", "sampling.grammar"};
  const v1::SamplingParams& s = req.sampling();
  const int kind = s.constraint_case() == v1::SamplingParams::kJsonSchema   ? 1
                   : s.constraint_case() == v1::SamplingParams::kJsonObject ? 2
                   : s.constraint_case() == v1::SamplingParams::kRegex      ? 3
                   : s.constraint_case() == v1::SamplingParams::kGrammar    ? 4
                                                                            : 0;
  f.constraint = constraint_field.empty() ? kConstraint[kind] : constraint_field;
  return f;
}

absl::Status name_request_field(const absl::Status& st, const RequestFields& fields) {
  std::optional<FieldError> e = field_error_of(st);
  if (!e) return st;
  // The engine's canonical names (core/generate/request.h) → GenerateRequest's.
  std::string field;
  std::string subscript = e->subscript;
  if (e->field == "prompt") {
    field = fields.prompt;
  } else if (e->field == "prompt_ids") {
    // A chat prompt's ids are the rendering's, not the client's: the position means nothing to it.
    field = fields.prompt == "messages" ? "messages" : "token_ids.ids";
    if (fields.prompt == "messages") subscript.clear();
  } else if (e->field == "constraint") {
    field = fields.constraint;
  } else if (e->field == "kv.codec" || e->field == "kv.repair" || e->field == "speculative.num_tokens") {
    field = e->field;
  } else {
    field = absl::StrCat("sampling.", e->field);  // SamplingParams' fields have the same names in the proto
  }
  return with_field(absl::Status(st.code(), absl::StrCat(field, subscript, ": ", e->detail)), *e);
}

v1::ModelInfo model_info(const Engine& e, const ServerConfig& cfg) {
  v1::ModelInfo response;
  const LoadedModel& m = e.model();
  response.set_name(m.name);
  response.set_architecture(arch_name(m.config.arch));
  response.set_context_length(static_cast<int32_t>(e.max_context()));
  response.set_vocab_size(static_cast<int32_t>(m.config.n_vocab));
  response.set_n_params(m.model->n_params());
  response.set_weight_dtype(weight_dtype_name(m.model->weight_format()));
  const EngineStats st = e.stats();
  response.set_weight_bytes(st.executor.weight_bytes);
  response.set_kernels(kernels::isa_name(kernels::active_isa()));
  response.set_kv_codec(kv_codec_name(cfg.engine.kv_codec));
  response.set_device(st.executor.device);
  response.set_device_name(st.executor.device_name);
  response.set_device_bytes(st.executor.device_bytes);
  response.set_kv_blocks(st.kv_blocks_total);
  response.set_kv_block_bytes(st.kv_block_bytes);
  response.set_kv_block_tokens(static_cast<int32_t>(st.kv_block_tokens));
  response.set_kv_cache_bytes(st.kv_pool_bytes);
  response.set_max_running(cfg.engine.max_running);
  response.set_max_batch_tokens(static_cast<int32_t>(cfg.engine.max_batch_tokens));
  response.set_prefix_caching(cfg.engine.prefix_caching);
  return response;
}

}  // namespace frost::server
