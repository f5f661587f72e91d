#pragma once
// What frost-bench and frost-loadgen report the same way: percentiles and the machine a figure came from.
// Header-only: frost-loadgen links the gRPC stubs, not frost_core.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
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

// One sequential read of a checkpoint directory's files (*.safetensors, *.json), to set frost's load time
// against: what reading the bytes costs on this machine, page cache as it is. {0, 0} for builtin models or a
// path that is not a directory.
struct FileReadTiming {
  int64_t bytes = 0;
  double seconds = 0;
};
inline FileReadTiming read_checkpoint_files(const std::string& dir) {
  namespace fs = std::filesystem;
  FileReadTiming t;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return t;
  std::vector<char> buf(size_t{8} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".safetensors" && ext != ".json")) continue;
    std::ifstream f(e.path(), std::ios::binary);
    while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())) || f.gcount() > 0) t.bytes += f.gcount();
  }
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

}  // namespace frost::bench
