// frost-bench: speed benchmarks printing one JSON object.
//
//   frost-bench MODE [flags]: `frost-bench --help` lists the modes, `frost-bench MODE --help` a mode's flags.
//   prototype, kv-repair, kvsplice, weights and spec live in bench/bench_*.cc, each with its own flag table.
//
// Flags are parsed by the mode's flag table (core/flags/flags.h, bench/bench_cli.h), which also prints the
// help: "--flag VALUE" or "--flag=VALUE"; numbers are parsed strictly and a bad or out-of-range value is a
// usage error (exit 2) naming the flag and the value. The six speed modes below share one table (each
// ignores the flags it does not use; the defaults depend on the mode).
//
// decode: batch-1 greedy generation through the Generator (sampler included) after a
// prompt of --prompt-tokens; tokens/s = decode steps / decode seconds, plus per-token
// latency percentiles. --via engine runs the same request through the Engine (its worker thread and a
// TokenSink, as frostd does) instead of calling the Generator on this thread: the difference is the engine's
// own overhead, and frost-loadgen against frostd adds gRPC on top. --temperature T --seed S (and --top-k,
// --top-p, --min-p) sample instead of greedy (frost-loadgen's workload). prefill: one forward pass over
// --prompt-tokens tokens (fast: the batched kernels the engine prefills with; reference:
// Transformer::forward).
// bare-step: the reference figure of the serving benchmark — a bare LibTorch fp32 step over the same
// weights at --batch rows: the weight GEMMs of every layer and the logits, no attention, no norms, no
// sampling, no serving; tokens/s = batch / step seconds (median of --repeat after 5 warm-up steps).
// "tokens_per_s": the GEMMs alone into preallocated outputs (at::mm_out, OpenBLAS); "tokens_per_s_linear": a
// plain LibTorch step (at::linear per matrix, outputs allocated, the MLP activation between);
// "tokens_per_s_packed": the same GEMMs through frost's packed kernel (what the serving step's weight GEMMs
// cost); the three alternated. Each figure is the median over --repeat runs after one warm-up run.
// parallel: what starting a parallel region costs after a stretch of serial work (--repeat regions per gap),
// on frost's spinning team (kernels/cpu/parallel.h) and on LibTorch's OpenMP pool, from a thread other than
// main after main has run an OpenMP region too — frostd's shape (the loader's team and the engine's).
// Loads no model.
// huge-pages: the step's packed weight GEMMs (every layer's and the logits, as bare-step's "packed") over the
// same packed weights held twice: in the huge-page arena the serving path uses (kernels/cpu/huge_pages.h) and
// copied into LibTorch's ordinary 4 KiB-page memory; at 1 row (decode, bound by reading the weights) and 32
// rows (a batched step), the two alternated in one process, so their ratio is free of the VM's drift and of
// where a process's memory happens to land. --batch adds a third row count.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_cli.h"
#include "bench/bench_kv_repair.h"
#include "bench/bench_kvsplice.h"
#include "bench/bench_prototype.h"
#include "bench/bench_spec.h"
#include "bench/bench_util.h"
#include "bench/bench_weights.h"
#include "core/common/device.h"
#include "core/flags/flags.h"
#include "core/flags/table_flags.h"
#include "core/generate/engine.h"
#include "core/generate/generator.h"
#include "core/generate/sampling_params.h"
#include "core/model/model_loader.h"
#include "core/model/quantize.h"
#include "core/serving/serving.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/parallel.h"

namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using frost::bench::median;
using frost::bench::percentile;

using frost::bench::usage;
using frost::cli::double_flag;
using frost::cli::int32_flag;
using frost::cli::int64_flag;
using frost::cli::string_flag;
using frost::cli::uint64_flag;

// The modes `frost-bench --help` lists.
const std::vector<frost::cli::CommandEntry> kModes = {
    {"decode", "batch-1 generation after a short prompt: tokens/s and per-token latency"},
    {"prefill", "one forward pass over --prompt-tokens tokens"},
    {"bare-step", "a bare LibTorch fp32 step at --batch rows: the serving benchmark's reference"},
    {"engine", "--streams concurrent requests through the in-process Engine"},
    {"parallel", "what starting a parallel region costs (loads no model)"},
    {"huge-pages", "the step's packed GEMMs from huge pages against 4 KiB pages"},
    {"prototype", "train + evaluate the prototype regression head (frost-bench prototype --help)"},
    {"kv-repair", "train + evaluate KV repair operators (frost-bench kv-repair --help)"},
    {"kvsplice", "KVSplice compression report + Fisher analysis (frost-bench kvsplice --help)"},
    {"weights", "quality and speed of each weight format (frost-bench weights --help)"},
    {"spec", "speculative decoding and jump-forward on vs off (frost-bench spec --help)"},
};

// The speed modes' flags (decode, prefill, bare-step, engine, parallel, huge-pages), with the mode's
// defaults.
struct SpeedFlags {
  explicit SpeedFlags(const std::string& mode)
      : repeat(mode == "bare-step"    ? 50
               : mode == "engine"     ? 3
               : mode == "parallel"   ? 2000
               : mode == "huge-pages" ? 30
                                      : 5),
        n_prompt(mode == "decode"   ? 16
                 : mode == "engine" ? 17
                                    : 128),
        n_new(mode == "engine" ? 128 : 256) {
    sampling.temperature = mode == "engine" ? 0.8f : 0.0f;
    sampling.seed = 1;
  }
  int64_t int8_group = frost::kInt8Group;
  std::string model_path = "builtin:15m", dtype = "fp32", kv_name = "fp32", path = "fast", via = "generator";
  std::string kernels_name = "auto", device_name = "cpu";
  int threads = 0;
  int repeat;
  int64_t n_prompt, n_new;
  int64_t batch = 32, streams = 32, max_running_flag = 0;
  // --temperature, --top-k, --top-p, --min-p, --seed: rows of SamplingParams' table
  // (core/flags/table_flags.h).
  frost::SamplingParams sampling;
};

// `mode` empty: the top-level help (the modes, and the speed modes' flags with the decode defaults).
frost::cli::Command speed_command(const std::string& mode, SpeedFlags* f) {
  frost::cli::Command c;
  c.name = mode.empty() ? "frost-bench" : "frost-bench " + mode;
  c.synopsis = mode.empty() ? "MODE [flags]" : "[flags]";
  c.description =
      mode.empty()
          ? "Speed benchmarks printing one JSON object. The six speed modes share the flags below (each "
            "ignores those it does not use); the defaults shown are decode's, `frost-bench MODE --help` "
            "shows a mode's."
          : "A speed benchmark printing one JSON object. The six speed modes share these flags (each "
            "ignores those it does not use); the defaults shown are this mode's.";
  c.flag_groups = {
      {mode.empty() ? "flags of decode, prefill, bare-step, engine, parallel, huge-pages" : "flags",
       {string_flag("--model", [f](const std::string& v) { f->model_path = v; })
            .doc("PATH", "builtin:15m (default) or a Hugging Face directory"),
        int32_flag("--threads", 0, [f](int32_t v) { f->threads = v; })
            .doc("N", "intra-op threads (0: the default)"),
        string_flag("--dtype", [f](const std::string& v) { f->dtype = v; })
            .doc("DTYPE", "weight format: " + frost::weight_dtype_choices() +
                              " (default fp32; fp16 only for engine on a --device)"),
        int64_flag("--int8-group", 0, [f](int64_t v) { f->int8_group = v; })
            .doc("N", absl::StrCat("int8 weights: columns per scale group (default ", frost::kInt8Group,
                                   "; 0: one scale per row)")),
        string_flag("--kv", [f](const std::string& v) { f->kv_name = v; })
            .doc("CODEC", "KV cache storage: fp32|fp16|bf16|int8|int4 (default fp32)"),
        string_flag("--kernels", [f](const std::string& v) { f->kernels_name = v; })
            .doc("ISA", "auto|avx512|avx2|scalar: the CPU kernels to run (default auto)"),
        string_flag("--device", [f](const std::string& v) { f->device_name = v; })
            .doc("DEVICE", "engine: cpu (default), cuda:N or reference"),
        int32_flag("--repeat", 1, [f](int32_t v) { f->repeat = v; })
            .doc("N", absl::StrCat("runs to take the median of (default ", f->repeat, ")")),
        string_flag("--path", [f](const std::string& v) { f->path = v; })
            .doc("fast|reference", "decode, prefill: the batched kernels (default) or Transformer::forward"),
        string_flag("--via", [f](const std::string& v) { f->via = v; })
            .doc("generator|engine",
                 "decode: call the Generator on this thread (default) or go through the Engine"),
        int64_flag("--batch", 1, [f](int64_t v) { f->batch = v; })
            .doc("N", "bare-step: rows per step (default 32); huge-pages: a third row count"),
        int64_flag("--streams", [f](int64_t v) { f->streams = v; })
            .doc("N", "engine: concurrent requests (default 32)"),
        int64_flag("--max-running", [f](int64_t v) { f->max_running_flag = v; })
            .doc("N", "engine: sequences running at once, >= --streams (default: --streams)"),
        int64_flag("--prompt-tokens", 1, [f](int64_t v) { f->n_prompt = v; })
            .doc("N", absl::StrCat("prompt length (default ", f->n_prompt, ")")),
        int64_flag("--new-tokens", 1, [f](int64_t v) { f->n_new = v; })
            .doc("N", absl::StrCat("tokens to generate (default ", f->n_new, ")")),
        frost::bench::json_flag()}}};
  // The sampling flags, before --streams (where --temperature and --seed always were).
  std::vector<frost::cli::Flag>& flags = c.flag_groups[0].flags;
  const std::vector<frost::cli::Flag> sampling = frost::cli::table_flags(
      frost::sampling_params_table(), {"temperature", "top_k", "top_p", "min_p", "seed"}, &f->sampling);
  flags.insert(std::find_if(flags.begin(), flags.end(), [](const auto& g) { return g.name == "--streams"; }),
               sampling.begin(), sampling.end());
  if (mode.empty()) {
    c.commands_title = "modes";
    c.commands = kModes;
  }
  return c;
}

// Records the arrival time of each token event (engine thread) and the result.
class TimingSink final : public frost::TokenSink {
 public:
  void on_token(const frost::TokenEvent&) override { arrivals.push_back(Clock::now()); }
  void on_finish(absl::StatusOr<frost::GenerationResult> r) override {
    result = std::move(r);
    done.Notify();
  }
  std::vector<Clock::time_point> arrivals;
  absl::StatusOr<frost::GenerationResult> result = absl::UnknownError("not finished");
  absl::Notification done;
};

// frost-bench parallel (see the top of this file): per gap of serial work before the region, the median and
// p90 microseconds from the region's start to its end, through the team and through OpenMP.
int run_parallel_bench(int repeat) {
  at::parallel_for(0, 2 * at::get_num_threads(), 1, [](int64_t, int64_t) {});  // the main thread's team
  ordered_json out;
  out["bench"] = "parallel";
  out["threads"] = at::get_num_threads();
  out["repeat"] = repeat;
  out["machine"] = frost::bench::machine_json();
  std::thread engine([&] {  // the "engine" thread
    const int64_t n = at::get_num_threads();
    auto spin_us = [](int us) {
      const Clock::time_point until = Clock::now() + std::chrono::microseconds(us);
      while (Clock::now() < until) {
      }
    };
    std::atomic<int64_t> sink{0};
    ordered_json rows = ordered_json::array();
    for (int gap : {0, 20, 50, 200, 1000}) {
      ordered_json row;
      row["gap_us"] = gap;
      for (const char* via : {"team", "openmp"}) {
        std::vector<double> us;
        for (int r = 0; r < repeat; ++r) {
          spin_us(gap);
          const Clock::time_point t0 = Clock::now();
          auto add = [&](int64_t i) { sink.fetch_add(i, std::memory_order_relaxed); };
          if (via[0] == 't') {
            frost::kernels::parallel_tasks(n, add);
          } else {
            at::parallel_for(0, n, 1, [&](int64_t i, int64_t) { add(i); });
          }
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        row[via] = {{"p50_us", percentile(us, 50)}, {"p90_us", percentile(us, 90)}};
      }
      rows.push_back(row);
    }
    out["region_after_gap"] = rows;
  });
  engine.join();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(3 + (i * 37 + 11) % (vocab - 3)));
  return ids;
}

}  // namespace

// The machine's read bandwidth with `threads` threads (STREAM-style: sum a 256 MiB buffer, far larger than
// the caches; the best of 5), bytes per second. The limit decode speed is held to in the same run. The buffer
// lives on the pages the packed weights get (kernels/cpu/huge_pages.h), so both are read the same way (on the
// 2-vCPU VM: 38-40 GB/s, 35-36 on 4 KiB pages). A rough guide, not a bound: builtin:15m's 61 MB of weights
// partly stay in a large L3 between tokens, and decode has measured up to 1.3-1.7x this limit.
double read_bandwidth(int threads) {
  const int64_t n = int64_t{64} << 20;  // floats
  const at::Tensor buf_t = frost::kernels::huge_page_copy(at::ones({n}));
  const float* buf = buf_t.data_ptr<float>();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::atomic<double> sink{0};
    const auto t0 = Clock::now();
    at::parallel_for(0, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
        float acc[16] = {0};
        for (int64_t i = lo; i + 16 <= hi; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
        float sum = 0;
        for (float a : acc) sum += a;
        double cur = sink.load();
        while (!sink.compare_exchange_weak(cur, cur + sum)) {
        }
      }
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sink.load() < 0) std::printf(" ");  // keeps the sum alive
    best = std::max(best, static_cast<double>(n) * sizeof(float) / s);
  }
  return best;
}

int main(int argc, char** argv) {
  // As frostd (server/main.cc): Abseil's debug-build lock-order detection off, so the in-process engine is
  // measured as it serves.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    SpeedFlags scratch("decode");
    frost::cli::Command top = speed_command("", &scratch);
    if (argc >= 2) {
      frost::cli::print_help(top);
      return 0;
    }
    frost::cli::exit_usage_error(top, "missing mode", 2);
  }
  const std::string mode = argv[1];
  if (mode == "prototype") return frost::bench::run_prototype_bench(argc, argv);
  if (mode == "kv-repair") return frost::bench::run_kv_repair_bench(argc, argv);
  if (mode == "weights") return frost::bench::run_weights_bench(argc, argv);
  if (mode == "kvsplice") return frost::bench::run_kvsplice_bench(argc, argv);
  if (mode == "spec") return frost::bench::run_spec_bench(argc, argv);
  if (mode != "decode" && mode != "prefill" && mode != "bare-step" && mode != "engine" &&
      mode != "parallel" && mode != "huge-pages") {
    SpeedFlags scratch("decode");
    frost::cli::exit_usage_error(speed_command("", &scratch), "unknown mode '" + mode + "'", 2);
  }
  // Every speed mode accepts every flag (and ignores those it does not use); the defaults depend on the mode.
  SpeedFlags sf(mode);
  frost::bench::parse_mode_flags(speed_command(mode, &sf), argc, argv);
  const int64_t int8_group = sf.int8_group;
  const std::string &model_path = sf.model_path, &dtype = sf.dtype, &kv_name = sf.kv_name, &path = sf.path,
                    &via = sf.via, &kernels_name = sf.kernels_name, &device_name = sf.device_name;
  const int threads = sf.threads, repeat = sf.repeat;
  const int64_t n_prompt = sf.n_prompt, n_new = sf.n_new, batch = sf.batch, streams = sf.streams,
                max_running_flag = sf.max_running_flag;
  const frost::SamplingParams& sampling = sf.sampling;
  const uint64_t seed = *sampling.seed;
  // The sampling as the output records it: the float's shortest text (0.8), and top_k / top_p / min_p only
  // when on (earlier outputs have temperature alone).
  auto record_sampling = [&sampling](ordered_json& out) {
    const ordered_json table = frost::sampling_params_table().to_json(sampling);
    out["temperature"] = table["temperature"];
    if (sampling.top_k != 0) out["top_k"] = sampling.top_k;
    if (sampling.top_p != 1.0f) out["top_p"] = table["top_p"];
    if (sampling.min_p != 0.0f) out["min_p"] = table["min_p"];
  };
  frost::WeightDtype wdtype;
  if (!frost::parse_weight_dtype(dtype, &wdtype))
    usage("--dtype must be " + frost::weight_dtype_choices() + ", got " + dtype);
  if (via != "generator" && via != "engine") usage("--via must be generator or engine");
  frost::kernels::Isa isa;
  if (!frost::kernels::parse_isa(kernels_name, &isa) || !frost::kernels::set_isa(isa))
    usage("--kernels must be auto, avx512, avx2 or scalar (and run on this CPU), got " + kernels_name);
  auto codec = frost::parse_kv_codec(kv_name);
  if (!codec.ok()) usage(std::string(codec.status().message()));
  auto device = frost::parse_device(device_name);
  if (!device.ok()) usage(absl::StrCat("--device: ", device.status().message()));
  // fp16 weights are a device format: only `engine` on a --device other than cpu runs them.
  if (mode != "engine" || device->kind == frost::DeviceKind::kCpu)
    if (auto st = frost::check_weight_dtype_on_cpu(wdtype, "--dtype"); !st.ok())
      usage(std::string(st.message()));

  if (auto st = frost::apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  if (mode == "parallel") return run_parallel_bench(repeat);
  frost::LoadOptions lo;
  lo.dtype = wdtype;
  lo.int8_group = int8_group;
  // Cold start, warm page cache: one sequential read of the checkpoint's files, then frost's load (parse,
  // convert, quantize) and the first packing of the matrices, which the first step would otherwise pay.
  const frost::bench::FileReadTiming files = frost::bench::read_checkpoint_files(model_path);
  const auto t_load = Clock::now();
  auto model = frost::load_model(model_path, lo);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  const frost::LoadedModel& m = **model;
  const auto t_pack = Clock::now();
  (void)m.model->packed_weight_bytes();  // packs on first use
  const double pack_s = std::chrono::duration<double>(Clock::now() - t_pack).count();

  ordered_json out;
  out["bench"] = mode;
  out["model"] = model_path;
  out["arch"] = frost::arch_name(m.config.arch);
  out["n_params"] = m.model->n_params();
  out["weight_bytes"] = m.model->weight_bytes();
  out["dtype"] = dtype;
  if (wdtype == frost::WeightDtype::kInt8) out["int8_group"] = int8_group;
  out["served_weight_bytes_per_token"] = m.model->served_weight_bytes_per_token();
  out["kernels"] = frost::kernels::isa_name(frost::kernels::active_isa());
  out["threads"] = at::get_num_threads();
  out["repeat"] = repeat;
  out["machine"] = frost::bench::machine_json();
  if (files.bytes > 0) {
    out["checkpoint_bytes"] = files.bytes;
    out["file_read_s"] = files.seconds;  // one read of every *.safetensors / config file (page cache as it is)
  }
  out["load_s"] = load_s;
  out["pack_s"] = pack_s;

  if (mode == "decode") {
    frost::GeneratorConfig gc;
    gc.kv_codec = *codec;
    gc.fast_decode = path == "fast";
    gc.max_context = n_prompt + n_new;
    gc.limits.max_new_tokens = static_cast<int32_t>(n_new);
    frost::Generator gen(m, gc);
    std::unique_ptr<frost::serving::Serving> serving;  // --via engine: the CPU engine, as frostd assembles it
    frost::Engine* engine = nullptr;
    if (via == "engine") {
      frost::serving::ServingOptions so = frost::serving::ServingOptions::for_loaded(
          std::shared_ptr<const frost::LoadedModel>(std::move(*model)));
      so.engine.gen = gc;
      so.engine.max_running = 1;
      auto s = frost::serving::Serving::start(so);
      if (!s.ok()) {
        std::fprintf(stderr, "error: %s\n", s.status().ToString().c_str());
        return 1;
      }
      serving = std::move(s).value();
      engine = serving->engine().get();
    }
    frost::GenerationRequest req;
    req.prompt_ids = prompt_ids(n_prompt, m.config.n_vocab);
    req.params = sampling;
    req.params.ignore_eos = true;
    req.params.max_new_tokens = static_cast<int32_t>(n_new);
    std::vector<double> tps, lat_ms;
    for (int r = 0; r <= repeat; ++r) {
      std::vector<double> lat;
      absl::StatusOr<frost::GenerationResult> res;
      if (engine) {
        auto sink = std::make_shared<TimingSink>();
        const auto t0 = Clock::now();
        if (auto st = engine->submit(req, sink, std::make_shared<frost::CancelToken>()); !st.ok()) {
          std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
          return 1;
        }
        sink->done.WaitForNotification();
        auto last = t0;
        for (const auto& t : sink->arrivals) {
          lat.push_back(std::chrono::duration<double, std::milli>(t - last).count());
          last = t;
        }
        res = std::move(sink->result);
      } else {
        auto last = Clock::now();
        frost::CancelToken cancel;
        res = gen.generate(
            req,
            [&](const frost::TokenEvent&) {
              const auto now = Clock::now();
              lat.push_back(std::chrono::duration<double, std::milli>(now - last).count());
              last = now;
            },
            cancel);
      }
      if (!res.ok()) {
        std::fprintf(stderr, "error: %s\n", res.status().ToString().c_str());
        return 1;
      }
      if (r == 0) continue;  // warm-up
      tps.push_back(res->decode_tok_s());
      lat_ms.insert(lat_ms.end(), lat.begin() + 1, lat.end());  // first event follows the prefill
    }
    out["kv_codec"] = kv_name;
    out["path"] = path;
    out["via"] = via;
    record_sampling(out);
    out["prompt_tokens"] = n_prompt;
    out["new_tokens"] = n_new;
    out["kv_bytes_per_token"] = engine ? engine->stats().kv_bytes_per_token : gen.kv()->bytes_per_token();
    out["decode_tokens_per_s"] = median(tps);
    out["decode_tokens_per_s_best"] = *std::max_element(tps.begin(), tps.end());
    out["token_latency_ms"] = {
        {"p50", percentile(lat_ms, 50)}, {"p90", percentile(lat_ms, 90)}, {"p99", percentile(lat_ms, 99)}};
    out["runs_tokens_per_s"] = tps;
    // Against the bandwidth limit: every served weight byte and the KV read once per token (at the mean
    // context of the run), at the read bandwidth measured now with the same threads.
    const double bw = read_bandwidth(at::get_num_threads());
    const int64_t kv_per_token = engine ? engine->stats().kv_bytes_per_token : gen.kv()->bytes_per_token();
    const double bytes = static_cast<double>(m.model->served_weight_bytes_per_token()) +
                         static_cast<double>(kv_per_token) * (static_cast<double>(n_prompt) + n_new / 2.0);
    out["read_bandwidth_gb_s"] = bw * 1e-9;
    out["bytes_per_token"] = bytes;
    out["bandwidth_limit_tokens_per_s"] = bw / bytes;
    out["ratio_to_bandwidth_limit"] = median(tps) / (bw / bytes);
  } else if (mode == "engine") {
    if (streams < 1) usage("--streams must be >= 1");
    frost::serving::ServingOptions so = frost::serving::ServingOptions::for_loaded(
        std::shared_ptr<const frost::LoadedModel>(std::move(*model)));
    so.device = device_name;
    frost::EngineConfig& ec = so.engine;
    ec.gen.kv_codec = *codec;
    ec.gen.limits.max_new_tokens = static_cast<int32_t>(n_new);
    // --max-running (default: the streams) sizes the engine as a server is sized: the KV pool follows it, so
    // the serving benchmark passes frostd's value and the two runs differ only by gRPC and the client.
    const int64_t max_running = max_running_flag > 0 ? max_running_flag : streams;
    if (max_running < streams) usage("--max-running must be >= --streams");
    ec.max_running = static_cast<int32_t>(max_running);
    ec.max_waiting = static_cast<int32_t>(streams);
    ec.max_batch_tokens = std::max<int64_t>(128, max_running);
    // The executor for --device and the engine, as frostd assembles them (core/serving/serving.h).
    out["device"] = device->name();
    auto serving = frost::serving::Serving::start(so);
    if (!serving.ok()) {
      std::fprintf(stderr, "error: %s\n", serving.status().ToString().c_str());
      return 1;
    }
    frost::Engine& engine = *(*serving)->engine();
    // Keeps `streams` requests in flight until `total` have finished (a finished request's sink submits the
    // next one); returns the wall seconds.
    struct Load {
      absl::Mutex mu;
      int64_t started = 0, finished = 0, total = 0;
      std::atomic<int64_t> tokens{0};
    };
    struct Sink final : frost::TokenSink {
      Load* load = nullptr;
      std::function<void()> next;
      void on_token(const frost::TokenEvent& ev) override {
        if (ev.id >= 0) load->tokens.fetch_add(1, std::memory_order_relaxed);
      }
      void on_finish(absl::StatusOr<frost::GenerationResult> r) override {
        if (!r.ok()) {
          std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str());
          std::exit(1);
        }
        {
          absl::MutexLock l(&load->mu);
          ++load->finished;
        }
        next();
      }
    };
    auto run = [&](int64_t total, uint64_t salt, int64_t* tokens) {
      Load load;
      load.total = total;
      std::function<void()> submit_one = [&] {
        int64_t i;
        {
          absl::MutexLock l(&load.mu);
          if (load.started >= load.total) return;
          i = load.started++;
        }
        frost::GenerationRequest req;
        for (int64_t t = 0; t < n_prompt; ++t)
          req.prompt_ids.push_back(static_cast<int32_t>(
              3 + (t * 31 + (salt + static_cast<uint64_t>(i)) * 7919) % (m.config.n_vocab - 3)));
        req.params = sampling;
        req.params.seed = seed + salt + static_cast<uint64_t>(i);
        req.params.ignore_eos = true;
        req.params.max_new_tokens = static_cast<int32_t>(n_new);
        auto sink = std::make_shared<Sink>();
        sink->load = &load;
        sink->next = submit_one;
        if (auto st = engine.submit(req, sink, std::make_shared<frost::CancelToken>()); !st.ok()) {
          std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
          std::exit(1);
        }
      };
      const auto t0 = Clock::now();
      for (int64_t k = 0; k < streams; ++k) submit_one();
      {
        absl::MutexLock l(&load.mu);
        auto all_done = [&load]() ABSL_SHARED_LOCKS_REQUIRED(load.mu) { return load.finished >= load.total; };
        load.mu.Await(absl::Condition(&all_done));
      }
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      engine.wait_idle(10);
      *tokens = load.tokens.load();
      return secs;
    };
    int64_t tok = 0;
    run(streams, 1000000, &tok);  // warm-up round
    const double secs = run(streams * repeat, 0, &tok);
    const frost::EngineStats st = engine.stats();
    out["streams"] = streams;
    out["prompt_tokens"] = n_prompt;
    out["new_tokens"] = n_new;
    record_sampling(out);
    out["requests"] = streams * repeat;
    out["output_tokens"] = tok;
    out["wall_s"] = secs;
    out["output_tokens_per_s"] = static_cast<double>(tok) / secs;
    out["mean_batch_size"] =
        st.batch_size.count ? st.batch_size.sum / static_cast<double>(st.batch_size.count) : 0;
    const double steps = static_cast<double>(std::max<uint64_t>(1, st.n_steps));
    out["steps"] = st.n_steps;
    out["preemptions"] = st.n_preemptions;
    out["step_ms"] = {{"schedule", st.t_schedule_s / steps * 1e3},
                      {"forward", st.t_forward_s / steps * 1e3},
                      {"sample", st.t_sample_s / steps * 1e3},
                      {"emit", st.t_emit_s / steps * 1e3},
                      {"deliver", st.t_deliver_s / steps * 1e3}};
  } else if (mode == "huge-pages") {
    c10::InferenceMode im;
    const frost::ModelWeights& w = m.model->weights();
    // The step's weight matrices in order, each packed as the serving path packs it (into the arena) and
    // copied once more into LibTorch's memory.
    std::vector<frost::kernels::PackedMatrix> huge, small;
    auto add = [&](const at::Tensor& t) {
      if (!t.defined()) return;
      frost::kernels::PackedMatrix pm = frost::kernels::pack_matrix(t.to(at::kFloat).contiguous());
      frost::kernels::PackedMatrix pl = pm;
      for (at::Tensor* x : {&pl.panels, &pl.scales, &pl.mins})
        if (x->defined()) *x = x->clone();  // LibTorch's allocator: glibc's mmap'd chunks, 4 KiB pages
      huge.push_back(std::move(pm));
      small.push_back(std::move(pl));
    };
    for (const auto& l : w.layers) {
      add(l.wqkv);
      add(l.wo);
      add(l.w_in);
      add(l.w_out);
    }
    add(w.lm_head);
    int64_t max_in = 0, max_out = 0;
    for (const auto& pm : huge) {
      max_in = std::max(max_in, pm.n_in);
      max_out = std::max(max_out, pm.n_out);
    }
    out["huge_pages_enabled"] = frost::kernels::huge_pages_enabled();
    out["transparent_hugepage"] = frost::kernels::transparent_hugepage_mode();
    out["packed_bytes"] = [&] {
      int64_t n = 0;
      for (const auto& pm : huge) n += pm.bytes();
      return n;
    }();
    ordered_json rows = ordered_json::array();
    std::vector<int64_t> row_counts = {1, 32};
    if (batch != 32 && batch != 1) row_counts.push_back(batch);
    for (const int64_t n_rows : row_counts) {
      const at::Tensor x = at::randn({n_rows, max_in});
      at::Tensor y = at::empty({n_rows, max_out});
      auto step = [&](const std::vector<frost::kernels::PackedMatrix>& ms) {
        const auto t0 = Clock::now();
        for (const auto& pm : ms)
          frost::kernels::gemm_packed(pm, x.data_ptr<float>(), max_in, n_rows, nullptr, y.data_ptr<float>(),
                                      max_out);
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      for (int r = 0; r < 3; ++r) step(huge), step(small);  // warm-up
      std::vector<double> t_huge, t_small, ratio;
      for (int r = 0; r < repeat; ++r) {  // alternated, the order swapped every repetition
        double a, b;
        if (r % 2) {
          a = step(huge);
          b = step(small);
        } else {
          b = step(small);
          a = step(huge);
        }
        t_huge.push_back(a);
        t_small.push_back(b);
        ratio.push_back(b / a);
      }
      rows.push_back({{"rows", n_rows},
                      {"step_ms_huge_pages",
                       {{"p50", percentile(t_huge, 50) * 1e3}, {"min", percentile(t_huge, 0) * 1e3}}},
                      {"step_ms_4k_pages",
                       {{"p50", percentile(t_small, 50) * 1e3}, {"min", percentile(t_small, 0) * 1e3}}},
                      {"speedup_p50", percentile(ratio, 50)},
                      {"speedup_min", percentile(ratio, 0)},
                      {"weight_read_gb_per_s_huge_pages",
                       static_cast<double>(out["packed_bytes"].get<int64_t>()) / median(t_huge) * 1e-9}});
    }
    out["gemm_step"] = rows;
  } else if (mode == "bare-step") {
    c10::InferenceMode im;
    const frost::ModelWeights& w = m.model->weights();
    const frost::ModelConfig& c = m.config;
    auto f32 = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat).contiguous() : t; };
    std::vector<std::array<at::Tensor, 4>> mats;  // wqkv, wo, w_in, w_out as fp32 [out, in]
    for (const auto& l : w.layers) mats.push_back({f32(l.wqkv), f32(l.wo), f32(l.w_in), f32(l.w_out)});
    const at::Tensor head = f32(w.lm_head);
    // Two forms. "mm_out": the GEMMs into preallocated outputs (OpenBLAS), only the GEMMs timed — the floor
    // of what LibTorch can do. "linear": at::linear per matrix with SwiGLU / GELU between the MLP GEMMs,
    // outputs allocated per call — a plain LibTorch forward step (torch.nn.Linear) without attention or
    // norms.
    const int64_t f_in = c.arch == frost::Arch::kLlama ? 2 * c.ffn_dim : c.ffn_dim;
    at::Tensor x = at::randn({batch, c.dim}), o = at::randn({batch, c.q_dim()}),
               a = at::randn({batch, c.ffn_dim});
    at::Tensor qkv = at::empty({batch, c.q_dim() + 2 * c.kv_dim()}), y = at::empty({batch, c.dim});
    at::Tensor u = at::empty({batch, f_in}), logits = at::empty({batch, c.n_vocab});
    // A third form, "packed": the same GEMMs through frost's packed kernel (kernels/cpu/gemm.h) — what the
    // serving step's weight GEMMs cost, so the rest of a served step (attention, norms, sampling) reads off.
    std::vector<std::array<frost::kernels::PackedMatrix, 4>> packed;
    for (const auto& mt : mats) {
      std::array<frost::kernels::PackedMatrix, 4> pm;
      for (size_t i = 0; i < 4; ++i)
        if (mt[i].defined()) pm[i] = frost::kernels::pack_matrix(mt[i]);
      packed.push_back(std::move(pm));
    }
    const frost::kernels::PackedMatrix head_packed = frost::kernels::pack_matrix(head);
    auto gemm = [](const frost::kernels::PackedMatrix& pm, const at::Tensor& in, at::Tensor& res) {
      frost::kernels::gemm_packed(pm, in.data_ptr<float>(), in.size(1), in.size(0), nullptr,
                                  res.data_ptr<float>(), res.size(1));
    };
    std::vector<double> secs, secs_linear, secs_packed;
    for (int r = 0; r < repeat + 5; ++r) {
      auto t0 = Clock::now();
      for (const auto& mt : mats) {
        at::mm_out(qkv, x, mt[0].t());                     // q | k | v
        if (mt[1].defined()) at::mm_out(y, o, mt[1].t());  // output projection
        at::mm_out(u, x, mt[2].t());                       // MLP in
        at::mm_out(y, a, mt[3].t());                       // MLP out
      }
      at::mm_out(logits, x, head.t());  // logits
      if (r >= 5) secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      t0 = Clock::now();
      at::Tensor sink;
      for (const auto& mt : mats) {
        sink = at::linear(x, mt[0]);
        if (mt[1].defined()) sink = at::linear(o, mt[1]);
        at::Tensor uu = at::linear(x, mt[2]);
        at::Tensor act = c.arch == frost::Arch::kLlama
                             ? at::silu(uu.narrow(1, 0, c.ffn_dim)) * uu.narrow(1, c.ffn_dim, c.ffn_dim)
                             : at::gelu(uu, "tanh");
        sink = at::linear(act, mt[3]);
      }
      sink = at::linear(x, head);
      (void)sink.data_ptr<float>()[0];
      if (r >= 5) secs_linear.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      t0 = Clock::now();
      for (const auto& pm : packed) {
        gemm(pm[0], x, qkv);
        if (pm[1].defined()) gemm(pm[1], o, y);
        gemm(pm[2], x, u);
        gemm(pm[3], a, y);
      }
      gemm(head_packed, x, logits);
      if (r >= 5) secs_packed.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    out["step_ms_packed"] = {{"p50", percentile(secs_packed, 50) * 1e3},
                             {"min", percentile(secs_packed, 0) * 1e3}};
    out["tokens_per_s_packed"] = static_cast<double>(batch) / median(secs_packed);
    out["step_ms_linear"] = {{"p50", percentile(secs_linear, 50) * 1e3},
                             {"min", percentile(secs_linear, 0) * 1e3}};
    out["tokens_per_s_linear"] = static_cast<double>(batch) / median(secs_linear);
    out["batch"] = batch;
    out["step_ms"] = {{"p50", percentile(secs, 50) * 1e3}, {"min", percentile(secs, 0) * 1e3}};
    out["tokens_per_s"] = static_cast<double>(batch) / median(secs);
  } else {
    c10::InferenceMode im;
    const auto ids = prompt_ids(n_prompt, m.config.n_vocab);
    at::Tensor t = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
    frost::SequenceKv kv(m.model->kv_spec(n_prompt, *codec));
    const bool fast = path == "fast";
    frost::BatchScratch bs;
    std::vector<double> tps, secs;
    for (int r = 0; r <= repeat; ++r) {
      kv.reset();
      const auto t0 = Clock::now();
      if (fast) {
        (void)m.model->forward_batch({frost::StepSeq{&kv, ids.data(), n_prompt, true}}, bs)[0];
      } else {
        at::Tensor logits = m.model->forward(t, kv, /*last_only=*/true);
        (void)logits.data_ptr<float>()[0];
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r == 0) continue;
      secs.push_back(s);
      tps.push_back(static_cast<double>(n_prompt) / s);
    }
    out["kv_codec"] = kv_name;
    out["path"] = path;
    out["prompt_tokens"] = n_prompt;
    out["prefill_tokens_per_s"] = median(tps);
    out["prefill_latency_ms"] = {{"p50", percentile(secs, 50) * 1e3}, {"max", percentile(secs, 100) * 1e3}};
    out["runs_tokens_per_s"] = tps;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
