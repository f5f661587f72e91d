#include "server/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/clock.h"
#include "core/common/log.h"
#include "server/metrics_https.h"
#include "server/openai_api.h"

namespace frost::server {

namespace oa = openai;
using json = nlohmann::json;

struct OpenAiHttpServer::Served {
  std::shared_ptr<Engine> engine;
  std::string model_name;
  std::optional<ChatTemplate> chat;
  std::string chat_unavailable;  // why chat is refused, when it is
  std::vector<std::pair<std::string, int32_t>> specials;
  std::string bos, eos;
  int64_t created = 0;
};

namespace {

double seconds_since(int64_t t0_ns) { return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9; }

const char* rpc_name(oa::Endpoint ep) { return ep == oa::Endpoint::kCompletions ? "completions" : "chat.completions"; }

// One response's shared state: the engine's delivery thread appends, the HTTP worker drains.
struct Exchange {
  absl::Mutex mu;
  absl::CondVar cv;
  std::vector<std::deque<TokenEvent>> pending ABSL_GUARDED_BY(mu);
  std::vector<oa::ChoiceState> choices ABSL_GUARDED_BY(mu);
  std::vector<char> finish_sent ABSL_GUARDED_BY(mu);
  std::vector<char> started ABSL_GUARDED_BY(mu);
  int finished ABSL_GUARDED_BY(mu) = 0;
  absl::Status error ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<CancelToken>> cancels;  // set before any submit
  int64_t t0_ns = 0;
  bool first_token_seen ABSL_GUARDED_BY(mu) = false;
  int admitted ABSL_GUARDED_BY(mu) = 0;             // choices the engine queued (TokenSink::on_admitted)
  std::vector<char> refused ABSL_GUARDED_BY(mu);    // choices that ended before they were queued

  void cancel_all() {
    for (auto& c : cancels) c->cancel();
  }
};

class ChoiceSink final : public TokenSink {
 public:
  ChoiceSink(std::shared_ptr<Exchange> ex, int index, bool keep_events, Metrics* metrics)
      : ex_(std::move(ex)), index_(index), keep_events_(keep_events), metrics_(metrics) {}
  void on_admitted() override {
    absl::MutexLock l(&ex_->mu);
    admitted_ = true;
    ++ex_->admitted;
    ex_->cv.SignalAll();
  }
  void on_token(const TokenEvent& ev) override {
    absl::MutexLock l(&ex_->mu);
    if (ev.id >= 0 && !ex_->first_token_seen) {
      ex_->first_token_seen = true;
      if (metrics_) metrics_->record_time_to_first_token(seconds_since(ex_->t0_ns));
    }
    ex_->pending[index_].push_back(ev);
    ex_->choices[index_].text += ev.text;
    if (keep_events_) ex_->choices[index_].events.push_back(ev);
    ex_->cv.SignalAll();
  }
  void on_finish(absl::StatusOr<GenerationResult> result) override {
    absl::MutexLock l(&ex_->mu);
    if (result.ok()) {
      if (metrics_) {
        metrics_->record_generation(result->n_prompt, result->n_completion, result->t_queue_s,
                                    seconds_since(ex_->t0_ns), finish_reason_name(result->finish_reason));
      }
      ex_->choices[index_].result = *std::move(result);
    } else if (ex_->error.ok()) {
      ex_->error = result.status();
    }
    if (!admitted_) ex_->refused[index_] = 1;
    ++ex_->finished;
    ex_->cv.SignalAll();
  }

 private:
  std::shared_ptr<Exchange> ex_;
  int index_;
  bool keep_events_;
  Metrics* metrics_;
  bool admitted_ = false;  // under ex_->mu
};

std::string sse(const json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

void send_error(httplib::Response& res, const oa::ApiError& e) {
  res.status = e.http;
  res.set_content(oa::error_body(e), "application/json");
}

std::string read_file(const std::string& path, absl::Status* st) {
  constexpr int64_t kMaxTemplateBytes = 1 << 20;
  absl::StatusOr<std::string> text = frost::read_file(path, kMaxTemplateBytes, "1 MiB");  // a FIFO: refused
  if (!text.ok()) {
    *st = absl::Status(text.status().code(), absl::StrCat("model.chat_template: cannot read \"", path,
                                                          "\": ", text.status().message()));
    return "";
  }
  return *std::move(text);
}

// Debian's cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library):
// 32 clients connecting at once then lose SYNs and retry after a second. listen() on a listening socket only
// updates its backlog, so find ours (a listening socket of this process on `port`) and raise it.
void raise_listen_backlog(int port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = 0;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) listen(static_cast<int>(fd), SOMAXCONN);
  }
  closedir(d);
}

}  // namespace

std::vector<int32_t> encode_with_special_tokens(const Tokenizer& tok, const std::string& text,
                                                const std::vector<std::pair<std::string, int32_t>>& specials) {
  std::vector<int32_t> out;
  size_t pos = 0;
  auto encode_plain = [&](size_t from, size_t to) {
    if (to <= from) return;
    absl::StatusOr<std::vector<int32_t>> ids = tok.encode(std::string_view(text).substr(from, to - from), false);
    if (ids.ok()) out.insert(out.end(), ids->begin(), ids->end());
  };
  // next[j]: where specials[j] occurs next at or after `pos` (searched again only once `pos` has passed it),
  // so the text is scanned once per special token, not once per special token per occurrence.
  std::vector<size_t> next;
  next.reserve(specials.size());
  for (const auto& sp : specials) next.push_back(text.find(sp.first));
  while (pos < text.size()) {
    // The earliest special token's text from `pos` (the longest one at a tie).
    size_t best = std::string::npos, best_len = 0;
    int32_t best_id = -1;
    for (size_t j = 0; j < specials.size(); ++j) {
      const auto& [piece, id] = specials[j];
      if (next[j] != std::string::npos && next[j] < pos) next[j] = text.find(piece, pos);
      const size_t at = next[j];
      if (at == std::string::npos) continue;
      if (at < best || (at == best && piece.size() > best_len)) {
        best = at;
        best_len = piece.size();
        best_id = id;
      }
    }
    if (best == std::string::npos) {
      encode_plain(pos, text.size());
      break;
    }
    encode_plain(pos, best);
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

OpenAiHttpServer::OpenAiHttpServer(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
                                   TlsReloader* tls)
    : cfg_(cfg), metrics_(metrics), auth_(auth), tls_(tls) {}

OpenAiHttpServer::~OpenAiHttpServer() { stop(); }

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::start(const ServerConfig& cfg, Metrics* metrics,
                                                                         const Authenticator* auth, TlsReloader* tls) {
  std::unique_ptr<OpenAiHttpServer> s(new OpenAiHttpServer(cfg, metrics, auth, tls));
  if (tls) {
    // Every connection takes the identity staged now (server/tls.h rotation): the context cpp-httplib creates
    // only carries the protocol floor; the client-hello callback switches each connection to the staged one.
    OpenAiHttpServer* self = s.get();
    auto ssl = std::make_unique<httplib::SSLServer>([self](SSL_CTX& ctx) {
      SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
      SSL_CTX_set_client_hello_cb(
          &ctx,
          [](SSL* conn, int* alert, void* arg) -> int {
            auto* srv = static_cast<OpenAiHttpServer*>(arg);
            absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> staged = srv->tls_context();
            if (!staged.ok()) {
              *alert = SSL_AD_INTERNAL_ERROR;
              return SSL_CLIENT_HELLO_ERROR;
            }
            SSL_CTX* c = (*staged)->ctx;
            SSL_set_SSL_CTX(conn, c);
            SSL_set_verify(conn, SSL_CTX_get_verify_mode(c), nullptr);
            SSL_set1_verify_cert_store(conn, SSL_CTX_get_cert_store(c));
            if (STACK_OF(X509_NAME)* names = SSL_CTX_get_client_CA_list(c)) {
              SSL_set_client_CA_list(conn, SSL_dup_CA_list(names));
            }
            // Keep the context alive as long as the connection: SSL_set_SSL_CTX took a reference.
            return SSL_CLIENT_HELLO_SUCCESS;
          },
          self);
      return true;
    });
    if (!ssl->is_valid()) return absl::InternalError("server.http.listen: cannot set up TLS");
    s->http_ = std::move(ssl);
  } else {
    s->http_ = std::make_unique<httplib::Server>();
  }
  const int threads = cfg.server.http.max_connections;
  s->http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s->http_->set_payload_max_length(static_cast<size_t>(cfg.server.http.max_body_bytes));
  s->http_->set_read_timeout(cfg.server.http.read_timeout_s, 0);
  s->http_->set_write_timeout(cfg.server.http.read_timeout_s, 0);
  s->http_->set_keep_alive_timeout(5);
  // Every SSE event is a small write: without TCP_NODELAY, Nagle holds each one back until the client ACKs the
  // previous (40 ms delayed ACKs: measured 86 ms to the first token instead of 6).
  s->http_->set_tcp_nodelay(true);
  s->routes();

  const HostPort hp = split_host_port(cfg.server.http.listen);
  const std::string host = hp.host.empty() ? "0.0.0.0" : hp.host;
  int port = 0;
  if (hp.port == "0") {
    port = s->http_->bind_to_any_port(host);
  } else {
    port = s->http_->bind_to_port(host, std::stoi(hp.port)) ? std::stoi(hp.port) : -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("server.http.listen: cannot listen on \"", cfg.server.http.listen, "\""));
  }
  s->port_ = port;
  raise_listen_backlog(port);
  httplib::Server* http = s->http_.get();
  s->thread_ = std::thread([http] {
    pthread_setname_np(pthread_self(), "frost-http");
    http->listen_after_bind();
  });
  FROST_LOG_INFO("frostd: OpenAI API listening on %s (port %d)%s", cfg.server.http.listen.c_str(), port,
                 tls ? ", HTTPS" : "");
  return s;
}

void OpenAiHttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  draining_.store(true);
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

// The SSL_CTX of the identity staged now, built once per staged generation (not per connection).
absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> OpenAiHttpServer::tls_context() {
  const uint64_t gen = tls_->generation();
  {
    absl::MutexLock l(&tls_mu_);
    if (tls_ctx_ && tls_ctx_generation_ == gen) return tls_ctx_;
  }
  const TlsReloader::Staged id = tls_->staged();
  absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> ctx = build_tls_server_ctx(id);
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock l(&tls_mu_);
  if (!tls_ctx_ || id.generation >= tls_ctx_generation_) {
    tls_ctx_ = *ctx;
    tls_ctx_generation_ = id.generation;
  }
  return tls_ctx_;
}

std::shared_ptr<const OpenAiHttpServer::Served> OpenAiHttpServer::served() const {
  absl::MutexLock l(&mu_);
  return served_;
}

std::string OpenAiHttpServer::chat_unavailable_reason() const {
  std::shared_ptr<const Served> s = served();
  return s ? s->chat_unavailable : "the model is loading";
}

void OpenAiHttpServer::set_engine(std::shared_ptr<Engine> engine) {
  auto s = std::make_shared<Served>();
  s->engine = engine;
  s->created = static_cast<int64_t>(std::time(nullptr));
  if (engine) {
    const LoadedModel& m = engine->model();
    s->model_name = m.name;
    const Tokenizer* tok = m.tokenizer.get();
    if (tok) {
      for (int32_t id = 0; id < tok->vocab_size(); ++id) {
        if (!tok->is_special(id)) continue;
        std::string piece = tok->id_to_piece(id);
        if (!piece.empty()) s->specials.emplace_back(std::move(piece), id);
      }
      if (tok->bos_id() >= 0) s->bos = tok->id_to_piece(tok->bos_id());
      if (tok->eos_id() >= 0) s->eos = tok->id_to_piece(tok->eos_id());
    }
    // The chat template: model.chat_template, else the model's own files.
    absl::Status st;
    std::optional<std::string> source;
    if (!cfg_.model.chat_template.empty()) {
      source = read_file(cfg_.model.chat_template, &st);
    } else if (!absl::StartsWith(m.source, "builtin:")) {
      absl::StatusOr<std::optional<std::string>> own = load_chat_template_source(m.source);
      if (own.ok()) {
        source = *own;
      } else {
        st = own.status();
      }
    }
    if (!st.ok()) {
      s->chat_unavailable = std::string(st.message());
    } else if (!source) {
      s->chat_unavailable = absl::StrCat("the model ", m.name,
                                         " has no chat template (tokenizer_config.json chat_template or "
                                         "chat_template.jinja); set model.chat_template, or use /v1/completions");
    } else {
      absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(*source);
      if (t.ok()) {
        s->chat = *std::move(t);
      } else {
        s->chat_unavailable = std::string(t.status().message());
      }
    }
    if (!s->chat_unavailable.empty())
      FROST_LOG_INFO("frostd: /v1/chat/completions refused: %s", s->chat_unavailable.c_str());
  }
  absl::MutexLock l(&mu_);
  served_ = std::move(s);
}

void OpenAiHttpServer::routes() {
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(static_cast<int>(oa::Endpoint::kCompletions), req, res);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(static_cast<int>(oa::Endpoint::kChat), req, res);
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const std::shared_ptr<const Served> sv = served();
    const bool ok = sv && sv->engine && !draining_.load();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}", "application/json");
  });
  // Statuses cpp-httplib sets itself (404 no route, 405, 413 body too large, 400 malformed head) get
  // OpenAI's error object too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    oa::ApiError e;
    e.http = res.status;
    switch (res.status) {
      case 404:
        e.type = "not_found_error";
        e.message = absl::StrCat("no route ", req.method, " ", oa::utf8_for_json(req.path),
                                 " (POST /v1/completions, POST /v1/chat/completions, GET /v1/models)");
        break;
      case 413:
        e.message = "the request body is over server.http.max_body_bytes";
        break;
      default:
        e.message = absl::StrCat("HTTP ", res.status);
    }
    res.set_content(oa::error_body(e), "application/json");
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    oa::ApiError e;
    e.http = 500;
    e.type = "internal_error";
    e.message = "internal error";
    send_error(res, e);
  });
}

namespace {

// Auth for an HTTP request: the inference rule, with the Authorization header as gRPC's metadata.
absl::Status check_auth(const Authenticator* auth, const httplib::Request& req) {
  if (!auth) return absl::OkStatus();
  if (!req.has_header("Authorization"))
    return auth->check("/frost.v1.Generation/Generate", static_cast<const std::string*>(nullptr));
  const std::string value = req.get_header_value("Authorization");
  return auth->check("/frost.v1.Generation/Generate", &value);
}

}  // namespace

void OpenAiHttpServer::handle_models(const httplib::Request& req, httplib::Response& res) {
  const int64_t t0 = RealClock::get().now_ns();
  auto finish = [&](int http) {
    if (metrics_) metrics_->record_request("models", static_cast<grpc::StatusCode>(oa::grpc_code_for_http(http)),
                                           seconds_since(t0), "http");
  };
  if (absl::Status st = check_auth(auth_, req); !st.ok()) {
    send_error(res, oa::error_from_status(st));
    return finish(res.status);
  }
  std::shared_ptr<const Served> s = served();
  if (!s || !s->engine) {
    send_error(res, oa::error_from_status(absl::UnavailableError("the model is loading")));
    return finish(res.status);
  }
  res.set_content(oa::models_response(s->model_name, s->created).dump(), "application/json");
  finish(200);
}

void OpenAiHttpServer::handle_generate(int endpoint, const httplib::Request& req, httplib::Response& res) {
  const oa::Endpoint ep = static_cast<oa::Endpoint>(endpoint);
  const int64_t t0 = RealClock::get().now_ns();
  Metrics* metrics = metrics_;
  auto fail = [&](const oa::ApiError& e) {
    send_error(res, e);
    if (metrics) {
      metrics->record_request(rpc_name(ep), static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http)),
                              seconds_since(t0), "http");
    }
  };
  if (absl::Status st = check_auth(auth_, req); !st.ok()) return fail(oa::error_from_status(st));
  std::shared_ptr<const Served> s = served();
  if (draining_.load(std::memory_order_acquire))
    return fail(oa::error_from_status(absl::UnavailableError("server is draining")));
  if (!s || !s->engine) return fail(oa::error_from_status(absl::UnavailableError("the model is loading")));

  std::variant<oa::ParsedRequest, oa::ApiError> parsed = oa::parse_request(ep, req.body, cfg_.limits);
  if (auto* e = std::get_if<oa::ApiError>(&parsed)) return fail(*e);
  oa::ParsedRequest& p = std::get<oa::ParsedRequest>(parsed);
  if (p.model != s->model_name && p.model != cfg_.model.path) {
    oa::ApiError e;
    e.http = 404;
    e.type = "not_found_error";
    e.code = "model_not_found";
    e.param = "model";
    e.message = absl::StrCat("model: \"", oa::utf8_for_json(p.model), "\" is not served here (this server serves \"",
                             s->model_name, "\")");
    return fail(e);
  }

  GenerationRequest gen;
  gen.params = p.params;
  if (ep == oa::Endpoint::kCompletions) {
    gen.prompt = p.prompt;
    gen.prompt_ids = p.prompt_ids;
  } else {
    if (!s->chat) {
      oa::ApiError e;
      e.param = "messages";
      e.message = absl::StrCat("chat is not available for this model: ", s->chat_unavailable);
      return fail(e);
    }
    ChatTemplate::Context ctx;
    ctx.bos_token = s->bos;
    ctx.eos_token = s->eos;
    ctx.add_generation_prompt = true;
    absl::StatusOr<std::string> text = s->chat->render(p.messages, ctx);
    if (!text.ok()) return fail(oa::error_from_status(text.status(), "messages"));
    if (text->size() > static_cast<size_t>(cfg_.limits.max_prompt_bytes)) {
      oa::ApiError e;
      e.http = 413;
      e.param = "messages";
      e.message = absl::StrCat("messages: the rendered prompt is ", text->size(),
                               " bytes, over limits.max_prompt_bytes = ", cfg_.limits.max_prompt_bytes);
      return fail(e);
    }
    gen.prompt_ids = encode_with_special_tokens(*s->engine->model().tokenizer, *text, s->specials);
    gen.add_bos = false;  // the template writes bos_token where the model wants it
    if (gen.prompt_ids.empty()) return fail(oa::error_from_status(absl::InvalidArgumentError("messages: empty prompt")));
  }
  if (p.constraint.kind != oa::ConstraintRequest::Kind::kNone) {
    gen.constraint.kind = static_cast<constrain::ConstraintSpec::Kind>(static_cast<int>(p.constraint.kind));
    gen.constraint.text = p.constraint.text;
  }

  auto ex = std::make_shared<Exchange>();
  ex->t0_ns = t0;
  {
    absl::MutexLock l(&ex->mu);
    ex->pending.resize(static_cast<size_t>(p.n));
    ex->choices.resize(static_cast<size_t>(p.n));
    ex->finish_sent.assign(static_cast<size_t>(p.n), 0);
    ex->started.assign(static_cast<size_t>(p.n), 0);
    ex->refused.assign(static_cast<size_t>(p.n), 0);
  }
  for (int i = 0; i < p.n; ++i) ex->cancels.push_back(std::make_shared<CancelToken>());
  for (int i = 0; i < p.n; ++i) {
    GenerationRequest gi = gen;
    if (gi.params.seed && i > 0) gi.params.seed = *gi.params.seed + static_cast<uint64_t>(i);
    absl::Status st = s->engine->submit(gi, std::make_shared<ChoiceSink>(ex, i, p.logprobs, metrics), ex->cancels[i]);
    if (!st.ok()) {
      ex->cancel_all();  // the choices already submitted end within a step
      if (metrics) {
        RejectReason reason = RejectReason::kInvalidArgument;
        if (absl::IsResourceExhausted(st)) reason = RejectReason::kQueueFull;
        if (absl::IsUnavailable(st)) reason = RejectReason::kUnavailable;
        if (absl::IsFailedPrecondition(st)) reason = RejectReason::kFailedPrecondition;
        metrics->record_rejected(reason);
      }
      std::string field = oa::body_field_for(ep, std::string(st.message()));
      std::string msg(st.message());
      if (absl::StartsWith(msg, "constraint: ")) {
        field = p.constraint.field;
        msg = absl::StrCat(field, ": ", msg.substr(std::string("constraint: ").size()));
      }
      oa::ApiError e = oa::error_from_status(absl::Status(st.code(), msg), field);
      return fail(e);
    }
  }

  // A constraint that was not in the compile cache compiles on the engine's compiler (never here); the status
  // line depends on its outcome, so wait until every choice is queued or refused (bounded by
  // engine.constraint_compile_timeout_ms: queued, then compiled).
  {
    absl::ReleasableMutexLock l(&ex->mu);
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex->mu) { return ex->admitted + ex->finished >= p.n; };
    ex->mu.Await(absl::Condition(&settled));
    for (int i = 0; i < p.n; ++i) {
      if (!ex->refused[static_cast<size_t>(i)]) continue;
      const absl::Status st = ex->error;
      l.Release();
      ex->cancel_all();
      if (metrics) metrics->record_rejected(absl::IsResourceExhausted(st) ? RejectReason::kQueueFull
                                            : absl::IsUnavailable(st)     ? RejectReason::kUnavailable
                                                                          : RejectReason::kInvalidArgument);
      std::string field = oa::body_field_for(ep, std::string(st.message()));
      std::string msg(st.message());
      if (absl::StartsWith(msg, "constraint: ")) {
        field = p.constraint.field;
        msg = absl::StrCat(field, ": ", msg.substr(std::string("constraint: ").size()));
      }
      return fail(oa::error_from_status(absl::Status(st.code(), msg), field));
    }
  }

  const oa::ResponseMeta meta{absl::StrCat(ep == oa::Endpoint::kCompletions ? "cmpl-" : "chatcmpl-",
                                           static_cast<uint64_t>(t0), "-", next_id_.fetch_add(1)),
                              static_cast<int64_t>(std::time(nullptr)), s->model_name};
  std::shared_ptr<Engine> engine = s->engine;  // held until the response ends
  auto token_text = [engine](int32_t id) { return engine->model().tokenizer->token_bytes(id); };
  const bool stream = p.stream, include_usage = p.include_usage, logprobs = p.logprobs;
  const int n = p.n;
  active_.fetch_add(1);

  auto provider = [ex, meta, ep, stream, include_usage, logprobs, n, token_text](size_t, httplib::DataSink& sink) {
    std::vector<std::pair<int, std::vector<TokenEvent>>> batch;
    std::vector<std::pair<int, FinishReason>> ended;
    bool all_done = false;
    absl::Status error;
    {
      absl::MutexLock l(&ex->mu);
      auto has_news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex->mu) {
        if (ex->finished == n) return true;
        if (!stream) return false;
        for (const auto& q : ex->pending)
          if (!q.empty()) return true;
        for (int i = 0; i < n; ++i)
          if (ex->choices[i].result && !ex->finish_sent[i]) return true;
        return false;
      };
      if (!has_news()) ex->cv.WaitWithTimeout(&ex->mu, absl::Milliseconds(kPollMs));
      all_done = ex->finished == n;
      error = ex->error;
      if (stream) {
        for (int i = 0; i < n; ++i) {
          auto& q = ex->pending[i];
          const bool fin = ex->choices[i].result.has_value() && !ex->finish_sent[i];
          if (q.empty() && !fin) continue;
          batch.emplace_back(i, std::vector<TokenEvent>(q.begin(), q.end()));
          q.clear();
          if (fin) {
            ex->finish_sent[i] = 1;
            ended.emplace_back(i, ex->choices[i].result->finish_reason);
          }
        }
      }
    }
    if (batch.empty() && !all_done) {
      if (!sink.is_writable()) {
        ex->cancel_all();
        return false;
      }
      return true;
    }
    std::string out;
    if (stream) {
      for (auto& [i, events] : batch) {
        std::optional<FinishReason> fin;
        for (const auto& [j, r] : ended)
          if (j == i) fin = r;
        bool first = false;
        {
          absl::MutexLock l(&ex->mu);
          first = !ex->started[i];
          ex->started[i] = 1;
        }
        // A finished choice with a last batch of events: the events first, then the finish on its own chunk
        // (chat clients expect content and finish_reason apart).
        if (fin && !events.empty()) {
          out += sse(oa::stream_chunk(ep, meta, i, events, first, std::nullopt, logprobs, token_text));
          out += sse(oa::stream_chunk(ep, meta, i, {}, false, fin, false, token_text));
        } else {
          out += sse(oa::stream_chunk(ep, meta, i, events, first, fin, logprobs, token_text));
        }
      }
      if (all_done) {
        if (!error.ok()) {
          out += sse(json::parse(oa::error_body(oa::error_from_status(error))));
        } else if (include_usage) {
          absl::MutexLock l(&ex->mu);
          out += sse(oa::usage_chunk(ep, meta, ex->choices));
        }
        out += "data: [DONE]\n\n";
      }
    } else {
      // all_done
      if (!error.ok()) {
        out = oa::error_body(oa::error_from_status(error));
      } else {
        absl::MutexLock l(&ex->mu);
        out = oa::full_response(ep, meta, ex->choices, logprobs, token_text)
                  .dump(-1, ' ', false, json::error_handler_t::replace);
      }
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      ex->cancel_all();
      return false;
    }
    if (all_done) sink.done();
    return true;
  };
  auto releaser = [this, ex, ep, t0, metrics](bool success) {
    ex->cancel_all();  // no-op when every choice finished; a broken connection stops its requests
    if (metrics) {
      metrics->record_request(rpc_name(ep), success ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED,
                              seconds_since(t0), "http");
    }
    active_.fetch_sub(1);
  };
  res.status = 200;
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider, releaser);
  } else {
    res.set_chunked_content_provider("application/json", provider, releaser);
  }
}

}  // namespace frost::server
