// frost-cuda-bench: the CUDA decoder's speed on random-weight LLaMA shapes (core/exec/cuda_decoder.h).
//
//   `frost-cuda-bench --help` lists the flags (cuda_bench_command below: one table parses them and prints
//   the help, core/flags/flags.h). A usage error exits 2, a failure 1.
//
// Per shape: batch-1 decode tokens/s against the bandwidth limit (streamed weight bytes over the measured
// device-to-device copy rate), batched decode at each batch size (sequences prefilled to --context, then
// --steps greedy steps, each a full step: metadata up, one forward, ids down), prefill tokens/s of one
// --prefill-token prompt. Medians over --repeats. JSON on --out (and stdout), a table on stderr.
// bench/cuda/torch_eager_bench.py measures PyTorch eager on the same shapes (scripts/gpu_check.sh runs both).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_util.h"
#include "core/exec/cuda_decoder.h"
#include "core/flags/flags.h"
#include "core/model/builtin_models.h"
#include "kernels/cuda/check.h"

namespace {

using frost::CudaDecoder;
using frost::DeviceStep;
using frost::ModelConfig;
using frost::WeightDtype;
using frost::bench::median;
using frost::cuda::KvFormat;
using frost::cuda::SampleParams;
using nlohmann::ordered_json;

// The shapes, as frost ModelConfigs (LLaMA family, tied embeddings, 32k vocabulary, 2,048 positions).
ModelConfig shape(const std::string& name) {
  ModelConfig s = frost::builtin_config("builtin:15m").value();
  s.tie_embeddings = true;
  s.n_vocab = 32000;
  s.max_pos = 2048;
  if (name == "15m") {
    s.dim = 288, s.n_layer = 6, s.n_head = 6, s.n_head_kv = 6, s.head_dim = 48, s.ffn_dim = 768;
  } else if (name == "1b") {
    s.dim = 2048, s.n_layer = 16, s.n_head = 32, s.n_head_kv = 8, s.head_dim = 64, s.ffn_dim = 8192;
  } else {
    throw std::invalid_argument("--shape: unknown '" + name + "' (15m, 1b)");
  }
  return s;
}

int64_t n_params(const ModelConfig& c) {
  const int64_t C = c.dim, F = c.ffn_dim;
  const int64_t per_layer = (c.q_dim() + 2 * c.kv_dim()) * C + C * c.q_dim() + 2 * F * C + C * F + 2 * C;
  return c.n_vocab * C * (c.tie_embeddings ? 1 : 2) + per_layer * c.n_layer + C;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Device-to-device copy of 2 GiB, counting bytes read plus written (METHOD.md's ceiling).
double copy_gbps() {
  const size_t n = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  FROST_CUDA_CHECK(cudaMalloc(&a, n));
  FROST_CUDA_CHECK(cudaMalloc(&b, n));
  FROST_CUDA_CHECK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  FROST_CUDA_CHECK(cudaEventCreate(&e0));
  FROST_CUDA_CHECK(cudaEventCreate(&e1));
  FROST_CUDA_CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
  std::vector<double> t;
  for (int i = 0; i < 10; ++i) {
    FROST_CUDA_CHECK(cudaEventRecord(e0));
    FROST_CUDA_CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    FROST_CUDA_CHECK(cudaEventRecord(e1));
    FROST_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    FROST_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms / 1e3);
  }
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * static_cast<double>(n) / median(t) / 1e9;
}

struct Args {
  std::vector<std::string> shapes;
  WeightDtype weights = WeightDtype::kBF16;
  KvFormat kv = KvFormat::kBF16;
  std::vector<int> batches = {1, 4, 16, 64, 256};
  int context = 128, steps = 32, prefill = 512, repeats = 5;
  bool graphs = true;
  std::string out;
};

// B decode rows, one per sequence 0..B−1, at position `pos`, logits for each.
DeviceStep decode_rows(int B, int pos, int token_seed, int n_vocab) {
  DeviceStep st;
  for (int s = 0; s < B; ++s) {
    st.token.push_back((s * 17 + token_seed) % n_vocab);
    st.seq.push_back(s);
    st.pos.push_back(pos);
    st.logit_rows.push_back(s);
  }
  return st;
}

// One greedy step (sampled on the device); the ids.
std::vector<int32_t> greedy(CudaDecoder& m, const DeviceStep& st) {
  std::vector<int32_t> ids(st.logit_rows.size());
  m.forward(st, std::vector<SampleParams>(st.logit_rows.size()), ids.data(), nullptr);
  return ids;
}

// `steps` greedy steps from `st`, each step's ids fed back as the next tokens; returns the seconds taken.
double decode(CudaDecoder& m, DeviceStep st, int steps) {
  const int32_t pos0 = st.pos[0];
  const double t0 = now_s();
  for (int k = 0; k < steps; ++k) {
    const std::vector<int32_t> ids = greedy(m, st);
    for (size_t s = 0; s < ids.size(); ++s) st.token[s] = ids[s], st.pos[s] = pos0 + k + 1;
  }
  return now_s() - t0;
}

ordered_json run_shape(const std::string& name, const Args& a, double bw) {
  const ModelConfig spec = shape(name);
  const int max_batch = *std::max_element(a.batches.begin(), a.batches.end());
  frost::DeviceOptions o;
  o.kv = a.kv;
  o.cuda_graphs = a.graphs;
  constexpr int kBlockTokens = 16;
  const int max_rows = std::max({max_batch, a.prefill, 512}), max_seqs = max_batch + 1;
  const int per_seq = (std::max(a.context + a.steps, a.prefill) + kBlockTokens - 1) / kBlockTokens;
  const int n_blocks = (max_batch + 1) * per_seq;
  std::unique_ptr<CudaDecoder> m = CudaDecoder::random(spec, o, a.weights, 1234);
  frost::cuda::KvLayout layout;
  layout.format = a.kv;
  layout.n_layer = static_cast<int>(spec.n_layer);
  layout.n_head_kv = static_cast<int>(spec.n_head_kv);
  layout.head_dim = static_cast<int>(spec.head_dim);
  layout.block_tokens = kBlockTokens;
  m->allocate(layout, n_blocks, max_rows, max_seqs,
              static_cast<int>((spec.max_pos + kBlockTokens - 1) / kBlockTokens));
  const double wbytes = static_cast<double>(m->weight_bytes());
  // The bytes a decode step streams: all the weights, but an int8 model's fp32 embedding table, which a step
  // only gathers rows from (its LM head is a separate int8 matrix; bf16 / fp16 / fp32 tied heads read the
  // table).
  const double streamed =
      a.weights == WeightDtype::kInt8 ? wbytes - 4.0 * static_cast<double>(spec.n_vocab * spec.dim) : wbytes;
  const double limit = bw * 1e9 / streamed;
  std::fprintf(stderr, "[%s] %.1f M params, weights %.1f MB, KV pool %.1f MB, batch-1 limit %.0f tok/s\n",
               name.c_str(), static_cast<double>(n_params(spec)) / 1e6, wbytes / 1e6,
               static_cast<double>(m->memory().kv_pool_bytes) / 1e6, limit);
  ordered_json js = {{"config",
                      {{"dim", spec.dim},
                       {"n_layer", spec.n_layer},
                       {"n_head", spec.n_head},
                       {"n_head_kv", spec.n_head_kv},
                       {"head_dim", spec.head_dim},
                       {"ffn_dim", spec.ffn_dim},
                       {"vocab", spec.n_vocab}}},
                     {"n_params", n_params(spec)},
                     {"weights", frost::weight_dtype_name(a.weights)},
                     {"weight_bytes", wbytes},
                     {"streamed_weight_bytes", streamed},
                     {"limit_tok_s", limit},
                     {"decode", ordered_json::array()}};
  for (int s = 0, next = 0; s <= max_batch; ++s) {  // slot max_batch: the prefill measurement's sequence
    std::vector<int32_t> blocks;
    for (int k = 0; k < per_seq; ++k) blocks.push_back(next++);
    m->set_blocks(s, blocks.data(), static_cast<int>(blocks.size()));
  }
  // Prefill every sequence to `context` positions once (chunks of max_rows rows).
  {
    DeviceStep st;
    for (int s = 0; s < max_batch; ++s)
      for (int p = 0; p < a.context; ++p) {
        st.token.push_back(static_cast<int32_t>((s * 131 + p * 7) % spec.n_vocab));
        st.seq.push_back(s);
        st.pos.push_back(p);
        if (static_cast<int>(st.token.size()) == max_rows || (s == max_batch - 1 && p == a.context - 1)) {
          st.logit_rows = {0};
          greedy(*m, st);
          st = DeviceStep{};
        }
      }
  }
  for (int B : a.batches) {
    std::vector<double> times;
    for (int rep = 0; rep < a.repeats + 1; ++rep) {  // the first repeat warms up (and captures the graph)
      const double t = decode(*m, decode_rows(B, a.context, rep, static_cast<int>(spec.n_vocab)), a.steps);
      if (rep > 0) times.push_back(t);
    }
    const double t = median(times);
    const double tok_s = static_cast<double>(B) * a.steps / t;
    std::fprintf(
        stderr, "  batch %4d  %10.0f tok/s  %7.3f ms/step%s\n", B, tok_s, 1e3 * t / a.steps,
        B == 1 ? (" (" + std::to_string(static_cast<int>(100 * tok_s / limit)) + "% of the limit)").c_str()
               : "");
    js["decode"].push_back({{"batch", B},
                            {"context", a.context},
                            {"steps", a.steps},
                            {"tok_s", tok_s},
                            {"ms_per_step", 1e3 * t / a.steps}});
  }
  // Where a step's device time goes: CUDA events between stages (no graph), at batch 1 and the largest batch.
  js["profile"] = ordered_json::object();
  for (int B : {1, max_batch}) {
    m->set_profiling(true);
    const int V = static_cast<int>(spec.n_vocab);
    decode(*m, decode_rows(B, a.context, 0, V), 1);  // warm
    m->take_profile();
    const double wall = decode(*m, decode_rows(B, a.context, 0, V), a.steps) / a.steps * 1e3;
    m->set_profiling(false);
    double dev = 0;
    ordered_json stages = ordered_json::object();
    std::string line;
    for (const auto& [stage, ms] : m->take_profile()) {
      stages[stage] = ms / a.steps;
      dev += ms / a.steps;
      line += " " + stage + " " + std::to_string(ms / a.steps).substr(0, 6);
    }
    js["profile"][std::to_string(B)] = {
        {"wall_ms_per_step_events_no_graph", wall}, {"stages_ms", stages}, {"device_ms_per_step", dev}};
    std::fprintf(stderr, "  profile batch %d (no graph): wall %.3f ms/step, device %.3f ms:%s\n", B, wall,
                 dev, line.c_str());
  }
  // Prefill: one prompt of `prefill` tokens in one step (sequence slot max_batch).
  std::vector<double> pt;
  for (int rep = 0; rep < a.repeats + 1; ++rep) {
    DeviceStep st;
    for (int p = 0; p < a.prefill; ++p) {
      st.token.push_back(static_cast<int32_t>((p * 31 + rep) % spec.n_vocab));
      st.seq.push_back(max_batch);
      st.pos.push_back(p);
    }
    st.logit_rows = {a.prefill - 1};
    const double t0 = now_s();
    greedy(*m, st);
    if (rep > 0) pt.push_back(now_s() - t0);
  }
  const double ptok = a.prefill / median(pt);
  std::fprintf(stderr, "  prefill %d tokens: %.0f tok/s\n", a.prefill, ptok);
  js["prefill"] = {{"tokens", a.prefill}, {"tok_s", ptok}};
  js["graphs_captured"] = m->graphs_captured();
  js["device_bytes"] = m->memory().device_bytes;
  return js;
}

// "1,4,16": a list of positive integers, else an error naming --batches and the value.
absl::Status parse_batches(const std::string& s, std::vector<int>* out) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) {
    absl::StatusOr<int32_t> n = frost::cli::parse_int32("--batches", t);
    if (!n.ok() || *n <= 0) return frost::cli::bad_value("--batches", "a list of positive integers", s);
    v.push_back(*n);
  }
  if (v.empty()) return frost::cli::bad_value("--batches", "a list of positive integers", s);
  *out = std::move(v);
  return absl::OkStatus();
}

frost::cli::Command cuda_bench_command(Args* a) {
  using frost::cli::int32_flag;
  using frost::cli::value_flag;
  frost::cli::Command c;
  c.name = "frost-cuda-bench";
  c.synopsis = "[flags]";
  c.description =
      "The CUDA decoder's speed on random-weight LLaMA shapes: per shape, batch-1 decode tokens/s against "
      "the bandwidth limit, batched decode at each batch size, prefill tokens/s. JSON on stdout (and --out), "
      "a table on stderr. Needs a GPU.";
  c.flag_groups = {
      {"flags",
       {value_flag("--shape",
                   [a](const std::string& v) {
                     if (v != "15m" && v != "1b") return frost::cli::bad_value("--shape", "15m or 1b", v);
                     a->shapes.push_back(v);
                     return absl::OkStatus();
                   })
            .doc("15m|1b", "a shape to run (repeatable; default both)"),
        value_flag("--weights",
                   [a](const std::string& v) {
                     if (!frost::parse_weight_dtype(v, &a->weights) ||
                         !frost::weight_dtype_on_device(a->weights))
                       return frost::cli::bad_value("--weights", frost::weight_dtype_choices(true), v);
                     return absl::OkStatus();
                   })
            .doc("DTYPE",
                 "weight format: " + frost::weight_dtype_choices(true) +
                     " (default bf16; int8: weight-only, the CPU int8 model's format, groups of 32)"),
        value_flag("--kv",
                   [a](const std::string& v) {
                     for (KvFormat f : {KvFormat::kF32, KvFormat::kF16, KvFormat::kBF16, KvFormat::kInt8,
                                        KvFormat::kInt4}) {
                       if (v == frost::cuda::kv_format_name(f)) {
                         a->kv = f;
                         return absl::OkStatus();
                       }
                     }
                     return frost::cli::bad_value("--kv", "fp32, fp16, bf16, int8 or int4", v);
                   })
            .doc("FORMAT", "KV cache format: fp32|fp16|bf16|int8|int4 (default bf16)"),
        value_flag("--batches", [a](const std::string& v) { return parse_batches(v, &a->batches); })
            .doc("B,B,...", "batch sizes of the batched decode (default 1,4,16,64,256)"),
        int32_flag("--context", 1, [a](int32_t v) { a->context = v; })
            .doc("N", "tokens each sequence is prefilled to before the decode steps (default 128)"),
        int32_flag("--steps", 1, [a](int32_t v) { a->steps = v; })
            .doc("N", "greedy decode steps timed (default 32)"),
        int32_flag("--prefill", 1, [a](int32_t v) { a->prefill = v; })
            .doc("N", "tokens of the prefill prompt (default 512)"),
        int32_flag("--repeats", 1, [a](int32_t v) { a->repeats = v; })
            .doc("N", "runs to take the median of (default 5)"),
        frost::cli::string_flag("--graphs", [a](const std::string& v) { a->graphs = v != "0"; })
            .doc("1|0", "capture each step in a CUDA graph (default 1)"),
        frost::cli::string_flag("--out", [a](const std::string& v) {
          a->out = v;
        }).doc("FILE", "also write the JSON there")}}};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const std::vector<std::string> positional =
      frost::cli::parse_or_exit(cuda_bench_command(&a), std::vector<std::string>(argv + 1, argv + argc), 2);
  if (!positional.empty()) {
    Args scratch;
    frost::cli::exit_usage_error(cuda_bench_command(&scratch),
                                 "unexpected argument '" + positional.front() + "'", 2);
  }
  try {
    if (a.shapes.empty()) a.shapes = {"15m", "1b"};
    cudaDeviceProp prop{};
    FROST_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = copy_gbps();
    std::fprintf(stderr, "%s, %d SMs; device copy %.0f GB/s (read + write)\n", prop.name,
                 prop.multiProcessorCount, bw);
    ordered_json js = {
        {"tool", "frost-cuda-bench"},
        {"device", prop.name},
        {"weights", frost::weight_dtype_name(a.weights)},
        {"kv", frost::cuda::kv_format_name(a.kv)},
        {"cuda_graphs", a.graphs},
        {"copy_GBps_read_plus_write", bw},
        {"notes",
         "limit_tok_s = copy rate (bytes read + written per second) / weight bytes; decode steps "
         "include the host round trip of each step (metadata up, ids down)"},
        {"shapes", ordered_json::object()}};
    for (const std::string& shp : a.shapes) js["shapes"][shp] = run_shape(shp, a, bw);
    const std::string text = js.dump(1) + "\n";
    std::fputs(text.c_str(), stdout);
    if (!a.out.empty()) std::ofstream(a.out) << text;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frost-cuda-bench: %s\n", e.what());
    return 1;
  }
}
