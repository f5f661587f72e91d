#include "server/metrics.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <exception>
#include <thread>

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

// A port the kernel considers free on `host` right now (bind to port 0, read it back, close). civetweb cannot
// bind port 0 itself; the port could be taken between this probe and civetweb's bind, so serve() retries with
// a fresh probe.
int probe_free_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), "0", &hints, &res) != 0 || res == nullptr) return 0;
  int port = 0;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0) {
    if (bind(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return port;
}

// Opens and closes one TCP connection to host:port (host empty or a wildcard address: loopback). Best effort.
void poke(const std::string& host, int port) {
  std::string target = host;
  if (target.empty() || target == "0.0.0.0") target = "127.0.0.1";
  if (target == "::") target = "::1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(target.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0) {
    (void)connect(fd, res->ai_addr, res->ai_addrlen);
    close(fd);
  }
  freeaddrinfo(res);
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
  ready_ = &BuildGauge()
                .Name("frost_ready")
                .Help(
                    "1 when the server is ready (model loaded and warmed up, "
                    "not draining), else 0.")
                .Register(*registry_)
                .Add({});
}

absl::StatusOr<int> Metrics::serve(const std::string& listen) {
  absl::Status valid = validate_host_port("server.metrics_listen", listen);
  if (!valid.ok()) return valid;
  // civetweb takes "HOST:PORT" for IPv4/hostnames and "[ADDR]:PORT" for IPv6, like our config.
  const HostPort hp = split_host_port(listen);
  const std::string& host = hp.host;
  const bool any_port = hp.port == "0";
  std::string error;
  for (int attempt = 0; attempt < (any_port ? 5 : 1) && !exposer_; ++attempt) {
    std::string addr = listen;
    if (any_port) {
      const int port = probe_free_port(host);
      if (port == 0)
        return absl::UnavailableError(absl::StrCat("server.metrics_listen: cannot bind \"", listen, "\""));
      addr = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);  // the host as written
    }
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(addr, /*num_threads=*/2);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!exposer_) {
    return absl::UnavailableError(
        absl::StrCat("server.metrics_listen: cannot listen on \"", listen, "\": ", error));
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(engine_collector_);
  exposer_->RegisterCollectable(jobs_collector_);
  std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("server.metrics_listen: no listening port for \"", listen, "\""));
  }
  host_ = host;
  port_ = ports.front();
  return port_;
}

Metrics::~Metrics() { stop(); }

void Metrics::stop() {
  if (!exposer_) return;
  // civetweb's master thread notices the stop flag only when its poll() on the listening socket returns,
  // which without traffic takes up to ~2 s; a connection wakes it at once (measured: 1.7 s -> 10 ms).
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load(std::memory_order_acquire)) {
      poke(host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  exposer_.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
}

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
