// Fuzz target: a client's body for the OpenAI-compatible API (server/openai_api.h parse_request), and the chat
// messages it carries rendered through a chat template (core/model/chat_template.h) as /v1/chat/completions does.
//
// Input: byte 0 picks the endpoint (bit 0: completions / chat); the rest is the request body as a client sent it.
// Promises checked:
//   - a refusal is a 4xx with a message (never an empty one, never a 5xx);
//   - nothing recurses on the client's nesting: a body deeper than kMaxRequestJsonDepth is refused while it is
//     parsed (the seeds hold 100,000-level documents), so no stack overflow whatever the shape;
//   - accepted chat messages and tools render (or are refused with a Status) under the template's work bounds;
//   - a forced tool choice's constraint (a schema assembled from the tools) is valid JSON.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "core/model/chat_template.h"
#include "server/openai_api.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A ChatML template that walks what a client controls: roles, contents, tool calls (their arguments printed with
// tojson, as the families' templates do) and the tools list.
constexpr const char* kTemplate =
    "{% for t in tools or [] %}{{ t | tojson }}\n{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content is string %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost::server;
  if (size < 1) return 0;
  static const auto* chat = new frost::ChatTemplate(*frost::ChatTemplate::parse(kTemplate));
  const openai::Endpoint ep = (data[0] & 1) ? openai::Endpoint::kChat : openai::Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  LimitsSection limits;
  std::variant<openai::ParsedRequest, openai::ApiError> r = openai::parse_request(ep, body, limits);
  if (const auto* e = std::get_if<openai::ApiError>(&r)) {
    FROST_FUZZ_CHECK(e->http >= 400 && e->http < 500, std::to_string(e->http) + " " + e->message);
    FROST_FUZZ_CHECK(!e->message.empty(), "a refusal without a message");
    return 0;
  }
  const auto& p = std::get<openai::ParsedRequest>(r);
  if (ep == openai::Endpoint::kChat) {
    nlohmann::ordered_json vars{{"messages", p.messages}, {"add_generation_prompt", true}};
    if (p.tools.any()) vars["tools"] = p.tools.tools;
    (void)chat->render_json(vars.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    // A forced tool choice's constraint is a schema built from the client's parameters: its text is valid JSON.
    if (p.constraint.kind == openai::ConstraintRequest::Kind::kJsonSchema) {
      const auto doc = nlohmann::json::parse(p.constraint.text, nullptr, false);
      FROST_FUZZ_CHECK(!doc.is_discarded(), "a constraint that is not JSON: " + p.constraint.text.substr(0, 200));
    }
  }
  return 0;
}
