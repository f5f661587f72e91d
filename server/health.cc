#include "server/health.h"

#include "core/common/log.h"

namespace frost::server {

Health::Health(grpc::Server* server, Metrics* metrics)
    : service_(server->GetHealthCheckService()), metrics_(metrics) {
  if (service_ == nullptr) {
    FROST_LOG_ERROR("health: the default health service is not enabled");
    return;
  }
  service_->SetServingStatus("", true);
  set_ready(false);
}

void Health::set_ready(bool ready) {
  ready_ = ready;
  if (service_ != nullptr) service_->SetServingStatus(kReadinessService, ready);
  metrics_->set_ready(ready);
  FROST_LOG_INFO("health: %s %s", kReadinessService, ready ? "SERVING" : "NOT_SERVING");
}

void Health::shutdown() {
  ready_ = false;
  metrics_->set_ready(false);
  if (service_ != nullptr) service_->Shutdown();
}

}  // namespace frost::server
