#include "server/openai_responses.h"

#include <regex>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/json.h"
#include "core/common/json_depth.h"
#include "core/common/number_text.h"
#include "server/openai_chat.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const ojson* member(const ojson& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

constexpr const char* kStateless =
    "frost serves the stateless subset of the Responses API and stores no responses or conversations: send "
    "the "
    "whole conversation in input";

// "speculative": frost's extension, passed on to the chat body as it is (openai_speculative.h).
const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {"model",
                                          "input",
                                          "instructions",
                                          "tools",
                                          "tool_choice",
                                          "parallel_tool_calls",
                                          "text",
                                          "max_output_tokens",
                                          "temperature",
                                          "top_p",
                                          "stream",
                                          "stream_options",
                                          "seed",
                                          "metadata",
                                          "user",
                                          "safety_identifier",
                                          "prompt_cache_key",
                                          "store",
                                          "previous_response_id",
                                          "conversation",
                                          "background",
                                          "include",
                                          "reasoning",
                                          "truncation",
                                          "service_tier",
                                          "prompt",
                                          "top_logprobs",
                                          "max_tool_calls",
                                          "speculative"};
  return k;
}

// Include entries naming outputs frost never produces (so including them changes nothing).
const std::set<std::string>& vacuous_includes() {
  static const std::set<std::string> k = {"reasoning.encrypted_content",
                                          "file_search_call.results",
                                          "web_search_call.results",
                                          "web_search_call.action.sources",
                                          "computer_call_output.output.image_url",
                                          "code_interpreter_call.outputs",
                                          "message.input_image.image_url"};
  return k;
}

// Only `allowed` members (nulls too); the first other one is refused.
std::optional<ApiError> only(const ojson& o, const std::string& at,
                             std::initializer_list<const char*> allowed) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok)
      return bad_request(at + "." + it.key(),
                         absl::StrCat(at, ".", utf8_for_json(it.key()), ": unknown field"));
  }
  return std::nullopt;
}

std::optional<ApiError> need_string(const ojson* v, const std::string& at, bool required) {
  if (!v) return required ? std::optional<ApiError>(bad_request(at, at + ": required")) : std::nullopt;
  if (!v->is_string()) return bad_request(at, absl::StrCat(at, ": expected a string, got ", json_kind(*v)));
  return std::nullopt;
}

// A message's content, or a function_call_output's output: a string, or text parts joined.
std::optional<ApiError> text_of(const ojson& c, const std::string& at, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array())
    return bad_request(at,
                       absl::StrCat(at, ": expected a string or an array of text parts, got ", json_kind(c)));
  out->clear();
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string pat = absl::StrCat(at, "[", j, "]");
    const ojson& part = c[j];
    if (!part.is_object())
      return bad_request(pat, absl::StrCat(pat, ": expected an object, got ", json_kind(part)));
    const ojson* type = member(part, "type");
    if (auto e = need_string(type, pat + ".type", true)) return e;
    const std::string& t = type->get_ref<const std::string&>();
    if (t != "input_text" && t != "output_text")
      return bad_request(pat + ".type",
                         absl::StrCat(pat, ".type: \"", utf8_for_json(t),
                                      "\" content is not supported (input_text and output_text only)"));
    if (auto e = only(part, pat, {"type", "text", "annotations", "logprobs"})) return e;
    const ojson* tx = member(part, "text");
    if (auto e = need_string(tx, pat + ".text", true)) return e;
    *out += tx->get_ref<const std::string&>();
  }
  return std::nullopt;
}

// input → chat messages (message_origin in step).
std::optional<ApiError> translate_input(const ojson& input, ojson* msgs, std::vector<std::string>* origin) {
  if (input.is_string()) {
    msgs->push_back(ojson{{"role", "user"}, {"content", input}});
    origin->push_back("input");
    return std::nullopt;
  }
  if (!input.is_array())
    return bad_request("input",
                       absl::StrCat("input: expected a string or an array of items, got ", json_kind(input)));
  if (input.empty()) return bad_request("input", "input: must not be empty");
  bool assistant_open = false;  // the last message is an assistant's that function_call items join
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string at = absl::StrCat("input[", i, "]");
    const ojson& item = input[i];
    if (!item.is_object())
      return bad_request(at, absl::StrCat(at, ": expected an object, got ", json_kind(item)));
    std::string type = "message";
    if (const ojson* t = member(item, "type")) {
      if (auto e = need_string(t, at + ".type", true)) return e;
      type = t->get<std::string>();
    }
    if (type == "message") {
      if (auto e = only(item, at, {"type", "role", "content", "id", "status"})) return e;
      const ojson* role = member(item, "role");
      if (auto e = need_string(role, at + ".role", true)) return e;
      const std::string& r = role->get_ref<const std::string&>();
      if (r != "user" && r != "assistant" && r != "system" && r != "developer")
        return bad_request(at + ".role", absl::StrCat(at, ".role: unknown value \"", utf8_for_json(r),
                                                      "\" (expected user, assistant, system or developer)"));
      const ojson* content = member(item, "content");
      if (!content) return bad_request(at + ".content", at + ".content: required");
      std::string text;
      if (auto e = text_of(*content, at + ".content", &text)) return e;
      msgs->push_back(ojson{{"role", r}, {"content", std::move(text)}});
      origin->push_back(at);
      assistant_open = r == "assistant";
    } else if (type == "function_call") {
      if (auto e = only(item, at, {"type", "call_id", "name", "arguments", "id", "status"})) return e;
      for (const char* k : {"call_id", "name", "arguments"})
        if (auto e = need_string(member(item, k), at + "." + k, true)) return e;
      const std::string& args = item["arguments"].get_ref<const std::string&>();
      json probe;  // bounded first: the text is the client's
      if (parse_json_bounded(args, 64, &probe) || !probe.is_object())
        return bad_request(at + ".arguments",
                           absl::StrCat(at, ".arguments: expected the JSON text of an object"));
      ojson call{{"id", item["call_id"]},
                 {"type", "function"},
                 {"function", ojson{{"name", item["name"]}, {"arguments", args}}}};
      if (!assistant_open) {
        msgs->push_back(ojson{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array()}});
        origin->push_back(at);
      }
      ojson& last = msgs->back();
      if (!last.contains("tool_calls")) last["tool_calls"] = ojson::array();
      last["tool_calls"].push_back(std::move(call));
      assistant_open = true;
    } else if (type == "function_call_output") {
      if (auto e = only(item, at, {"type", "call_id", "output", "id", "status"})) return e;
      if (auto e = need_string(member(item, "call_id"), at + ".call_id", true)) return e;
      const ojson* out = member(item, "output");
      if (!out) return bad_request(at + ".output", at + ".output: required");
      std::string text;
      if (auto e = text_of(*out, at + ".output", &text)) return e;
      msgs->push_back(
          ojson{{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", std::move(text)}});
      origin->push_back(at);
      assistant_open = false;
    } else if (type == "item_reference") {
      return bad_request(at + ".type",
                         absl::StrCat(at, ".type: item_reference is not supported: ", kStateless));
    } else {
      return bad_request(at + ".type", absl::StrCat(at, ".type: \"", utf8_for_json(type),
                                                    "\" items are not supported (message, function_call and "
                                                    "function_call_output)"));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> translate_tools(const ojson& tools, ojson* out) {
  if (!tools.is_array())
    return bad_request("tools", absl::StrCat("tools: expected an array, got ", json_kind(tools)));
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const ojson& t = tools[i];
    if (!t.is_object()) return bad_request(at, absl::StrCat(at, ": expected an object, got ", json_kind(t)));
    const ojson* type = member(t, "type");
    if (auto e = need_string(type, at + ".type", true)) return e;
    if (*type != "function")
      return bad_request(at + ".type", absl::StrCat(at, ".type: \"", utf8_for_json(type->get<std::string>()),
                                                    "\" tools are not served (function tools only)"));
    if (auto e = only(t, at, {"type", "name", "description", "parameters", "strict"})) return e;
    ojson fn = ojson::object();
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (const ojson* v = member(t, k)) fn[k] = *v;
    out->push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

std::optional<ApiError> translate_tool_choice(const ojson& tc, ojson* out) {
  if (tc.is_string()) {
    *out = tc;  // auto / none / required; parse_tools checks the value
    return std::nullopt;
  }
  if (!tc.is_object())
    return bad_request("tool_choice",
                       absl::StrCat("tool_choice: expected a string or an object, got ", json_kind(tc)));
  const ojson* type = member(tc, "type");
  if (auto e = need_string(type, "tool_choice.type", true)) return e;
  if (*type != "function")
    return bad_request("tool_choice.type",
                       absl::StrCat("tool_choice.type: \"", utf8_for_json(type->get<std::string>()),
                                    "\" is not supported (auto, none, required or {type: function, name})"));
  if (auto e = only(tc, "tool_choice", {"type", "name"})) return e;
  const ojson* name = member(tc, "name");
  if (auto e = need_string(name, "tool_choice.name", true)) return e;
  *out = ojson{{"type", "function"}, {"function", ojson{{"name", *name}}}};
  return std::nullopt;
}

// text → response_format (null when the format is plain text).
std::optional<ApiError> translate_text(const ojson& text, ojson* rf) {
  if (!text.is_object())
    return bad_request("text", absl::StrCat("text: expected an object, got ", json_kind(text)));
  if (auto e = only(text, "text", {"format", "verbosity"})) return e;
  if (const ojson* v = member(text, "verbosity")) {
    if (!v->is_string() || (*v != "low" && *v != "medium" && *v != "high"))
      return bad_request("text.verbosity", "text.verbosity: expected low, medium or high");
  }
  const ojson* f = member(text, "format");
  if (!f) return std::nullopt;
  if (!f->is_object())
    return bad_request("text.format", absl::StrCat("text.format: expected an object, got ", json_kind(*f)));
  const ojson* type = member(*f, "type");
  if (auto e = need_string(type, "text.format.type", true)) return e;
  if (*type == "text") {
    if (auto e = only(*f, "text.format", {"type"})) return e;
  } else if (*type == "json_object") {
    if (auto e = only(*f, "text.format", {"type"})) return e;
    *rf = ojson{{"type", "json_object"}};
  } else if (*type == "json_schema") {
    if (auto e = only(*f, "text.format", {"type", "name", "schema", "strict", "description"})) return e;
    ojson js = ojson::object();
    for (const char* k : {"name", "description", "schema", "strict"})
      if (const ojson* v = member(*f, k)) js[k] = *v;
    *rf = ojson{{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else {
    return bad_request("text.format.type", absl::StrCat("text.format.type: unknown value \"",
                                                        utf8_for_json(type->get<std::string>()),
                                                        "\" (expected text, json_object or json_schema)"));
  }
  return std::nullopt;
}

// The fields accepted only in their harmless forms.
std::optional<ApiError> check_refusals(const json& doc) {
  auto val = [&](const char* k) -> const json* {
    auto it = doc.find(k);
    return it == doc.end() || it->is_null() ? nullptr : &*it;
  };
  for (const char* k : {"previous_response_id", "conversation"})
    if (val(k)) return bad_request(k, absl::StrCat(k, ": not supported: ", kStateless));
  if (const json* v = val("background")) {
    if (!v->is_boolean())
      return bad_request("background", absl::StrCat("background: expected a boolean, got ", json_kind(*v)));
    if (v->get<bool>())
      return bad_request("background",
                         "background: true is not supported (responses run while the request waits)");
  }
  if (val("prompt"))
    return bad_request("prompt", "prompt: reusable prompts are not supported (send instructions and input)");
  if (const json* v = val("store"); v && !v->is_boolean())
    return bad_request("store", absl::StrCat("store: expected a boolean, got ", json_kind(*v)));
  if (const json* v = val("include")) {
    if (!v->is_array())
      return bad_request("include", absl::StrCat("include: expected an array, got ", json_kind(*v)));
    for (size_t i = 0; i < v->size(); ++i) {
      const json& x = (*v)[i];
      if (!x.is_string() || !vacuous_includes().count(x.get<std::string>()))
        return bad_request("include", absl::StrCat("include[", i, "]: ",
                                                   x.is_string() ? utf8_for_json(x.get<std::string>()) : "",
                                                   " is not supported"));
    }
  }
  if (const json* v = val("reasoning")) {
    if (!v->is_object())
      return bad_request("reasoning", absl::StrCat("reasoning: expected an object, got ", json_kind(*v)));
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it->is_null())
        return bad_request("reasoning." + it.key(),
                           absl::StrCat("reasoning.", utf8_for_json(it.key()),
                                        ": not supported (the served model has no reasoning "
                                        "settings)"));
    }
  }
  if (const json* v = val("truncation"); v && *v != "disabled")
    return bad_request(
        "truncation",
        "truncation: only \"disabled\" is supported (a conversation over the context is refused, "
        "never cut)");
  if (const json* v = val("service_tier"); v && *v != "auto" && *v != "default")
    return bad_request("service_tier", "service_tier: only \"auto\" or \"default\"");
  if (const json* v = val("top_logprobs"); v && *v != 0)
    return bad_request("top_logprobs", "top_logprobs: not supported (only 0)");
  if (val("max_tool_calls")) return bad_request("max_tool_calls", "max_tool_calls: not supported");
  if (const json* v = val("metadata")) {
    if (!v->is_object())
      return bad_request("metadata", absl::StrCat("metadata: expected an object, got ", json_kind(*v)));
    for (auto it = v->begin(); it != v->end(); ++it)
      if (!it->is_string())
        return bad_request("metadata." + it.key(),
                           absl::StrCat("metadata.", utf8_for_json(it.key()), ": expected a string"));
  }
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key"})
    if (const json* v = val(k); v && !v->is_string())
      return bad_request(k, absl::StrCat(k, ": expected a string, got ", json_kind(*v)));
  if (const json* v = val("stream_options")) {
    if (!v->is_object()) return bad_request("stream_options", "stream_options: expected an object");
    for (auto it = v->begin(); it != v->end(); ++it)
      if (it.key() != "include_obfuscation")
        return bad_request("stream_options." + it.key(),
                           absl::StrCat("stream_options.", utf8_for_json(it.key()), ": unknown field"));
  }
  return std::nullopt;
}

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s->find(from, pos)) != std::string::npos; pos += to.size())
    s->replace(pos, from.size(), to);
}

}  // namespace

std::variant<ResponsesTranslation, ApiError> responses_to_chat(std::string_view body) {
  json doc;
  if (std::optional<std::string> err = parse_json_bounded(body, kMaxRequestJsonDepth, &doc)) {
    if (json_nests_deeper(body, kMaxRequestJsonDepth))
      return bad_request("", absl::StrCat("the request body nests deeper than ", kMaxRequestJsonDepth,
                                          " levels of objects and arrays"));
    return bad_request("", absl::StrCat("the body is not valid JSON (", *err, ")"));
  }
  if (!doc.is_object())
    return bad_request("", absl::StrCat("the body must be a JSON object, got ", json_kind(doc)));
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!known_fields().count(it.key()))
      return bad_request(it.key(),
                         absl::StrCat("unrecognized request argument supplied: ", utf8_for_json(it.key())));
  }
  if (auto e = check_refusals(doc)) return *e;
  // The members the chat body carries, re-read keeping member order (a schema's properties are generated in
  // it).
  auto ordered = [&](const char* key, std::optional<ApiError>* err) -> std::optional<ojson> {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return ojson();
    return ordered_member(body, *it, key, err);
  };
  ResponsesTranslation t;
  ojson& cb = t.chat_body;
  cb = ojson::object();
  ojson& echo = t.echo;
  echo = ojson::object();
  std::optional<ApiError> err;
  if (auto it = doc.find("model"); it != doc.end()) cb["model"] = *it;

  ojson msgs = ojson::array();
  std::optional<ojson> instructions = ordered("instructions", &err);
  if (!instructions) return *err;
  if (!instructions->is_null()) {
    if (!instructions->is_string())
      return bad_request("instructions",
                         absl::StrCat("instructions: expected a string, got ", json_kind(*instructions)));
    msgs.push_back(ojson{{"role", "system"}, {"content", *instructions}});
    t.message_origin.push_back("instructions");
  }
  echo["instructions"] = *instructions;
  std::optional<ojson> input = ordered("input", &err);
  if (!input) return *err;
  if (input->is_null()) return bad_request("input", "input: required");
  if (auto e = translate_input(*input, &msgs, &t.message_origin)) return *e;
  cb["messages"] = std::move(msgs);

  std::optional<ojson> tools = ordered("tools", &err);
  if (!tools) return *err;
  if (!tools->is_null()) {
    ojson chat_tools;
    if (auto e = translate_tools(*tools, &chat_tools)) return *e;
    cb["tools"] = std::move(chat_tools);
  }
  echo["tools"] = tools->is_null() ? ojson::array() : *tools;
  std::optional<ojson> choice = ordered("tool_choice", &err);
  if (!choice) return *err;
  if (!choice->is_null()) {
    ojson chat_choice;
    if (auto e = translate_tool_choice(*choice, &chat_choice)) return *e;
    cb["tool_choice"] = std::move(chat_choice);
  }
  echo["tool_choice"] = choice->is_null() ? ojson("auto") : *choice;
  for (const char* k : {"parallel_tool_calls", "temperature", "top_p", "stream", "seed", "speculative"})
    if (auto it = doc.find(k); it != doc.end() && !it->is_null()) cb[k] = *it;
  if (auto it = doc.find("max_output_tokens"); it != doc.end() && !it->is_null())
    cb["max_completion_tokens"] = *it;
  echo["parallel_tool_calls"] = cb.contains("parallel_tool_calls") ? cb["parallel_tool_calls"] : ojson(true);
  echo["max_output_tokens"] = cb.contains("max_completion_tokens") ? cb["max_completion_tokens"] : ojson();

  std::optional<ojson> text = ordered("text", &err);
  if (!text) return *err;
  if (!text->is_null()) {
    ojson rf;
    if (auto e = translate_text(*text, &rf)) return *e;
    if (!rf.is_null()) cb["response_format"] = std::move(rf);
  }
  echo["text"] = text->is_null() || !text->contains("format") || (*text)["format"].is_null()
                     ? ojson{{"format", ojson{{"type", "text"}}}}
                     : *text;
  std::optional<ojson> metadata = ordered("metadata", &err);
  if (!metadata) return *err;
  echo["metadata"] = metadata->is_null() ? ojson::object() : *metadata;
  if (auto it = doc.find("user"); it != doc.end() && it->is_string()) echo["user"] = *it;
  return t;
}

std::string responses_field(std::string_view chat_field, const std::vector<std::string>& message_origin) {
  std::string f(chat_field);
  if (absl::StartsWith(f, "messages[")) {
    const size_t close = f.find(']');
    size_t k = 0;
    bool num = close != std::string::npos && close > 9;
    for (size_t i = 9; num && i < close; ++i) {
      if (f[i] < '0' || f[i] > '9')
        num = false;
      else
        k = k * 10 + static_cast<size_t>(f[i] - '0');
    }
    if (!num || k >= message_origin.size()) return "input";
    const std::string rest = f.substr(close + 1);
    const std::string& o = message_origin[k];
    if (o != "instructions" && o != "input" &&
        (absl::StartsWith(rest, ".role") || absl::StartsWith(rest, ".content")))
      return o + rest;
    return o;
  }
  if (f == "messages" || f == "prompt")
    return "input";  // "prompt": the engine's name for the rendered prompt
  if (f == "max_completion_tokens" || f == "max_tokens") return "max_output_tokens";
  if (absl::StartsWith(f, "response_format.json_schema")) return "text.format" + f.substr(27);
  if (absl::StartsWith(f, "response_format")) return "text.format" + f.substr(15);
  if (absl::StartsWith(f, "tool_choice.function")) return "tool_choice" + f.substr(20);
  if (absl::StartsWith(f, "tools[")) {
    const size_t close = f.find(']');
    if (close != std::string::npos && f.compare(close + 1, 9, ".function") == 0) return f.erase(close + 1, 9);
  }
  return f;
}

ApiError responses_error(ApiError e, const std::vector<std::string>& message_origin) {
  const std::string mapped = responses_field(e.param, message_origin);
  if (!e.param.empty() && mapped != e.param && absl::StartsWith(e.message, e.param))
    e.message = mapped + e.message.substr(e.param.size());
  // Other chat names the message mentions (e.g. "... response_format cannot be given with it").
  replace_all(&e.message, "response_format.json_schema", "text.format");
  replace_all(&e.message, "response_format", "text.format");
  replace_all(&e.message, "max_completion_tokens", "max_output_tokens");
  e.message = std::regex_replace(e.message, std::regex(R"(tools\[(\d+)\]\.function)"), "tools[$1]");
  e.param = mapped;
  return e;
}

std::variant<ResponsesRequest, ApiError> parse_responses_request(std::string_view body,
                                                                 const LimitsSection& limits,
                                                                 const SamplingParams& defaults) {
  std::variant<ResponsesTranslation, ApiError> t = responses_to_chat(body);
  if (auto* e = std::get_if<ApiError>(&t)) return *e;
  ResponsesTranslation& tr = std::get<ResponsesTranslation>(t);
  const std::string chat_body = tr.chat_body.dump(-1, ' ', false, ojson::error_handler_t::replace);
  std::variant<ParsedRequest, ApiError> parsed = parse_request(Endpoint::kChat, chat_body, limits, defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return responses_error(*e, tr.message_origin);
  ResponsesRequest r;
  r.chat = std::get<ParsedRequest>(std::move(parsed));
  r.chat.constraint.field = responses_field(r.chat.constraint.field, tr.message_origin);
  r.message_origin = std::move(tr.message_origin);
  r.echo = std::move(tr.echo);
  // The sampling the response ran with: the body's values as sent, else the served defaults.
  for (const char* k : {"temperature", "top_p"}) {
    if (tr.chat_body.contains(k)) r.echo[k] = tr.chat_body[k];
  }
  // A float's shortest spelling (0.8, not 0.800000011920929), as the double that JSON writes back the same.
  auto shortest = [](float v) { return std::stod(shortest_float_text(v)); };
  if (!r.echo.contains("temperature")) r.echo["temperature"] = shortest(r.chat.params.temperature);
  if (!r.echo.contains("top_p")) r.echo["top_p"] = shortest(r.chat.params.top_p);
  return r;
}

std::string new_response_id(std::string_view prefix) {
  return std::string(prefix) + new_tool_call_id(ToolCallFormat::kHermes).substr(5);
}

// ---- output

ResponsesOutput::ResponsesOutput(ToolCallFormat format, std::string forced_name, ToolCallFormat id_format)
    : format_(format), parser_(format, std::move(forced_name)), id_format_(id_format) {}

ojson ResponsesOutput::item_json(size_t i) const {
  const Item& it = items_[i];
  if (it.is_call) {
    return ojson{{"type", "function_call"},   {"id", it.id},
                 {"call_id", it.call_id},     {"name", it.name},
                 {"arguments", it.arguments}, {"status", "completed"}};
  }
  const char* status = !finished_ ? "in_progress" : incomplete_ ? "incomplete" : "completed";
  return ojson{{"type", "message"},
               {"id", it.id},
               {"status", status},
               {"role", "assistant"},
               {"content", ojson::array({ojson{{"type", "output_text"},
                                               {"text", utf8_for_json(it.text)},
                                               {"annotations", ojson::array()},
                                               {"logprobs", ojson::array()}}})}};
}

void ResponsesOutput::content(const std::string& s, std::vector<ojson>* events) {
  if (message_ < 0) {
    message_ = static_cast<int>(items_.size());
    items_.push_back(Item{false, new_response_id("msg_"), "", "", "", ""});
    if (events) {
      ojson added = item_json(static_cast<size_t>(message_));
      added["content"] = ojson::array();
      events->push_back(ojson{
          {"type", "response.output_item.added"}, {"output_index", message_}, {"item", std::move(added)}});
      events->push_back(
          ojson{{"type", "response.content_part.added"},
                {"item_id", items_[static_cast<size_t>(message_)].id},
                {"output_index", message_},
                {"content_index", 0},
                {"part", ojson{{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}}}});
    }
  }
  items_[static_cast<size_t>(message_)].text += s;
  pending_delta_ += s;
}

void ResponsesOutput::flush_delta(std::vector<ojson>* events) {
  if (pending_delta_.empty()) return;
  if (events) {
    events->push_back(ojson{{"type", "response.output_text.delta"},
                            {"item_id", items_[static_cast<size_t>(message_)].id},
                            {"output_index", message_},
                            {"content_index", 0},
                            {"delta", utf8_for_json(pending_delta_)},
                            {"logprobs", ojson::array()}});
  }
  pending_delta_.clear();
}

void ResponsesOutput::call(const ToolCall& c, std::vector<ojson>* events) {
  flush_delta(events);
  const size_t idx = items_.size();
  items_.push_back(Item{true, new_response_id("fc_"), "", new_tool_call_id(id_format_), c.name, c.arguments});
  if (!events) return;
  const Item& it = items_.back();
  ojson added = item_json(idx);
  added["arguments"] = "";
  added["status"] = "in_progress";
  events->push_back(
      ojson{{"type", "response.output_item.added"}, {"output_index", idx}, {"item", std::move(added)}});
  events->push_back(ojson{{"type", "response.function_call_arguments.delta"},
                          {"item_id", it.id},
                          {"output_index", idx},
                          {"delta", it.arguments}});
  events->push_back(ojson{{"type", "response.function_call_arguments.done"},
                          {"item_id", it.id},
                          {"output_index", idx},
                          {"name", it.name},
                          {"arguments", it.arguments}});
  events->push_back(
      ojson{{"type", "response.output_item.done"}, {"output_index", idx}, {"item", item_json(idx)}});
}

void ResponsesOutput::apply(ToolCallStream::Delta d, std::vector<ojson>* events) {
  if (!d.content.empty()) content(d.content, events);
  for (const ToolCall& c : d.calls) call(c, events);
}

void ResponsesOutput::feed(std::string_view text, std::vector<ojson>* events) {
  if (finished_ || text.empty()) return;
  if (format_ == ToolCallFormat::kNone) {
    content(std::string(text), events);
  } else {
    // One character at a time: where content and calls are released (and so the items' order) depends on the
    // text only, not on its split into batches.
    for (size_t i = 0; i < text.size(); ++i) apply(parser_.feed(text.substr(i, 1)), events);
  }
  flush_delta(events);
}

void ResponsesOutput::finish(bool incomplete, std::vector<ojson>* events) {
  if (finished_) return;
  if (format_ != ToolCallFormat::kNone) apply(parser_.finish(), events);
  if (message_ < 0 && items_.empty()) content("", events);
  flush_delta(events);
  finished_ = true;
  incomplete_ = incomplete;
  if (message_ < 0 || !events) return;
  const Item& m = items_[static_cast<size_t>(message_)];
  const std::string text = utf8_for_json(m.text);
  events->push_back(ojson{{"type", "response.output_text.done"},
                          {"item_id", m.id},
                          {"output_index", message_},
                          {"content_index", 0},
                          {"text", text},
                          {"logprobs", ojson::array()}});
  events->push_back(
      ojson{{"type", "response.content_part.done"},
            {"item_id", m.id},
            {"output_index", message_},
            {"content_index", 0},
            {"part", ojson{{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}}}});
  events->push_back(ojson{{"type", "response.output_item.done"},
                          {"output_index", message_},
                          {"item", item_json(static_cast<size_t>(message_))}});
}

ojson ResponsesOutput::output_json() const {
  ojson out = ojson::array();
  for (size_t i = 0; i < items_.size(); ++i) out.push_back(item_json(i));
  return out;
}

std::string ResponsesOutput::output_text() const {
  return message_ < 0 ? "" : utf8_for_json(items_[static_cast<size_t>(message_)].text);
}

ojson response_object(const ResponseMeta& meta, const ojson& echo, const ResponseStatus& st,
                      const ResponsesOutput* out) {
  ojson r{{"id", meta.id},
          {"object", "response"},
          {"created_at", meta.created},
          {"status", st.status},
          {"background", false}};
  if (st.error) {
    r["error"] = ojson{{"code", st.error->code.empty() ? std::string("server_error") : st.error->code},
                       {"message", st.error->message}};
  } else {
    r["error"] = nullptr;
  }
  r["incomplete_details"] = st.incomplete_length ? ojson{{"reason", "max_output_tokens"}} : ojson();
  r["model"] = meta.model;
  r["output"] = out ? out->output_json() : ojson::array();
  r["output_text"] = out ? out->output_text() : "";
  for (auto it = echo.begin(); it != echo.end(); ++it) r[it.key()] = it.value();
  r["max_tool_calls"] = nullptr;
  r["previous_response_id"] = nullptr;
  r["reasoning"] = ojson{{"effort", nullptr}, {"summary", nullptr}};
  r["service_tier"] = "default";
  r["store"] = false;
  r["top_logprobs"] = 0;
  r["truncation"] = "disabled";
  if (st.has_usage) {
    r["usage"] = ojson{{"input_tokens", st.input_tokens},
                       {"input_tokens_details", ojson{{"cached_tokens", 0}}},
                       {"output_tokens", st.output_tokens},
                       {"output_tokens_details", ojson{{"reasoning_tokens", 0}}},
                       {"total_tokens", st.input_tokens + st.output_tokens}};
  } else {
    r["usage"] = nullptr;
  }
  return r;
}

std::string ResponsesEvents::frame(ojson ev) {
  ev["sequence_number"] = seq_++;
  const std::string type = ev.value("type", "");
  return absl::StrCat("event: ", type, "\ndata: ", ev.dump(-1, ' ', false, ojson::error_handler_t::replace),
                      "\n\n");
}

std::string ResponsesEvents::frame_all(std::vector<ojson>* evs) {
  std::string out;
  for (ojson& e : *evs) out += frame(std::move(e));
  evs->clear();
  return out;
}

ojson ResponsesEvents::lifecycle(const char* type, ojson response) {
  return ojson{{"type", type}, {"response", std::move(response)}};
}

}  // namespace frost::server::openai
