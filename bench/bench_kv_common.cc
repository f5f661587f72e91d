#include "bench/bench_kv_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "core/common/status_macros.h"
#include "core/train/repair_train.h"

namespace frost::bench {

KvBenchFlags parse_kv_bench_flags(int argc, char** argv, const std::string& mode, const std::string& synopsis,
                                  const std::string& description, std::vector<cli::Flag> own) {
  KvBenchFlags f;
  std::vector<cli::Flag> flags = std::move(own);
  std::vector<cli::Flag> shared = {
      cli::string_flag("--model", [&f](const std::string& v) { f.model_path = v; })
          .doc("DIR", "the model: a Hugging Face directory or builtin:NAME (required)"),
      cli::string_flag("--data", [&f](const std::string& v) { f.data_dir = v; })
          .doc(
              "DIR|self",
              "DIR/train.jsonl and DIR/test.jsonl ({\"text\": ...} per line), or self: text sampled from the "
              "model (required)"),
      cli::string_flag("--artifact", [&f](const std::string& v) { f.artifact = v; })
          .doc("PATH", "also write what was trained there"),
      cli::string_flag("--set", [&f](const std::string& v) { f.sets.push_back(v); })
          .doc("KEY=VALUE", "config override (repeatable)"),
      cli::int32_flag("--threads", [&f](int32_t v) { f.threads = v; })
          .doc("N", "intra-op threads (0: the default)"),
      cli::int64_flag("--calib-windows", 1, [&f](int64_t v) { f.calib_windows = v; })
          .doc("N", absl::StrCat("calibration windows (default ", f.calib_windows, ")")),
      cli::int64_flag("--eval-windows", 1, [&f](int64_t v) { f.eval_windows = v; })
          .doc("N", absl::StrCat("held-out windows (default ", f.eval_windows, ")")),
      cli::int64_flag("--decode-tokens", 1, [&f](int64_t v) { f.decode_tokens = v; })
          .doc("N", absl::StrCat("tokens of the decode-speed runs (default ", f.decode_tokens, ")")),
      cli::switch_flag("--progress", [&f] { f.progress = true; }).doc("training progress on stderr"),
      json_flag(),
  };
  flags.insert(flags.end(), shared.begin(), shared.end());
  cli::Command command;
  command.name = "frost-bench " + mode;
  command.synopsis = synopsis;
  command.description = description;
  command.flag_groups = {{"flags", std::move(flags)}};
  parse_mode_flags(std::move(command), argc, argv);
  if (f.model_path.empty()) usage("--model is required");
  if (f.data_dir.empty()) usage("--data is required");
  return f;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

int64_t flag_int(const std::string& flag, const std::string& value) {
  absl::StatusOr<int64_t> v = cli::parse_int64(flag, value);
  if (!v.ok()) usage(std::string(v.status().message()));
  return *v;
}

void apply_bench_sets(const std::vector<std::string>& sets,
                      const std::function<absl::Status(const std::string&, const std::string&)>& set) {
  for (const std::string& kv : sets) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) usage("--set expects key=value, got '" + kv + "'");
    if (absl::Status st = set(kv.substr(0, eq), kv.substr(eq + 1)); !st.ok())
      usage(std::string(st.message()));
  }
}

double greedy_decode_tps(const Transformer& m, KvCodecKind codec, std::shared_ptr<const KvSpliceSet> splice,
                         std::shared_ptr<const RepairSet> repair, int64_t n_new) {
  const int64_t n = std::min<int64_t>(16 + n_new, m.config().max_pos);
  std::vector<double> runs;
  DecodeScratch scratch;
  for (int rep = 0; rep < 4; ++rep) {
    SequenceKv kv(m.kv_spec(n, codec, splice));
    kv.set_repair(repair);
    int32_t tok = 1;
    for (int64_t i = 0; i < 16; ++i) m.decode_step(static_cast<int32_t>(3 + i * 7 % 200), kv, scratch);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t steps = 0;
    while (kv.n_tokens() < n) {
      const float* logits = m.decode_step(tok, kv, scratch);
      tok = static_cast<int32_t>(std::max_element(logits, logits + m.config().n_vocab) - logits);
      ++steps;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) runs.push_back(static_cast<double>(steps) / s);  // run 0 warms up
  }
  return median(runs);
}

absl::StatusOr<BenchWindows> load_bench_windows(const LoadedModel& m, const std::string& data, int64_t window,
                                                int64_t calib, int64_t eval, int64_t self_sample,
                                                uint64_t seed) {
  BenchWindows w;
  const int32_t bos = m.tokenizer->bos_id();
  if (data == "self") {
    FROST_ASSIGN_OR_RETURN(w.calib, sample_windows(*m.model, bos, calib, window, seed + 1));
    FROST_ASSIGN_OR_RETURN(w.eval, sample_windows(*m.model, bos, eval, window, seed + 2));
  } else {
    FROST_ASSIGN_OR_RETURN(auto tr, load_text_jsonl(data + "/train.jsonl"));
    FROST_ASSIGN_OR_RETURN(auto te, load_text_jsonl(data + "/test.jsonl"));
    FROST_ASSIGN_OR_RETURN(w.calib, make_text_windows(*m.tokenizer, tr, window, calib));
    FROST_ASSIGN_OR_RETURN(w.eval, make_text_windows(*m.tokenizer, te, window, eval));
  }
  if (self_sample > 0) {
    FROST_ASSIGN_OR_RETURN(auto s, sample_windows(*m.model, bos, self_sample, window, seed + 3));
    w.calib.insert(w.calib.end(), s.begin(), s.end());
  }
  if (w.calib.empty() || w.eval.empty())
    return absl::InvalidArgumentError(absl::StrCat("not enough text for one window of ", window, " tokens"));
  return w;
}

}  // namespace frost::bench
