// frost-bench weights: what each weight format (model.dtype) costs in accuracy and buys in speed, against
// fp32 in the same run.
//
//   frost-bench weights --model DIR|builtin:NAME --data DIR|self [--eval-windows 64] [--window 128]
//                       [--decode-tokens 256] [--threads N] [--json]
//
// Accuracy: held-out windows (DIR/test.jsonl text, or "self": sampled from the fp32 model) through the
// reference path of each format; perplexity of the next tokens and the mean KL(fp32 ‖ format) per position.
// Speed: batch-1 greedy decode through the fast path (the median of 3 runs), and the bytes of weights a
// decoded token reads in that format. Formats: fp32, bf16, int8 (a scale per 32 inputs, the default), int8
// per output channel (the alternative kInt8Group was chosen against), int4 (a scale and a minimum per 32),
// w8a8 (int8 weights and int8 activations: its reference path is int8's, so its accuracy is measured on the
// fast path, decode_step token by token, where the activations are quantized).
#include "bench/bench_weights.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_kv_common.h"
#include "bench/bench_util.h"
#include "core/common/device.h"
#include "core/model/quantize.h"
#include "core/train/train_util.h"
#include "kernels/cpu/isa.h"

namespace frost::bench {
namespace {

struct Variant {
  std::string name;
  LoadOptions opts;
  std::unique_ptr<LoadedModel> model;
  double nll = 0, kl = 0;
  int64_t n = 0;
};

}  // namespace

int run_weights_bench(int argc, char** argv) {
  int64_t window = 128;
  const KvBenchFlags f = parse_kv_bench_flags(
      argc, argv, "weights", "--model DIR|builtin:NAME --data DIR|self [flags]",
      "Quality (NLL, KL against fp32) and decode speed of each weight format on one model.",
      {cli::int64_flag("--window", 2, [&](int64_t v) {
         window = v;
       }).doc("N", "tokens per evaluation window (default 128)")});
  if (auto st = apply_device_config({f.threads}); !st.ok()) usage(std::string(st.message()));
  c10::InferenceMode im;
  std::vector<Variant> vs;
  auto add = [&](const std::string& name, WeightDtype d, int64_t group) {
    Variant v;
    v.name = name;
    v.opts.dtype = d;
    v.opts.int8_group = group;
    vs.push_back(std::move(v));
  };
  add("fp32", WeightDtype::kF32, kInt8Group);
  add("bf16", WeightDtype::kBF16, kInt8Group);
  add("int8", WeightDtype::kInt8, kInt8Group);
  add("int8_per_channel", WeightDtype::kInt8, 0);
  add("int4", WeightDtype::kInt4, kInt8Group);
  add("w8a8", WeightDtype::kW8A8, kInt8Group);
  for (Variant& v : vs) {
    auto m = load_model(f.model_path, v.opts);
    if (!m.ok()) return fail(m.status());
    v.model = std::move(*m);
  }
  const LoadedModel& ref = *vs[0].model;
  window = std::min<int64_t>(window, ref.config.max_pos);
  auto bw = load_bench_windows(ref, f.data_dir, window, 1, f.eval_windows, 0, 7);
  if (!bw.ok()) return fail(bw.status());

  for (const TokenWindow& w : bw->eval) {
    const at::Tensor ids = at::tensor(std::vector<int64_t>(w.begin(), w.end()), at::kLong);
    const int64_t T = static_cast<int64_t>(w.size()) - 1;  // positions with a next token
    const at::Tensor next = ids.narrow(0, 1, T);
    at::Tensor ref_logp;
    for (size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[i];
      const at::Tensor logits = window_logits_as_served(*v.model->model, w).narrow(0, 0, T);
      const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
      if (i == 0) ref_logp = logp;
      v.nll -= logp.gather(1, next.unsqueeze(1)).sum().item<double>();
      v.kl += (ref_logp.exp() * (ref_logp - logp)).sum().item<double>();
      v.n += T;
    }
  }

  nlohmann::ordered_json out;
  out["bench"] = "weights";
  out["model"] = ref.name;
  out["data"] = f.data_dir;
  out["eval_windows"] = bw->eval.size();
  out["window"] = window;
  out["threads"] = at::get_num_threads();
  out["kernels"] = kernels::isa_name(kernels::active_isa());
  out["machine"] = machine_json();
  const double ppl32 = std::exp(vs[0].nll / static_cast<double>(vs[0].n));
  double tps32 = 0;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (Variant& v : vs) {
    const Transformer& m = *v.model->model;
    const double ppl = std::exp(v.nll / static_cast<double>(v.n));
    const double tps = greedy_decode_tps(m, KvCodecKind::kF32, nullptr, nullptr, f.decode_tokens);
    if (v.name == "fp32") tps32 = tps;
    nlohmann::ordered_json r;
    r["format"] = v.name;
    if (v.opts.dtype == WeightDtype::kInt8 || v.opts.dtype == WeightDtype::kW8A8)
      r["int8_group"] = v.opts.int8_group;
    r["evaluated_on"] = v.opts.dtype == WeightDtype::kW8A8 ? "fast path" : "reference path";
    r["ppl"] = ppl;
    r["ppl_vs_fp32"] = ppl / ppl32 - 1.0;
    r["mean_kl"] = v.kl / static_cast<double>(v.n);
    r["weight_bytes_per_token"] = m.served_weight_bytes_per_token();
    r["decode_tokens_per_s"] = tps;
    r["decode_vs_fp32"] = tps32 > 0 ? tps / tps32 : 1.0;
    rows.push_back(r);
  }
  out["formats"] = rows;
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

}  // namespace frost::bench
