#pragma once
// FrostServer: frostd's serving core, separate from main() so tests can run it in-process.
//
// Life cycle (the order SREs expect from vLLM/Triton-class servers):
//   start()       bind gRPC (+ health, reflection) and /metrics; liveness
//   SERVING,
//                 readiness NOT_SERVING; every Generation RPC answers
//                 UNAVAILABLE.
//   load_model()  load weights and tokenizer, build the Engine, run one warm-up
//   generation;
//                 then readiness SERVING and RPCs are served.
//   drain()       readiness NOT_SERVING at once, new calls UNAVAILABLE,
//   in-flight streams run
//                 until the drain deadline, then are cancelled (they end with
//                 FINISH_REASON_CANCELLED); the gRPC server and /metrics stop.
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/generate/engine.h"
#include "core/serving/serving.h"
#include "server/generation_service.h"
#include "server/admin_service.h"
#include "server/health.h"
#include "server/http_server.h"
#include "server/inference_service.h"
#include "server/kv_events_publisher.h"
#include "server/metrics.h"
#include "server/metrics_https.h"
#include "server/prediction_service.h"
#include "server/runtime.h"
#include "server/server_config.h"
#include "server/tls.h"
#include "server/training_service.h"

namespace frost::server {

class FrostServer {
 public:
  // Binds both listeners (port 0 picks free ports, see grpc_port()/metrics_port()). UNAVAILABLE when an
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FrostServer>> start(const ServerConfig& cfg);
  ~FrostServer();  // drain(0) if still serving
  FrostServer(const FrostServer&) = delete;
  FrostServer& operator=(const FrostServer&) = delete;

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  // The OpenAI HTTP API's port (server.http.listen); 0 when it is off.
  int http_port() const { return http_port_; }
  // server.kv_events: the TCP ports the PUB and replay sockets are bound to (0: off, not TCP, or connected).
  int kv_events_port() const;
  int kv_events_replay_port() const;
  // The served model's name once loaded ("" before).
  std::string model_name() const { return serving_ ? serving_->model()->name : ""; }

  // Starts the serving assembly (core/serving/serving.h: loads model.path, builds the engine, warms it up),
  // then turns readiness SERVING. Errors name the config field; the server stays up and NOT_SERVING on
  // failure.
  absl::Status load_model();

  // Graceful stop; see the header comment. Idempotent. Returns when the gRPC server has stopped.
  void drain(double timeout_s);
  // SIGHUP: re-reads server.tls's certificate files now (no-op without TLS). See server/tls.h.
  void reload_tls();

  Metrics& metrics() { return *metrics_; }
  Runtime* runtime() { return runtime_.get(); }
  GenerationService& generation() { return *generation_; }
  bool ready() const { return health_ && health_->ready(); }

 private:
  explicit FrostServer(const ServerConfig& cfg);

  ServerConfig cfg_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<KvEventsPublisher> kv_events_;  // server.kv_events; outlives the engine (EngineConfig)
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<TlsReloader> tls_;
  std::unique_ptr<HttpsMetricsServer> metrics_https_;  // server.tls.metrics (instead of metrics_->serve)
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<PredictionService> prediction_;
  std::unique_ptr<TrainingService> training_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<InferenceService> inference_;
  std::unique_ptr<Health> health_;  // registered with server_: outlives it
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<OpenAiHttpServer> http_;  // server.http.listen
  std::unique_ptr<serving::Serving> serving_;  // the model and its engine, once loaded
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int http_port_ = 0;
  bool stopped_ = false;
};

}  // namespace frost::server
