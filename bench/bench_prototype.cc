// frost-bench prototype: trains the prototype regression head on a dataset directory and
// evaluates it on the test split next to same-backbone baselines (core/prototype/evaluate.h).
//
//   frost-bench prototype --model DIR|builtin:NAME --data DATASET_DIR [--set key=value ...]
//                         [--threads N] [--artifact DIR] [--progress] [--json]
//
// DATASET_DIR holds train.jsonl, test.jsonl and meta.json (label_min, label_max), as
// ../shared/data/emobank_valence. --set overrides any prototype config field (core/prototype/config.h).
#include "bench/bench_prototype.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "core/common/device.h"
#include "core/model/model_loader.h"
#include "core/prototype/evaluate.h"

namespace frost::bench {

int run_prototype_bench(int argc, char** argv) {
  std::string model_path, data_dir, artifact_dir;
  std::vector<std::string> sets;
  int threads = 0;
  bool progress = false;
  cli::Command command;
  command.name = "frost-bench prototype";
  command.synopsis = "--model DIR --data DATASET_DIR [flags]";
  command.description =
      "Trains and evaluates the prototype regression head beside its baselines (ridge, kNN, train mean) on "
      "the same features.";
  command.flag_groups = {
      {"flags",
       {cli::string_flag("--model", [&](const std::string& v) { model_path = v; })
            .doc("DIR", "the backbone: a Hugging Face directory or builtin:NAME (required)"),
        cli::string_flag("--data", [&](const std::string& v) { data_dir = v; })
            .doc("DATASET_DIR", "train.jsonl, test.jsonl and meta.json (required)"),
        cli::string_flag("--artifact", [&](const std::string& v) { artifact_dir = v; })
            .doc("DIR", "also write the trained head there"),
        cli::string_flag("--set", [&](const std::string& v) { sets.push_back(v); })
            .doc("KEY=VALUE", "prototype config override (repeatable)"),
        cli::int32_flag("--threads", [&](int32_t v) { threads = v; })
            .doc("N", "intra-op threads (0: the default)"),
        cli::switch_flag("--progress", [&] { progress = true; }).doc("training progress on stderr"),
        json_flag()}}};
  parse_mode_flags(std::move(command), argc, argv);
  if (model_path.empty()) usage("--model is required");
  if (data_dir.empty()) usage("--data is required");
  prototype::EvalOptions opts;
  if (auto st = prototype::set_fields(opts.cfg, sets); !st.ok()) usage(std::string(st.message()));
  if (auto st = apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  auto data = prototype::load_dataset_dir(data_dir);
  if (!data.ok()) {
    std::fprintf(stderr, "error: %s\n", data.status().ToString().c_str());
    return 1;
  }
  auto model = load_model(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  opts.artifact_dir = artifact_dir;
  if (progress) {
    opts.hooks.on_progress = [](const prototype::TrainProgress& p) {
      if (p.stage == "stage_a" || p.stage == "stage_b") {
        if (p.step != p.steps && p.step % 50 != 0) return;
        std::fprintf(
            stderr,
            "%s epoch %lld/%lld step %lld/%lld loss %.4f (reg %.4f aux %.4f) tau %.2f %.0f ex/s eta %.0fs\n",
            p.stage.c_str(), static_cast<long long>(p.epoch), static_cast<long long>(p.epochs),
            static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.loss_reg, p.loss_aux,
            p.tau, p.examples_per_s, p.eta_s);
      } else {
        std::fprintf(stderr, "%s %lld/%lld\n", p.stage.c_str(), static_cast<long long>(p.step),
                     static_cast<long long>(p.steps));
      }
    };
  }
  auto res = prototype::evaluate_prototype(**model, *data, opts);
  if (!res.ok()) {
    std::fprintf(stderr, "error: %s\n", res.status().ToString().c_str());
    return 1;
  }
  // The head beside the baselines on the same features, and the verdict, for a reader (stderr; the
  // JSON on stdout holds the same numbers).
  {
    const auto& m = (*res)["test_metrics"];
    std::fprintf(stderr, "%-22s %8s %9s %8s\n", "test split", "MAE", "Spearman", "pred_std");
    for (const char* k : {"prototype", "prototype_unrefined", "ridge_mean_pooled", "knn_mean_pooled",
                          "knn_keycache", "train_mean"}) {
      if (!m.contains(k)) continue;
      std::fprintf(stderr, "%-22s %8.4f %9.4f %8.4f\n", k, m[k]["mae"].get<double>(),
                   m[k]["spearman"].get<double>(), m[k].value("pred_std", 0.0));
    }
    const auto& r = (*res)["rlcs"];
    std::fprintf(
        stderr, "resTR fallback rate %.3f (in distribution %.3f); refined MAE %.4f, unrefined %.4f\n",
        r["restr_fallback_rate"].get<double>(), r["restr_fallback_rate_in_distribution"].get<double>(),
        r["refined_mae"].get<double>(), r["unrefined_mae"].get<double>());
    std::fprintf(stderr, "verdict: %s\n", (*res)["verdict"]["text"].get<std::string>().c_str());
    if (res->contains("warnings"))
      std::fprintf(stderr, "warning: %s\n", (*res)["warnings"][0].get<std::string>().c_str());
  }
  nlohmann::ordered_json out;
  out["bench"] = "prototype";
  {
    std::string cmd;  // the command line, so a recorded result says how it was made
    for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    out["command"] = cmd;
  }
  out["threads"] = at::get_num_threads();
  out["machine"] = machine_json();
  for (auto& [k, v] : res->items()) out[k] = v;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace frost::bench
