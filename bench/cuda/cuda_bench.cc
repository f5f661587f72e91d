// frost-cuda-bench: the CUDA decoder's speed on random-weight LLaMA shapes (core/exec/cuda_decoder.h).
//
//   frost-cuda-bench [--shape 15m|1b]... [--weights bf16|fp16|fp32] [--kv fp32|fp16|bf16|int8|int4]
//                    [--batches 1,4,16,64,256] [--context 128] [--steps 32] [--prefill 512] [--repeats 5]
//                    [--graphs 1|0] [--out FILE]
//
// Per shape: batch-1 decode tokens/s against the bandwidth limit (weight bytes over the measured
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

#include "bench/bench_util.h"
#include "core/exec/cuda_decoder.h"
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

KvFormat kv_format(const std::string& n) {
  for (KvFormat f : {KvFormat::kF32, KvFormat::kF16, KvFormat::kBF16, KvFormat::kInt8, KvFormat::kInt4})
    if (n == frost::cuda::kv_format_name(f)) return f;
  throw std::invalid_argument("--kv: unknown '" + n + "' (fp32, fp16, bf16, int8, int4)");
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
  m->allocate(layout, n_blocks, max_rows, max_seqs, static_cast<int>((spec.max_pos + kBlockTokens - 1) / kBlockTokens));
  const double wbytes = static_cast<double>(m->weight_bytes());
  const double limit = bw * 1e9 / wbytes;
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
                     {"weight_bytes", wbytes},
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

// A positive integer flag value, the whole text; else an error naming the flag and the value.
int positive_int(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v <= 0)
    throw std::invalid_argument(flag + ": '" + text + "' is not a positive integer");
  return v;
}

std::vector<int> parse_batches(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) v.push_back(positive_int("--batches", t));
  if (v.empty()) throw std::invalid_argument("--batches: empty list");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a;
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(k + ": needs a value");
        return argv[++i];
      };
      if (k == "--shape")
        a.shapes.push_back(val());
      else if (k == "--weights") {
        const std::string v = val();
        if (!frost::parse_weight_dtype(v, &a.weights) || !frost::weight_dtype_on_device(a.weights))
          throw std::invalid_argument("--weights: '" + v + "' (" + frost::weight_dtype_choices(true) + ")");
      } else if (k == "--kv")
        a.kv = kv_format(val());
      else if (k == "--batches")
        a.batches = parse_batches(val());
      else if (k == "--context")
        a.context = positive_int(k, val());
      else if (k == "--steps")
        a.steps = positive_int(k, val());
      else if (k == "--prefill")
        a.prefill = positive_int(k, val());
      else if (k == "--repeats")
        a.repeats = positive_int(k, val());
      else if (k == "--graphs")
        a.graphs = val() != "0";
      else if (k == "--out")
        a.out = val();
      else
        throw std::invalid_argument("unknown flag " + k);
    }
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
