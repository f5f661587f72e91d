#pragma once
// What the KV benchmarks (kv-repair, kvsplice) share: their common flags, --set key=value, calibration
// and held-out token windows, and batch-1 greedy decode speed.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/flags/flags.h"
#include "core/model/model_loader.h"
#include "core/train/train_util.h"

namespace frost::bench {

struct KvBenchFlags {
  std::string model_path, data_dir, artifact;
  std::vector<std::string> sets;  // --set key=value, in order
  int threads = 0;
  int64_t calib_windows = 64, eval_windows = 32, decode_tokens = 256;
  bool progress = false;
};
// Parses argv[2..] with the table of `mode` (bench_cli.h): the bench's `own` flags, then --model, --data,
// --artifact, --set, --threads, --calib-windows, --eval-windows, --decode-tokens (counts >= 1), --progress,
// --json (JSON is the only output format); -h / --help prints it. --model and --data are required; errors
// go to usage() (bench_cli.h).
KvBenchFlags parse_kv_bench_flags(int argc, char** argv, const std::string& mode, const std::string& synopsis,
                                  const std::string& description, std::vector<cli::Flag> own);
// Prints "error: <status>" and returns the bench's exit code for it (1).
int fail(const absl::Status& s);
// A flag's integer value, parsed strictly (usage naming the flag and the value when it is not one).
int64_t flag_int(const std::string& flag, const std::string& value);
// Each "key=value" through `set` (a config's set_*_field); usage with its message on the first error.
void apply_bench_sets(const std::vector<std::string>& sets,
                      const std::function<absl::Status(const std::string&, const std::string&)>& set);

// DIR/train.jsonl and DIR/test.jsonl ({"text": ...} per line), or "self": both sampled from the model
// (seeds + 1, + 2); plus `self_sample` extra calibration windows sampled with seed + 3.
struct BenchWindows {
  std::vector<TokenWindow> calib, eval;
};
absl::StatusOr<BenchWindows> load_bench_windows(const LoadedModel& m, const std::string& data, int64_t window,
                                                int64_t calib, int64_t eval, int64_t self_sample,
                                                uint64_t seed);

// Tokens/s of greedy decode_step (the fast path) over n_new tokens after a 16-token prompt, with the
// codec, KVSplice and repair operator (null = off) given: the median of 3 runs after a warm-up.
double greedy_decode_tps(const Transformer& m, KvCodecKind codec, std::shared_ptr<const KvSpliceSet> splice,
                         std::shared_ptr<const RepairSet> repair, int64_t n_new);

}  // namespace frost::bench
