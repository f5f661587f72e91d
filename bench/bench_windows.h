#pragma once
// Calibration and held-out token windows for the KV benchmarks (kv-repair, kvsplice): DIR/train.jsonl and
// DIR/test.jsonl ({"text": ...} per line), or "self": both sampled from the model (seeds + 1, + 2); plus
// `self_sample` extra calibration windows sampled with seed + 3.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv/train_util.h"
#include "core/model/model_loader.h"

namespace frost::bench {

struct BenchWindows {
  std::vector<TokenWindow> calib, eval;
};
absl::StatusOr<BenchWindows> load_bench_windows(const LoadedModel& m, const std::string& data, int64_t window,
                                                int64_t calib, int64_t eval, int64_t self_sample,
                                                uint64_t seed);

}  // namespace frost::bench
