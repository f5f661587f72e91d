#include "server/openai_api.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"
#include "core/common/json.h"
#include "core/common/json_depth.h"
#include "core/common/utf8.h"
#include "grpcpp/support/status.h"
#include "server/openai_sampling.h"
#include "server/openai_speculative.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

ApiError bad(std::string param, std::string message) { return bad_request(std::move(param), std::move(message)); }
const char* kind_name(const json& v) { return json_kind(v); }

// Reading typed fields; each returns an error naming the field and what it got.
struct Reader {
  const json& obj;
  std::string prefix;  // "" or "response_format."
  std::optional<ApiError> err;

  std::string path(const char* key) const { return prefix + key; }
  const json* get(const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;  // null = not given (OpenAI's SDKs send nulls)
    return &*it;
  }
  bool fail(const char* key, std::string what) {
    if (!err) err = bad(path(key), absl::StrCat(path(key), ": ", what));
    return false;
  }
  bool number(const char* key, double* out) {
    const json* v = get(key);
    if (!v) return false;
    if (!v->is_number()) return fail(key, absl::StrCat("expected a number, got ", kind_name(*v)));
    *out = v->get<double>();
    return true;
  }
  bool integer(const char* key, int64_t* out) {
    const json* v = get(key);
    if (!v) return false;
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (d != std::trunc(d) || std::fabs(d) > 9e15)
        return fail(key, absl::StrCat("expected an integer, got ", v->dump()));
      *out = static_cast<int64_t>(d);
      return true;
    }
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(key, absl::StrCat("out of range, got ", u));
      *out = static_cast<int64_t>(u);
      return true;
    }
    if (!v->is_number_integer()) return fail(key, absl::StrCat("expected an integer, got ", kind_name(*v)));
    *out = v->get<int64_t>();
    return true;
  }
  bool boolean(const char* key, bool* out) {
    const json* v = get(key);
    if (!v) return false;
    if (!v->is_boolean()) return fail(key, absl::StrCat("expected a boolean, got ", kind_name(*v)));
    *out = v->get<bool>();
    return true;
  }
  bool string(const char* key, std::string* out) {
    const json* v = get(key);
    if (!v) return false;
    if (!v->is_string()) return fail(key, absl::StrCat("expected a string, got ", kind_name(*v)));
    *out = v->get<std::string>();
    return true;
  }
};

bool in_int32(int64_t v) { return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(); }

std::optional<ApiError> check_text(const std::string& field, const std::string& text, const LimitsSection& limits,
                                   bool allow_empty) {
  if (text.empty() && !allow_empty) return bad(field, absl::StrCat(field, ": must not be empty"));
  if (text.size() > static_cast<size_t>(limits.max_prompt_bytes)) {
    ApiError e = bad(field, absl::StrCat(field, ": ", text.size(), " bytes is over limits.max_prompt_bytes = ",
                                         limits.max_prompt_bytes));
    e.http = 413;
    return e;
  }
  return std::nullopt;  // UTF-8: the JSON parser refused invalid sequences already
}

// The fields each endpoint knows; anything else is a 400.
const std::set<std::string>& known_fields(Endpoint ep) {
  // The sampling rows' keys are sampling_params_table()'s, as the body names them (server/openai_sampling.h).
  static const std::set<std::string> common = {
      "model",           "n",           "stream",       "stream_options", "stop",       "logprobs",   "user",
      "response_format", "guided_json", "guided_regex", "guided_grammar", "logit_bias", "speculative"};
  static const std::set<std::string> completions = [] {
    std::set<std::string> s = common;
    for (const std::string& k : sampling_body_keys(Endpoint::kCompletions)) s.insert(k);
    s.insert({"prompt", "echo", "suffix", "best_of"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    std::set<std::string> s = common;
    for (const std::string& k : sampling_body_keys(Endpoint::kChat)) s.insert(k);
    s.insert({"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
              "chat_template_kwargs", "add_generation_prompt"});
    return s;
  }();
  return ep == Endpoint::kCompletions ? completions : chat;
}

std::optional<ApiError> parse_constraint(Reader& r, ConstraintRequest* out) {
  auto set = [&](ConstraintRequest::Kind k, std::string text, std::string field) -> std::optional<ApiError> {
    if (out->kind != ConstraintRequest::Kind::kNone) {
      return bad(field, absl::StrCat(field, ": only one of response_format (json_object / json_schema), "
                                            "guided_json, guided_regex and guided_grammar may be given (",
                                     out->field, " is set too)"));
    }
    out->kind = k;
    out->text = std::move(text);
    out->field = std::move(field);
    return std::nullopt;
  };
  if (const json* rf = r.get("response_format")) {
    if (!rf->is_object())
      return bad("response_format", absl::StrCat("response_format: expected an object, got ", kind_name(*rf)));
    for (auto it = rf->begin(); it != rf->end(); ++it) {
      if (it.key() != "type" && it.key() != "json_schema")
        return bad("response_format." + it.key(), absl::StrCat("response_format.", it.key(), ": unknown field"));
    }
    Reader sub{*rf, "response_format."};
    std::string type;
    if (!sub.string("type", &type)) {
      if (sub.err) return sub.err;
      return bad("response_format.type", "response_format.type: required (text, json_object or json_schema)");
    }
    if (type == "json_object") {
      if (auto e = set(ConstraintRequest::Kind::kJsonObject, "", "response_format")) return e;
    } else if (type == "json_schema") {
      const json* js = sub.get("json_schema");
      if (!js || !js->is_object())
        return bad("response_format.json_schema",
                   "response_format.json_schema: required, an object with name and schema");
      for (auto it = js->begin(); it != js->end(); ++it) {
        if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" && it.key() != "description")
          return bad("response_format.json_schema." + it.key(),
                     absl::StrCat("response_format.json_schema.", it.key(), ": unknown field"));
      }
      Reader js_r{*js, "response_format.json_schema."};
      std::string name;
      if (!js_r.string("name", &name) && js_r.err) return js_r.err;
      bool strict = false;
      if (!js_r.boolean("strict", &strict) && js_r.err) return js_r.err;
      const json* schema = js_r.get("schema");
      if (!schema) {
        // OpenAI: a missing schema means any JSON object.
        if (auto e = set(ConstraintRequest::Kind::kJsonObject, "", "response_format.json_schema")) return e;
      } else {
        if (!schema->is_object() && !schema->is_boolean())
          return bad("response_format.json_schema.schema",
                     absl::StrCat("response_format.json_schema.schema: expected an object, got ", kind_name(*schema)));
        if (auto e = set(ConstraintRequest::Kind::kJsonSchema, schema->dump(), "response_format.json_schema.schema"))
          return e;
      }
    } else if (type != "text") {
      return bad("response_format.type", absl::StrCat("response_format.type: unknown value \"", type,
                                                      "\" (expected text, json_object or json_schema)"));
    }
  }
  if (const json* gj = r.get("guided_json")) {
    std::string text;
    if (gj->is_string()) {
      text = gj->get<std::string>();
    } else if (gj->is_object()) {
      text = gj->dump();
    } else {
      return bad("guided_json", absl::StrCat("guided_json: expected a schema (object or string), got ", kind_name(*gj)));
    }
    if (auto e = set(ConstraintRequest::Kind::kJsonSchema, std::move(text), "guided_json")) return e;
  }
  std::string text;
  if (r.string("guided_regex", &text)) {
    if (auto e = set(ConstraintRequest::Kind::kRegex, text, "guided_regex")) return e;
  } else if (r.err) {
    return r.err;
  }
  if (r.string("guided_grammar", &text)) {
    if (auto e = set(ConstraintRequest::Kind::kGrammar, text, "guided_grammar")) return e;
  } else if (r.err) {
    return r.err;
  }
  return std::nullopt;
}

// prompt: a string, a list of strings, a list of token ids, or a list of token-id lists (a batch).
std::optional<ApiError> parse_prompts(const json& prompt, const LimitsSection& limits, std::vector<PromptInput>* out) {
  auto ids_of = [&](const json& arr, const std::string& at, PromptInput* in) -> std::optional<ApiError> {
    if (arr.size() > static_cast<size_t>(limits.max_prompt_bytes))
      return bad("prompt", absl::StrCat(at, ": ", arr.size(), " token ids is over limits.max_prompt_bytes"));
    for (size_t i = 0; i < arr.size(); ++i) {
      const json& t = arr[i];
      if (!t.is_number_integer() || !in_int32(t.get<int64_t>()))
        return bad("prompt", absl::StrCat(at, "[", i, "]: expected a token id, got ", t.dump()));
      in->ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    if (in->ids.empty()) return bad("prompt", absl::StrCat(at, ": must not be empty"));
    return std::nullopt;
  };
  if (prompt.is_string()) {
    out->push_back({prompt.get<std::string>(), {}});
    return check_text("prompt", out->back().text, limits, false);
  }
  if (!prompt.is_array() || prompt.empty())
    return bad("prompt", absl::StrCat("prompt: expected a string, [string], [token ids] or [[token ids]], got ",
                                      prompt.is_array() ? "an empty array" : kind_name(prompt)));
  if (prompt[0].is_number_integer()) {
    out->emplace_back();
    return ids_of(prompt, "prompt", &out->back());
  }
  if (prompt.size() > static_cast<size_t>(kMaxPrompts))
    return bad("prompt", absl::StrCat("prompt: at most ", kMaxPrompts, " prompts per request, got ", prompt.size()));
  size_t total = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string at = absl::StrCat("prompt[", i, "]");
    const json& p = prompt[i];
    out->emplace_back();
    if (p.is_string()) {
      out->back().text = p.get<std::string>();
      total += out->back().text.size();
      if (auto e = check_text(at, out->back().text, limits, false)) return e;
    } else if (p.is_array()) {
      if (auto e = ids_of(p, at, &out->back())) return e;
      total += out->back().ids.size();
    } else {
      return bad("prompt", absl::StrCat(at, ": expected a string or a list of token ids, got ", kind_name(p)));
    }
    if (total > static_cast<size_t>(limits.max_prompt_bytes)) {
      ApiError e = bad("prompt", absl::StrCat("prompt: the batch's ", total, " bytes / tokens are over "
                                              "limits.max_prompt_bytes = ", limits.max_prompt_bytes));
      e.http = 413;
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

ApiError bad_request(std::string param, std::string message) {
  ApiError e;
  e.http = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

std::optional<ApiError> check_model(const std::string& asked, const std::string& served_name,
                                    const std::string& configured_path) {
  if (asked == served_name || (!configured_path.empty() && asked == configured_path)) return std::nullopt;
  ApiError e;
  e.http = 404;
  e.type = "not_found_error";
  e.code = "model_not_found";
  e.param = "model";
  e.message = absl::StrCat("model: \"", utf8_for_json(asked), "\" is not served here (this server serves \"",
                           served_name, "\")");
  return e;
}

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError error_from_status(const absl::Status& st, const std::string& param) {
  ApiError e;
  e.message = std::string(st.message());
  e.param = param;
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http = 401;
      e.type = "authentication_error";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http = 503;
      e.type = "service_unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http = 504;
      e.type = "timeout";
      break;
    default:
      e.http = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

int grpc_code_for_http(int http) {
  switch (http) {
    case 200:
      return grpc::StatusCode::OK;
    case 400:
    case 413:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
    case 405:
      return grpc::StatusCode::NOT_FOUND;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

std::variant<ParsedRequest, ApiError> parse_request(Endpoint ep, std::string_view body, const LimitsSection& limits,
                                                    const SamplingParams& defaults,
                                                    const std::set<std::string>* extra_fields) {
  // Bounded nesting before anything recursive (dump(), copies, the schema and template visitors) sees the
  // document: kMaxRequestJsonDepth leaves room for a JSON Schema at its own limit inside response_format.
  json doc;
  if (std::optional<std::string> err = parse_json_bounded(body, kMaxRequestJsonDepth, &doc)) {
    if (json_nests_deeper(body, kMaxRequestJsonDepth))
      return bad("", absl::StrCat("the request body nests deeper than ", kMaxRequestJsonDepth,
                                  " levels of objects and arrays"));
    return bad("", absl::StrCat("the body is not valid JSON (", *err, ")"));
  }
  if (!doc.is_object()) return bad("", absl::StrCat("the body must be a JSON object, got ", kind_name(doc)));
  const std::set<std::string>& known = known_fields(ep);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!known.count(it.key()) && !(extra_fields && extra_fields->count(it.key()))) {
      return bad(it.key(), absl::StrCat("unrecognized request argument supplied: ", utf8_for_json(it.key())));
    }
  }
  ParsedRequest out;
  out.endpoint = ep;
  out.params = defaults;
  SamplingParams& p = out.params;
  Reader r{doc, ""};
  if (!r.string("model", &out.model)) {
    if (r.err) return *r.err;
    return bad("model", "model: required (GET /v1/models lists the served model)");
  }

  if (ep == Endpoint::kCompletions) {
    const json* prompt = r.get("prompt");
    if (!prompt) return bad("prompt", "prompt: required");
    if (auto e = parse_prompts(*prompt, limits, &out.prompts)) return *e;
    bool echo = false;
    if (r.boolean("echo", &echo) && echo) return bad("echo", "echo: true is not supported");
    std::string suffix;
    if (r.string("suffix", &suffix) && !suffix.empty()) return bad("suffix", "suffix: not supported");
    p.max_new_tokens = 16;  // OpenAI's default for completions
  } else {
    const json* msgs = r.get("messages");
    if (!msgs) return bad("messages", "messages: required");
    std::optional<ApiError> err;
    std::optional<nlohmann::ordered_json> ordered = ordered_member(body, *msgs, "messages", &err);
    if (!ordered) return *err;
    if (auto e = parse_chat_messages(*ordered, static_cast<size_t>(limits.max_prompt_bytes), &out.messages)) return *e;
    std::optional<nlohmann::ordered_json> tools, choice, parallel, kwargs;
    for (auto [key, slot] : {std::pair{"tools", &tools}, std::pair{"tool_choice", &choice},
                             std::pair{"parallel_tool_calls", &parallel}, std::pair{"chat_template_kwargs", &kwargs}}) {
      if (const json* v = r.get(key)) {
        *slot = ordered_member(body, *v, key, &err);
        if (!*slot) return *err;
      }
    }
    if (auto e = parse_tools(tools ? &*tools : nullptr, choice ? &*choice : nullptr, parallel ? &*parallel : nullptr,
                             &out.tools))
      return *e;
    r.boolean("add_generation_prompt", &out.add_generation_prompt);
    if (r.err) return *r.err;
    if (kwargs) {
      if (!kwargs->is_object())
        return bad("chat_template_kwargs", absl::StrCat("chat_template_kwargs: expected an object, got ", kind_name(doc["chat_template_kwargs"])));
      out.template_kwargs = *std::move(kwargs);
    }
  }
  if (r.err) return *r.err;

  int64_t iv = 0;
  bool bv = false;
  // The sampling rows, OpenAI's differences declared beside them (server/openai_sampling.cc).
  std::set<std::string> given;
  if (auto e = read_sampling(ep, doc, limits, &p, &given)) return *e;
  out.max_tokens_set = given.count("max_new_tokens") > 0;
  if (r.integer("n", &iv)) {
    if (iv < 1 || iv > kMaxChoices) return bad("n", absl::StrCat("n: must be in [1, ", kMaxChoices, "], got ", iv));
    out.n = static_cast<int>(iv);
  }
  if (out.prompts.size() * static_cast<size_t>(out.n) > static_cast<size_t>(kMaxBatchChoices))
    return bad("n", absl::StrCat("n: ", out.prompts.size(), " prompts x n = ", out.n, " is over ", kMaxBatchChoices,
                                 " choices per request"));
  if (ep == Endpoint::kCompletions && r.integer("best_of", &iv) && iv != out.n)
    return bad("best_of", "best_of: only best_of = n is supported");
  if (r.boolean("stream", &bv)) out.stream = bv;
  if (const json* so = r.get("stream_options")) {
    if (!so->is_object()) return bad("stream_options", "stream_options: expected an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats")
        return bad("stream_options." + it.key(), absl::StrCat("stream_options.", it.key(), ": unknown field"));
    }
    Reader sr{*so, "stream_options."};
    if (sr.boolean("include_usage", &bv)) out.include_usage = bv;
    if (sr.err) return *sr.err;
    if (!out.stream) return bad("stream_options", "stream_options: only allowed with stream: true");
  }
  if (r.err) return *r.err;
  if (const json* stop = r.get("stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > static_cast<size_t>(limits.max_stop_strings))
        return bad("stop", absl::StrCat("stop: at most ", limits.max_stop_strings, " strings (limits.max_stop_strings), got ",
                                        stop->size()));
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return bad("stop", absl::StrCat("stop[", i, "]: expected a string"));
        p.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return bad("stop", absl::StrCat("stop: expected a string or an array of strings, got ", kind_name(*stop)));
    }
  }
  if (ep == Endpoint::kCompletions) {
    if (r.integer("logprobs", &iv)) {
      if (iv < 0 || iv > limits.max_logprobs)
        return bad("logprobs", absl::StrCat("logprobs: must be in [0, ", limits.max_logprobs, "] (limits.max_logprobs), got ", iv));
      out.logprobs = true;
      p.logprobs = static_cast<int32_t>(iv);
    }
  } else {
    if (r.boolean("logprobs", &bv) && bv) {
      out.logprobs = true;
      p.logprobs = 0;
    }
    if (r.integer("top_logprobs", &iv)) {
      if (iv < 0 || iv > limits.max_logprobs)
        return bad("top_logprobs", absl::StrCat("top_logprobs: must be in [0, ", limits.max_logprobs,
                                                "] (limits.max_logprobs), got ", iv));
      if (!out.logprobs && iv > 0) return bad("top_logprobs", "top_logprobs: needs logprobs: true");
      if (out.logprobs) p.logprobs = static_cast<int32_t>(iv);
    }
  }
  if (r.err) return *r.err;
  if (const json* lb = r.get("logit_bias")) {
    if (!lb->is_object() || !lb->empty()) return bad("logit_bias", "logit_bias: not supported (only {} or null)");
  }
  std::string user;
  r.string("user", &user);
  if (r.err) return *r.err;
  if (auto e = parse_speculative(r.get("speculative"), &out.spec_method, &out.spec_num_tokens)) return *e;
  if (auto e = parse_constraint(r, &out.constraint)) return *e;
  if (out.tools.choice == ToolChoice::kRequired || out.tools.choice == ToolChoice::kNamed) {
    if (out.constraint.kind != ConstraintRequest::Kind::kNone)
      return bad("tool_choice", absl::StrCat("tool_choice: a forced tool call is itself a constraint; ", out.constraint.field,
                                             " cannot be given with it"));
    out.constraint = tool_constraint(out.tools);
    return out;
  }
  const bool schema_in_body = out.constraint.kind == ConstraintRequest::Kind::kJsonSchema &&
                              (out.constraint.field != "guided_json" || doc.at("guided_json").is_object());
  if (schema_in_body) {
    // JSON Schema properties are generated in the schema's order, which `json` (a sorted map) lost: take the
    // schema's text again from an order-keeping parse of the body.
    // schema's text again, as the client wrote it, from the body (no second parse: an ordered_json insert is
    // linear in the members already there, quadratic for a wide schema).
    const std::vector<std::string> path = out.constraint.field == "guided_json"
                                              ? std::vector<std::string>{"guided_json"}
                                              : std::vector<std::string>{"response_format", "json_schema", "schema"};
    if (std::optional<std::string_view> span = json_value_span(body, path)) out.constraint.text = std::string(*span);
  }
  return out;
}

std::string body_field(Endpoint ep, std::string_view canonical, const std::string& constraint_field) {
  if (canonical == "max_new_tokens") return "max_tokens";
  if (canonical == "prompt" || canonical == "prompt_ids")
    return ep == Endpoint::kChat ? "messages" : "prompt";
  if (canonical == "constraint") return constraint_field;
  if (canonical == "kv.codec" || canonical == "kv.repair") return "";  // not in the body
  // SamplingParams' fields and speculative.num_tokens have the body's names.
  return std::string(canonical);
}

ApiError engine_error(Endpoint ep, const absl::Status& st, const std::string& constraint_field) {
  std::optional<FieldError> e = field_error_of(st);
  if (!e) return error_from_status(st);
  const std::string field = body_field(ep, e->field, constraint_field);
  if (field.empty()) return error_from_status(st);
  // A token position of the prompt is the engine's (a batch's prompts share no numbering): its sentence
  // stays.
  if (e->field == "prompt_ids") return error_from_status(st, field);
  return error_from_status(absl::Status(st.code(), absl::StrCat(field, e->subscript, ": ", e->detail)),
                           field);
}

const char* finish_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
      return "length";
  }
  return "stop";
}

std::string utf8_for_json(std::string_view bytes) { return sanitize_utf8(bytes); }

namespace {

json bytes_array(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Completions' logprobs object over `events` (text_offset counted from `offset0`).
json completion_logprobs(const std::vector<TokenEvent>& events, const TokenText& token_text, size_t offset0) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = offset0;
  for (const TokenEvent& ev : events) {
    if (ev.id < 0) continue;
    tokens.push_back(utf8_for_json(token_text(ev.id)));
    lps.push_back(ev.logprob);
    json top = json::object();
    for (const TokenLogprob& t : ev.top_logprobs) top[utf8_for_json(token_text(t.id))] = t.logprob;
    tops.push_back(ev.top_logprobs.empty() ? json(nullptr) : top);
    offs.push_back(off);
    off += ev.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json chat_logprobs(const std::vector<TokenEvent>& events, const TokenText& token_text) {
  json content = json::array();
  for (const TokenEvent& ev : events) {
    if (ev.id < 0) continue;
    const std::string raw = token_text(ev.id);
    json top = json::array();
    for (const TokenLogprob& t : ev.top_logprobs) {
      const std::string tr = token_text(t.id);
      top.push_back({{"token", utf8_for_json(tr)}, {"logprob", t.logprob}, {"bytes", bytes_array(tr)}});
    }
    content.push_back({{"token", utf8_for_json(raw)}, {"logprob", ev.logprob}, {"bytes", bytes_array(raw)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

}  // namespace

json usage_of(const std::vector<ChoiceState>& choices) {
  int64_t prompt = 0, completion = 0;
  std::set<int> counted;  // each prompt of a batch once, whatever n is
  for (const ChoiceState& c : choices) {
    if (!c.result) continue;
    if (counted.insert(c.prompt_index).second) prompt += c.result->n_prompt;
    completion += c.result->n_completion;
  }
  json usage = {
      {"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  add_speculation_usage(choices, &usage);
  return usage;
}

json full_response(Endpoint ep, const ResponseMeta& meta, const std::vector<ChoiceState>& choices, bool logprobs,
                   const TokenText& token_text) {
  json arr = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceState& c = choices[i];
    const char* fr = c.result ? finish_reason(c.result->finish_reason) : "length";
    if (ep == Endpoint::kCompletions) {
      arr.push_back({{"index", i}, {"text", c.text},
                     {"logprobs", logprobs ? completion_logprobs(c.events, token_text, 0) : json(nullptr)},
                     {"finish_reason", fr}});
    } else {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (!c.calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = tool_calls_json(c.calls, c.call_ids, false);
        fr = "tool_calls";
      }
      arr.push_back({{"index", i}, {"message", std::move(message)},
                     {"logprobs", logprobs ? chat_logprobs(c.events, token_text) : json(nullptr)},
                     {"finish_reason", fr}});
    }
  }
  return {{"id", meta.id},
          {"object", ep == Endpoint::kCompletions ? "text_completion" : "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", arr},
          {"usage", usage_of(choices)}};
}

json stream_chunk(Endpoint ep, const ResponseMeta& meta, int index, const std::vector<TokenEvent>& events, bool first,
                  const std::optional<FinishReason>& finish, bool logprobs, const TokenText& token_text) {
  std::string text;
  for (const TokenEvent& ev : events) text += ev.text;
  json choice;
  if (ep == Endpoint::kCompletions) {
    choice = {{"index", index}, {"text", text},
              {"logprobs", logprobs ? completion_logprobs(events, token_text, 0) : json(nullptr)},
              {"finish_reason", finish ? json(finish_reason(*finish)) : json(nullptr)}};
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (!finish && !first)) delta["content"] = text;
    if (first && text.empty() && !finish) delta["content"] = "";
    choice = {{"index", index}, {"delta", delta},
              {"logprobs", logprobs ? chat_logprobs(events, token_text) : json(nullptr)},
              {"finish_reason", finish ? json(finish_reason(*finish)) : json(nullptr)}};
  }
  return {{"id", meta.id},
          {"object", ep == Endpoint::kCompletions ? "text_completion" : "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json tool_stream_chunk(const ResponseMeta& meta, int index, const std::vector<TokenEvent>& events, bool first,
                       const std::string& content, const std::vector<ToolCall>& calls,
                       const std::vector<std::string>& call_ids, int first_call_index,
                       const std::optional<FinishReason>& finish, bool had_calls, bool logprobs,
                       const TokenText& token_text) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!content.empty() || (first && calls.empty())) delta["content"] = content;
  if (!calls.empty()) delta["tool_calls"] = tool_calls_json(calls, call_ids, true, first_call_index);
  json fr = nullptr;
  if (finish) fr = had_calls ? "tool_calls" : finish_reason(*finish);
  json choice = {{"index", index}, {"delta", delta},
                 {"logprobs", logprobs ? chat_logprobs(events, token_text) : json(nullptr)}, {"finish_reason", fr}};
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json usage_chunk(Endpoint ep, const ResponseMeta& meta, const std::vector<ChoiceState>& choices) {
  return {{"id", meta.id},
          {"object", ep == Endpoint::kCompletions ? "text_completion" : "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_of(choices)}};
}

json models_response(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "frost"}}})}};
}

}  // namespace frost::server::openai
