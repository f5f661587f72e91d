// The host reference device (core/exec/reference_decoder.h), which CI runs in place of a GPU:
//  - it computes the model: within 1e-4 (relative) of the CPU transformer's reference forward on LLaMA-GQA
//  and
//    GPT-2 shapes with every KV format it stores, and the stories260K golden's greedy tokens;
//  - a ragged step of several sequences gives each one's logits bit for bit as when it runs alone (rows are
//    independent on the device, paged through their own block tables);
//  - its sampler is the host sampler: on the same logits and draw, the same token, for greedy, temperature,
//    top-k, top-p, min-p and their mixes;
//  - int8 weights (weight-only): the CPU int8 model's int8 matrices and scales, multiplied as its dequantized
//    values (ref::linear_q8 = ref::linear over dequantize(), bit for bit) by fp32 activations: within 1e-4 of
//    the CPU int8 transformer's forward on random shapes and on stories260K's golden prompts;
//  - it refuses what a device decoder cannot run, naming it, and a step it cannot run, then keeps serving;
//    an injected fault fails one step, a sticky one every step.
#include "core/exec/reference_decoder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "core/exec/device_executor.h"
#include "core/exec/device_factory.h"
#include "core/exec/hidden_states.h"
#include "core/generate/sampler.h"
#include "core/kv/sequence_kv.h"
#include "core/prototype/features.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/reference.h"
#include "tests/testing/decoder_harness.h"
#include "tests/testing/stories260k.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using testing::DecoderSeq;
using testing::TestBlocks;

std::unique_ptr<ReferenceDecoder> make_decoder(const LoadedModel& m, cuda::KvFormat f) {
  DeviceOptions o;
  o.kv = f;
  auto w = ReferenceWeights::create(m.config, m.model->weights());
  EXPECT_TRUE(w.ok()) << w.status();
  return std::make_unique<ReferenceDecoder>(*w, o);
}

TEST(ReferenceDecoderTest, ComputesTheCpuTransformersLogitsInEveryKvFormat) {
  for (const ModelConfig& cfg : {testing::device_llama_gqa(), testing::device_gpt2()}) {
    const auto model = testing::random_loaded_model(cfg, cfg.arch == Arch::kLlama ? 7 : 8);
    std::mt19937 g(3);
    std::vector<int32_t> tokens(20);
    for (auto& t : tokens) t = static_cast<int32_t>(g() % static_cast<unsigned>(cfg.n_vocab));
    for (cuda::KvFormat f : testing::kKvFormats) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + " kv " + cuda::kv_format_name(f));
      auto d = make_decoder(*model, f);
      testing::allocate_for_test(*d, cfg, f, 16, 32, 4);
      TestBlocks blocks(16);
      DecoderSeq s;
      s.reserve(*d, blocks, 20);
      // Prefill 12 rows (logits for each), then 8 single-row decode steps.
      const std::vector<float> got = testing::prefill_then_decode_logits(*d, tokens, 12);
      const std::vector<float> want = testing::cpu_forward_logits(*model, testing::kv_codec_of(f), tokens);
      // Float sums (CPU) against double ones (the twin): 1e-4 with fp32 rows. A compact row is the same
      // function of K / V on both sides (int8 / int4 through the same quantizer), but a K computed a last bit
      // apart can round to the neighbouring fp16 / bf16 value or quantisation step: up to one unit of that
      // format in one element (fp16 2⁻¹¹, bf16 2⁻⁸, int8 1/127 of the row's range).
      const double tol = f == cuda::KvFormat::kF32 ? 1e-4 : f == cuda::KvFormat::kF16 ? 1e-3 : 1e-2;
      const double diff = testing::rel_max_diff(got, want);
      EXPECT_LT(diff, tol);
      std::printf("  reference device vs CPU transformer: %-5s kv %-4s max rel diff %.2e\n", arch_name(cfg.arch),
                  cuda::kv_format_name(f), diff);
    }
  }
}

TEST(ReferenceDecoderTest, Stories260KGivesTheGoldensGreedyTokens) {
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  auto loaded = testing::load_stories260k();
  ASSERT_TRUE(loaded);
  const LoadedModel& m = *loaded;
  auto d = make_decoder(m, cuda::KvFormat::kF32);
  testing::allocate_for_test(*d, m.config, cuda::KvFormat::kF32, 64, 64, 4);
  TestBlocks blocks(64);
  int slot = 0;
  const int V = static_cast<int>(m.config.n_vocab);
  for (const testing::GoldenCase& c : testing::golden_cases(refp)) {
    DecoderSeq s;
    s.slot = slot++;
    s.tokens = c.input_ids;
    const std::vector<int32_t>& want = c.greedy_new_ids;
    const auto steps = testing::run_alone(*d, blocks, s, static_cast<int>(want.size()), V);
    double worst = 0;
    for (const auto& [token, logit] : c.top20_last_position)
      worst = std::max(worst, std::fabs(static_cast<double>(steps[0][static_cast<size_t>(token)]) - logit));
    EXPECT_LT(worst, 1e-4) << c.prompt;
    std::vector<int32_t> got;
    for (const auto& l : steps) got.push_back(testing::argmax_of(l.data(), V));
    EXPECT_EQ(got, want) << c.prompt;
  }
}

TEST(ReferenceDecoderTest, ARaggedStepGivesEachSequenceItsLogitsAloneBitForBit) {
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 11);
  const std::vector<int> lens = {1, 3, 17, 30, 8};
  const int n_new = 5, V = static_cast<int>(cfg.n_vocab);
  for (cuda::KvFormat f : {cuda::KvFormat::kF32, cuda::KvFormat::kInt4}) {
    SCOPED_TRACE(cuda::kv_format_name(f));
    auto d = make_decoder(*model, f);
    testing::allocate_for_test(*d, cfg, f, 64, 64, 12, 8);
    TestBlocks blocks(64);
    std::mt19937 g(17);
    std::vector<DecoderSeq> batch(lens.size());
    std::vector<std::vector<std::vector<float>>> want;
    for (size_t i = 0; i < lens.size(); ++i) {
      DecoderSeq alone;
      alone.slot = static_cast<int>(i);
      for (int k = 0; k < lens[i]; ++k) alone.tokens.push_back(static_cast<int32_t>(g() % 300));
      batch[i] = alone;
      batch[i].slot = static_cast<int>(i + lens.size());
      batch[i].blocks.clear();
      want.push_back(testing::run_alone(*d, blocks, alone, n_new, V));
    }
    DeviceStep pre;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].reserve(*d, blocks, lens[i] + n_new);
      for (int k = 0; k < lens[i]; ++k) {
        pre.token.push_back(batch[i].tokens[static_cast<size_t>(k)]);
        pre.seq.push_back(batch[i].slot);
        pre.pos.push_back(k);
      }
      pre.logit_rows.push_back(static_cast<int32_t>(pre.token.size()) - 1);
    }
    std::vector<float> l = d->forward_logits(pre);
    for (int k = 0; k < n_new; ++k) {
      DeviceStep st;
      for (size_t i = 0; i < batch.size(); ++i) {
        const std::vector<float> row(l.begin() + static_cast<int64_t>(i) * V, l.begin() + static_cast<int64_t>(i + 1) * V);
        ASSERT_EQ(row, want[i][static_cast<size_t>(k)]) << "sequence " << i << " step " << k;
        st.token.push_back(testing::argmax_of(row.data(), V));
        st.seq.push_back(batch[i].slot);
        st.pos.push_back(lens[i] + k);
        st.logit_rows.push_back(static_cast<int32_t>(i));
      }
      if (k + 1 < n_new) l = d->forward_logits(st);
    }
  }
}

// The device sampler's twin against the host sampler: the same seed gives the same draw u (plan_device_draw
// consumes exactly what sample() would), and on the same logits the same token.
TEST(ReferenceDecoderTest, ItsSamplerIsTheHostSampler) {
  std::mt19937_64 g(9);
  int checked = 0, distinct_from_greedy = 0;
  for (int V : {512, 32000}) {
    for (int trial = 0; trial < 120; ++trial) {
      std::vector<float> l(static_cast<size_t>(V));
      std::uniform_real_distribution<float> d(-6.f, 6.f);
      for (auto& x : l) x = d(g);
      if (trial % 7 == 0) l[static_cast<size_t>(trial) % l.size()] = std::nanf("");
      if (trial % 5 == 0) l[3] = l[V - 2] = 9.f;  // ties for the maximum
      SamplingParams p;
      p.seed = 1000 + static_cast<uint64_t>(trial);
      p.temperature = trial % 11 == 10 ? 0.f : 0.2f + 0.15f * static_cast<float>(trial % 9);
      p.top_k = trial % 3 == 1 ? 1 + (trial * 37) % 300 : 0;
      p.top_p = trial % 4 == 2 ? 0.3f + 0.07f * static_cast<float>(trial % 10) : 1.f;
      p.min_p = trial % 5 == 3 ? 0.02f + 0.01f * static_cast<float>(trial % 4) : 0.f;
      Sampler host(p, V), plan(p, V);
      for (int k = 0; k < 3; ++k) {  // a few consecutive draws of the same generator
        bool greedy = false;
        cuda::SampleParams sp;
        plan.plan_device_draw(&greedy, &sp.temperature, &sp.top_k, &sp.top_p, &sp.min_p, &sp.u);
        sp.greedy = greedy ? 1 : 0;
        const int device = cuda::ref::sample_row(l.data(), V, sp);
        plan.accept_device_token(device);
        const int want = host.sample(l.data()).id;
        ASSERT_EQ(device, want) << "V " << V << " trial " << trial << " draw " << k;
        distinct_from_greedy += device != cuda::ref::argmax(l.data(), V);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 720);
  EXPECT_GT(distinct_from_greedy, checked / 3);
}

// Constrained decoding on the device (issue 54): the twin with a token mask (ref::apply_token_mask, then
// sample_row) is the host sampler with the same mask (Sampler::sample(logits, allowed)), draw for draw, and
// its token is always one the mask allows — masks of one token to nearly all, with and without the argmax.
TEST(ReferenceDecoderTest, ItsMaskedSamplerIsTheHostsMaskedSampler) {
  std::mt19937_64 g(11);
  int checked = 0;
  for (int V : {512, 32000}) {
    const int W = (V + 31) / 32;
    for (int trial = 0; trial < 80; ++trial) {
      std::vector<float> l(static_cast<size_t>(V));
      std::uniform_real_distribution<float> d(-6.f, 6.f);
      for (auto& x : l) x = d(g);
      std::vector<uint32_t> mask(static_cast<size_t>(W), 0u);
      const int allowed = trial % 4 == 0 ? 1 : 1 + static_cast<int>(g() % static_cast<uint64_t>(V));
      for (int k = 0; k < allowed; ++k) {
        const auto id = static_cast<int>(g() % static_cast<uint64_t>(V));
        mask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
      }
      SamplingParams p;
      p.seed = 2000 + static_cast<uint64_t>(trial);
      p.temperature = trial % 9 == 8 ? 0.f : 0.3f + 0.1f * static_cast<float>(trial % 8);
      p.top_k = trial % 3 == 1 ? 1 + (trial * 37) % 300 : 0;
      p.top_p = trial % 4 == 2 ? 0.5f : 1.f;
      p.min_p = trial % 5 == 3 ? 0.05f : 0.f;
      Sampler host(p, V), plan(p, V);
      for (int k = 0; k < 3; ++k) {
        bool greedy = false;
        cuda::SampleParams sp;
        plan.plan_device_draw(&greedy, &sp.temperature, &sp.top_k, &sp.top_p, &sp.min_p, &sp.u);
        sp.greedy = greedy ? 1 : 0;
        std::vector<float> masked = l;
        cuda::ref::apply_token_mask(masked.data(), V, mask.data());
        const int device = cuda::ref::sample_row(masked.data(), V, sp);
        plan.accept_device_token(device);
        ASSERT_TRUE((mask[static_cast<size_t>(device / 32)] >> (device % 32)) & 1u)
            << "V " << V << " trial " << trial << ": token " << device << " is outside the mask";
        ASSERT_EQ(device, host.sample(l.data(), mask.data()).id)
            << "V " << V << " trial " << trial << " draw " << k;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 480);
}

TEST(ReferenceDecoderTest, RefusesWhatADeviceCannotRunNamingIt) {
  ModelConfig c = testing::device_llama_gqa();
  EXPECT_TRUE(device_supports(c, WeightDtype::kF32, "cuda:0").ok());
  EXPECT_TRUE(device_supports(c, WeightDtype::kBF16, "cuda:0").ok());
  EXPECT_TRUE(device_supports(c, WeightDtype::kF16, "cuda:0").ok());
  auto refused = [](const absl::Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
    EXPECT_NE(std::string(st.message()).find("model.device cuda:0"), std::string::npos) << st;
  };
  EXPECT_TRUE(device_supports(c, WeightDtype::kInt8, "cuda:0").ok());
  refused(device_supports(c, WeightDtype::kInt4, "cuda:0"),
          "model.dtype int4 (a device serves fp32, bf16, fp16 or int8");
  refused(device_supports(c, WeightDtype::kW8A8, "cuda:0"), "model.dtype w8a8");
  ModelConfig g3 = c;
  g3.n_head = 6;
  refused(device_supports(g3, WeightDtype::kF32, "cuda:0"), "6 query heads over 2 kv heads");
  ModelConfig hd = c;
  hd.head_dim = 12;
  refused(device_supports(hd, WeightDtype::kF32, "cuda:0"), "head_dim 12");
  ModelConfig longc = c;
  longc.max_pos = 20000;
  refused(device_supports(longc, WeightDtype::kF32, "cuda:0"), "max_position_embeddings 20000");
  auto variants = load_model("builtin:tiny");
  ASSERT_TRUE(variants.ok());
  ModelConfig ra = (*variants)->config;
  ra.variants.ra_layers = {0};
  refused(device_supports(ra, WeightDtype::kF32, "cuda:0"),
          "model.device cuda:0: architecture variants: reciprocal attention (config.json frost_variants.ra_layers) "
          "runs only on model.device cpu");
}

TEST(ReferenceDecoderTest, RefusesAStepItCannotRunThenKeepsServing) {
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 5);
  auto d = make_decoder(*model, cuda::KvFormat::kF32);
  testing::allocate_for_test(*d, cfg, cuda::KvFormat::kF32, 8, 4, 2);
  auto step_error = [&](const DeviceStep& st) -> std::string {
    try {
      d->forward_logits(st);
    } catch (const DeviceError& e) {
      EXPECT_FALSE(e.sticky());
      return e.what();
    }
    return "";
  };
  TestBlocks blocks(8);
  DecoderSeq s;
  s.reserve(*d, blocks, 4);
  EXPECT_NE(step_error(DeviceStep{{300}, {0}, {0}, {0}}).find("token 300 out of range"), std::string::npos);
  EXPECT_NE(step_error(DeviceStep{{1}, {0}, {64}, {0}}).find("position 64"), std::string::npos);
  EXPECT_NE(step_error(DeviceStep{{1, 2, 3, 4, 5}, {0, 0, 0, 0, 0}, {0, 1, 2, 3, 4}, {4}}).find("1..4 rows"),
            std::string::npos);
  EXPECT_NE(step_error(DeviceStep{{1}, {2}, {0}, {0}}).find("sequence slot 2"), std::string::npos);
  EXPECT_THROW(d->set_blocks(0, std::vector<int32_t>{8}.data(), 1), DeviceError);
  EXPECT_EQ(d->forward_logits(DeviceStep{{1}, {0}, {0}, {0}}).size(), 300u);  // still serves
  // An injected fault fails one step; a sticky one every step after it.
  d->inject_fault(false);
  EXPECT_NE(step_error(DeviceStep{{1}, {0}, {1}, {0}}).find("injected fault"), std::string::npos);
  EXPECT_EQ(d->forward_logits(DeviceStep{{1}, {0}, {1}, {0}}).size(), 300u);
  d->inject_fault(true);
  for (int k = 0; k < 2; ++k) {
    try {
      d->forward_logits(DeviceStep{{1}, {0}, {2}, {0}});
      ADD_FAILURE() << "a sticky fault must fail every step";
    } catch (const DeviceError& e) {
      EXPECT_TRUE(e.sticky()) << e.what();
    }
  }
}

// Predict's and the jobs' backbone features on a device (core/exec/hidden_states.h): the final-norm hidden
// states of every position from the device's own decoder, within 1e-4 of the CPU reference forward's; and the
// feature paths (encode_texts, FeatureCache) ask the model's source when it has one.
TEST(DeviceHiddenStatesTest, FeaturesComeFromTheDeviceAndEqualTheCpus) {
  for (const char* name : {"builtin:tiny", "builtin:tiny-gpt2"}) {
    SCOPED_TRACE(name);
    auto cpu = load_model(name);
    ASSERT_TRUE(cpu.ok());
    ExecutorOptions o;
    o.device.kind = DeviceKind::kReference;
    auto src = make_hidden_source(**cpu, o);
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_TRUE(*src);
    EXPECT_EQ((*src)->device(), "reference");
    std::vector<int32_t> ids;
    for (int i = 0; i < 37; ++i) ids.push_back(3 + (i * 53) % 500);
    auto want = prototype::backbone_hidden(**cpu, ids);  // no source: the CPU forward
    ASSERT_TRUE(want.ok()) << want.status();
    auto device = load_model(name);
    ASSERT_TRUE(device.ok());
    (*device)->hidden_source = *src;
    auto got = prototype::backbone_hidden(**device, ids);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->sizes(), want->sizes());
    const double scale = std::max(1.0, want->abs().max().item<double>());
    EXPECT_LT((*got - *want).abs().max().item<double>() / scale, 1e-4);
    // Predict's path and the feature cache go through the source: the same rows (fp16-rounded) as the CPU's.
    auto fb_dev = prototype::encode_texts(**device, {"a cat sat", "on the mat today"}, 64);
    auto fb_cpu = prototype::encode_texts(**cpu, {"a cat sat", "on the mat today"}, 64);
    ASSERT_TRUE(fb_dev.ok() && fb_cpu.ok());
    EXPECT_TRUE(at::equal(fb_dev->mask, fb_cpu->mask));
    EXPECT_LT((fb_dev->h - fb_cpu->h).abs().max().item<double>(), 5e-3);  // one fp16 step at most
    prototype::FeatureCache::Options fo;
    fo.max_tokens = 64;
    auto cache = prototype::FeatureCache::build(**device, {"one text", "and another one"}, fo);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ((*cache)->size(), 2);
  }
  // The CPU device has no source: features stay on Transformer::forward.
  auto cpu = load_model("builtin:tiny");
  ASSERT_TRUE(cpu.ok());
  auto none = make_hidden_source(**cpu, ExecutorOptions{});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
}

// Weights once per device (core/exec/device_factory.h): the engine's executor and the features' decoder borrow
// one DeviceWeights, so the device holds one copy; the executor reports those bytes (frost_model_weight_bytes,
// frost_device_memory_bytes{kind="weights"}) and the features still equal the CPU's.
TEST(DeviceHiddenStatesTest, TheEngineAndTheFeaturesShareOneCopyOfTheWeights) {
  auto m = load_model("builtin:tiny");
  ASSERT_TRUE(m.ok());
  ExecutorOptions o;
  o.device.kind = DeviceKind::kReference;
  auto up = upload_device_weights((*m)->config, (*m)->model->weights(), o.device);
  ASSERT_TRUE(up.ok()) << up.status();
  o.weights = *up;
  EXPECT_EQ(o.weights.use_count(), 2);  // *up and o.weights
  auto src = make_hidden_source(**m, o);
  ASSERT_TRUE(src.ok()) << src.status();
  std::shared_ptr<const LoadedModel> shared(std::move(*m));
  auto ex = make_executor(shared, o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(o.weights.use_count(), 4);  // + the features' decoder + the engine's: no second upload
  EXPECT_GT(o.weights->bytes(), 0);
  auto* dev = dynamic_cast<DeviceExecutor*>(ex->get());
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->decoder().memory().weight_bytes, o.weights->bytes());  // what the executor's stats report
  std::vector<int32_t> ids = {1, 5, 9, 200, 17};
  auto got = (*src)->hidden(ids);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = prototype::backbone_hidden(*shared, ids);  // no source on `shared`: the CPU forward
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LT((*got - *want).abs().max().item<double>(), 1e-4);
  // The cpu lays out no device weights: it serves the loaded ones.
  EXPECT_EQ(upload_device_weights(shared->config, shared->model->weights(), DeviceSpec{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// fp16 weights (a device format) on the reference device:
//  - the loader's fp16 matrices are the twin's rounding of the fp32 ones, bit for bit (what the CUDA decoder
//    uploads, and what it would round itself from fp32);
//  - stories260K with fp16 weights: every golden prompt's prefill logits within 2e-3 of the fp32 weights'
//    (max |Δ| / max(1, max |fp32|): weights and activations each move by up to 2⁻¹¹ relative), and the same
//    greedy tokens as the fp32 weights' and the golden's.
TEST(ReferenceDecoderTest, Fp16WeightsAreTheTwinsRoundingOfTheFp32Ones) {
  LoadOptions f16;
  f16.dtype = WeightDtype::kF16;
  auto h = load_model("builtin:tiny", f16);
  auto f = load_model("builtin:tiny");
  ASSERT_TRUE(h.ok() && f.ok());
  const ModelWeights& hw = (*h)->model->weights();
  const ModelWeights& fw = (*f)->model->weights();
  EXPECT_EQ((*h)->model->weight_format(), WeightDtype::kF16);
  auto same = [](const at::Tensor& half, const at::Tensor& full, const std::string& what) {
    ASSERT_EQ(half.scalar_type(), at::kHalf) << what;
    const at::Tensor hc = half.contiguous(), fc = full.to(at::kFloat).contiguous();
    ASSERT_EQ(hc.numel(), fc.numel()) << what;
    const auto* hb = static_cast<const uint16_t*>(hc.data_ptr());
    const float* fv = fc.data_ptr<float>();
    for (int64_t i = 0; i < hc.numel(); ++i)
      ASSERT_EQ(hb[i], cuda::ref::f16_bits(fv[i])) << what << " [" << i << "]";
  };
  same(hw.tok_embed, fw.tok_embed, "tok_embed");
  for (size_t l = 0; l < hw.layers.size(); ++l) {
    same(hw.layers[l].wqkv, fw.layers[l].wqkv, "wqkv");
    same(hw.layers[l].wo, fw.layers[l].wo, "wo");
    same(hw.layers[l].w_in, fw.layers[l].w_in, "w_in");
    same(hw.layers[l].w_out, fw.layers[l].w_out, "w_out");
  }
  EXPECT_EQ(hw.final_norm_w.scalar_type(), at::kFloat);
}

TEST(ReferenceDecoderTest, Stories260KWithFp16WeightsStaysWithinFp16OfFp32) {
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  LoadOptions f16;
  f16.dtype = WeightDtype::kF16;
  auto lh = testing::load_stories260k(f16);
  auto lf = testing::load_stories260k();
  ASSERT_TRUE(lh);
  ASSERT_TRUE(lf);
  const ModelConfig& cfg = lf->config;
  auto dh = make_decoder(*lh, cuda::KvFormat::kF32);
  auto df = make_decoder(*lf, cuda::KvFormat::kF32);
  EXPECT_LT(dh->memory().weight_bytes, df->memory().weight_bytes * 6 / 10);  // the matrices in 2 bytes
  testing::allocate_for_test(*dh, cfg, cuda::KvFormat::kF32, 64, 64, 4);
  testing::allocate_for_test(*df, cfg, cuda::KvFormat::kF32, 64, 64, 4);
  TestBlocks bh(64), bf(64);
  const int V = static_cast<int>(cfg.n_vocab);
  int slot = 0;
  double worst = 0;
  for (const testing::GoldenCase& c : testing::golden_cases(refp)) {
    DecoderSeq s;
    s.slot = slot++;
    s.tokens = c.input_ids;
    const std::vector<int32_t>& want = c.greedy_new_ids;
    const auto half = testing::run_alone(*dh, bh, s, static_cast<int>(want.size()), V);
    const auto full = testing::run_alone(*df, bf, s, static_cast<int>(want.size()), V);
    worst = std::max(worst, testing::rel_max_diff(half[0], full[0]));
    std::vector<int32_t> got_h, got_f;
    for (const auto& l : half) got_h.push_back(testing::argmax_of(l.data(), V));
    for (const auto& l : full) got_f.push_back(testing::argmax_of(l.data(), V));
    EXPECT_EQ(got_h, got_f) << c.prompt;
    EXPECT_EQ(got_h, want) << c.prompt;
  }
  EXPECT_LT(worst, 2e-3);
  EXPECT_GT(worst, 0.0);  // fp16 is not fp32: the rounding took place
  std::printf("  stories260K fp16 vs fp32 weights (reference device): prefill logits max rel diff %.2e\n",
              worst);
}

// The twins' fp16 rounding against known values — CUDA's __float2half_rn: round to nearest, ties to even, in
// the normal and subnormal ranges and across their boundary; ±65520 and beyond overflow to ±inf (65519.99
// still rounds to 65504); NaN stays NaN — and ref::linear's fp16 product rounds its inputs with it.
TEST(ReferenceTwinsTest, HalfRoundingKnownValues) {
  using cuda::ref::f16_bits;
  const float two_m24 = std::ldexp(1.f, -24), two_m25 = std::ldexp(1.f, -25);
  struct Case {
    float f;
    uint16_t h;
  };
  for (const Case c :
       {Case{0.f, 0x0000}, Case{-0.f, 0x8000}, Case{1.f, 0x3c00}, Case{-2.f, 0xc000}, Case{65504.f, 0x7bff},
        Case{65519.99f, 0x7bff}, Case{65520.f, 0x7c00}, Case{-65520.f, 0xfc00}, Case{1e10f, 0x7c00},
        Case{std::numeric_limits<float>::infinity(), 0x7c00},
        Case{-std::numeric_limits<float>::infinity(), 0xfc00},
        // ties to even among normals: 1 + 2⁻¹¹ → 1 (even), 1 + 3·2⁻¹¹ → 1 + 2⁻⁹ (even), and the carry
        // into the exponent 2 − 2⁻¹¹ → 2; just above a tie rounds up
        Case{1.f + std::ldexp(1.f, -11), 0x3c00}, Case{1.f + 3 * std::ldexp(1.f, -11), 0x3c02},
        Case{2.f - std::ldexp(1.f, -11), 0x4000},
        Case{1.f + std::ldexp(1.f, -11) + std::ldexp(1.f, -23), 0x3c01},
        // subnormals: 2⁻²⁴ is the smallest; 2⁻²⁵ (a tie) → 0, 3·2⁻²⁵ (a tie) → 2·2⁻²⁴, 2⁻²⁵·(1+ε) → 2⁻²⁴
        Case{two_m24, 0x0001}, Case{-two_m24, 0x8001}, Case{two_m25, 0x0000}, Case{-two_m25, 0x8000},
        Case{3 * two_m25, 0x0002}, Case{5 * two_m25, 0x0002}, Case{two_m25 * 1.0001f, 0x0001},
        Case{std::ldexp(1.f, -26), 0x0000}, Case{1023 * two_m24, 0x03ff},
        // the subnormal / normal boundary: 2⁻¹⁴ − 2⁻²⁵ (a tie) → 2⁻¹⁴, the smallest normal
        Case{std::ldexp(1.f, -14) - two_m25, 0x0400}, Case{std::ldexp(1.f, -14), 0x0400},
        Case{1e-30f, 0x0000}}) {
    EXPECT_EQ(f16_bits(c.f), c.h) << c.f;
  }
  const uint16_t nan = f16_bits(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00u, 0x7c00u);
  EXPECT_NE(nan & 0x03ffu, 0u);
  EXPECT_EQ(cuda::ref::f16_round(65519.99f), 65504.f);
  EXPECT_EQ(cuda::ref::f16_round(two_m24 * 1.4f), two_m24);
  EXPECT_TRUE(std::isinf(cuda::ref::f16_round(70000.f)));
  for (float v : {0.1f, -3.3333f, 1e-6f, 40000.3f}) {
    EXPECT_EQ(cuda::ref::dtype_round(cuda::DType::kF16, v), cuda::ref::f16_round(v));
    EXPECT_EQ(cuda::ref::dtype_round(cuda::DType::kBF16, v), cuda::ref::bf16_round(v));
    EXPECT_EQ(cuda::ref::dtype_round(cuda::DType::kF32, v), v);
  }
  // y = w · x with w = 1: the fp16 product takes x rounded (1 + 2⁻¹¹ → 1), the fp32 one x itself; bf16 rounds
  // coarser still (1 + 2⁻⁷ + 2⁻⁹ → 1 + 2⁻⁷ in bf16, exact in fp16).
  const float w = 1.f, x1 = 1.f + std::ldexp(1.f, -11), x2 = 1.f + std::ldexp(1.f, -7) + std::ldexp(1.f, -9);
  float y = 0;
  cuda::ref::linear(&w, &x1, 1, 1, 1, nullptr, false, cuda::DType::kF16, &y);
  EXPECT_EQ(y, 1.f);
  cuda::ref::linear(&w, &x1, 1, 1, 1, nullptr, false, cuda::DType::kF32, &y);
  EXPECT_EQ(y, x1);
  cuda::ref::linear(&w, &x2, 1, 1, 1, nullptr, false, cuda::DType::kF16, &y);
  EXPECT_EQ(y, x2);
  cuda::ref::linear(&w, &x2, 1, 1, 1, nullptr, false, cuda::DType::kBF16, &y);
  EXPECT_EQ(y, 1.f + std::ldexp(1.f, -7));
}

// The twins' fp16 conversion (the device's __float2half_rn, written out) against LibTorch's: every bit pattern of
// half round-trips, and 200,000 floats over the whole range (normals, subnormals, overflow, ties) round alike.
TEST(ReferenceTwinsTest, HalfConversionIsIeeeRoundToNearestEven) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = cuda::ref::f16_value(static_cast<uint16_t>(h));
    const float want = static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(f, want) << h;
    ASSERT_EQ(cuda::ref::f16_bits(f), h) << h;
  }
  std::mt19937 g(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = g();
    if (i % 3 == 0) bits = (bits & 0x807fffffu) | (static_cast<uint32_t>(100 + i % 60) << 23);  // near half's range
    if (i % 7 == 0) bits = (bits & 0xffffe000u) | 0x1000u;  // an exact tie
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const c10::Half want(f);
    ASSERT_EQ(cuda::ref::f16_bits(f), want.x) << f;
  }
}

}  // namespace
}  // namespace frost

namespace frost {
namespace {

// The int8 twin multiplies exactly the CPU int8 model's weights: ref::linear_q8 on (q, scales) equals
// ref::linear on dequantize(q, scales) in fp32 bit for bit (the same float weights, the same double sums),
// for groups that divide the row, a short last group, and one group per row (model.int8_group 0).
TEST(ReferenceTwinsTest, Int8LinearIsTheFp32LinearOfTheDequantizedMatrix) {
  for (int64_t group : {int64_t{32}, int64_t{16}, int64_t{0}})
    for (const auto& shape : {std::pair{7, 64}, std::pair{5, 45}, std::pair{3, 16}}) {
      // Plain locals, not a structured binding: the lambda below captures n_in, which C++17 (clang) forbids
      // for a binding.
      const int n_out = shape.first, n_in = shape.second;
      const at::Tensor w = at::randn({n_out, n_in}, at::TensorOptions().dtype(at::kFloat)) * 0.1;
      const kernels::QuantizedMatrix qm = kernels::quantize_int8(w, group);
      const at::Tensor dq = kernels::dequantize(qm).contiguous();
      const int rows = 3;
      const std::vector<float> x = [&] {
        std::vector<float> v(static_cast<size_t>(rows) * n_in);
        std::mt19937 g(static_cast<uint32_t>(n_in + group));
        std::uniform_real_distribution<float> u(-2.f, 2.f);
        for (float& e : v) e = u(g);
        return v;
      }();
      std::vector<float> b(static_cast<size_t>(n_out), 0.25f), y8(static_cast<size_t>(rows) * n_out, 1.f),
          yf = y8;
      cuda::ref::linear_q8(qm.q.data_ptr<int8_t>(), qm.scales.data_ptr<float>(), static_cast<int>(qm.group),
                           x.data(), rows, n_out, n_in, b.data(), true, y8.data());
      cuda::ref::linear(dq.data_ptr<float>(), x.data(), rows, n_out, n_in, b.data(), true, cuda::DType::kF32,
                        yf.data());
      EXPECT_EQ(y8, yf) << "group " << group << " " << n_out << "x" << n_in;
    }
}

// int8 weights on the reference device against the CPU int8 transformer's forward (which computes with the
// dequantized matrices: the same function, float sums against double ones): 1e-4 with fp32 KV rows, as fp32
// weights, on LLaMA-GQA and GPT-2 shapes (prefill 12 rows, then 8 decode steps); the weights are the int8
// bytes and their scales (about a quarter of fp32's).
TEST(ReferenceDecoderTest, Int8WeightsComputeTheCpuInt8TransformersLogits) {
  for (const ModelConfig& cfg : {testing::device_llama_gqa(), testing::device_gpt2()}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    const auto model =
        testing::random_loaded_model(cfg, cfg.arch == Arch::kLlama ? 7 : 8, WeightDtype::kInt8);
    ASSERT_EQ(model->model->weight_format(), WeightDtype::kInt8);
    std::mt19937 g(3);
    std::vector<int32_t> tokens(20);
    for (auto& t : tokens) t = static_cast<int32_t>(g() % static_cast<unsigned>(cfg.n_vocab));
    auto d = make_decoder(*model, cuda::KvFormat::kF32);
    testing::allocate_for_test(*d, cfg, cuda::KvFormat::kF32, 16, 32, 4);
    TestBlocks blocks(16);
    DecoderSeq s;
    s.reserve(*d, blocks, 20);
    const std::vector<float> got = testing::prefill_then_decode_logits(*d, tokens, 12);
    const double diff =
        testing::rel_max_diff(got, testing::cpu_forward_logits(*model, KvCodecKind::kF32, tokens));
    EXPECT_LT(diff, 1e-4);
    const auto fp32 = testing::random_loaded_model(cfg, cfg.arch == Arch::kLlama ? 7 : 8);
    const int64_t bytes8 = d->memory().weight_bytes,
                  bytes32 = make_decoder(*fp32, cuda::KvFormat::kF32)->memory().weight_bytes;
    EXPECT_LT(bytes8, bytes32 / 2);
    std::printf(
        "  reference device int8 vs CPU int8 transformer: %-5s max rel diff %.2e; weights %lld vs %lld bytes "
        "(fp32)\n",
        arch_name(cfg.arch), diff, static_cast<long long>(bytes8), static_cast<long long>(bytes32));
  }
}

// stories260K with int8 weights: every golden prompt's prefill logits within 1e-4 of the CPU int8
// transformer's forward (the model the CPU int8 path serves), and the greedy tokens of the CPU int8 model's
// own logits.
TEST(ReferenceDecoderTest, Stories260KWithInt8WeightsComputesTheCpuInt8Model) {
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  LoadOptions i8;
  i8.dtype = WeightDtype::kInt8;
  auto loaded = testing::load_stories260k(i8);
  ASSERT_TRUE(loaded);
  const LoadedModel& m = *loaded;
  auto d = make_decoder(m, cuda::KvFormat::kF32);
  testing::allocate_for_test(*d, m.config, cuda::KvFormat::kF32, 64, 64, 4);
  TestBlocks blocks(64);
  const int V = static_cast<int>(m.config.n_vocab);
  int slot = 0;
  double worst = 0;
  for (const testing::GoldenCase& c : testing::golden_cases(refp)) {
    DecoderSeq s;
    s.slot = slot++;
    s.tokens = c.input_ids;
    const auto steps = testing::run_alone(*d, blocks, s, 1, V);
    const std::vector<float> cpu = testing::cpu_forward_logits(m, KvCodecKind::kF32, s.tokens);
    const std::vector<float> last(cpu.end() - V, cpu.end());
    const double diff = testing::rel_max_diff(steps[0], last);
    worst = std::max(worst, diff);
    EXPECT_LT(diff, 1e-4) << c.prompt;
    EXPECT_EQ(testing::argmax_of(steps[0].data(), V), testing::argmax_of(last.data(), V)) << c.prompt;
  }
  std::printf("  stories260K int8 (reference device vs CPU int8 forward): prefill logits max rel diff %.2e\n",
              worst);
}

}  // namespace
}  // namespace frost
