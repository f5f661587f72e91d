// frost-bench kv-repair: trains KV repair operators for one or more codecs (core/train/repair_train.h),
// then evaluates clean / corrupted / repaired on held-out text and times the fast decode path.
//
//   frost-bench kv-repair --model DIR|builtin:NAME --codec int4[,int8,...] [--corruption SPEC]
//                         --data DIR|self [--set key=value ...] [--calib-windows 64] [--eval-windows 32]
//                         [--decode-tokens 256] [--threads N] [--artifact PATH] [--progress] [--json]
//
// DIR holds train.jsonl (calibration) and test.jsonl (held-out), one {"text": ...} per line (other
// fields ignored), e.g. ../shared/data/emobank_valence. `--data self` samples both from the model
// (different seeds). Rows of the report, each with ppl and mean KL to the clean fp32 model:
//   clean (fp32); per codec in fp16, int8, int4 and the trained ones: "corrupted" (codec + --corruption);
//   for each trained codec: "repaired" (codec + corruption + its operator).
// decode: tokens/s of batch-1 greedy decode_step (fast path: folded repair) with the trained codec,
// without and with repair, median of 3 after a warm-up; the overhead is 1 − repaired/plain. The same
// for the reference path (forward() per token, repair materialised as the seed writes it).
#include "bench/bench_kv_repair.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_cli.h"
#include "bench/bench_kv_common.h"
#include "bench/bench_util.h"
#include "core/common/device.h"
#include "core/model/model_loader.h"
#include "core/train/repair_train.h"

namespace frost::bench {

namespace {

// tokens/s of the reference path: forward() one token at a time with the seed's materialised repair.
double reference_tps(const Transformer& m, KvCodecKind codec, std::shared_ptr<const RepairSet> repair,
                     int64_t n_new) {
  const int64_t n = std::min<int64_t>(16 + n_new, m.config().max_pos);
  std::vector<double> runs;
  at::NoGradGuard ng;
  for (int rep = 0; rep < 3; ++rep) {
    SequenceKv kv(m.kv_spec(n, codec));
    kv.set_repair(repair);
    KvStudy st;
    st.repair_path = KvStudy::RepairPath::kMaterialised;
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < 16; ++i) prompt.push_back(3 + i * 7 % 200);
    m.forward(at::tensor(prompt, at::kLong), kv, st, /*last_only=*/true);
    int64_t tok = 1, steps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (kv.n_tokens() < n) {
      at::Tensor logits = m.forward(at::tensor({tok}, at::kLong), kv, st, /*last_only=*/true);
      tok = logits.argmax(-1).item<int64_t>();
      ++steps;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) runs.push_back(static_cast<double>(steps) / s);
  }
  return median(runs);
}

}  // namespace

int run_kv_repair_bench(int argc, char** argv) {
  std::string codecs_arg, corruption_arg;
  const KvBenchFlags f = parse_kv_bench_flags(
      argc, argv, "kv-repair", "--model DIR --codec C[,C...] --data DIR|self [flags]",
      "Trains and evaluates KV repair operators for each codec (and corruption): quality with and without "
      "the operator, decode speed of the fast and reference paths.",
      {cli::string_flag("--codec", [&](const std::string& v) { codecs_arg = v; })
           .doc("C[,C...]", "the KV codecs to train an operator for, e.g. int4,int8 (required)"),
       cli::string_flag("--corruption", [&](const std::string& v) {
         corruption_arg = v;
       }).doc("SPEC", "a corruption applied to the cache, e.g. gaussian:0.1 (default: none)")});
  if (codecs_arg.empty()) usage("--codec is required");

  KvRepairConfig cfg;
  apply_bench_sets(
      f.sets, [&](const std::string& k, const std::string& v) { return set_kv_repair_field(cfg, k, v); });
  if (!corruption_arg.empty()) {
    auto c = parse_corruption(corruption_arg);
    if (!c.ok()) usage(std::string(c.status().message()));
    cfg.corruption = *c;
  }
  std::vector<KvCodecKind> trained;
  for (absl::string_view c : absl::StrSplit(codecs_arg, ',')) {
    auto k = parse_kv_codec(std::string(c));
    if (!k.ok()) usage(std::string(k.status().message()));
    trained.push_back(*k);
  }
  if (auto st = apply_device_config({f.threads}); !st.ok()) usage(std::string(st.message()));
  auto model = load_model(f.model_path);
  if (!model.ok()) return fail(model.status());
  const Transformer& m = *(*model)->model;
  if (auto st = validate_kv_repair_config(cfg, m.config()); !st.ok()) usage(std::string(st.message()));

  // calibration and held-out windows
  auto bw = load_bench_windows(**model, f.data_dir, cfg.window, f.calib_windows, f.eval_windows,
                               cfg.self_sample_windows, cfg.seed);
  if (!bw.ok()) return fail(bw.status());
  const std::vector<TokenWindow>&calib = bw->calib, &eval = bw->eval;

  nlohmann::ordered_json out;
  out["bench"] = "kv-repair";
  out["model"] = (*model)->name;
  out["threads"] = at::get_num_threads();
  out["machine"] = machine_json();
  out["config"] = nlohmann::ordered_json::parse(kv_repair_config_json(cfg));
  out["calibration_windows"] = calib.size();
  out["eval_windows"] = eval.size();
  out["eval_positions"] = static_cast<int64_t>(eval.size()) * cfg.window;

  // train one operator per requested codec
  std::map<KvCodecKind, std::shared_ptr<RepairSet>> ops;
  for (KvCodecKind codec : trained) {
    KvRepairConfig c = cfg;
    c.codec = codec;
    KvRepairTrainOptions topts;
    if (f.progress) {
      topts.progress = [codec](const KvRepairProgress& p) {
        if (p.step % 20 == 0 || p.step == p.steps)
          std::fprintf(stderr, "%s step %lld/%lld loss %.5f kl %.5f %.1f windows/s\n", kv_codec_name(codec),
                       static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.kl,
                       p.windows_per_s);
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto set = train_kv_repair(m, c, calib, topts);
    if (!set.ok()) return fail(set.status());
    out["train_seconds"][kv_codec_name(codec)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ops[codec] = *set;
    if (!f.artifact.empty()) {
      const std::string path = trained.size() == 1 ? f.artifact : f.artifact + "." + kv_codec_name(codec);
      if (auto st = (*set)->save(path, {{"codec", kv_codec_name(codec)},
                                        {"corruption", cfg.corruption.to_string()},
                                        {"model", (*model)->name}});
          !st.ok())
        return fail(st);
    }
  }
  out["repair_params"] = ops.begin()->second->n_params();
  out["repair_layers"] = repair_layers_string(ops.begin()->second->layers());

  // evaluation rows: clean, then every shown codec corrupted, then every trained codec repaired
  std::vector<std::string> names = {"clean"};
  std::vector<KvEvalCase> cases = {KvEvalCase{}};
  std::vector<KvCodecKind> shown = {KvCodecKind::kF16, KvCodecKind::kInt8, KvCodecKind::kInt4};
  for (KvCodecKind c : trained)
    if (std::find(shown.begin(), shown.end(), c) == shown.end()) shown.push_back(c);
  for (KvCodecKind c : shown) {
    names.push_back("corrupted");
    cases.push_back({c, cfg.corruption, nullptr});
  }
  for (auto& [c, set] : ops) {
    names.push_back("repaired");
    cases.push_back({c, cfg.corruption, set});
  }
  auto evals = evaluate_kv(m, eval, cases);
  if (!evals.ok()) return fail(evals.status());
  for (size_t i = 0; i < cases.size(); ++i) {
    SequenceKv kv(m.kv_spec(1, cases[i].codec));
    out["rows"].push_back({{"name", names[i]},
                           {"codec", kv_codec_name(cases[i].codec)},
                           {"corruption", cases[i].corruption.to_string()},
                           {"ppl", (*evals)[i].ppl},
                           {"mean_kl", (*evals)[i].mean_kl},
                           {"kv_bytes_per_token", kv.bytes_per_token()}});
  }

  // targets and decode speed per trained codec
  const double fp32_ppl = out["rows"][0]["ppl"].get<double>();
  const double fp32_bytes = out["rows"][0]["kv_bytes_per_token"].get<double>();
  for (auto& [c, set] : ops) {
    double kl_cor = 0, kl_rep = 0, ppl_rep = 0, bytes = 0;
    for (const auto& r : out["rows"]) {
      if (r["codec"] != kv_codec_name(c)) continue;
      if (r["name"] == "corrupted") kl_cor = r["mean_kl"].get<double>();
      if (r["name"] == "repaired") {
        kl_rep = r["mean_kl"].get<double>();
        ppl_rep = r["ppl"].get<double>();
        bytes = r["kv_bytes_per_token"].get<double>();
      }
    }
    nlohmann::ordered_json t;
    t["kl_reduction"] = kl_cor > 0 ? 1.0 - kl_rep / kl_cor : 0.0;
    t["ppl_rel_to_fp32"] = ppl_rep / fp32_ppl - 1.0;
    t["kv_bytes_frac_of_fp32"] = bytes / fp32_bytes;
    if (cfg.corruption.kind == CorruptionKind::kNone ||
        cfg.corruption.mode == CorruptionMode::kPersistentAtWrite) {
      const double plain = greedy_decode_tps(m, c, nullptr, nullptr, f.decode_tokens);
      const double rep = greedy_decode_tps(m, c, nullptr, set, f.decode_tokens);
      t["decode_tokens_per_s"] = plain;
      t["decode_tokens_per_s_repaired"] = rep;
      t["decode_overhead"] = 1.0 - rep / plain;
      // the same on the reference path (forward() per token, K̂ and V̂ materialised as the seed writes them)
      const double ref_plain = reference_tps(m, c, nullptr, f.decode_tokens);
      const double ref_rep = reference_tps(m, c, set, f.decode_tokens);
      t["reference_decode_tokens_per_s"] = ref_plain;
      t["reference_decode_tokens_per_s_repaired"] = ref_rep;
      t["reference_decode_overhead"] = 1.0 - ref_rep / ref_plain;
    }
    out["targets"][kv_codec_name(c)] = t;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace frost::bench
