#pragma once
// frost-loadgen's view of frostd's /metrics during the measured phase (--metrics-addr).
#include <atomic>
#include <string>
#include <thread>

namespace frost::loadgen {

// Samples /metrics every 50 ms until stopped: the peak of KV bytes in use (and, at that moment, the bytes
// the held positions need without block rounding), and the counters at the start and the end.
struct Scraper {
  std::atomic<bool> stop{false};
  double peak_bytes = 0, needed_at_peak = 0, peak_usage = 0;
  double preempt0 = 0, preempt1 = 0, hits0 = 0, hits1 = 0, queries0 = 0, queries1 = 0;
  int samples = 0;
  std::thread th;
  // Takes the first sample and starts the sampling thread.
  void start(const std::string& addr);
  // Stops the thread and takes the last sample.
  void finish();
};

}  // namespace frost::loadgen
