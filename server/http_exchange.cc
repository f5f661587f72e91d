#include "server/http_exchange.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"

namespace frost::server::http_internal {

using json = nlohmann::json;

double seconds_since(int64_t t0_ns) { return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9; }

Batch next_batch(Exchange& ex, bool stream, int n, absl::Duration wait) {
  Batch b;
  absl::MutexLock l(&ex.mu);
  auto has_news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex.mu) {
    if (ex.finished == n) return true;
    if (!stream) return false;
    for (const auto& q : ex.pending)
      if (!q.empty()) return true;
    for (int i = 0; i < n; ++i)
      if (ex.choices[i].result && !ex.finish_sent[i]) return true;
    return false;
  };
  if (!has_news()) ex.cv.WaitWithTimeout(&ex.mu, wait);
  b.all_done = ex.finished == n;
  b.error = ex.error;
  if (!stream) return b;
  for (int i = 0; i < n; ++i) {
    auto& q = ex.pending[i];
    const bool fin = ex.choices[i].result.has_value() && !ex.finish_sent[i];
    if (q.empty() && !fin) continue;
    b.events.emplace_back(i, std::vector<TokenEvent>(q.begin(), q.end()));
    b.first.push_back(!ex.started[i]);
    ex.started[i] = 1;
    q.clear();
    if (fin) {
      ex.finish_sent[i] = 1;
      b.ended.emplace_back(i, ex.choices[i].result->finish_reason);
    }
  }
  return b;
}

std::string sse(const json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

bool send_error(HttpResponse& res, const oa::ApiError& e) {
  return res.send(e.http, "application/json", oa::error_body(e));
}

oa::ApiError api_error(oa::Endpoint ep, const absl::Status& st, const std::string& constraint_field) {
  return oa::engine_error(ep, st, constraint_field);
}

RejectReason reject_reason(const absl::Status& st) {
  if (absl::IsResourceExhausted(st)) return RejectReason::kQueueFull;
  if (absl::IsUnavailable(st)) return RejectReason::kUnavailable;
  if (absl::IsFailedPrecondition(st)) return RejectReason::kFailedPrecondition;
  return RejectReason::kInvalidArgument;
}

}  // namespace frost::server::http_internal
