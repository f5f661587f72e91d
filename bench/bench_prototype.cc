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
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/common/device.h"
#include "core/model/model_loader.h"
#include "core/prototype/evaluate.h"

namespace frost::bench {

namespace {

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "error: %s\nusage: frost-bench prototype --model DIR --data DATASET_DIR [--set key=value ...] "
               "[--threads N] [--artifact DIR] [--progress] [--json]\n",
               msg.c_str());
  std::exit(2);
}

}  // namespace

int run_prototype_bench(int argc, char** argv) {
  std::string model_path, data_dir, artifact_dir;
  std::vector<std::string> sets;
  int threads = 0;
  bool progress = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("flag " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") continue;  // JSON is the only output format
    if (a == "--progress") {
      progress = true;
    } else if (a == "--model") {
      model_path = value();
    } else if (a == "--data") {
      data_dir = value();
    } else if (a == "--artifact") {
      artifact_dir = value();
    } else if (a == "--set") {
      sets.push_back(value());
    } else if (a == "--threads") {
      try {
        threads = std::stoi(value());
      } catch (...) {
        usage("--threads is not a number");
      }
    } else {
      usage("unknown flag '" + a + "'");
    }
  }
  if (model_path.empty()) usage("--model is required");
  if (data_dir.empty()) usage("--data is required");
  proto::EvalOptions opts;
  if (auto st = proto::set_fields(opts.cfg, sets); !st.ok()) usage(std::string(st.message()));
  if (auto st = apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  auto data = proto::load_dataset_dir(data_dir);
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
    opts.hooks.on_progress = [](const proto::TrainProgress& p) {
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
  auto res = proto::evaluate_prototype(**model, *data, opts);
  if (!res.ok()) {
    std::fprintf(stderr, "error: %s\n", res.status().ToString().c_str());
    return 1;
  }
  nlohmann::ordered_json out;
  out["bench"] = "prototype";
  out["threads"] = at::get_num_threads();
  out["machine"] = machine_json();
  for (auto& [k, v] : res->items()) out[k] = v;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace frost::bench
