// frost-loadgen's /metrics scraper (see loadgen_metrics.h).
#include "bench/loadgen_metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace frost::loadgen {
namespace {

// GET /metrics from host:port (plain HTTP/1.0); "" on any error.
std::string fetch_metrics(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) return "";
  std::string body;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) body.append(buf, static_cast<size_t>(n));
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return body;
}

// The value of an unlabelled sample (or the first sample whose line starts with `name`) in a text exposition.
double metric(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const char next = pos + name.size() < text.size() ? text[pos + name.size()] : '\0';
    if (line_start && (next == ' ' || next == '{')) {
      const size_t sp = text.find(' ', pos + name.size());
      return std::strtod(text.c_str() + sp + 1, nullptr);
    }
    pos += name.size();
  }
  return 0;
}

}  // namespace

void Scraper::start(const std::string& addr) {
  const std::string first = fetch_metrics(addr);
  preempt0 = metric(first, "frost_preemptions_total");
  hits0 = metric(first, "frost_prefix_cache_hits_tokens_total");
  queries0 = metric(first, "frost_prefix_cache_queries_tokens_total");
  th = std::thread([this, addr] {
    while (!stop.load()) {
      const std::string m = fetch_metrics(addr);
      if (!m.empty()) {
        ++samples;
        const double b = metric(m, "frost_kv_cache_bytes_in_use");
        if (b > peak_bytes) {
          peak_bytes = b;
          needed_at_peak = metric(m, "frost_kv_cache_bytes_needed");
        }
        peak_usage = std::max(peak_usage, metric(m, "frost_kv_cache_usage_ratio"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const std::string last = fetch_metrics(addr);
    preempt1 = metric(last, "frost_preemptions_total");
    hits1 = metric(last, "frost_prefix_cache_hits_tokens_total");
    queries1 = metric(last, "frost_prefix_cache_queries_tokens_total");
  });
}

void Scraper::finish() {
  stop = true;
  if (th.joinable()) th.join();
}

}  // namespace frost::loadgen
