#pragma once
// grpc.health.v1.Health for Kubernetes probes, on gRPC's default health service.
//
//   ""                     liveness: SERVING while the process serves gRPC at
//   all. "frost.v1.Generation"  readiness: NOT_SERVING until the model is
//   loaded and one warm-up
//                          generation succeeded, and again from the moment a
//                          drain starts.
//
// gRPC's default service reports every registered name SERVING at start; Health overrides readiness right
// after the server starts (before that instant a Check of the readiness name answers NOT_FOUND, which probes
// also treat as not ready). Health is never behind auth or admission control: it is served by gRPC itself,
// not by our services.
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>

#include "server/metrics.h"

namespace frost::server {

inline constexpr char kReadinessService[] = "frost.v1.Generation";

class Health {
 public:
  // `server` was built with grpc::EnableDefaultHealthCheckService(true); both must outlive this.
  Health(grpc::Server* server, Metrics* metrics);

  // Readiness (frost.v1.Generation). Liveness stays SERVING until shutdown().
  void set_ready(bool ready);
  bool ready() const { return ready_; }
  // Everything NOT_SERVING, for good (the process is about to exit).
  void shutdown();

 private:
  grpc::HealthCheckServiceInterface* service_;
  Metrics* metrics_;
  bool ready_ = false;
};

}  // namespace frost::server
