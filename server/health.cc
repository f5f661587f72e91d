#include "server/health.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/common/log.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/auth.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"
#include "server/stream_writer.h"
#include "server/unary.h"

namespace frost::server {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

using HealthBase = grpc::health::v1::Health::WithRawCallbackMethod_Check<
    grpc::health::v1::Health::WithRawCallbackMethod_Watch<grpc::health::v1::Health::Service>>;

// How long shutdown() lets the watchers write their last status before the server cuts them.
constexpr absl::Duration kWatchFlush = absl::Seconds(1);

// The service name's length.
absl::Status check_service_name(const HealthCheckRequest& req) {
  if (req.service().size() > kMaxHealthServiceBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "service: ", req.service().size(), " bytes is more than the cap of ", kMaxHealthServiceBytes));
  return absl::OkStatus();
}

// Parses a request and checks its service name.
absl::Status parse_health_request(const grpc::ByteBuffer* in, HealthCheckRequest* req) {
  if (absl::Status st = parse_request(*in, req); !st.ok()) return st;
  return check_service_name(*req);
}

}  // namespace

// One Watch stream (server/stream_writer.h: the newest status, coalesced, never the same one twice). Lock
// order: Health::mu_, then the stream's mutex.
class Health::WatchCall final : public CoalescingStream<HealthCheckResponse> {
 public:
  WatchCall(Health* health, const grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in)
      : CoalescingStream("the client went away"), health_(health) {
    HealthCheckRequest req;
    absl::Status st = check_metadata_size(*ctx, health_->max_metadata_bytes_);
    if (st.ok()) st = parse_health_request(in, &req);
    if (!st.ok()) {
      abort(st);
      return;
    }
    service_ = req.service();
    absl::MutexLock hl(&health_->mu_);
    if (static_cast<int64_t>(health_->watchers_.size()) >= kMaxHealthWatchers) {
      abort(absl::ResourceExhaustedError(
          absl::StrCat("Health.Watch: ", kMaxHealthWatchers, " streams are open, the most allowed")));
      return;
    }
    health_->watchers_.insert(this);
    registered_ = true;
    update(health_->status_locked(service_), /*last=*/health_->shut_down_);
  }

  const std::string& service() const { return service_; }

  // A new status for this watcher's service (Health::mu_ held); `last`: end the stream after writing it.
  void update(int status, bool last) {
    HealthCheckResponse resp;
    resp.set_status(static_cast<HealthCheckResponse::ServingStatus>(status));
    post(std::move(resp), last);
  }

  void OnCancel() override { abort(absl::CancelledError("Health.Watch cancelled")); }
  void OnDone() override {
    if (registered_) {
      absl::MutexLock hl(&health_->mu_);
      health_->watchers_.erase(this);  // after this no update can reach us
    }
    release();
  }

 private:
  bool should_write(const HealthCheckResponse& next) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sent_ == next.status()) return false;
    sent_ = next.status();
    return true;
  }

  Health* health_;
  std::string service_;
  bool registered_ = false;  // in health_->watchers_ (set in the constructor only)
  std::optional<int> sent_ ABSL_GUARDED_BY(mu_);  // the status last written
};

class Health::Service final : public HealthBase {
 public:
  explicit Service(Health* health) : health_(health) {}

  // In-memory state only: answered on the callback thread. No auth and no drain check (a draining server
  // says so through the status), not counted in frost_requests_total.
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out) override {
    UnaryServer s;
    s.service = "grpc.health.v1.Health";
    s.max_metadata_bytes = health_->max_metadata_bytes_;
    return serve_unary<HealthCheckRequest, HealthCheckResponse>(
        s, ctx, in, out, {"Check", Mode::kInline, /*refuse_while_draining=*/false},
        [](HealthCheckRequest&& req) -> absl::StatusOr<HealthCheckRequest> {
          if (absl::Status st = check_service_name(req); !st.ok()) return st;
          return std::move(req);
        },
        [this](const HealthCheckRequest& req) -> absl::StatusOr<HealthCheckResponse> {
          int status = HealthCheckResponse::SERVICE_UNKNOWN;
          {
            absl::MutexLock l(&health_->mu_);
            status = health_->status_locked(req.service());
          }
          if (status == HealthCheckResponse::SERVICE_UNKNOWN)
            return absl::NotFoundError(
                absl::StrCat("service \"", req.service(), "\" is unknown to this server"));
          HealthCheckResponse resp;
          resp.set_status(static_cast<HealthCheckResponse::ServingStatus>(status));
          return resp;
        });
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in) override {
    return new WatchCall(health_, ctx, in);
  }

 private:
  Health* health_;
};

Health::Health(Metrics* metrics) : metrics_(metrics), service_(std::make_unique<Service>(this)) {
  {
    absl::MutexLock l(&mu_);
    serving_[kLivenessService] = true;
    serving_[kReadinessService] = false;
  }
  metrics_->set_ready(false);
}

Health::~Health() = default;

grpc::Service* Health::service() { return service_.get(); }

int Health::status_locked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void Health::set_locked(const std::string& service, bool serving) {
  auto [it, added] = serving_.try_emplace(service, serving);
  if (!added && it->second == serving) return;
  it->second = serving;
  for (WatchCall* w : watchers_)
    if (w->service() == service) w->update(status_locked(service), /*last=*/false);
}

void Health::set_ready(bool ready) {
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    set_locked(kReadinessService, ready);
  }
  metrics_->set_ready(ready);
  FROST_LOG_INFO("health: %s %s", kReadinessService, ready ? "SERVING" : "NOT_SERVING");
}

bool Health::ready() const {
  absl::MutexLock l(&mu_);
  return !shut_down_ && status_locked(kReadinessService) == HealthCheckResponse::SERVING;
}

void Health::set_serving(const std::string& service, bool serving) {
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    set_locked(service, serving);
  }
  if (service == kReadinessService) metrics_->set_ready(serving);
  FROST_LOG_INFO("health: %s %s", service.empty() ? "(liveness)" : service.c_str(),
                 serving ? "SERVING" : "NOT_SERVING");
}

void Health::shutdown() {
  metrics_->set_ready(false);
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, serving] : serving_) serving = false;
  for (WatchCall* w : watchers_) w->update(status_locked(w->service()), /*last=*/true);
  // Each watcher removes itself in OnDone; give their last writes a moment before the server cuts them.
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](std::set<WatchCall*>* ws) { return ws->empty(); }, &watchers_),
                       kWatchFlush);
}

int64_t Health::watchers() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(watchers_.size());
}

}  // namespace frost::server
