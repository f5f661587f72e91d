#pragma once
// What frost-bench and frost-loadgen report the same way: percentiles and the machine a figure came from.
// Header-only: frost-loadgen links the gRPC stubs, not frost_core.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace frost::bench {

// The p-th percentile (0..100) of `v`, linear interpolation between closest ranks; 0 for an empty `v`.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

inline double median(std::vector<double> v) { return percentile(std::move(v), 50); }

// The CPU model name from /proc/cpuinfo ("unknown" when absent).
inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// {"cpu", "cores", "openblas_coretype"}: the "machine" object of every benchmark JSON.
inline nlohmann::ordered_json machine_json() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return {{"cpu", cpu_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"openblas_coretype", coretype ? coretype : ""}};
}

}  // namespace frost::bench
