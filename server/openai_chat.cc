#include "server/openai_chat.h"

#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/json.h"
#include "server/openai_api.h"

namespace frost::server::openai {
namespace {

using ojson = nlohmann::ordered_json;

const ojson* member(const ojson& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// Content: a string, or text parts joined; null stays null.
std::optional<ApiError> content_of(const ojson& c, const std::string& at, ojson* out) {
  if (c.is_null() || c.is_string()) {
    *out = c;
    return std::nullopt;
  }
  if (!c.is_array())
    return bad_request(at,
                       absl::StrCat(at, ": expected a string or an array of text parts, got ", json_kind(c)));
  std::string text;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string pat = absl::StrCat(at, "[", j, "]");
    const ojson& part = c[j];
    const ojson* type = part.is_object() ? member(part, "type") : nullptr;
    if (!type || !type->is_string())
      return bad_request(pat, absl::StrCat(pat, ": expected an object with a type"));
    const std::string& t = type->get_ref<const std::string&>();
    if (t != "text" && t != "input_text" && t != "output_text")
      return bad_request(pat + ".type", absl::StrCat(pat, ".type: \"", utf8_for_json(t),
                                                     "\" content is not supported (text only)"));
    const ojson* tx = member(part, "text");
    if (!tx || !tx->is_string())
      return bad_request(pat + ".text", absl::StrCat(pat, ".text: expected a string"));
    text += tx->get_ref<const std::string&>();
  }
  *out = std::move(text);
  return std::nullopt;
}

std::optional<ApiError> parse_tool_call(const ojson& tc, const std::string& at, ojson* out) {
  if (!tc.is_object()) return bad_request(at, absl::StrCat(at, ": expected an object, got ", json_kind(tc)));
  ojson call = ojson::object();
  for (auto it = tc.begin(); it != tc.end(); ++it) {
    const std::string& k = it.key();
    if (it->is_null()) continue;
    if (k == "id" || k == "type") {
      if (!it->is_string())
        return bad_request(at + "." + k,
                           absl::StrCat(at, ".", k, ": expected a string, got ", json_kind(*it)));
      if (k == "type" && *it != "function")
        return bad_request(at + ".type", absl::StrCat(at, ".type: expected \"function\", got \"",
                                                      utf8_for_json(it->get<std::string>()), "\""));
      call[k] = *it;
    } else if (k == "index") {
      continue;  // a streamed delta's index, echoed back by some clients
    } else if (k == "function") {
      const std::string fat = at + ".function";
      if (!it->is_object())
        return bad_request(fat, absl::StrCat(fat, ": expected an object, got ", json_kind(*it)));
      const ojson* name = member(*it, "name");
      if (!name || !name->is_string())
        return bad_request(fat + ".name", absl::StrCat(fat, ".name: expected a string"));
      ojson args = ojson::object();
      if (const ojson* a = member(*it, "arguments")) {
        if (a->is_string()) {
          nlohmann::json probe;  // bounded first: the text is the client's
          if (parse_json_bounded(a->get_ref<const std::string&>(), 64, &probe) || !probe.is_object())
            return bad_request(fat + ".arguments",
                               absl::StrCat(fat, ".arguments: expected the JSON text of an object"));
          args = ojson::parse(a->get_ref<const std::string&>(), nullptr, false);
          if (args.is_discarded() || !args.is_object())
            return bad_request(fat + ".arguments",
                               absl::StrCat(fat, ".arguments: expected the JSON text of an object"));
        } else if (a->is_object()) {
          args = *a;
        } else {
          return bad_request(fat + ".arguments",
                             absl::StrCat(fat, ".arguments: expected a string, got ", json_kind(*a)));
        }
      }
      call["function"] = ojson{{"name", *name}, {"arguments", std::move(args)}};
    } else {
      return bad_request(at + "." + k, absl::StrCat(at, ".", utf8_for_json(k), ": unknown field"));
    }
  }
  if (!call.contains("function"))
    return bad_request(at + ".function", absl::StrCat(at, ".function: required"));
  if (!call.contains("type")) call["type"] = "function";
  *out = std::move(call);
  return std::nullopt;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (const char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Every local "$ref" under `schema` ("#..." pointers) rebased to where the schema now sits (`base`, a
// pointer).
void rebase_refs(ojson& schema, const std::string& base) {
  std::vector<ojson*> todo{&schema};
  while (!todo.empty()) {
    ojson* x = todo.back();
    todo.pop_back();
    if (x->is_object()) {
      auto it = x->find("$ref");
      if (it != x->end() && it->is_string()) {
        const std::string& r = it->get_ref<const std::string&>();
        if (!r.empty() && r[0] == '#') *it = absl::StrCat("#", base, r.substr(1));
      }
    }
    if (x->is_structured())
      for (auto& c : *x) todo.push_back(&c);
  }
}

}  // namespace

bool too_wide(const nlohmann::json& v) {
  std::vector<const nlohmann::json*> todo{&v};
  while (!todo.empty()) {
    const nlohmann::json* x = todo.back();
    todo.pop_back();
    if (!x->is_structured()) continue;
    if (x->is_object() && x->size() > kMaxObjectMembers) return true;
    for (const auto& c : *x) todo.push_back(&c);
  }
  return false;
}

std::optional<nlohmann::ordered_json> ordered_member(std::string_view body, const nlohmann::json& value,
                                                     const std::string& key, std::optional<ApiError>* err) {
  if (too_wide(value)) {
    *err = bad_request(key, absl::StrCat(key, ": an object has more than ", kMaxObjectMembers, " members"));
    return std::nullopt;
  }
  std::optional<std::string_view> span = json_value_span(body, {key});
  ojson out = span ? ojson::parse(*span, nullptr, false) : ojson();
  if (!span || out.is_discarded()) {
    *err = bad_request(key, absl::StrCat(key, ": cannot be read"));
    return std::nullopt;
  }
  return out;
}

std::optional<ApiError> parse_chat_messages(const ojson& v, size_t max_content_bytes, ojson* out) {
  if (!v.is_array())
    return bad_request("messages", absl::StrCat("messages: expected an array, got ", json_kind(v)));
  if (v.empty()) return bad_request("messages", "messages: must not be empty");
  if (v.size() > static_cast<size_t>(kMaxMessages))
    return bad_request("messages",
                       absl::StrCat("messages: at most ", kMaxMessages, " messages, got ", v.size()));
  *out = ojson::array();
  size_t total = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = absl::StrCat("messages[", i, "]");
    const ojson& m = v[i];
    if (!m.is_object()) return bad_request(at, absl::StrCat(at, ": expected an object, got ", json_kind(m)));
    ojson msg = ojson::object();
    std::string role;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& k = it.key();
      const std::string fat = at + "." + k;
      if (k == "role") {
        if (!it->is_string())
          return bad_request(fat, absl::StrCat(fat, ": expected a string, got ", json_kind(*it)));
        role = it->get<std::string>();
        if (role == "developer") role = "system";  // OpenAI's newer name for the system role
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
          return bad_request(fat,
                             absl::StrCat(fat, ": unknown value \"", utf8_for_json(it->get<std::string>()),
                                          "\" (expected system, developer, user, assistant or tool)"));
        msg["role"] = role;
      } else if (k == "content") {
        ojson c;
        if (auto e = content_of(*it, fat, &c)) return e;
        if (c.is_string()) total += c.get_ref<const std::string&>().size();
        msg["content"] = std::move(c);
      } else if (it->is_null()) {
        continue;  // refusal: null, tool_calls: null, audio: null, ... as the SDKs send them
      } else if (k == "name" || k == "tool_call_id") {
        if (!it->is_string())
          return bad_request(fat, absl::StrCat(fat, ": expected a string, got ", json_kind(*it)));
        msg[k] = *it;
      } else if (k == "tool_calls") {
        if (!it->is_array())
          return bad_request(fat, absl::StrCat(fat, ": expected an array, got ", json_kind(*it)));
        if (role != "assistant" && m.contains("role") && m["role"] != "assistant")
          return bad_request(fat, absl::StrCat(fat, ": only assistant messages carry tool calls"));
        ojson calls = ojson::array();
        for (size_t j = 0; j < it->size(); ++j) {
          ojson call;
          if (auto e = parse_tool_call((*it)[j], absl::StrCat(fat, "[", j, "]"), &call)) return e;
          calls.push_back(std::move(call));
        }
        if (!calls.empty()) msg["tool_calls"] = std::move(calls);
      } else {
        return bad_request(fat, absl::StrCat(at, ".", utf8_for_json(k), ": unknown field"));
      }
    }
    if (role.empty()) return bad_request(at + ".role", absl::StrCat(at, ".role: required"));
    if (msg.contains("tool_calls") && role != "assistant")
      return bad_request(at + ".tool_calls",
                         absl::StrCat(at, ".tool_calls: only assistant messages carry tool calls"));
    if (role == "tool" && !msg.contains("tool_call_id"))
      return bad_request(at + ".tool_call_id",
                         absl::StrCat(at, ".tool_call_id: required for a tool message"));
    // Absent or null content is "" (as vLLM renders it): templates test and slice content as a string
    // (Qwen3's `'</think>' in message.content`), and an assistant turn of tool calls sends null.
    if (!msg.contains("content") || msg["content"].is_null()) msg["content"] = "";
    if (total > max_content_bytes) {
      ApiError e = bad_request(
          "messages",
          absl::StrCat("messages: ", total,
                       " bytes of content is over limits.max_prompt_bytes = ", max_content_bytes));
      e.http = 413;
      return e;
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson* tools, const ojson* tool_choice, const ojson* parallel,
                                    ToolsRequest* out) {
  if (tools) {
    if (!tools->is_array())
      return bad_request("tools", absl::StrCat("tools: expected an array, got ", json_kind(*tools)));
    if (tools->size() > static_cast<size_t>(kMaxTools))
      return bad_request("tools", absl::StrCat("tools: at most ", kMaxTools, " tools, got ", tools->size()));
    std::set<std::string> seen;
    ojson rendered = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = absl::StrCat("tools[", i, "]");
      const ojson& t = (*tools)[i];
      if (!t.is_object())
        return bad_request(at, absl::StrCat(at, ": expected an object, got ", json_kind(t)));
      for (auto it = t.begin(); it != t.end(); ++it) {
        if (it.key() != "type" && it.key() != "function")
          return bad_request(at + "." + it.key(),
                             absl::StrCat(at, ".", utf8_for_json(it.key()), ": unknown field"));
      }
      const ojson* type = member(t, "type");
      if (!type || *type != "function")
        return bad_request(at + ".type",
                           absl::StrCat(at, ".type: expected \"function\" (the only tool type served)"));
      const ojson* fn = member(t, "function");
      if (!fn || !fn->is_object())
        return bad_request(at + ".function", absl::StrCat(at, ".function: required, an object"));
      for (auto it = fn->begin(); it != fn->end(); ++it) {
        const std::string& k = it.key();
        if (k != "name" && k != "description" && k != "parameters" && k != "strict")
          return bad_request(at + ".function." + k,
                             absl::StrCat(at, ".function.", utf8_for_json(k), ": unknown field"));
      }
      const ojson* name = member(*fn, "name");
      if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
        return bad_request(
            at + ".function.name",
            absl::StrCat(at, ".function.name: required, 1-64 letters, digits, '_', '-' or '.'"));
      if (!seen.insert(name->get<std::string>()).second)
        return bad_request(
            at + ".function.name",
            absl::StrCat(at, ".function.name: \"", name->get<std::string>(), "\" is defined twice"));
      if (const ojson* d = member(*fn, "description"); d && !d->is_string())
        return bad_request(at + ".function.description",
                           absl::StrCat(at, ".function.description: expected a string"));
      if (const ojson* p = member(*fn, "parameters"); p && !p->is_object())
        return bad_request(
            at + ".function.parameters",
            absl::StrCat(at, ".function.parameters: expected a JSON Schema object, got ", json_kind(*p)));
      out->names.push_back(name->get<std::string>());
      ojson f = ojson::object();
      for (auto it = fn->begin(); it != fn->end(); ++it)
        if (!it->is_null()) f[it.key()] = *it;
      rendered.push_back(ojson{{"type", "function"}, {"function", std::move(f)}});
    }
    if (!rendered.empty()) out->tools = std::move(rendered);
  }
  if (tool_choice) {
    if (tool_choice->is_string()) {
      const std::string& c = tool_choice->get_ref<const std::string&>();
      if (c == "auto") {
        out->choice = ToolChoice::kAuto;
      } else if (c == "none") {
        out->choice = ToolChoice::kNone;
      } else if (c == "required") {
        out->choice = ToolChoice::kRequired;
      } else {
        return bad_request(
            "tool_choice",
            absl::StrCat("tool_choice: unknown value \"", utf8_for_json(c),
                         "\" (expected auto, none, required or {\"type\": \"function\", ...})"));
      }
    } else if (tool_choice->is_object()) {
      const ojson* fn = member(*tool_choice, "function");
      const ojson* name = fn && fn->is_object() ? member(*fn, "name") : member(*tool_choice, "name");
      if (!name || !name->is_string())
        return bad_request("tool_choice",
                           "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
      const std::string n = name->get<std::string>();
      for (size_t i = 0; i < out->names.size(); ++i)
        if (out->names[i] == n) out->named = static_cast<int>(i);
      if (out->named < 0)
        return bad_request("tool_choice", absl::StrCat("tool_choice: names the function \"", utf8_for_json(n),
                                                       "\", which is not in tools"));
      out->choice = ToolChoice::kNamed;
    } else {
      return bad_request("tool_choice", absl::StrCat("tool_choice: expected a string or an object, got ",
                                                     json_kind(*tool_choice)));
    }
    if (out->choice == ToolChoice::kRequired && !out->any())
      return bad_request("tool_choice", "tool_choice: \"required\" needs tools");
  }
  if (!out->any()) out->choice = ToolChoice::kNone;
  if (parallel) {
    if (!parallel->is_boolean())
      return bad_request("parallel_tool_calls",
                         absl::StrCat("parallel_tool_calls: expected a boolean, got ", json_kind(*parallel)));
    out->parallel = parallel->get<bool>();
  }
  return std::nullopt;
}

ConstraintRequest tool_constraint(const ToolsRequest& t) {
  ConstraintRequest c;
  auto params = [&](size_t i) -> const ojson* {
    const ojson& fn = t.tools[i]["function"];
    auto it = fn.find("parameters");
    return it == fn.end() ? nullptr : &*it;
  };
  // A function without `parameters` takes none (OpenAI's reading): its arguments are {}.
  const ojson no_parameters{{"type", "object"}, {"properties", ojson::object()}};
  if (t.choice == ToolChoice::kNamed) {
    const ojson* p = params(static_cast<size_t>(t.named));
    c.field = absl::StrCat("tools[", t.named, "].function.parameters");
    c.kind = ConstraintRequest::Kind::kJsonSchema;
    c.text = (p ? *p : no_parameters).dump();
  } else if (t.choice == ToolChoice::kRequired) {
    ojson branches = ojson::array();
    for (size_t i = 0; i < t.names.size(); ++i) {
      ojson p = params(i) ? *params(i) : no_parameters;
      rebase_refs(p, absl::StrCat("/items/anyOf/", i, "/properties/parameters"));
      branches.push_back(
          ojson{{"type", "object"},
                {"properties", {{"name", {{"const", t.names[i]}}}, {"parameters", std::move(p)}}},
                {"required", {"name", "parameters"}}});
    }
    ojson schema{{"type", "array"}, {"minItems", 1}};
    schema["maxItems"] = t.parallel ? kMaxParallelCalls : 1;
    schema["items"] = {{"anyOf", std::move(branches)}};
    c.kind = ConstraintRequest::Kind::kJsonSchema;
    c.text = schema.dump();
    c.field = "tools";
  }
  return c;
}

ToolCallFormat output_format(const ToolsRequest& t, ToolCallFormat template_format) {
  switch (t.choice) {
    case ToolChoice::kNone:
      return ToolCallFormat::kNone;
    case ToolChoice::kAuto:
      return template_format;
    case ToolChoice::kRequired:
      return ToolCallFormat::kCallList;
    case ToolChoice::kNamed:
      return ToolCallFormat::kArguments;
  }
  return ToolCallFormat::kNone;
}

std::string forced_name(const ToolsRequest& t) {
  return t.choice == ToolChoice::kNamed ? t.names[static_cast<size_t>(t.named)] : std::string();
}

std::string new_tool_call_id(ToolCallFormat format) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, const std::vector<std::string>& ids,
                               bool with_index, int first_index) {
  nlohmann::json arr = nlohmann::json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::json c = {{"id", ids[i]},
                        {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = first_index + static_cast<int>(i);
    arr.push_back(std::move(c));
  }
  return arr;
}

}  // namespace frost::server::openai
