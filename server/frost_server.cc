#include "server/frost_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/device_spec.h"
#include "core/common/log.h"
#include "kernels/cpu/isa.h"

namespace frost::server {
namespace {

// Removes gRPC's reflection plugin from a ServerBuilder. libgrpc++_reflection registers that plugin with
// every ServerBuilder from a static initializer as soon as the library is loaded, so server.reflection:
// false must take it out again rather than just not adding it.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [&](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p != nullptr && p->name() == name;
                                  }),
                   plugins->end());
  }
};

// How long a drain waits for finished streams to write their last messages before cutting them.
constexpr double kStreamFlushS = 5;

// HTTP/2 transport limits (server.*; what each one mitigates: README "Transport security").
void set_transport_limits(const ServerSection& s, grpc::ServerBuilder* b) {
  constexpr int kMsPerS = 1000;
  auto ms = [](int32_t seconds) { return static_cast<int>(std::min<int64_t>(int64_t{seconds} * kMsPerS, INT32_MAX)); };
  b->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, s.max_concurrent_streams);
  // Above server.max_header_list_bytes, which frostd checks per call (server/auth.h: check_metadata_size):
  // over the transport's limit gRPC ends every call of the connection, over ours only the one call.
  const int64_t transport_header_bytes = transport_header_list_bytes(s.max_header_list_bytes);
  b->AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                        static_cast<int>(std::min<int64_t>(transport_header_bytes, INT32_MAX)));
  b->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(s.keepalive_time_s));
  b->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(s.keepalive_timeout_s));
  b->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, ms(s.keepalive_min_ping_interval_s));
  b->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, s.keepalive_max_ping_strikes);
  if (s.max_connection_idle_s > 0) b->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(s.max_connection_idle_s));
  if (s.max_connection_age_s > 0) {
    b->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(s.max_connection_age_s));
    b->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, ms(s.max_connection_age_grace_s));
  }
}

}  // namespace

FrostServer::FrostServer(const ServerConfig& cfg) : cfg_(cfg) {}

void FrostServer::reload_tls() {
  if (!tls_) {
    FROST_LOG_INFO("frostd: SIGHUP: no server.tls configured, nothing to reload");
    return;
  }
  (void)tls_->reload();  // logs a refusal itself
}

FrostServer::~FrostServer() { drain(0); }

namespace {
// The port of a bound "tcp://HOST:PORT" endpoint; 0 for anything else.
int tcp_port(const std::string& endpoint) {
  int port = 0;
  const size_t colon = endpoint.rfind(':');
  if (!absl::StartsWith(endpoint, "tcp://") || colon == std::string::npos ||
      !absl::SimpleAtoi(endpoint.substr(colon + 1), &port))
    return 0;
  return port;
}
}  // namespace

int FrostServer::kv_events_port() const { return kv_events_ ? tcp_port(kv_events_->endpoint()) : 0; }
int FrostServer::kv_events_replay_port() const {
  return kv_events_ ? tcp_port(kv_events_->replay_endpoint()) : 0;
}

absl::StatusOr<std::unique_ptr<FrostServer>> FrostServer::start(const ServerConfig& cfg) {
  if (absl::Status st = validate_server_config(cfg); !st.ok()) return st;
  if (absl::Status st = check_config_paths(cfg); !st.ok()) return st;
  std::unique_ptr<FrostServer> s(new FrostServer(cfg));
  s->metrics_ = std::make_unique<Metrics>();
  absl::StatusOr<Authenticator> auth = Authenticator::create(cfg.auth);
  if (!auth.ok()) {
    s->stopped_ = true;
    return auth.status();
  }
  s->auth_ = std::make_unique<Authenticator>(*std::move(auth));
  if (const KvEventsSection& k = cfg.server.kv_events; k.enabled) {
    // Before the engine exists: AllBlocksCleared is sequence 0, ahead of anything the warm-up stores.
    KvEventsOptions ko;
    ko.endpoint = k.endpoint;
    ko.topic = k.topic;
    ko.replay_endpoint = k.replay_endpoint;
    ko.buffer_steps = k.buffer_steps;
    ko.queue_batches = k.queue_batches;
    ko.medium = parse_device(cfg.model.device)->kind == DeviceKind::kCpu ? "CPU" : "GPU";  // validated
    absl::StatusOr<std::unique_ptr<KvEventsPublisher>> pub = KvEventsPublisher::create(ko, s->metrics_.get());
    if (!pub.ok()) {
      s->stopped_ = true;
      return pub.status();
    }
    s->kv_events_ = *std::move(pub);
  }
  s->auth_->set_max_metadata_bytes(cfg.server.max_header_list_bytes);
  if (!s->auth_->has_admin_token())
    FROST_LOG_WARN(
        "frostd: no admin token configured (auth.admin_token_file / $%s): Training and Admin "
        "refuse every call",
        cfg.auth.admin_token_env.c_str());
  s->generation_ = std::make_unique<GenerationService>(cfg, s->metrics_.get());
  s->generation_->set_authenticator(s->auth_.get());
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::create(cfg, s->metrics_.get(), s->auth_.get());
  if (!rt.ok()) {
    s->stopped_ = true;
    return rt.status();
  }
  s->runtime_ = *std::move(rt);
  s->prediction_ = std::make_unique<PredictionService>(s->runtime_.get());
  s->training_ = std::make_unique<TrainingService>(s->runtime_.get());
  s->admin_ = std::make_unique<AdminService>(s->runtime_.get());
  s->inference_ = std::make_unique<InferenceService>(s->runtime_.get());

  // grpc.health.v1.Health is frost's own (server/health.h), not gRPC's default service: readiness
  // NOT_SERVING from the first instant, INVALID_ARGUMENT for a request that does not parse.
  s->health_ = std::make_unique<Health>(s->metrics_.get());
  s->health_->set_max_metadata_bytes(cfg.server.max_header_list_bytes);
  if (cfg.jobs.enabled) s->health_->set_serving(kTrainingService, true);
  // Jobs unavailable (jobs.state_dir cannot be written) and back again: the Training readiness follows.
  s->runtime_->set_jobs_listener([h = s->health_.get()](bool ok) { h->set_serving(kTrainingService, ok); });
  if (cfg.server.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!cfg.server.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!cfg.server.tls.cert_file.empty()) {
    absl::StatusOr<std::unique_ptr<TlsReloader>> tls = TlsReloader::create(cfg.server.tls);
    if (!tls.ok()) {
      s->stopped_ = true;
      return tls.status();
    }
    s->tls_ = *std::move(tls);
    creds = s->tls_->credentials();
  }
  builder.AddListeningPort(cfg.server.listen, creds, &s->grpc_port_);
  builder.SetMaxReceiveMessageSize(cfg.server.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(cfg.server.max_send_message_bytes);
  set_transport_limits(cfg.server, &builder);
  builder.RegisterService(s->generation_.get());
  builder.RegisterService(s->prediction_.get());
  builder.RegisterService(s->training_.get());
  builder.RegisterService(s->admin_.get());
  builder.RegisterService(s->inference_.get());
  builder.RegisterService(s->health_->service());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->grpc_port_ == 0) {
    s->stopped_ = true;
    return absl::UnavailableError(
        absl::StrCat("server.listen: cannot listen on \"", cfg.server.listen, "\""));
  }
  FROST_LOG_INFO("frostd: gRPC listening on %s (port %d)%s", cfg.server.listen.c_str(), s->grpc_port_,
                 cfg.server.reflection ? ", reflection on" : "");
  if (!cfg.server.http.listen.empty()) {
    absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> http =
        OpenAiHttpServer::start(cfg, s->metrics_.get(), s->auth_.get(), s->tls_.get());
    if (!http.ok()) {
      s->drain(0);
      return http.status();
    }
    s->http_ = *std::move(http);
    s->http_port_ = s->http_->port();
  }

  absl::StatusOr<int> mport;
  if (cfg.server.tls.metrics) {
    // Same server as the plaintext endpoint (server/metrics_https.h), owned here: it reads tls_.
    Metrics* m = s->metrics_.get();
    MetricsHttpServer::Options options;
    options.on_refused = [m](const char* reason) { m->record_metrics_connection_refused(reason); };
    absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> https =
        absl::InvalidArgumentError("server.tls.metrics: needs server.tls.cert_file and key_file");
    if (s->tls_)
      https = HttpsMetricsServer::start(cfg.server.metrics_listen, s->tls_.get(), [m] { return m->render(); },
                                        std::move(options));
    if (https.ok()) {
      s->metrics_https_ = *std::move(https);
      mport = s->metrics_https_->port();
    } else {
      mport = https.status();
    }
  } else {
    mport = s->metrics_->serve(cfg.server.metrics_listen);
  }
  if (!mport.ok()) {
    s->drain(0);
    return mport.status();
  }
  s->metrics_port_ = *mport;
  FROST_LOG_INFO("frostd: metrics on %s://%s/metrics (port %d)", cfg.server.tls.metrics ? "https" : "http",
                 cfg.server.metrics_listen.c_str(), *mport);
  return s;
}

absl::Status FrostServer::load_model() {
  if (stopped_) return absl::FailedPreconditionError("server stopped");
  // The model, its executor for model.device and the engine are assembled in core (core/serving/serving.h);
  // the server passes its config, the registry's slots and its hooks.
  serving::ServingOptions so;
  so.model_path = cfg_.model.path;
  so.dtype = cfg_.model.dtype;
  so.threads = cfg_.model.threads;
  so.kernels = cfg_.model.kernels;
  so.device = cfg_.model.device;
  so.cuda_graphs = cfg_.model.cuda_graphs;
  EngineConfig& ec = so.engine;
  ec.gen.kv_codec = cfg_.engine.kv_codec;
  ec.gen.max_context = cfg_.engine.max_context;
  ec.gen.max_prompt_tokens = cfg_.limits.max_prompt_tokens;
  ec.gen.limits = cfg_.limits;  // the limits section is a SamplingLimits (server_config.h)
  static_cast<EngineOptions&>(ec) = cfg_.engine;  // the engine section is the engine's options (no copy)
  // Generate takes its snapshot of the served KV repair operator and KVSplice from the registry's slots.
  ec.kv_repair = &runtime_->registry().kv_repair();
  ec.kv_splice = &runtime_->registry().kvsplice();
  ec.kv_events = kv_events_.get();  // null when server.kv_events is off
  // A sticky device error: readiness NOT_SERVING (the load balancer stops sending), the engine refuses every
  // request with UNAVAILABLE, and frost_device_healthy drops to 0. Restarting the pod is the way back.
  Health* health = health_.get();
  ec.on_device_failure = [health](const absl::Status& why) {
    FROST_LOG_ERROR("frostd: the serving device failed and cannot recover (%s): readiness NOT_SERVING; restart "
                    "frostd", why.ToString().c_str());
    if (health) health->set_ready(false);
  };
  absl::StatusOr<std::unique_ptr<serving::Serving>> started = serving::Serving::start(so);
  if (!started.ok()) return started.status();
  serving_ = *std::move(started);
  const std::shared_ptr<const LoadedModel>& model = serving_->model();
  const std::shared_ptr<Engine>& e = serving_->engine();
  metrics_->set_stats_source([e] { return e->stats(); });
  metrics_->set_model_info(model->name, arch_name(model->config.arch),
                           weight_dtype_name(model->model->weight_format()),
                           kernels::isa_name(kernels::active_isa()), serving_->weight_bytes());
  if (absl::Status st = runtime_->start(model); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("jobs: ", st.message()));
  }
  // One prompt source (one ChatPrompt) for both transports' chat.
  auto prompts = std::make_shared<const openai::PromptSource>(openai::make_prompt_source(
      model->tokenizer.get(), model->name, model->source, cfg_.model.chat_template, e->max_context()));
  generation_->set_engine(e, prompts);
  if (http_) http_->set_engine(e, prompts);
  health_->set_ready(true);
  return absl::OkStatus();
}

void FrostServer::drain(double timeout_s) {
  if (stopped_) return;
  stopped_ = true;
  const int64_t t0 = RealClock::get().now_ns();
  if (health_) health_->set_ready(false);
  generation_->start_drain();
  if (http_) http_->start_drain();
  if (runtime_) {
    runtime_->start_drain();
    runtime_->shutdown();  // running jobs checkpoint and go back to QUEUED
  }
  // The engine stops accepting, waits up to timeout_s, then every remaining stream gets its final message
  // (CANCELLED).
  if (serving_) (void)serving_->drain(timeout_s);
  // Every Generate stream now has its final message or status queued: give them up to kStreamFlushS to be
  // written (a client that stopped reading is cut then), then stop gRPC at once. gRPC's own
  // Shutdown(deadline) also waits for idle client connections to close until the deadline, so waiting there
  // instead would cost the whole grace period whenever a client merely keeps its channel open.
  const int64_t t_flush = RealClock::get().now_ns();
  while (generation_->active_streams() > 0 &&
         static_cast<double>(RealClock::get().now_ns() - t_flush) * 1e-9 < kStreamFlushS) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int64_t left = generation_->active_streams(); left > 0) {
    FROST_LOG_WARN("frostd: %lld streams still writing after %.0fs: cutting them",
                   static_cast<long long>(left), kStreamFlushS);
  }
  while (http_ && http_->active() > 0 &&
         static_cast<double>(RealClock::get().now_ns() - t_flush) * 1e-9 < kStreamFlushS) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (http_) http_->stop();
  if (kv_events_) kv_events_->stop();  // the engine has stopped: its last batches go out (up to a second)
  if (health_) health_->shutdown();  // Health.Watch streams get their last NOT_SERVING and end
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  FROST_LOG_INFO("frostd: stopped after a %.2fs drain",
                 static_cast<double>(RealClock::get().now_ns() - t0) * 1e-9);
}

}  // namespace frost::server
