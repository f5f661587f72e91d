#include "server/http_server.h"

#include <chrono>
#include <ctime>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "server/openai_api.h"
#include "server/openai_render.h"
#include "server/http_exchange.h"

namespace frost::server {

using json = nlohmann::json;
using namespace http_internal;  // NOLINT: this file is the exchange's main user

namespace {

const char* rpc_name(oa::Endpoint ep) { return ep == oa::Endpoint::kCompletions ? "completions" : "chat.completions"; }

// The front's own refusals (400, 404, 405, 408, 413, 415, 417, 431, 500, 501, 505) as OpenAI error objects.
HttpErrorBody api_error_body(int status, const std::string& message) {
  oa::ApiError e;
  e.http = status;
  e.message = oa::utf8_for_json(message);
  if (status == 404) {
    e.type = "not_found_error";
    e.message += " (POST /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/responses, /tokenize, "
                 "/detokenize, /v1/completions/render, /v1/chat/completions/render; GET /v1/models, /health)";
  } else if (status >= 500 && status != 501 && status != 505) {
    e.type = "internal_error";
  }
  return HttpErrorBody{"application/json", oa::error_body(e)};
}

}  // namespace

OpenAiHttpServer::~OpenAiHttpServer() { stop(); }

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::start(const ServerConfig& cfg, Metrics* metrics,
                                                                         const Authenticator* auth, TlsReloader* tls) {
  std::unique_ptr<OpenAiHttpServer> s(new OpenAiHttpServer(cfg, metrics, auth));
  const HttpSection& h = cfg.server.http;
  HttpFront::Options o;
  o.listen_field = "server.http.listen";
  o.endpoint = "the OpenAI API";
  o.thread_name = "frost-http";
  HttpFrontLimits& lim = o.limits;
  lim.max_connections = h.max_connections;
  lim.max_connections_per_address = h.max_connections_per_address;
  lim.max_head_bytes = static_cast<size_t>(h.max_header_bytes);
  lim.max_request_line = std::min<size_t>(lim.max_head_bytes, 8192);
  lim.max_headers = 100;
  lim.max_body_bytes = static_cast<uint64_t>(h.max_body_bytes);
  lim.head_timeout_s = h.head_timeout_s;
  lim.body_timeout_s = h.read_timeout_s;
  lim.write_timeout_s = h.read_timeout_s;
  lim.idle_timeout_s = h.keep_alive_timeout_s;
  o.routes = s->routes();
  o.error_body = api_error_body;
  o.on_refused = [metrics](const char* reason) {
    if (metrics) metrics->record_http_refused(reason);
  };
  absl::StatusOr<std::unique_ptr<HttpFront>> front = HttpFront::start(h.listen, tls, std::move(o));
  if (!front.ok()) return front.status();
  s->front_ = *std::move(front);
  FROST_LOG_INFO("frostd: OpenAI API listening on %s (port %d)%s", h.listen.c_str(), s->front_->port(),
                 tls ? " over TLS" : "");
  return s;
}

void OpenAiHttpServer::stop() {
  draining_.store(true);
  if (front_) front_->stop();
}

std::shared_ptr<const OpenAiHttpServer::Served> OpenAiHttpServer::served() const {
  absl::MutexLock l(&mu_);
  return served_;
}

std::string OpenAiHttpServer::chat_unavailable_reason() const {
  std::shared_ptr<const Served> s = served();
  return s ? s->prompts.chat_unavailable : "the model is loading";
}

void OpenAiHttpServer::set_engine(std::shared_ptr<Engine> engine,
                                  std::shared_ptr<const oa::PromptSource> prompts) {
  auto s = std::make_shared<Served>();
  s->engine = engine;
  s->created = static_cast<int64_t>(std::time(nullptr));
  if (engine) {
    const LoadedModel& m = engine->model();
    s->model_name = m.name;
    s->prompts = prompts ? *prompts
                         : oa::make_prompt_source(m.tokenizer.get(), m.name, m.source,
                                                  cfg_.model.chat_template, engine->max_context());
    if (!s->prompts.chat_unavailable.empty())
      FROST_LOG_INFO("frostd: /v1/chat/completions refused: %s", s->prompts.chat_unavailable.c_str());
  }
  absl::MutexLock l(&mu_);
  served_ = std::move(s);
}

std::vector<HttpRoute> OpenAiHttpServer::routes() {
  using oa::Endpoint;
  return {
      {"POST", "/v1/completions",
       [this](const HttpRequest& req, HttpResponse& res) {
         handle_generate(Endpoint::kCompletions, req, res);
       }},
      {"POST", "/v1/chat/completions",
       [this](const HttpRequest& req, HttpResponse& res) { handle_generate(Endpoint::kChat, req, res); }},
      {"POST", "/v1/responses", [this](const HttpRequest& req, HttpResponse& res) { handle_responses(req, res); }},
      {"GET", "/v1/models", [this](const HttpRequest& req, HttpResponse& res) { handle_models(req, res); }},
      {"POST", "/tokenize", [this](const HttpRequest& req, HttpResponse& res) { handle_utility("tokenize", req, res); }},
      {"POST", "/detokenize",
       [this](const HttpRequest& req, HttpResponse& res) { handle_utility("detokenize", req, res); }},
      {"POST", "/v1/completions/render",
       [this](const HttpRequest& req, HttpResponse& res) { handle_utility("completions", req, res); }},
      {"POST", "/v1/chat/completions/render",
       [this](const HttpRequest& req, HttpResponse& res) { handle_utility("chat", req, res); }},
      {"POST", "/v1/embeddings", [this](const HttpRequest& req, HttpResponse& res) { handle_embeddings(req, res); }},
      {"GET", "/health", [this](const HttpRequest& req, HttpResponse& res) { handle_health(req, res); }},
  };
}

void OpenAiHttpServer::handle_health(const HttpRequest&, HttpResponse& res) {
  const std::shared_ptr<const Served> sv = served();
  const bool ok = sv && sv->engine && !draining_.load();
  res.send(ok ? 200 : 503, "application/json", ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}");
}

std::variant<std::shared_ptr<const OpenAiHttpServer::Served>, oa::ApiError> OpenAiHttpServer::serving(
    const HttpRequest& req, bool refuse_while_draining, const char* method) const {
  if (auth_ && method != nullptr) {  // the Authorization header as gRPC's metadata
    if (absl::Status st = auth_->check(method, req.header("Authorization")); !st.ok())
      return oa::error_from_status(st);
  }
  std::shared_ptr<const Served> s = served();
  if (refuse_while_draining && draining_.load(std::memory_order_acquire))
    return oa::error_from_status(absl::UnavailableError("server is draining"));
  if (!s || !s->engine) return oa::error_from_status(absl::UnavailableError("the model is loading"));
  return s;
}

void OpenAiHttpServer::handle_models(const HttpRequest& req, HttpResponse& res) {
  const int64_t t0 = RealClock::get().now_ns();
  auto finish = [&](int http) {
    if (metrics_) metrics_->record_request("models", static_cast<grpc::StatusCode>(oa::grpc_code_for_http(http)),
                                           seconds_since(t0), "http");
  };
  std::variant<std::shared_ptr<const Served>, oa::ApiError> sv = serving(req, /*refuse_while_draining=*/false);
  if (auto* e = std::get_if<oa::ApiError>(&sv)) {
    send_error(res, *e);
    return finish(e->http);
  }
  const std::shared_ptr<const Served>& s = std::get<std::shared_ptr<const Served>>(sv);
  res.send(200, "application/json", oa::models_response(s->model_name, s->created).dump());
  finish(200);
}

void OpenAiHttpServer::handle_generate(oa::Endpoint ep, const HttpRequest& req, HttpResponse& res) {
  const int64_t t0 = RealClock::get().now_ns();
  std::variant<Submitted, oa::ApiError> sub = parse_and_submit(ep, req, t0);
  if (auto* e = std::get_if<oa::ApiError>(&sub)) {
    send_error(res, *e);
    if (metrics_)
      metrics_->record_request(rpc_name(ep), static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e->http)),
                               seconds_since(t0), "http");
    return;
  }
  active_.fetch_add(1);
  const Submitted& s = std::get<Submitted>(sub);
  bool gone = false;
  grpc::StatusCode code = grpc::StatusCode::CANCELLED;
  if (std::optional<oa::ApiError> refused = await_admission(s, res, &gone)) {
    // Refused after submit (its constraint did not compile): answered like a refusal at submit.
    code = send_error(res, *refused) ? static_cast<grpc::StatusCode>(oa::grpc_code_for_http(refused->http))
                                     : grpc::StatusCode::CANCELLED;
  } else if (!gone) {
    code = stream_response(s, res);
  }
  s.ex->cancel_all();  // no-op when every choice finished; a client that went stops its requests
  if (metrics_) metrics_->record_request(rpc_name(ep), code, seconds_since(t0), "http");
  active_.fetch_sub(1);
}

std::variant<OpenAiHttpServer::Submitted, oa::ApiError> OpenAiHttpServer::parse_and_submit(
    oa::Endpoint ep, const HttpRequest& req, int64_t t0) {
  std::variant<std::shared_ptr<const Served>, oa::ApiError> sv = serving(req, /*refuse_while_draining=*/true);
  if (auto* e = std::get_if<oa::ApiError>(&sv)) return *e;
  const std::shared_ptr<const Served>& s = std::get<std::shared_ptr<const Served>>(sv);

  std::variant<oa::ParsedRequest, oa::ApiError> parsed = oa::parse_request(ep, req.body, cfg_.limits,
                                                                            sampling_defaults(s->engine->model().generation));
  if (auto* e = std::get_if<oa::ApiError>(&parsed)) return *e;
  oa::ParsedRequest& p = std::get<oa::ParsedRequest>(parsed);
  if (std::optional<oa::ApiError> e = oa::check_model(p.model, s->model_name, cfg_.model.path)) return *e;

  return submit(std::move(p), s, t0);
}

std::variant<OpenAiHttpServer::Submitted, oa::ApiError> OpenAiHttpServer::submit(oa::ParsedRequest p,
                                                                                 const std::shared_ptr<const Served>& s,
                                                                                 int64_t t0) {
  const oa::Endpoint ep = p.endpoint;
  std::variant<std::vector<oa::BuiltPrompt>, oa::ApiError> built = oa::build_prompts(p, s->prompts, cfg_.limits);
  if (auto* e = std::get_if<oa::ApiError>(&built)) return *e;
  const std::vector<oa::BuiltPrompt>& prompts = std::get<std::vector<oa::BuiltPrompt>>(built);
  const int total = static_cast<int>(prompts.size()) * p.n;

  GenerationRequest gen;
  gen.params = p.params;
  if (ep == oa::Endpoint::kChat && !p.max_tokens_set)
    gen.params.max_new_tokens =
        oa::default_chat_max_tokens(static_cast<int64_t>(prompts[0].ids.size()), s->prompts.max_context, cfg_.limits);
  gen.spec_method = p.spec_method;
  gen.spec_num_tokens = p.spec_num_tokens;
  if (p.constraint.kind != oa::ConstraintRequest::Kind::kNone) {
    gen.constraint.kind = static_cast<constrain::ConstraintSpec::Kind>(static_cast<int>(p.constraint.kind));
    gen.constraint.text = p.constraint.text;
  }

  auto ex = std::make_shared<Exchange>();
  ex->t0_ns = t0;
  {
    absl::MutexLock l(&ex->mu);
    ex->pending.resize(static_cast<size_t>(total));
    ex->choices.resize(static_cast<size_t>(total));
    for (int i = 0; i < total; ++i) ex->choices[static_cast<size_t>(i)].prompt_index = i / p.n;
    ex->finish_sent.assign(static_cast<size_t>(total), 0);
    ex->started.assign(static_cast<size_t>(total), 0);
    ex->refused.assign(static_cast<size_t>(total), 0);
  }
  for (int i = 0; i < total; ++i) ex->cancels.push_back(std::make_shared<CancelToken>());
  for (int i = 0; i < total; ++i) {
    // Choice j of prompt k (OpenAI's and vLLM's order: prompt-major); seeds per choice j, so a batch gives what
    // the same prompts sent one by one give.
    const oa::BuiltPrompt& b = prompts[static_cast<size_t>(i / p.n)];
    const int j = i % p.n;
    GenerationRequest gi = gen;
    gi.prompt = b.text;
    gi.prompt_ids = b.ids;
    gi.add_bos = b.add_bos;
    if (gi.params.seed && j > 0) gi.params.seed = *gi.params.seed + static_cast<uint64_t>(j);
    absl::Status st =
        s->engine->submit(gi, std::make_shared<ChoiceSink>(ex, i, p.logprobs, metrics_), ex->cancels[i]);
    if (!st.ok()) {
      ex->cancel_all();  // the choices already submitted end within a step
      if (metrics_) metrics_->record_rejected(reject_reason(st));
      return api_error(ep, st, p.constraint.field);
    }
  }

  const oa::ResponseMeta meta{absl::StrCat(ep == oa::Endpoint::kCompletions ? "cmpl-" : "chatcmpl-",
                                           static_cast<uint64_t>(t0), "-", next_id_.fetch_add(1)),
                              static_cast<int64_t>(std::time(nullptr)), s->model_name};
  Submitted sub;
  sub.ep = ep;
  sub.ex = std::move(ex);
  sub.meta = meta;
  sub.engine = s->engine;
  sub.n = total;
  sub.stream = p.stream;
  if (ep == oa::Endpoint::kChat && s->prompts.chat) {
    sub.tool_format = oa::output_format(p.tools, s->prompts.chat->tool_format());
    sub.id_format = s->prompts.chat->tool_format();
    if (!p.tools.any()) sub.tool_format = ToolCallFormat::kNone;
    sub.forced_name = oa::forced_name(p.tools);
    for (int i = 0; i < total; ++i) sub.tool_streams.emplace_back(sub.tool_format, sub.forced_name);
    sub.calls_sent.assign(static_cast<size_t>(total), 0);
  }
  sub.include_usage = p.include_usage;
  sub.logprobs = p.logprobs;
  sub.constraint_field = p.constraint.field;
  return sub;
}

std::optional<oa::ApiError> OpenAiHttpServer::await_admission(const Submitted& sub, HttpResponse& res, bool* gone) {
  Exchange& ex = *sub.ex;
  for (;;) {
    {
      absl::MutexLock l(&ex.mu);
      auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex.mu) { return ex.admitted + ex.finished >= sub.n; };
      if (!settled()) ex.cv.WaitWithTimeout(&ex.mu, absl::Milliseconds(kPollMs));
      if (settled()) {
        for (int i = 0; i < sub.n; ++i) {
          if (!ex.refused[static_cast<size_t>(i)]) continue;
          if (metrics_) metrics_->record_rejected(reject_reason(ex.error));
          return api_error(sub.ep, ex.error, sub.constraint_field);
        }
        return std::nullopt;
      }
    }
    if (res.client_gone()) {  // the caller cancels: a compile stops within milliseconds (constraint_compiler.h)
      *gone = true;
      return std::nullopt;
    }
  }
}

namespace {

// The SSE chunks of one batch of a chat choice whose output is parsed for tool calls: content and completed calls
// as the parser releases them, then (on the choice's end) what finish() releases and the finish chunk.
std::string tool_chunks_of(const oa::ResponseMeta& meta, ToolCallStream& parser, int& calls_sent, int index,
                           ToolCallFormat id_format, const std::vector<TokenEvent>& events, bool first,
                           const std::optional<FinishReason>& fin, bool logprobs, const oa::TokenText& token_text) {
  std::string text;
  for (const TokenEvent& ev : events) text += ev.text;
  ToolCallStream::Delta d = parser.feed(text);
  if (fin) {
    ToolCallStream::Delta rest = parser.finish();
    d.content += rest.content;
    for (ToolCall& c : rest.calls) d.calls.push_back(std::move(c));
  }
  std::vector<std::string> ids;
  for (size_t k = 0; k < d.calls.size(); ++k) ids.push_back(oa::new_tool_call_id(id_format));
  std::string out;
  const int before = calls_sent;
  calls_sent += static_cast<int>(d.calls.size());
  if (!d.content.empty() || !d.calls.empty() || first || (logprobs && !events.empty())) {
    out += sse(oa::tool_stream_chunk(meta, index, events, first, d.content, d.calls, ids, before, std::nullopt,
                                     false, logprobs, token_text));
  }
  if (fin)
    out += sse(oa::tool_stream_chunk(meta, index, {}, false, "", {}, {}, 0, fin, calls_sent > 0, false, token_text));
  return out;
}

}  // namespace

std::string OpenAiHttpServer::tool_chunks(const Submitted& sub, int i, const std::vector<TokenEvent>& events,
                                          bool first, const std::optional<FinishReason>& fin,
                                          const oa::TokenText& token_text) {
  return tool_chunks_of(sub.meta, sub.tool_streams[static_cast<size_t>(i)], sub.calls_sent[static_cast<size_t>(i)], i,
                        sub.id_format, events, first, fin, sub.logprobs, token_text);
}

grpc::StatusCode OpenAiHttpServer::stream_response(const Submitted& sub, HttpResponse& res) {
  Exchange& ex = *sub.ex;
  const std::shared_ptr<Engine>& engine = sub.engine;
  // A checkpoint without a tokenizer serves token-id prompts; its logprobs name each token as vLLM's
  // --return-tokens-as-token-ids does ("token_id:42"), instead of dereferencing the absent tokenizer.
  const oa::TokenText token_text = [&engine](int32_t id) {
    const Tokenizer* tok = engine->model().tokenizer.get();
    return tok ? tok->token_bytes(id) : absl::StrCat("token_id:", id);
  };
  if (sub.stream && !res.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}}))
    return grpc::StatusCode::CANCELLED;
  for (;;) {
    const Batch b = next_batch(ex, sub.stream, sub.n, absl::Milliseconds(kPollMs));
    if (b.events.empty() && !b.all_done) {
      if (res.client_gone()) return grpc::StatusCode::CANCELLED;
      continue;
    }
    if (!sub.stream) {  // every choice has finished: the whole response, or the error
      if (!b.error.ok()) {
        const oa::ApiError e = api_error(sub.ep, b.error, sub.constraint_field);
        return send_error(res, e) ? static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http))
                                  : grpc::StatusCode::CANCELLED;
      }
      std::string body;
      {
        absl::MutexLock l(&ex.mu);
        if (sub.tool_format != ToolCallFormat::kNone) {
          for (oa::ChoiceState& c : ex.choices) {
            ToolCallOutput parsed = parse_tool_calls(sub.tool_format, c.text, sub.forced_name);
            if (parsed.calls.empty()) continue;
            c.text = std::move(parsed.content);
            c.calls = std::move(parsed.calls);
            for (size_t k = 0; k < c.calls.size(); ++k) c.call_ids.push_back(oa::new_tool_call_id(sub.id_format));
          }
        }
        body = oa::full_response(sub.ep, sub.meta, ex.choices, sub.logprobs, token_text)
                   .dump(-1, ' ', false, json::error_handler_t::replace);
      }
      return res.send(200, "application/json", body) ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED;
    }
    std::string out;
    for (size_t k = 0; k < b.events.size(); ++k) {
      const auto& [i, events] = b.events[k];
      std::optional<FinishReason> fin;
      for (const auto& [j, r] : b.ended)
        if (j == i) fin = r;
      if (sub.tool_format != ToolCallFormat::kNone) {
        out += tool_chunks(sub, i, events, b.first[k], fin, token_text);
        continue;
      }
      // A finished choice with a last batch of events: the events first, then the finish on its own chunk
      // (chat clients expect content and finish_reason apart).
      if (fin && !events.empty()) {
        out += sse(oa::stream_chunk(sub.ep, sub.meta, i, events, b.first[k], std::nullopt, sub.logprobs,
                                    token_text));
        out += sse(oa::stream_chunk(sub.ep, sub.meta, i, {}, false, fin, false, token_text));
      } else {
        out += sse(oa::stream_chunk(sub.ep, sub.meta, i, events, b.first[k], fin, sub.logprobs, token_text));
      }
    }
    if (b.all_done) {
      if (!b.error.ok()) {
        out += sse(json::parse(oa::error_body(api_error(sub.ep, b.error, sub.constraint_field))));
      } else if (sub.include_usage) {
        absl::MutexLock l(&ex.mu);
        out += sse(oa::usage_chunk(sub.ep, sub.meta, ex.choices));
      }
      out += "data: [DONE]\n\n";
    }
    if (!res.write(out)) return grpc::StatusCode::CANCELLED;
    if (b.all_done) return res.finish() ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED;
    if (res.client_gone()) return grpc::StatusCode::CANCELLED;
  }
}

}  // namespace frost::server
