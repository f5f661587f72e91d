// The host reference device on the model families' features (core/model/model_config.h; the HF checkpoints of
// tests/integration/hf_families_test.cc hold it to Hugging Face's math, with fp32 KV rows): here the same
// features on small random models, against the CPU transformer's reference forward, in every KV format the
// device stores, and through the engine:
//  - a Gemma-2-like model (a sliding window on layer 0 only, attention and final-logit soft caps, post norms,
//    scaled embeddings, query_pre_attn_scalar, the tanh-GELU gate) and a Gemma-3 / Qwen-like one (q / k
//    norms, windows with the local RoPE base on the sliding layer, linear RoPE scaling on the global one,
//    partial rotary, q / k / v biases without an o bias): a 12-row prefill past the window, then 12 decode
//    steps, within 1e-4 (relative) with fp32 rows and one unit of the format otherwise — the tolerances of
//    reference_decoder_test.cc — and each feature changes the logits (the check is not vacuous);
//  - the engine on the reference device (chunked prefills, batched decode) gives the CPU engine's greedy
//    tokens;
//  - the CUDA decoder still refuses such a model naming the config.json field; the reference device runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/exec/device_decoder.h"
#include "core/exec/make_executor.h"
#include "core/exec/reference_decoder.h"
#include "core/generate/engine.h"
#include "tests/testing/decoder_harness.h"
#include "tests/testing/test_util.h"
#include "tests/testing/recording_sink.h"

namespace frost {
namespace {

using testing::DecoderSeq;
using testing::TestBlocks;

// device_llama_gqa (C 128, 8 heads over 2, head_dim 16, 2 layers, vocab 300, context 64) as Gemma 2 lays it
// out.
ModelConfig gemma2_like() {
  ModelConfig c = testing::device_llama_gqa();
  c.architecture = "Gemma2ForCausalLM";
  c.family = Family::kGemma2;
  c.act = Activation::kGeluNew;
  c.window = {8, 0};  // layer 0 slides over the last 8 positions, layer 1 sees all
  c.post_norms = true;
  c.embed_scale = std::sqrt(static_cast<double>(c.dim));
  c.attn_scale = 1.0 / std::sqrt(24.0);  // query_pre_attn_scalar 24 != head_dim 16
  c.attn_softcap = 0.5;                  // small enough to bend these scores
  c.final_softcap = 1.5;
  return c;
}

// The same shape with Gemma 3's and Qwen's features.
ModelConfig gemma3_qwen_like() {
  ModelConfig c = testing::device_llama_gqa();
  c.architecture = "Gemma3ForCausalLM";
  c.family = Family::kGemma3;
  c.window = {6, 0};
  c.qk_norm = true;
  c.rope_theta = 1e6;
  c.rope_local_theta = 1e4;  // layer 0 (sliding) rotates with this base, unscaled
  c.rope_scaling.type = RopeType::kLinear;
  c.rope_scaling.factor = 2.0;
  c.rotary_dim = 8;  // of head_dim 16
  c.attention_bias = true;
  c.o_bias = false;
  return c;
}

std::unique_ptr<ReferenceDecoder> make_decoder(const LoadedModel& m, cuda::KvFormat f) {
  DeviceOptions o;
  o.kv = f;
  auto w = ReferenceWeights::create(m.config, m.model->weights());
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  return std::make_unique<ReferenceDecoder>(*w, o);
}

// The device's logits of `tokens`: a prefill of the first 12 (logits for each), then one decode step per
// token.
std::vector<float> device_logits(const LoadedModel& m, cuda::KvFormat f, const std::vector<int32_t>& tokens) {
  auto d = make_decoder(m, f);
  if (!d) return {};
  testing::allocate_for_test(*d, m.config, f, 16, 32, 2);
  TestBlocks blocks(16);
  DecoderSeq s;
  s.reserve(*d, blocks, static_cast<int>(tokens.size()));
  return testing::prefill_then_decode_logits(*d, tokens, 12);
}

std::vector<int32_t> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(g() % static_cast<unsigned>(vocab));
  return t;
}

TEST(ReferenceFamiliesTest, WindowsAndSoftCapsComputeTheCpuTransformersLogitsInEveryKvFormat) {
  struct Model {
    const char* name;
    ModelConfig cfg;
  };
  for (const Model& mc :
       {Model{"gemma2-like", gemma2_like()}, Model{"gemma3/qwen-like", gemma3_qwen_like()}}) {
    const auto model = testing::random_loaded_model(mc.cfg, 23);
    const std::vector<int32_t> tokens = random_tokens(24, static_cast<int>(mc.cfg.n_vocab), 5);
    for (cuda::KvFormat f : testing::kKvFormats) {
      SCOPED_TRACE(std::string(mc.name) + " kv " + cuda::kv_format_name(f));
      const std::vector<float> got = device_logits(*model, f, tokens);
      const std::vector<float> want = testing::cpu_forward_logits(*model, testing::kv_codec_of(f), tokens);
      // reference_decoder_test.cc's tolerances: float sums (CPU) against double ones (the twin), 1e-4 with
      // fp32 rows; a compact row may round a last-bit-apart K to the neighbouring fp16 / bf16 value or
      // quantisation step (fp16 2⁻¹¹, bf16 2⁻⁸, int8 1/127 of the row's range).
      const double tol = f == cuda::KvFormat::kF32 ? 1e-4 : f == cuda::KvFormat::kF16 ? 1e-3 : 1e-2;
      const double diff = testing::rel_max_diff(got, want);
      EXPECT_LT(diff, tol);
      std::printf("  reference device vs CPU transformer: %-16s kv %-4s max rel diff %.2e\n", mc.name,
                  cuda::kv_format_name(f), diff);
    }
  }
}

// Each feature the test above exercises changes the device's logits (else a device that ignored it would
// pass).
TEST(ReferenceFamiliesTest, EachFeatureChangesTheLogits) {
  const std::vector<int32_t> tokens = random_tokens(24, 300, 5);
  auto logits = [&](const ModelConfig& cfg) {
    return device_logits(*testing::random_loaded_model(cfg, 23), cuda::KvFormat::kF32, tokens);
  };
  struct Off {
    const char* what;
    ModelConfig cfg;
  };
  std::vector<Off> offs;
  const ModelConfig g2 = gemma2_like(), g3 = gemma3_qwen_like();
  auto off = [&](const char* what, ModelConfig c, auto&& change) {
    change(c);
    offs.push_back({what, c});
  };
  off("window", g2, [](ModelConfig& c) { c.window = {0, 0}; });
  off("attention soft cap", g2, [](ModelConfig& c) { c.attn_softcap = 0; });
  off("final soft cap", g2, [](ModelConfig& c) { c.final_softcap = 0; });
  off("query scale", g2, [](ModelConfig& c) { c.attn_scale = 0; });
  off("embedding scale", g2, [](ModelConfig& c) { c.embed_scale = 1; });
  off("tanh-GELU gate", g2, [](ModelConfig& c) { c.act = Activation::kSilu; });
  const std::vector<float> base2 = logits(g2), base3 = logits(g3);
  off("local RoPE base", g3, [](ModelConfig& c) { c.rope_local_theta = 0; });
  off("RoPE scaling", g3, [](ModelConfig& c) { c.rope_scaling = RopeScaling{}; });
  off("partial rotary", g3, [](ModelConfig& c) { c.rotary_dim = 0; });
  off("window (with the local base)", g3, [](ModelConfig& c) { c.window = {0, 0}; });
  for (const Off& o : offs) {
    const bool is_g3 = o.cfg.family == Family::kGemma3;
    const double d = testing::rel_max_diff(logits(o.cfg), is_g3 ? base3 : base2);
    EXPECT_GT(d, 1e-3) << o.what;
    std::printf("  without %-28s max rel diff %.2e\n", o.what, d);
  }
  // The weights' features (q / k norms, post norms, biases) change the logits by construction (random
  // weights, not identities): the CPU comparison above holds the device to them.
}

using Sink = testing::RecordingSink;

std::vector<std::vector<int32_t>> run_greedy(Engine& e, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::shared_ptr<Sink>> sinks;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt_ids = p;
    r.params.max_new_tokens = 16;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    auto s = std::make_shared<Sink>();
    const absl::Status st = e.submit(r, s, std::make_shared<CancelToken>());
    EXPECT_TRUE(st.ok()) << st;
    sinks.push_back(s);
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->done.WaitForNotificationWithTimeout(absl::Seconds(120)));
    EXPECT_TRUE(s->result.ok()) << s->result.status();
    out.push_back(s->ids);
  }
  EXPECT_TRUE(e.wait_idle(30));
  return out;
}

TEST(ReferenceFamiliesTest, TheEngineOnTheReferenceDeviceGivesTheCpuEnginesGreedyTokens) {
  for (const ModelConfig& cfg : {gemma2_like(), gemma3_qwen_like()}) {
    SCOPED_TRACE(cfg.architecture);
    const std::shared_ptr<const LoadedModel> model = testing::random_loaded_model(cfg, 29);
    EngineConfig c;
    c.max_running = 4;
    c.max_waiting = 64;
    c.max_batch_tokens = 16;  // prompts of 9..33 tokens prefill in chunks, across the windows
    c.audit_kv = true;
    ExecutorOptions o;
    o.device.kind = DeviceKind::kReference;
    auto ex = make_executor(model, o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    auto device = Engine::create(model, c, std::move(ex).value());
    ASSERT_TRUE(device.ok()) << device.status();
    auto cpu = Engine::create(model, c);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i)
      prompts.push_back(random_tokens(9 + 8 * i, 300, 40 + static_cast<unsigned>(i)));
    const auto got = run_greedy(**device, prompts);
    const auto want = run_greedy(**cpu, prompts);
    EXPECT_EQ(got, want);
    EXPECT_EQ((*device)->device(), "reference");
    EXPECT_EQ(got[0].size(), 16u);
  }
}

// The CUDA decoder has no kernels for the families' ops: it refuses such a model before upload, naming the
// config.json field (check_layer_features' message); the reference device declares them and runs it.
TEST(ReferenceFamiliesTest, OnlyTheReferenceDeviceRunsTheFamiliesFeatures) {
  const absl::Status cuda = device_supports(gemma2_like(), WeightDtype::kF32, "cuda:0");
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition) << cuda;
  EXPECT_MSG_HAS(cuda,
                 "model.device cuda:0: Gemma2ForCausalLM feature: sliding-window attention (config.json "
                 "sliding_window) runs only on model.device cpu");
  ModelConfig gelu = testing::device_llama_gqa();
  gelu.architecture = "GemmaLike";
  gelu.act = Activation::kGeluNew;
  EXPECT_MSG_HAS(device_supports(gelu, WeightDtype::kF32, "cuda:0"), "(config.json hidden_activation)");
  LayerFeatures families;
  families.families = true;
  EXPECT_TRUE(device_supports(gemma2_like(), WeightDtype::kF32, "reference", families).ok());
  EXPECT_TRUE(device_supports(gemma3_qwen_like(), WeightDtype::kBF16, "reference", families).ok());
  const auto m = testing::random_loaded_model(gemma2_like(), 3);
  EXPECT_TRUE(ReferenceWeights::create(m->config, m->model->weights()).ok());
  // The variants stay refused on every device.
  ModelConfig ra = gemma2_like();
  ra.variants.ra_layers = {0};
  EXPECT_MSG_HAS(device_supports(ra, WeightDtype::kF32, "reference", families), "frost_variants.ra_layers");
}

}  // namespace
}  // namespace frost
