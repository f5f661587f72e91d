// frost-generate: local generation demo on the engine (no server). Streams the completion to
// stdout as it is produced and prints timings to stderr.
//
//   frost-generate [--model builtin:tiny|DIR] [--prompt TEXT] [--max-new-tokens N]
//                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N]
//                  [--dtype fp32|bf16|int8|int4|w8a8] [--kv fp32|fp16|bf16|int8|int4] [--stop STR]...
//                  (--dtype fp16, a device weight format, is refused: this runs on the CPU)
//
// Flags are parsed by the shared parser (client/flags/flags.h): "--flag VALUE" or "--flag=VALUE"; values are
// checked strictly and a bad one is a usage error (exit 2) naming the flag and the value. -h / --help prints
// the usage.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/flags/flags.h"
#include "core/common/device.h"
#include "core/common/log.h"
#include "core/generate/generator.h"
#include "core/model/model_loader.h"

namespace {

using frost::cli::float_flag;
using frost::cli::int32_flag;
using frost::cli::string_flag;
using frost::cli::switch_flag;
using frost::cli::uint64_flag;

frost::CancelToken* g_cancel = nullptr;
void on_signal(int) {
  if (g_cancel) g_cancel->cancel();
}

constexpr char kUsage[] =
    "usage: frost-generate [--model builtin:tiny|DIR] [--prompt TEXT] [--max-new-tokens N] "
    "[--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N] [--dtype fp32|bf16|int8|int4|w8a8] "
    "[--kv fp32|fp16|bf16|int8|int4] [--stop STR]...\n";

// A usage error: the message and the usage on stderr, exit 2.
[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

// -h / --help: the usage on stdout, exit 0.
[[noreturn]] void help() {
  std::fputs(kUsage, stdout);
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "builtin:tiny", prompt = "Once upon a time", dtype = "fp32", kv = "fp32";
  frost::SamplingParams params;
  params.max_new_tokens = 64;
  int threads = 0;
  const std::vector<frost::cli::Flag> flags = {
      string_flag("--model", [&](const std::string& v) { model_path = v; }),
      string_flag("--prompt", [&](const std::string& v) { prompt = v; }),
      int32_flag("--max-new-tokens", [&](int32_t v) { params.max_new_tokens = v; }),
      float_flag("--temperature", [&](float v) { params.temperature = v; }),
      int32_flag("--top-k", [&](int32_t v) { params.top_k = v; }),
      float_flag("--top-p", [&](float v) { params.top_p = v; }),
      uint64_flag("--seed", [&](uint64_t v) { params.seed = v; }),
      int32_flag("--threads", [&](int32_t v) { threads = v; }),
      string_flag("--dtype", [&](const std::string& v) { dtype = v; }),
      string_flag("--kv", [&](const std::string& v) { kv = v; }),
      string_flag("--stop", [&](const std::string& v) { params.stop.push_back(v); }),
      switch_flag("--help", help),
      switch_flag("-h", help),
  };
  absl::StatusOr<std::vector<std::string>> positional =
      frost::cli::parse_flags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!positional.ok()) usage(std::string(positional.status().message()));
  if (!positional->empty()) usage("unexpected argument '" + positional->front() + "'");
  if (auto st = frost::apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  auto codec = frost::parse_kv_codec(kv);
  if (!codec.ok()) usage(std::string(codec.status().message()));
  frost::WeightDtype wdtype;
  if (!frost::parse_weight_dtype(dtype, &wdtype))
    usage("--dtype must be " + frost::weight_dtype_choices(false) + ", got " + dtype);
  if (auto st = frost::check_weight_dtype_on_cpu(wdtype, "--dtype"); !st.ok())
    usage(std::string(st.message()));
  frost::LoadOptions lo;
  lo.dtype = wdtype;
  auto model = frost::load_model(model_path, lo);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const auto& m = **model;
  FROST_LOG_INFO("loaded %s (%s, %lld params, n_layer=%lld) in %.2fs", m.name.c_str(),
                 frost::arch_name(m.config.arch), static_cast<long long>(m.model->n_params()),
                 static_cast<long long>(m.config.n_layer), m.t_load_s);
  frost::GeneratorConfig gc;
  gc.kv_codec = *codec;
  frost::Generator gen(m, gc);
  frost::GenerationRequest req;
  req.prompt = prompt;
  req.params = params;
  frost::CancelToken cancel;
  g_cancel = &cancel;
  std::signal(SIGINT, on_signal);
  std::printf("%s", prompt.c_str());
  std::fflush(stdout);
  auto res = gen.generate(
      req,
      [](const frost::TokenEvent& e) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        std::fflush(stdout);
      },
      cancel);
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
