#pragma once
#include <map>
// Metrics: every prometheus-cpp family of frostd is registered here, once (docs/conventions.md, "Logging and metrics"). Names are
// frost_<noun>_<unit>[_total], base units seconds and bytes, labels bounded (rpc, code, reason, codec) —
// never request ids.
//
// Counters and histograms are recorded by the services as requests end. Gauges that mirror engine state
// (running, waiting, KV bytes) are read from an EngineStats snapshot at scrape time through a Collectable, so
// they are never stale and core needs no prometheus-cpp.
//
// Thread-safe: prometheus-cpp metrics are atomic; the stats source is guarded by a mutex.
#include <grpcpp/support/status_code_enum.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/generate/engine.h"
#include "server/metrics_https.h"

namespace frost::server {

// Job and artifact-store state read at scrape time (server/runtime.cc fills it).
struct JobsStats {
  bool jobs_available = false;  // jobs enabled and the scheduler running (state directory usable)
  std::map<std::string, int64_t> jobs_by_state;  // "queued" → n, ... (every state, zeros included)
  bool job_running = false;
  double job_loss = 0;            // last reported loss of the running job (the oldest when several)
  double job_examples_per_s = 0;  // its throughput
  std::map<std::string, int64_t> store_bytes;  // device → loaded artifact bytes
  int64_t artifact_swaps = 0, artifact_swap_failures = 0;
};

// Why a request was turned away before it produced anything (label `reason`).
enum class RejectReason { kQueueFull, kInvalidArgument, kUnavailable, kFailedPrecondition };
const char* reject_reason_name(RejectReason r);  // "queue_full" | "invalid_argument" | "unavailable"

class EngineCollector;  // server/metrics_collectors.h
class JobsCollector;

class Metrics {
 public:
  Metrics();
  ~Metrics();  // stop()
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Starts the plaintext /metrics HTTP endpoint on HOST:PORT (port 0 picks a free one): a MetricsHttpServer
  // (server/metrics_https.h, its bounds on slow and excess clients) serving render(), counting the connections
  // it closes without an answer. INVALID_ARGUMENT / UNAVAILABLE when it cannot bind; returns the bound port.
  // (The HTTPS endpoint, server.tls.metrics, is a MetricsHttpServer that FrostServer owns: it must stop
  // before the TlsReloader it reads; it counts through record_metrics_connection_refused.)
  absl::StatusOr<int> serve(const std::string& listen,
                            MetricsHttpServer::Limits limits = MetricsHttpServer::Limits());
  // Stops the /metrics endpoint (if serving) and returns once its threads have exited. Idempotent.
  void stop();
  // One /metrics connection closed without an answer (MetricsHttpServer::Options::on_refused's reasons):
  // frost_metrics_connections_refused_total{reason}.
  void record_metrics_connection_refused(const char* reason);
  // One connection or request the OpenAI API's HTTP front refused (server/http_front.h's reasons):
  // frost_http_refused_total{reason}.
  void record_http_refused(const char* reason);

  // Where engine gauges come from (nullptr: report zeros, e.g. while the model loads).
  void set_stats_source(std::function<EngineStats()> source);
  // Where job/store gauges come from (nullptr: none exported).
  void set_jobs_source(std::function<JobsStats()> source);
  // One Predict request: texts predicted and how many were out of distribution.
  void record_predictions(int64_t texts, int64_t out_of_distribution);
  // The served model, once loaded: frost_model_info{model, architecture, weights, kernels} 1 and
  // frost_model_weight_bytes (what the served weights hold, in their format).
  void set_model_info(const std::string& model, const std::string& architecture, const std::string& weights,
                      const std::string& kernels, int64_t weight_bytes);
  // frost_ready: 1 when readiness is SERVING.
  void set_ready(bool ready) { ready_->Set(ready ? 1 : 0); }

  // One finished RPC (any outcome), with its wall time from arrival to the last byte. `protocol`: "grpc", or
  // "http" for the OpenAI API (server/http_server.h: rpc "completions", "chat.completions", "models", with the
  // gRPC code its HTTP status maps from).
  void record_request(const std::string& rpc, grpc::StatusCode code, double seconds,
                      const std::string& protocol = "grpc");
  void record_rejected(RejectReason reason);
  // One finished generation (stream completed, cancelled or cut by its deadline).
  void record_generation(int64_t prompt_tokens, int64_t completion_tokens, double queue_s, double e2e_s,
                         const std::string& finish_reason);
  void record_time_to_first_token(double seconds);
  // One Generate stream cut for a client that stopped reading (server.write_stall_timeout_s).
  void record_write_stall();
  // One KV event batch (server/kv_events_publisher.h) sent with `events` events, or dropped (queue full).
  void record_kv_event_batch(bool published, int64_t events);
  // The sequence number the next batch will carry (frost_kv_events_next_sequence).
  void set_kv_event_next_sequence(uint64_t next);
  void record_inter_token_latency(double seconds);

  // The text exposition of everything registered (what /metrics serves); for tests and logs.
  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<EngineCollector> engine_collector_;
  std::shared_ptr<JobsCollector> jobs_collector_;
  prometheus::Family<prometheus::Gauge>* model_info_ = nullptr;
  prometheus::Gauge* model_weight_bytes_ = nullptr;
  prometheus::Counter* predictions_ = nullptr;
  prometheus::Counter* predictions_ood_ = nullptr;
  prometheus::Counter* write_stalls_ = nullptr;
  prometheus::Family<prometheus::Counter>* kv_event_batches_ = nullptr;
  prometheus::Counter* kv_events_published_ = nullptr;
  prometheus::Gauge* kv_event_sequence_ = nullptr;
  prometheus::Family<prometheus::Counter>* metrics_refused_ = nullptr;
  prometheus::Family<prometheus::Counter>* http_refused_ = nullptr;
  std::unique_ptr<MetricsHttpServer> http_;  // the plaintext endpoint, once serve() bound it

  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_duration_ = nullptr;
  prometheus::Family<prometheus::Counter>* rejected_ = nullptr;
  prometheus::Family<prometheus::Counter>* generations_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* generation_tokens_ = nullptr;
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Histogram* itl_ = nullptr;
  prometheus::Histogram* e2e_ = nullptr;
  prometheus::Histogram* queue_ = nullptr;
  prometheus::Gauge* ready_ = nullptr;
};

}  // namespace frost::server
