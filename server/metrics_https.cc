#include "server/metrics_https.h"

#include <algorithm>
#include <utility>

namespace frost::server {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(
    const std::string& listen, TlsReloader* tls, std::function<std::string()> render, Options options) {
  const Limits& lim = options.limits;
  if (lim.max_connections < 1 || lim.max_connections_per_address < 1 || !(lim.head_deadline_s > 0) ||
      !(lim.write_deadline_s > 0) || lim.max_request_head < 64)
    return absl::InvalidArgumentError("server.metrics_listen: limits must be positive");
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(std::move(render)));
  HttpFront::Options o;
  o.listen_field = "server.metrics_listen";
  o.endpoint = "/metrics";
  o.thread_name = "frost-metrics";
  HttpFrontLimits& f = o.limits;
  f.max_connections = lim.max_connections;
  f.max_connections_per_address = lim.max_connections_per_address;
  f.max_head_bytes = lim.max_request_head;
  f.max_request_line = std::min<size_t>(lim.max_request_head, 8192);
  f.max_body_bytes = 4096;  // a scrape has none; a small one is read and ignored
  f.head_timeout_s = lim.head_deadline_s;
  f.body_timeout_s = lim.head_deadline_s;
  f.write_timeout_s = lim.write_deadline_s;
  f.linger_s = 1;
  f.keep_alive = false;  // one request per connection, as Prometheus scrapes
  MetricsHttpServer* self = s.get();
  for (const char* method : {"GET", "HEAD"})
    for (const char* path : {"/metrics", "/"})
      o.routes.push_back(
          {method, path, [self](const HttpRequest& req, HttpResponse& res) { self->answer(req, res); }});
  // Only connections closed without an answer (the counter's meaning); the front's 4xx answers are not.
  o.on_refused = [cb = std::move(options.on_refused)](const char* reason) {
    if (cb && !refusal_answered(reason)) cb(reason);
  };
  absl::StatusOr<std::unique_ptr<HttpFront>> front = HttpFront::start(listen, tls, std::move(o));
  if (!front.ok()) return front.status();
  s->front_ = *std::move(front);
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (front_) front_->stop();
}

void MetricsHttpServer::answer(const HttpRequest&, HttpResponse& res) {
  if (res.send(200, "text/plain; version=0.0.4; charset=utf-8", render_())) served_.fetch_add(1);
}

}  // namespace frost::server
