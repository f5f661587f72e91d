// frost-generate: local generation demo on the engine (no server). Streams the completion to
// stdout as it is produced and prints timings to stderr.
//
//   frost-generate [--model builtin:tiny|DIR] [--prompt TEXT] [--max-new-tokens N]
//                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N]
//                  [--dtype fp32|bf16] [--kv fp32|fp16|bf16|int8|int4] [--stop STR]...
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/common/device.h"
#include "core/common/log.h"
#include "core/generate/generator.h"
#include "core/model/model_loader.h"

namespace {

frost::CancelToken* g_cancel = nullptr;
void on_signal(int) {
  if (g_cancel) g_cancel->cancel();
}

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "error: %s\nusage: frost-generate [--model builtin:tiny|DIR] [--prompt TEXT] [--max-new-tokens N] "
               "[--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N] [--dtype fp32|bf16] "
               "[--kv fp32|fp16|bf16|int8|int4] [--stop STR]...\n",
               msg.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path = "builtin:tiny", prompt = "Once upon a time", dtype = "fp32", kv = "fp32";
  frost::SamplingParams params;
  params.max_new_tokens = 64;
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("flag " + a + " needs a value");
    const std::string v = argv[++i];
    try {
      if (a == "--model") model_path = v;
      else if (a == "--prompt") prompt = v;
      else if (a == "--max-new-tokens") params.max_new_tokens = std::stoi(v);
      else if (a == "--temperature") params.temperature = std::stof(v);
      else if (a == "--top-k") params.top_k = std::stoi(v);
      else if (a == "--top-p") params.top_p = std::stof(v);
      else if (a == "--seed") params.seed = std::stoull(v);
      else if (a == "--threads") threads = std::stoi(v);
      else if (a == "--dtype") dtype = v;
      else if (a == "--kv") kv = v;
      else if (a == "--stop") params.stop.push_back(v);
      else usage("unknown flag " + a);
    } catch (const std::exception&) {
      usage("bad value for " + a + ": " + v);
    }
  }
  if (auto st = frost::apply_device_config({threads}); !st.ok()) usage(std::string(st.message()));
  auto codec = frost::parse_kv_codec(kv);
  if (!codec.ok()) usage(std::string(codec.status().message()));
  if (dtype != "fp32" && dtype != "bf16") usage("--dtype must be fp32 or bf16, got " + dtype);
  frost::LoadOptions lo;
  lo.dtype = dtype == "bf16" ? frost::WeightDtype::kBF16 : frost::WeightDtype::kF32;
  auto model = frost::load_model(model_path, lo);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const auto& m = **model;
  FROST_LOG_INFO("loaded %s (%s, %lld params, n_layer=%lld) in %.2fs", m.name.c_str(), frost::arch_name(m.config.arch),
                 static_cast<long long>(m.model->n_params()), static_cast<long long>(m.config.n_layer), m.t_load_s);
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
  auto res = gen.generate(req, [](const frost::TokenEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
  }, cancel);
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
