#pragma once
// The /metrics collectors read at scrape time (server/metrics.h registers them): engine gauges and
// histograms from an EngineStats snapshot, job / artifact-store gauges from a JobsStats snapshot. Each
// holds a source function, set once the engine or runtime exists (nothing is reported before).
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/generate/engine.h"
#include "server/metrics.h"

namespace frost::server {

// Engine gauges, read at scrape time.
class EngineCollector : public prometheus::Collectable {
 public:
  void set_source(std::function<EngineStats()> source) {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  std::function<EngineStats()> source_ ABSL_GUARDED_BY(mu_);
};

class JobsCollector : public prometheus::Collectable {
 public:
  void set_source(std::function<JobsStats()> source) {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  std::function<JobsStats()> source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::server
