#include "server/generation_chat.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/json.h"
#include "server/openai_api.h"
#include "server/openai_chat.h"

namespace frost::server {
namespace {

using ojson = nlohmann::ordered_json;
namespace oa = openai;

absl::Status invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// The JSON text of a request field (a tool's parameters, chat_template_kwargs) as the ordered value the
// template sees, with the OpenAI body's bounds (nesting, object width); it must be an object.
absl::StatusOr<ojson> json_object_field(const std::string& field, const std::string& text) {
  nlohmann::json probe;
  if (std::optional<std::string> err = parse_json_bounded(text, oa::kMaxRequestJsonDepth, &probe))
    return invalid(absl::StrCat(field, ": not valid JSON (", *err, ")"));
  if (!probe.is_object())
    return invalid(absl::StrCat(field, ": expected the JSON text of an object, got ", oa::json_kind(probe)));
  if (oa::too_wide(probe))
    return invalid(absl::StrCat(field, ": an object has more than ", oa::kMaxObjectMembers, " members"));
  ojson out = ojson::parse(text, nullptr, false);
  if (out.is_discarded()) return invalid(absl::StrCat(field, ": cannot be read"));
  return out;
}

// The messages as the OpenAI body writes them (member order: role, content, name, tool_calls,
// tool_call_id); unset / empty optional fields are absent.
ojson messages_json(const v1::GenerateRequest& req) {
  ojson msgs = ojson::array();
  for (const v1::ChatMessage& m : req.messages()) {
    ojson o = ojson::object();
    o["role"] = m.role();
    if (m.has_content()) o["content"] = m.content();
    if (!m.name().empty()) o["name"] = m.name();
    if (m.tool_calls_size() > 0) {
      ojson calls = ojson::array();
      for (const v1::ToolCall& tc : m.tool_calls()) {
        ojson c = ojson::object();
        if (!tc.id().empty()) c["id"] = tc.id();
        if (!tc.type().empty()) c["type"] = tc.type();
        if (tc.has_function()) {
          ojson fn = ojson::object();
          fn["name"] = tc.function().name();
          if (!tc.function().arguments().empty()) fn["arguments"] = tc.function().arguments();
          c["function"] = std::move(fn);
        }
        calls.push_back(std::move(c));
      }
      o["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) o["tool_call_id"] = m.tool_call_id();
    msgs.push_back(std::move(o));
  }
  return msgs;
}

// The tools as the OpenAI body writes them: {"type", "function": {"name", "description", "parameters",
// "strict"}}, unset fields absent.
absl::StatusOr<ojson> tools_json(const v1::GenerateRequest& req) {
  ojson tools = ojson::array();
  for (int i = 0; i < req.tools_size(); ++i) {
    const v1::Tool& t = req.tools(i);
    ojson fn = ojson::object();
    fn["name"] = t.function().name();
    if (t.function().has_description()) fn["description"] = t.function().description();
    if (!t.function().parameters().empty()) {
      absl::StatusOr<ojson> p =
          json_object_field(absl::StrCat("tools[", i, "].function.parameters"), t.function().parameters());
      if (!p.ok()) return p.status();
      fn["parameters"] = *std::move(p);
    }
    if (t.function().has_strict()) fn["strict"] = t.function().strict();
    ojson o = ojson::object();
    o["type"] = t.type().empty() ? "function" : t.type();
    o["function"] = std::move(fn);
    tools.push_back(std::move(o));
  }
  return tools;
}

absl::Status status_of(const oa::ApiError& e) {
  // 400 and 413 (content over limits.max_prompt_bytes) are both the client's input.
  return e.http == 400 || e.http == 413 ? invalid(e.message) : absl::InternalError(e.message);
}

}  // namespace

absl::Status apply_chat(const v1::GenerateRequest& req, const oa::PromptSource& src,
                        const LimitsSection& limits, GenerationRequest* out, GrpcChat* chat) {
  if (!src.chat)
    return absl::FailedPreconditionError(
        absl::StrCat("messages: chat is not available for this model: ", src.chat_unavailable));
  oa::ParsedRequest p;
  p.endpoint = oa::Endpoint::kChat;
  if (std::optional<oa::ApiError> e = oa::parse_chat_messages(
          messages_json(req), static_cast<size_t>(limits.max_prompt_bytes), &p.messages))
    return status_of(*e);
  std::optional<ojson> tools, choice, parallel;
  if (req.tools_size() > 0) {
    absl::StatusOr<ojson> t = tools_json(req);
    if (!t.ok()) return t.status();
    tools = *std::move(t);
  }
  if (req.has_tool_choice()) {
    const v1::ToolChoice& c = req.tool_choice();
    switch (c.choice_case()) {
      case v1::ToolChoice::kMode:
        switch (c.mode()) {
          case v1::TOOL_CHOICE_MODE_UNSPECIFIED:
          case v1::TOOL_CHOICE_MODE_AUTO:
            choice = "auto";
            break;
          case v1::TOOL_CHOICE_MODE_NONE:
            choice = "none";
            break;
          case v1::TOOL_CHOICE_MODE_REQUIRED:
            choice = "required";
            break;
          default:
            return invalid(absl::StrCat("tool_choice.mode: unknown value ", static_cast<int>(c.mode()),
                                        " (expected TOOL_CHOICE_MODE_AUTO|NONE|REQUIRED)"));
        }
        break;
      case v1::ToolChoice::kFunction:
        choice = ojson{{"type", "function"}, {"function", {{"name", c.function()}}}};
        break;
      case v1::ToolChoice::CHOICE_NOT_SET:
        break;
    }
  }
  if (req.has_parallel_tool_calls()) parallel = req.parallel_tool_calls();
  if (std::optional<oa::ApiError> e = oa::parse_tools(tools ? &*tools : nullptr, choice ? &*choice : nullptr,
                                                      parallel ? &*parallel : nullptr, &p.tools))
    return status_of(*e);
  if (!req.chat_template_kwargs().empty()) {
    absl::StatusOr<ojson> k = json_object_field("chat_template_kwargs", req.chat_template_kwargs());
    if (!k.ok()) return k.status();
    p.template_kwargs = *std::move(k);
  }
  if (req.has_add_generation_prompt()) p.add_generation_prompt = req.add_generation_prompt();

  std::variant<std::vector<oa::BuiltPrompt>, oa::ApiError> built = oa::build_prompts(p, src, limits);
  if (auto* e = std::get_if<oa::ApiError>(&built)) return status_of(*e);
  oa::BuiltPrompt& b = std::get<std::vector<oa::BuiltPrompt>>(built).front();
  out->prompt.clear();
  out->prompt_ids = std::move(b.ids);
  out->add_bos = false;
  if (!req.sampling().has_max_new_tokens())
    out->params.max_new_tokens =
        oa::default_chat_max_tokens(static_cast<int64_t>(out->prompt_ids.size()), src.max_context, limits);

  const oa::ConstraintRequest forced = oa::tool_constraint(p.tools);
  if (forced.kind != oa::ConstraintRequest::Kind::kNone) {
    if (out->constraint.kind != constrain::ConstraintSpec::Kind::kNone)
      return invalid(
          "tool_choice: a forced tool call is itself a constraint; sampling's constraint is another (at most "
          "one per request)");
    out->constraint.kind = static_cast<constrain::ConstraintSpec::Kind>(static_cast<int>(forced.kind));
    out->constraint.text = forced.text;
    chat->constraint_field = forced.field;
  }
  chat->id_format = src.chat->tool_format();
  chat->tool_format =
      p.tools.any() ? oa::output_format(p.tools, src.chat->tool_format()) : ToolCallFormat::kNone;
  chat->forced_name = oa::forced_name(p.tools);
  return absl::OkStatus();
}

void add_tool_calls(const GrpcChat& chat, const std::string& text, v1::Final* f) {
  if (chat.tool_format == ToolCallFormat::kNone) return;
  ToolCallOutput parsed = parse_tool_calls(chat.tool_format, text, chat.forced_name);
  if (parsed.calls.empty()) return;
  for (const ToolCall& c : parsed.calls) {
    v1::ToolCall* t = f->add_tool_calls();
    t->set_id(oa::new_tool_call_id(chat.id_format));
    t->set_type("function");
    t->mutable_function()->set_name(c.name);
    t->mutable_function()->set_arguments(c.arguments);
  }
  f->set_content(parsed.content);
  f->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
}

}  // namespace frost::server
