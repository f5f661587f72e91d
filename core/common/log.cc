#include "core/common/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <vector>

namespace frost {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_sink_mu;
std::function<void(LogLevel, const std::string&)>& sink_ref() {
  static std::function<void(LogLevel, const std::string&)> sink;
  return sink;
}
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void set_log_sink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  sink_ref() = std::move(sink);
}

void log_message(LogLevel level, const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string msg(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(msg.data(), msg.size() + 1, fmt, ap2);
  va_end(ap2);

  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (sink_ref()) {
    sink_ref()(level, msg);
    return;
  }
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  std::fprintf(stderr, "%s %s %s:%d] %s\n", ts, level_name(level), base, line, msg.c_str());
}

}  // namespace frost
