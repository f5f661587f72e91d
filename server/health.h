#pragma once
// grpc.health.v1.Health for Kubernetes probes and load balancers: frost's own implementation of the standard
// service (not gRPC's default one, which answers a request it cannot parse with INTERNAL on Watch and an
// empty UNIMPLEMENTED on Check).
//
//   ""                     liveness: SERVING while the process serves gRPC at all.
//   "frost.v1.Generation"  readiness: NOT_SERVING until the model is loaded and one warm-up generation
//                          succeeded, and again from the moment a drain starts (or the device fails).
//   "frost.v1.Training"    SERVING from the start when jobs are enabled (set_serving() reports it otherwise).
//
// Check answers the status at once; a service never registered is NOT_FOUND. Watch (server streaming)
// sends the current status at once, then each change (a change that is overtaken while the previous one is
// still being written is coalesced into the newest); a service never registered is SERVICE_UNKNOWN, and
// the stream stays open in case it appears. shutdown() sends every watcher its last status (NOT_SERVING)
// and ends the streams with OK. Each Watch is a callback reactor: it holds no gRPC thread while it waits.
//
// Both methods are raw (server/proto_codec.h): bytes that are no HealthCheckRequest get INVALID_ARGUMENT
// naming the type, as every frost method does. Health is never behind auth or admission control, and it
// records no request metrics (probes would drown the counts).
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/metrics.h"

namespace frost::server {

inline constexpr char kLivenessService[] = "";
inline constexpr char kReadinessService[] = "frost.v1.Generation";
inline constexpr char kTrainingService[] = "frost.v1.Training";
// Longest HealthCheckRequest.service accepted, in bytes (INVALID_ARGUMENT beyond).
inline constexpr size_t kMaxHealthServiceBytes = 256;
// Most Watch streams open at once; beyond it Watch is RESOURCE_EXHAUSTED.
inline constexpr int64_t kMaxHealthWatchers = 10000;

class Health {
 public:
  // Liveness SERVING, readiness NOT_SERVING. `metrics` (frost_ready) must outlive this.
  explicit Health(Metrics* metrics);
  ~Health();
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // The grpc.health.v1.Health service to register with the ServerBuilder; this object must outlive the
  // grpc::Server (every Watch must be done).
  grpc::Service* service();

  // Readiness (frost.v1.Generation), mirrored in the frost_ready gauge.
  void set_ready(bool ready);
  bool ready() const;
  // Any service name: registers it (Check then answers it) and sets its status; watchers of it get the
  // change. No effect after shutdown().
  void set_serving(const std::string& service, bool serving);
  // Everything NOT_SERVING, for good (the process is about to exit): every Watch gets its last status and
  // ends with OK. Waits up to a second for those streams to finish writing.
  void shutdown();

  // Watch streams open now.
  int64_t watchers() const;

  // server.max_header_list_bytes, checked per Check / Watch call like every other call (server/auth.h:
  // check_metadata_size): over it that call alone is RESOURCE_EXHAUSTED. Set before the server starts.
  void set_max_metadata_bytes(int64_t n) { max_metadata_bytes_ = n; }

 private:
  class Service;
  class WatchCall;
  friend class Service;
  friend class WatchCall;

  // The status of `service` as HealthCheckResponse::ServingStatus (SERVICE_UNKNOWN when never registered).
  int status_locked(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void set_locked(const std::string& service, bool serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Metrics* metrics_;
  int64_t max_metadata_bytes_ = 0;
  std::unique_ptr<Service> service_;
  mutable absl::Mutex mu_;  // before any WatchCall's own mutex
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  std::set<WatchCall*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace frost::server
