// The OpenAI endpoint's prompt utilities (server/http_server.h): POST /tokenize and /detokenize in vLLM's
// shapes, and POST /v1/completions/render and /v1/chat/completions/render — the token ids a completions or
// chat request would run, computed by the same code that submits it (openai_render.h), so a router's prefix
// scorer and the engine agree to the token.
//
//   /tokenize    {model?, prompt, add_special_tokens (default true: BOS), return_token_strs?} or
//                {model?, messages, tools?, add_generation_prompt?, chat_template_kwargs?, add_special_tokens
//                (default false: the template writes BOS), return_token_strs?}
//                → {count, max_model_len, tokens, token_strs (null unless asked)}
//   /detokenize  {model?, tokens} → {prompt} (Tokenizer::decode: special tokens skipped, as vLLM)
//   /v1/completions/render       a completions body → [{model, prompt_index, token_ids, count, max_model_len,
//                                 max_tokens}] (one per prompt of a batch)
//   /v1/chat/completions/render  a chat body → {model, prompt (the rendered template text), token_ids, count,
//                                 max_model_len, max_tokens}
// Errors are OpenAI's error object, fields named as the generating endpoints name them.
#include <set>

#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/json.h"
#include "server/http_exchange.h"
#include "server/http_server.h"

namespace frost::server {

using json = nlohmann::json;
using namespace http_internal;  // NOLINT: the exchange's helpers

namespace {

// `body` with "model": `name` added when the body has none (the tokenize endpoints make model optional).
std::string with_model(const std::string& body, const json& doc, const std::string& name) {
  if (doc.contains("model")) return body;
  const size_t brace = body.find('{');
  std::string out = body;
  const bool empty = doc.empty();
  out.insert(brace + 1, absl::StrCat("\"model\":", json(name).dump(), empty ? "" : ","));
  return out;
}

}  // namespace

std::variant<json, oa::ApiError> OpenAiHttpServer::utility_answer(const std::string& route,
                                                                  const HttpRequest& req) {
  // auth.open_render: the render routes (not /tokenize, /detokenize) without a token, for a router's
  // tokenizer.
  const bool open = cfg_.auth.open_render && route != "tokenize" && route != "detokenize";
  std::variant<std::shared_ptr<const Served>, oa::ApiError> sv =
      serving(req, /*refuse_while_draining=*/false, open ? nullptr : "/frost.v1.Generation/Generate");
  if (auto* e = std::get_if<oa::ApiError>(&sv)) return *e;
  const std::shared_ptr<const Served>& s = std::get<std::shared_ptr<const Served>>(sv);
  const oa::PromptSource& src = s->prompts;
  json doc;
  if (std::optional<std::string> err = parse_json_bounded(req.body, oa::kMaxRequestJsonDepth, &doc))
    return oa::bad_request("", absl::StrCat("the body is not valid JSON (", *err, ")"));
  if (!doc.is_object()) return oa::bad_request("", "the body must be a JSON object");
  if (doc.contains("model") && !doc["model"].is_null()) {
    if (!doc["model"].is_string()) return oa::bad_request("model", "model: expected a string");
    if (std::optional<oa::ApiError> e = oa::check_model(doc["model"], s->model_name, cfg_.model.path))
      return *e;
  }
  const SamplingParams defaults = sampling_defaults(s->engine->model().generation);
  auto flag = [&](const char* key, bool dflt) -> std::variant<bool, oa::ApiError> {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) return oa::bad_request(key, absl::StrCat(key, ": expected a boolean"));
    return it->get<bool>();
  };

  if (route == "detokenize") {
    for (auto it = doc.begin(); it != doc.end(); ++it)
      if (it.key() != "model" && it.key() != "tokens")
        return oa::bad_request(
            it.key(), absl::StrCat("unrecognized request argument supplied: ", oa::utf8_for_json(it.key())));
    if (!src.tok)
      return oa::error_from_status(absl::FailedPreconditionError("the served model has no tokenizer"));
    auto it = doc.find("tokens");
    if (it == doc.end() || !it->is_array())
      return oa::bad_request("tokens", "tokens: required, a list of token ids");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= src.tok->vocab_size())
        return oa::bad_request("tokens", absl::StrCat("tokens[", i, "]: expected a token id in [0, ",
                                                      src.tok->vocab_size(), "), got ", t.dump()));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return json{{"prompt", oa::utf8_for_json(src.tok->decode(ids))}};
  }

  const bool tokenize = route == "tokenize";
  const bool chat = tokenize ? doc.contains("messages") : route == "chat";
  const oa::Endpoint ep = chat ? oa::Endpoint::kChat : oa::Endpoint::kCompletions;
  bool add_special = !chat, token_strs = false;
  if (tokenize) {
    for (auto [key, out] :
         {std::pair{"add_special_tokens", &add_special}, std::pair{"return_token_strs", &token_strs}}) {
      std::variant<bool, oa::ApiError> v = flag(key, *out);
      if (auto* e = std::get_if<oa::ApiError>(&v)) return *e;
      *out = std::get<bool>(v);
    }
  }
  static const std::set<std::string> kTokenizeFields = {"add_special_tokens", "return_token_strs"};
  std::variant<oa::ParsedRequest, oa::ApiError> parsed =
      oa::parse_request(ep, tokenize ? with_model(req.body, doc, s->model_name) : req.body, cfg_.limits,
                        defaults, tokenize ? &kTokenizeFields : nullptr);
  if (auto* e = std::get_if<oa::ApiError>(&parsed)) return *e;
  oa::ParsedRequest& p = std::get<oa::ParsedRequest>(parsed);
  if (std::optional<oa::ApiError> e = oa::check_model(p.model, s->model_name, cfg_.model.path)) return *e;
  if (tokenize && !chat) {
    if (p.prompts.size() != 1 || !p.prompts[0].ids.empty())
      return oa::bad_request("prompt", "prompt: /tokenize takes one text prompt");
    p.prompts[0].ids.clear();
  }
  std::variant<std::vector<oa::BuiltPrompt>, oa::ApiError> built = oa::build_prompts(p, src, cfg_.limits);
  if (auto* e = std::get_if<oa::ApiError>(&built)) return *e;
  std::vector<oa::BuiltPrompt>& prompts = std::get<std::vector<oa::BuiltPrompt>>(built);
  json items = json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    oa::BuiltPrompt& b = prompts[i];
    if (tokenize) {
      if (!chat) b.add_bos = add_special;
      if (chat && add_special && src.tok && src.tok->bos_id() >= 0)
        b.ids.insert(b.ids.begin(), src.tok->bos_id());
    }
    absl::StatusOr<std::vector<int32_t>> ids = oa::prompt_ids(b, src);
    if (!ids.ok()) return oa::error_from_status(ids.status(), "prompt");
    const int64_t n = static_cast<int64_t>(ids->size());
    if (tokenize) {
      json strs = nullptr;
      if (token_strs) {
        strs = json::array();
        for (int32_t id : *ids) strs.push_back(oa::utf8_for_json(src.tok ? src.tok->id_to_piece(id) : ""));
      }
      return json{{"count", n}, {"max_model_len", src.max_context}, {"tokens", *ids}, {"token_strs", strs}};
    }
    const int32_t max_tokens = chat && !p.max_tokens_set
                                   ? oa::default_chat_max_tokens(n, src.max_context, cfg_.limits)
                                   : p.params.max_new_tokens;
    json item = {{"model", s->model_name},
                 {"token_ids", *ids},
                 {"count", n},
                 {"max_model_len", src.max_context},
                 {"max_tokens", max_tokens}};
    if (chat) {
      item["prompt"] = oa::utf8_for_json(b.rendered);
      return item;
    }
    item["prompt_index"] = i;
    items.push_back(std::move(item));
  }
  return items;
}

void OpenAiHttpServer::handle_utility(const std::string& route, const HttpRequest& req, HttpResponse& res) {
  const int64_t t0 = RealClock::get().now_ns();
  std::variant<json, oa::ApiError> out = utility_answer(route, req);
  int http = 200;
  if (auto* e = std::get_if<oa::ApiError>(&out)) {
    http = e->http;
    send_error(res, *e);
  } else {
    res.send(200, "application/json",
             std::get<json>(out).dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (metrics_)
    metrics_->record_request(route == "tokenize" || route == "detokenize" ? route : route + ".render",
                             static_cast<grpc::StatusCode>(oa::grpc_code_for_http(http)), seconds_since(t0),
                             "http");
}

}  // namespace frost::server
