// frost-generate: local generation demo on the engine (no server). Streams the completion to
// stdout as it is produced and prints timings to stderr.
//
// The model and the engine come from core/serving/serving.h, the assembly frostd and frost-bench start
// too, so that what this demo runs is what the server serves (one request, on the CPU).
//
// `frost-generate --help` lists the flags. They are parsed by the flag table below (core/flags/flags.h),
// which also prints the help: "--flag VALUE" or "--flag=VALUE"; values are checked strictly and a bad one is
// a usage error (exit 2) naming the flag and the value.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/common/device.h"
#include "core/common/log.h"
#include "core/flags/flags.h"
#include "core/serving/serving.h"

namespace {

using frost::cli::float_flag;
using frost::cli::int32_flag;
using frost::cli::string_flag;
using frost::cli::uint64_flag;

frost::CancelToken* g_cancel = nullptr;
void on_signal(int) {
  if (g_cancel) g_cancel->cancel();
}

// The flag table, for usage errors found after parsing: the message and the help on stderr, exit 2.
const frost::cli::Command* g_command = nullptr;
[[noreturn]] void usage(const std::string& msg) { frost::cli::exit_usage_error(*g_command, msg, 2); }

// Writes each token's text to stdout as it comes (on the engine's thread) and keeps the result.
class StdoutSink final : public frost::TokenSink {
 public:
  void on_token(const frost::TokenEvent& e) override {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
  }
  void on_finish(absl::StatusOr<frost::GenerationResult> r) override {
    result = std::move(r);
    done.Notify();
  }
  absl::StatusOr<frost::GenerationResult> result = absl::UnknownError("the generation did not finish");
  absl::Notification done;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "builtin:tiny", prompt = "Once upon a time", dtype = "fp32", kv = "fp32";
  frost::SamplingParams params;
  params.max_new_tokens = 64;
  int threads = 0;
  frost::cli::Command command;
  command.name = "frost-generate";
  command.synopsis = "[flags]";
  command.description =
      "Local generation on the engine (no server): streams the completion to stdout as it is produced and "
      "prints timings to stderr. Ctrl-C stops the generation.";
  command.flag_groups = {
      {"flags",
       {string_flag("--model", [&](const std::string& v) { model_path = v; })
            .doc("PATH",
                 "builtin:tiny|builtin:tiny-gpt2|builtin:15m or a Hugging Face directory (default "
                 "builtin:tiny)"),
        string_flag("--prompt", [&](const std::string& v) { prompt = v; })
            .doc("TEXT", "the prompt (default \"Once upon a time\")"),
        int32_flag("--max-new-tokens", [&](int32_t v) { params.max_new_tokens = v; })
            .doc("N", "tokens to generate at most (default 64)"),
        float_flag("--temperature", [&](float v) { params.temperature = v; }).doc("T", "0 = greedy"),
        int32_flag("--top-k", [&](int32_t v) { params.top_k = v; })
            .doc("K", "sample among the K likeliest tokens"),
        float_flag("--top-p", [&](float v) { params.top_p = v; })
            .doc("P", "nucleus sampling: the smallest set of mass P"),
        uint64_flag("--seed", [&](uint64_t v) { params.seed = v; }).doc("S", "same seed, same tokens"),
        int32_flag("--threads", [&](int32_t v) { threads = v; })
            .doc("N", "intra-op threads (0: the default)"),
        string_flag("--dtype", [&](const std::string& v) { dtype = v; })
            .doc("DTYPE", "weight format: " + frost::weight_dtype_choices(false) +
                              " (default fp32; fp16 is a device format, refused on the CPU)"),
        string_flag("--kv", [&](const std::string& v) { kv = v; })
            .doc("CODEC", "KV cache storage: fp32|fp16|bf16|int8|int4 (default fp32)"),
        string_flag("--stop", [&](const std::string& v) {
          params.stop.push_back(v);
        }).doc("STR", "stop string (repeatable)")}}};
  const std::vector<std::string> positional =
      frost::cli::parse_or_exit(command, std::vector<std::string>(argv + 1, argv + argc), 2);
  g_command = &command;
  if (!positional.empty()) usage("unexpected argument '" + positional.front() + "'");
  if (auto st = frost::apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  auto codec = frost::parse_kv_codec(kv);
  if (!codec.ok()) usage(std::string(codec.status().message()));
  frost::WeightDtype wdtype;
  if (!frost::parse_weight_dtype(dtype, &wdtype))
    usage("--dtype must be " + frost::weight_dtype_choices(false) + ", got " + dtype);
  if (auto st = frost::check_weight_dtype_on_cpu(wdtype, "--dtype"); !st.ok())
    usage(std::string(st.message()));
  // The flags are checked above (usage errors, exit 2); the process's threads are set there, so Serving
  // leaves them, and the CPU kernels stay the process's choice (no --kernels flag).
  frost::serving::ServingOptions so;
  so.model_path = model_path;
  so.dtype = wdtype;
  so.threads = std::nullopt;
  so.kernels.clear();
  so.device = "cpu";
  so.hidden_source = false;  // no Predict here
  so.warmup = false;         // the timings below are the first request's, as a user running it sees them
  so.log_name.clear();       // the "loaded" line below instead of frostd's ready line
  so.engine.gen.kv_codec = *codec;
  so.engine.max_running = 1;  // one request: a KV pool for one sequence
  so.engine.max_waiting = 1;
  auto serving = frost::serving::Serving::start(so);
  if (!serving.ok()) {
    std::fprintf(stderr, "error: %s\n", serving.status().ToString().c_str());
    return 1;
  }
  const auto& m = *(*serving)->model();
  FROST_LOG_INFO("loaded %s (%s, %lld params, n_layer=%lld) in %.2fs", m.name.c_str(),
                 frost::arch_name(m.config.arch), static_cast<long long>(m.model->n_params()),
                 static_cast<long long>(m.config.n_layer), m.t_load_s);
  frost::GenerationRequest req;
  req.prompt = prompt;
  req.params = params;
  auto cancel = std::make_shared<frost::CancelToken>();
  g_cancel = cancel.get();
  std::signal(SIGINT, on_signal);
  std::printf("%s", prompt.c_str());
  std::fflush(stdout);
  auto sink = std::make_shared<StdoutSink>();
  if (absl::Status st = (*serving)->engine()->submit(req, sink, cancel); !st.ok()) {
    std::printf("\n");
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  sink->done.WaitForNotification();
  g_cancel = nullptr;
  (*serving)->stop();
  const absl::StatusOr<frost::GenerationResult>& res = sink->result;
  std::printf("\n");
  std::fflush(stdout);
  if (!res.ok()) {
    std::fprintf(stderr, "error: %s\n", res.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "finish=%s prompt_tokens=%d completion_tokens=%d prefill=%.1fms decode=%.1f tok/s\n",
               frost::finish_reason_name(res->finish_reason), res->n_prompt, res->n_completion,
               res->t_prefill_s * 1e3, res->decode_tok_s());
  return 0;
}
