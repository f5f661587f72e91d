#include "server/metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "server/metrics_collectors.h"
#include "server/server_config.h"

namespace frost::server {
namespace {

// Canonical gRPC code names, as grpc-go and the Prometheus gRPC interceptors spell them.
const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// Bucket upper bounds, seconds. Chosen for CPU serving of small models up to GPU serving of large ones: first
// tokens from ~1 ms (cached tiny model) to a minute (long queue).
const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return *b;
}
// Inter-token latency: one decode step, 100 µs (tiny model) to 2 s (overloaded).
const prometheus::Histogram::BucketBoundaries& step_buckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2};
  return *b;
}

}  // namespace

const char* reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kQueueFull:
      return "queue_full";
    case RejectReason::kInvalidArgument:
      return "invalid_argument";
    case RejectReason::kUnavailable:
      return "unavailable";
    case RejectReason::kFailedPrecondition:
      return "failed_precondition";
  }
  return "unknown";
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      engine_collector_(std::make_shared<EngineCollector>()),
      jobs_collector_(std::make_shared<JobsCollector>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  model_info_ = &BuildGauge()
                     .Name("frost_model_info")
                     .Help("The served model (value 1): name, architecture, weight format (fp32, bf16, fp16, "
                           "int8, int4, w8a8) and the CPU kernels in use (avx512, avx2, scalar).")
                     .Register(*registry_);
  model_weight_bytes_ = &BuildGauge()
                             .Name("frost_model_weight_bytes")
                             .Help("Bytes the served weights hold in their format (packed matrices, embeddings, norms).")
                             .Register(*registry_)
                             .Add({});
  predictions_ = &BuildCounter()
                      .Name("frost_predictions_total")
                      .Help("Texts answered by Prediction.Predict.")
                      .Register(*registry_)
                      .Add({});
  predictions_ood_ = &BuildCounter()
                          .Name("frost_predictions_out_of_distribution_total")
                          .Help("Predicted texts flagged out of distribution (RLCS population consistency).")
                          .Register(*registry_)
                          .Add({});
  write_stalls_ = &BuildCounter()
                       .Name("frost_generate_write_stalls_total")
                       .Help("Generate streams cut because the client read nothing for server.write_stall_timeout_s "
                             "while a message waited (flow control closed).")
                       .Register(*registry_)
                       .Add({});
  // KV events (server/kv_events_publisher.h): batches sent or dropped for a full queue, events sent.
  kv_event_batches_ = &BuildCounter()
                           .Name("frost_kv_event_batches_total")
                           .Help("KV event batches of the prefix cache (server.kv_events) by outcome: "
                                 "published (sent on the PUB socket) or dropped (the publisher's queue was "
                                 "full; a gap in sequence numbers, then a snapshot batch).")
                           .Register(*registry_);
  kv_event_batches_->Add({{"outcome", "published"}});
  kv_event_batches_->Add({{"outcome", "dropped"}});
  kv_event_sequence_ = &BuildGauge()
                            .Name("frost_kv_events_next_sequence")
                            .Help("Sequence number the next KV event batch will carry: the batches made "
                                  "since start, sent or dropped (a subscriber that applied up to this minus "
                                  "one is current).")
                            .Register(*registry_)
                            .Add({});
  kv_events_published_ = &BuildCounter()
                              .Name("frost_kv_events_published_total")
                              .Help("KV events (BlockStored, BlockRemoved, AllBlocksCleared) in published "
                                    "batches.")
                              .Register(*registry_)
                              .Add({});
  requests_ = &BuildCounter()
                   .Name("frost_requests_total")
                   .Help("Finished requests by method, gRPC status code and protocol (grpc, or http: the OpenAI API).")
                   .Register(*registry_);
  request_duration_ = &BuildHistogram()
                           .Name("frost_request_duration_seconds")
                           .Help("RPC wall time from arrival to the final status, by method.")
                           .Register(*registry_);
  rejected_ = &BuildCounter()
                   .Name("frost_requests_rejected_total")
                   .Help(
                       "Generate requests turned away before any model work, "
                       "by reason.")
                   .Register(*registry_);
  for (RejectReason r :
       {RejectReason::kQueueFull, RejectReason::kInvalidArgument, RejectReason::kUnavailable}) {
    rejected_->Add({{"reason", reject_reason_name(r)}});  // export zeros so rate() works from the start
  }
  generations_ = &BuildCounter()
                      .Name("frost_generations_total")
                      .Help("Generations that ran in the engine, by finish reason.")
                      .Register(*registry_);
  prompt_tokens_ = &BuildCounter()
                        .Name("frost_prompt_tokens_total")
                        .Help("Prompt tokens of generations that ran in the engine.")
                        .Register(*registry_)
                        .Add({});
  generation_tokens_ = &BuildCounter()
                            .Name("frost_generation_tokens_total")
                            .Help("Tokens generated (stop tokens excluded).")
                            .Register(*registry_)
                            .Add({});
  ttft_ = &BuildHistogram()
               .Name("frost_time_to_first_token_seconds")
               .Help(
                   "From a Generate request's arrival to its first generated "
                   "token (queue time included).")
               .Register(*registry_)
               .Add({}, latency_buckets());
  itl_ = &BuildHistogram()
              .Name("frost_inter_token_latency_seconds")
              .Help("Time between consecutive generated tokens of one stream.")
              .Register(*registry_)
              .Add({}, step_buckets());
  e2e_ = &BuildHistogram()
              .Name("frost_e2e_request_latency_seconds")
              .Help(
                  "From a Generate request's arrival to the end of its "
                  "generation.")
              .Register(*registry_)
              .Add({}, latency_buckets());
  queue_ = &BuildHistogram()
                .Name("frost_request_queue_time_seconds")
                .Help("Time a Generate request waited for a running slot.")
                .Register(*registry_)
                .Add({}, latency_buckets());
  metrics_refused_ = &BuildCounter()
                         .Name("frost_metrics_connections_refused_total")
                         .Help("Connections to /metrics closed without an answer, by reason: address_limit / "
                               "connection_limit (over the per-address / total cap), head_timeout (no complete "
                               "request head, TLS handshake included, within the deadline), body_timeout, "
                               "write_timeout, tls_handshake (server/metrics_https.h).")
                         .Register(*registry_);
  for (const char* r : {"address_limit", "connection_limit", "head_timeout", "write_timeout", "tls_handshake"})
    metrics_refused_->Add({{"reason", r}});  // export zeros so rate() works from the start
  http_refused_ = &BuildCounter()
                      .Name("frost_http_refused_total")
                      .Help("Connections and requests the OpenAI API's HTTP front refused, by reason. Closed "
                            "without an answer: address_limit / connection_limit (over server.http's caps), "
                            "head_timeout, body_timeout, write_timeout, tls_handshake. Answered with an error: "
                            "bad_request (400 / 505), uri_too_long (414), head_too_large (431), body_too_large "
                            "(413), unsupported_encoding (415), expectation_failed (417), not_implemented (501) "
                            "(server/http_front.h).")
                      .Register(*registry_);
  for (const char* r : {"address_limit", "connection_limit", "head_timeout", "body_timeout", "write_timeout",
                        "tls_handshake", "bad_request", "uri_too_long", "head_too_large", "body_too_large",
                        "unsupported_encoding", "expectation_failed", "not_implemented"})
    http_refused_->Add({{"reason", r}});
  ready_ = &BuildGauge()
                .Name("frost_ready")
                .Help(
                    "1 when the server is ready (model loaded and warmed up, "
                    "not draining), else 0.")
                .Register(*registry_)
                .Add({});
}

absl::StatusOr<int> Metrics::serve(const std::string& listen, MetricsHttpServer::Limits limits) {
  if (http_) return absl::FailedPreconditionError("server.metrics_listen: /metrics is already served");
  MetricsHttpServer::Options options;
  options.limits = limits;
  options.on_refused = [this](const char* reason) { record_metrics_connection_refused(reason); };
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::start(listen, /*tls=*/nullptr, [this] { return render(); }, std::move(options));
  if (!server.ok()) return server.status();
  http_ = *std::move(server);
  return http_->port();
}

Metrics::~Metrics() { stop(); }

void Metrics::stop() {
  if (http_) http_->stop();
}

void Metrics::record_metrics_connection_refused(const char* reason) {
  metrics_refused_->Add({{"reason", reason}}).Increment();
}

void Metrics::record_http_refused(const char* reason) { http_refused_->Add({{"reason", reason}}).Increment(); }

void Metrics::set_stats_source(std::function<EngineStats()> source) {
  engine_collector_->set_source(std::move(source));
}

void Metrics::set_jobs_source(std::function<JobsStats()> source) {
  jobs_collector_->set_source(std::move(source));
}

void Metrics::set_model_info(const std::string& model, const std::string& architecture, const std::string& weights,
                             const std::string& kernels, int64_t weight_bytes) {
  model_info_->Add({{"model", model}, {"architecture", architecture}, {"weights", weights}, {"kernels", kernels}})
      .Set(1);
  model_weight_bytes_->Set(static_cast<double>(weight_bytes));
}

void Metrics::record_predictions(int64_t texts, int64_t out_of_distribution) {
  predictions_->Increment(static_cast<double>(texts));
  predictions_ood_->Increment(static_cast<double>(out_of_distribution));
}

void Metrics::record_write_stall() { write_stalls_->Increment(); }

void Metrics::set_kv_event_next_sequence(uint64_t next) {
  kv_event_sequence_->Set(static_cast<double>(next));
}

void Metrics::record_kv_event_batch(bool published, int64_t events) {
  kv_event_batches_->Add({{"outcome", published ? "published" : "dropped"}}).Increment();
  if (published) kv_events_published_->Increment(static_cast<double>(events));
}

void Metrics::record_request(const std::string& rpc, grpc::StatusCode code, double seconds,
                             const std::string& protocol) {
  requests_->Add({{"rpc", rpc}, {"code", code_name(code)}, {"protocol", protocol}}).Increment();
  request_duration_->Add({{"rpc", rpc}, {"protocol", protocol}}, latency_buckets()).Observe(seconds);
}

void Metrics::record_rejected(RejectReason reason) {
  rejected_->Add({{"reason", reject_reason_name(reason)}}).Increment();
}

void Metrics::record_generation(int64_t prompt_tokens, int64_t completion_tokens, double queue_s,
                                double e2e_s, const std::string& finish_reason) {
  generations_->Add({{"finish_reason", finish_reason}}).Increment();
  prompt_tokens_->Increment(static_cast<double>(prompt_tokens));
  generation_tokens_->Increment(static_cast<double>(completion_tokens));
  queue_->Observe(queue_s);
  e2e_->Observe(e2e_s);
}

void Metrics::record_time_to_first_token(double seconds) { ttft_->Observe(seconds); }
void Metrics::record_inter_token_latency(double seconds) { itl_->Observe(seconds); }

std::string Metrics::render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> engine = engine_collector_->Collect();
  families.insert(families.end(), engine.begin(), engine.end());
  std::vector<prometheus::MetricFamily> jobs = jobs_collector_->Collect();
  families.insert(families.end(), jobs.begin(), jobs.end());
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace frost::server
