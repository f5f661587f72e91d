#pragma once
// Logging through our own macros only (docs/conventions.md, "Logging and metrics"): bare LOG/CHECK mean glog in
// Debian's LibTorch and c10's own in pip LibTorch. printf-style format strings.
#include <cstdarg>
#include <functional>
#include <string>

namespace frost {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo. Thread-safe.
void set_log_level(LogLevel level);
LogLevel log_level();
// Replaces the sink (default: one line on stderr with UTC time and level). Thread-safe.
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);

void log_message(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace frost

#define FROST_LOG_(lvl, ...)                                              \
  do {                                                                    \
    if (static_cast<int>(lvl) >= static_cast<int>(::frost::log_level()))  \
      ::frost::log_message(lvl, __FILE__, __LINE__, __VA_ARGS__);         \
  } while (0)
#define FROST_LOG_DEBUG(...) FROST_LOG_(::frost::LogLevel::kDebug, __VA_ARGS__)
#define FROST_LOG_INFO(...) FROST_LOG_(::frost::LogLevel::kInfo, __VA_ARGS__)
#define FROST_LOG_WARN(...) FROST_LOG_(::frost::LogLevel::kWarn, __VA_ARGS__)
#define FROST_LOG_ERROR(...) FROST_LOG_(::frost::LogLevel::kError, __VA_ARGS__)
