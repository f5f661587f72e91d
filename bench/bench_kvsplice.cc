// frost-bench kvsplice: the KVSplice compression report (core/train/kvsplice_train.h, core/kv/fisher.h).
//
//   frost-bench kvsplice --model DIR|builtin:NAME [--rank R|RK:RV[,...]] --data DIR|self
//                        [--set key=value ...] [--calib-windows 64] [--eval-windows 32] [--fisher-windows 16]
//                        [--decode-tokens 256] [--threads N] [--artifact PATH] [--progress] [--json]
//
// DIR holds train.jsonl (calibration) and test.jsonl (held-out), {"text": ...} per line; `--data self`
// samples both from the model. --set takes the kvsplice job's config keys (steps, lr, window, batch,
// fisher_threshold, fim_rank, seed, ...). Without --rank the Fisher-suggested rank is used. A rank RK:RV
// gives K and V their own latent sizes (e.g. 12:20 is 2x against fp16 when d = 32). --set latent=int8
// stores the latents as int8 with a scale per row (r_k + r_v + 8 bytes per token per layer).
// Report:
//   fisher: per-layer metrics of the attention Fisher matrices on calibration windows and the suggested rank.
//   rows: perplexity and mean KL to fp32 on held-out windows, KV bytes per token and compression against
//         fp16, for fp32, fp16, int8, int4 and, per rank, the PCA initialisation and the fine-tuned splice
//         (and FIMKVSplice when fim_rank > 0), plus batch-1 greedy decode tokens/s of the fast path.
// --artifact writes the fine-tuned splice of the first rank (kvsplice.safetensors format).
#include "bench/bench_kvsplice.h"

#include <ATen/Parallel.h>

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
#include "core/train/kvsplice_train.h"

namespace frost::bench {

int run_kvsplice_bench(int argc, char** argv) {
  std::string ranks_arg;
  int64_t fisher_windows = 16;
  const KvBenchFlags f = parse_kv_bench_flags(
      argc, argv, "kvsplice", "--model DIR --data DIR|self [flags]",
      "KVSplice compression report (quality and speed per rank) and the Fisher analysis.",
      {cli::string_flag("--rank", [&](const std::string& v) { ranks_arg = v; })
           .doc("R[,R...]", "latent ranks to report, each R or RK:RV (default: the config's)"),
       cli::int64_flag("--fisher-windows", 1, [&](int64_t v) {
         fisher_windows = v;
       }).doc("N", "windows of the Fisher analysis (default 16)")});
  KvSpliceConfig cfg;
  apply_bench_sets(f.sets,
                   [&](const std::string& k, const std::string& v) { return set_kvsplice_field(cfg, k, v); });
  std::vector<KvSpliceRanks> ranks;
  if (!ranks_arg.empty())
    for (absl::string_view r : absl::StrSplit(ranks_arg, ',')) {
      std::vector<std::string> kv = absl::StrSplit(r, ':');
      if (kv.size() > 2) usage("--rank takes R or RK:RV, got '" + std::string(r) + "'");
      const int64_t rk = flag_int("--rank", kv[0]);
      ranks.push_back({rk, kv.size() == 2 ? flag_int("--rank", kv[1]) : rk});
    }
  if (auto st = apply_device_config({f.threads}); !st.ok()) usage(std::string(st.message()));
  auto model = load_model(f.model_path);
  if (!model.ok()) return fail(model.status());
  const Transformer& m = *(*model)->model;
  for (const KvSpliceRanks& r : ranks) {
    KvSpliceConfig c = cfg;
    c.k_rank = r.k;
    c.v_rank = r.v;
    if (auto st = validate_kvsplice_config(c, m.config()); !st.ok() || r.k < 1 || r.v < 1)
      usage(st.ok() ? "--rank must be >= 1" : std::string(st.message()));
  }
  if (auto st = validate_kvsplice_config(cfg, m.config()); !st.ok()) usage(std::string(st.message()));
  auto bw = load_bench_windows(**model, f.data_dir, cfg.window, f.calib_windows, f.eval_windows,
                               cfg.self_sample_windows, cfg.seed);
  if (!bw.ok()) return fail(bw.status());
  const std::vector<TokenWindow>&calib = bw->calib, &eval = bw->eval;

  nlohmann::ordered_json out;
  out["bench"] = "kvsplice";
  out["model"] = (*model)->name;
  out["threads"] = at::get_num_threads();
  out["machine"] = machine_json();
  out["config"] = nlohmann::ordered_json::parse(kvsplice_config_json(cfg));
  out["calibration_windows"] = calib.size();
  out["eval_windows"] = eval.size();
  out["eval_positions"] = static_cast<int64_t>(eval.size()) * cfg.window;

  // Fisher analysis
  const size_t n_fisher = std::min(calib.size(), static_cast<size_t>(fisher_windows));
  auto acc = accumulate_fisher(m, std::vector<TokenWindow>(calib.begin(), calib.begin() + n_fisher));
  if (!acc.ok()) return fail(acc.status());
  auto fisher = acc->finish();
  if (!fisher.ok()) return fail(fisher.status());
  auto suggested = fisher->suggested_rank(cfg.fisher_threshold);
  auto fj = fisher->to_json(cfg.fisher_threshold);
  if (!suggested.ok()) return fail(suggested.status());
  if (!fj.ok()) return fail(fj.status());
  out["fisher"] = *fj;
  const int64_t d = m.config().n_head_kv * m.config().head_dim;
  if (ranks.empty()) {
    const int64_t s = std::clamp<int64_t>(*suggested, 1, d);
    ranks.push_back({s, s});
  }
  for (const KvSpliceRanks& r : ranks) out["ranks"].push_back(r.label());

  // reference rows, then PCA and fine-tuned splices per rank
  std::vector<std::string> names = {"fp32", "fp16", "int8", "int4"};
  std::vector<KvEvalCase> cases = {KvEvalCase{}, KvEvalCase{KvCodecKind::kF16},
                                   KvEvalCase{KvCodecKind::kInt8}, KvEvalCase{KvCodecKind::kInt4}};
  std::vector<KvSpliceRanks> row_rank(4);
  for (const KvSpliceRanks& r : ranks) {
    KvSpliceConfig c = cfg;
    c.k_rank = r.k;
    c.v_rank = r.v;
    KvRepairTrainOptions topts;
    if (f.progress) {
      topts.progress = [r](const KvRepairProgress& p) {
        if (p.step % 20 == 0 || p.step == p.steps)
          std::fprintf(stderr, "rank %s step %lld/%lld kl %.5f %.1f windows/s\n", r.label().c_str(),
                       static_cast<long long>(p.step), static_cast<long long>(p.steps), p.kl,
                       p.windows_per_s);
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<KvSpliceSet> pca;
    auto tuned = train_kvsplice(m, c, calib, topts, &pca);
    if (!tuned.ok()) return fail(tuned.status());
    out["train_seconds"][r.label()] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!f.artifact.empty() && &r == &ranks.front()) {
      if (auto st = (*tuned)->save(f.artifact, {{"model", (*model)->name}}); !st.ok()) return fail(st);
    }
    names.push_back("kvsplice_pca");
    cases.push_back(KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, pca, nullptr});
    row_rank.push_back(r);
    names.push_back("kvsplice");
    cases.push_back(KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, *tuned, nullptr});
    row_rank.push_back(r);
  }
  if (cfg.fim_rank > 0) {
    auto fim = FimKvSplice::from_accumulator(*acc, cfg.fim_rank);
    if (!fim.ok()) return fail(fim.status());
    names.push_back("fim_temporal");
    cases.push_back(KvEvalCase{
        KvCodecKind::kF32, {}, nullptr, nullptr, std::make_shared<const FimKvSplice>(std::move(*fim))});
    row_rank.push_back({cfg.fim_rank, cfg.fim_rank});
  }
  auto evals = evaluate_kv(m, eval, cases);
  if (!evals.ok()) return fail(evals.status());
  const double fp16_ppl = (*evals)[1].ppl;
  const int64_t fp16_bytes = m.config().n_layer * 2 * d * 2;
  for (size_t i = 0; i < cases.size(); ++i) {
    SequenceKv kv(m.kv_spec(1, cases[i].codec, cases[i].splice));
    nlohmann::ordered_json row = {{"name", names[i]},
                                  {"codec", kv_codec_name(cases[i].codec)},
                                  {"ppl", (*evals)[i].ppl},
                                  {"mean_kl", (*evals)[i].mean_kl},
                                  {"ppl_vs_fp16", (*evals)[i].ppl / fp16_ppl - 1.0}};
    if (names[i] == "fim_temporal") {
      row["temporal_rank"] = row_rank[i].k;
      row["window"] = cfg.window;
      row["temporal_compression"] = static_cast<double>(cfg.window) / static_cast<double>(row_rank[i].k);
    } else {
      if (row_rank[i].k > 0) {
        row["rank"] = row_rank[i].label();
        row["k_rank"] = row_rank[i].k;
        row["v_rank"] = row_rank[i].v;
        row["latent"] = kv_latent_name(cfg.latent);
      }
      row["kv_bytes_per_token"] = kv.bytes_per_token();
      row["compression_vs_fp16"] =
          static_cast<double>(fp16_bytes) / static_cast<double>(kv.bytes_per_token());
      if (names[i] != "kvsplice_pca")
        row["decode_tokens_per_s"] =
            greedy_decode_tps(m, cases[i].codec, cases[i].splice, nullptr, f.decode_tokens);
    }
    out["rows"].push_back(row);
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace frost::bench
