// The CUDA decoder (core/exec/cuda_decoder.h) against the host reference device, which implements the same
// contract with the CPU twins of its kernels (core/exec/reference_decoder.h; CI holds that one to the CPU
// transformer and the golden), and the engine serving on cuda:0:
//  - random LLaMA-GQA and GPT-2 shapes, every KV format, fp32, bf16, fp16 and int8 weights: the logits of a
//    prefill (12 rows: the cuBLAS GEMM; int8: the GEMV in pieces of 8) and of decode steps (the GEMV) (max
//    |Δ| / max(1, max |ref|): fp32 and int8 weights 1e-4 — int8 multiplies the same fp32 weights float(q) ·
//    scale by unrounded activations —; bf16 5e-3, since the GEMM rounds its activations to bf16 and a
//    last-bit difference upstream moves one of them by a bf16 unit, 2⁻⁸ relative; fp16 2e-3 on the same
//    grounds, its unit 2⁻¹¹ relative, with room for a few);
//  - int8 on each of its paths (the GEMV, the GEMV in pieces up to 32 rows, dequantize + fp32 cuBLAS above,
//    and cuBLAS alone with the GEMV off): 1e-4 of the reference device; stories260K int8: 1e-4 of the
//    reference device and its greedy tokens; random int8 weights made on the device (the benchmark's) run;
//  - a ragged step of several sequences equals each alone (1e-4);
//  - bounded CUDA graph replays give the direct launches' tokens, with one graph per shape bucket;
//  - sampling on the device: the twin's token (the host sampler's function) on the device's own logits;
//  - stories260K: the golden's greedy tokens and top-20 logits (1e-4), with and without graphs;
//  - refusals name what is wrong and the decoder keeps serving;
//  - the engine on cuda:0 (DeviceExecutor): the golden's tokens, and mixed sampling / preemption equal to
//    each request alone.
// Every case skips, visibly, without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include "absl/synchronization/notification.h"
#include "core/exec/cuda_decoder.h"
#include "core/exec/device_executor.h"
#include "core/exec/make_executor.h"
#include "core/exec/reference_decoder.h"
#include "core/generate/engine.h"
#include "kernels/cuda/reference.h"
#include "tests/testing/decoder_harness.h"
#include "tests/testing/recording_sink.h"
#include "tests/testing/stories260k.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using testing::DecoderSeq;
using testing::TestBlocks;

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device visible";
  return "";
}
#define REQUIRE_GPU()                                                \
  do {                                                               \
    const std::string why_ = no_gpu_reason();                        \
    if (!why_.empty()) GTEST_SKIP() << "GPU test skipped: " << why_; \
  } while (0)

// The stories260K golden's cases (FROST_STORIES_REFERENCE, else ../shared's reference.json); none when there
// is no golden, which the caller skips on.
std::vector<testing::GoldenCase> stories_golden() {
  std::string refp;
  if (const char* p = std::getenv("FROST_STORIES_REFERENCE")) {
    refp = p;
  } else {
    refp = testing::shared_path("models/stories260K/reference.json");
  }
  if (refp.empty() || !std::ifstream(refp)) return {};
  return testing::golden_cases(refp);
}
#define REQUIRE_GOLDEN(golden) \
  if ((golden).empty()) GTEST_SKIP() << "no golden (set FROST_STORIES_REFERENCE)"

std::unique_ptr<CudaDecoder> cuda_decoder(const LoadedModel& m, cuda::KvFormat f, bool graphs = false) {
  DeviceOptions o;
  o.kv = f;
  o.cuda_graphs = graphs;
  auto w = CudaWeights::create(m.config, m.model->weights(), o.device);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  auto d = CudaDecoder::create(*w, o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(d).value() : nullptr;
}
std::unique_ptr<ReferenceDecoder> twin(const LoadedModel& m, cuda::KvFormat f) {
  DeviceOptions o;
  o.kv = f;
  return std::make_unique<ReferenceDecoder>(ReferenceWeights::create(m.config, m.model->weights()).value(), o);
}

// Prefill 12 rows (logits for each), then 8 single-row decode steps, on one decoder.
std::vector<float> prefill_then_decode(DeviceDecoder& d, const std::vector<int32_t>& tokens) {
  TestBlocks blocks(16);
  DecoderSeq s;
  s.reserve(d, blocks, 20);
  return testing::prefill_then_decode_logits(d, tokens, 12);
}

TEST(CudaDecoder, RandomLlamaAndGpt2MatchTheReferenceDeviceInEveryFormat) {
  REQUIRE_GPU();
  for (const ModelConfig& cfg : {testing::device_llama_gqa(), testing::device_gpt2()})
    for (WeightDtype wd : {WeightDtype::kF32, WeightDtype::kBF16, WeightDtype::kF16, WeightDtype::kInt8}) {
      const auto model = testing::random_loaded_model(cfg, cfg.arch == Arch::kLlama ? 7 : 8, wd);
      std::mt19937 g(3);
      std::vector<int32_t> tokens(20);
      for (auto& t : tokens) t = static_cast<int32_t>(g() % static_cast<unsigned>(cfg.n_vocab));
      for (cuda::KvFormat f : testing::kKvFormats) {
        SCOPED_TRACE(std::string(arch_name(cfg.arch)) + " " + weight_dtype_name(wd) + " kv " + cuda::kv_format_name(f));
        auto gpu = cuda_decoder(*model, f);
        ASSERT_TRUE(gpu);
        auto ref = twin(*model, f);
        testing::allocate_for_test(*gpu, cfg, f, 16, 32, 4);
        testing::allocate_for_test(*ref, cfg, f, 16, 32, 4);
        const double d = testing::rel_max_diff(prefill_then_decode(*gpu, tokens), prefill_then_decode(*ref, tokens));
        EXPECT_LT(d, wd == WeightDtype::kF32 || wd == WeightDtype::kInt8 ? 1e-4
                     : wd == WeightDtype::kBF16                          ? 5e-3
                                                                         : 2e-3);
        std::printf("  gpu vs reference device: %-5s %s kv %-4s  max rel diff %.2e\n", arch_name(cfg.arch),
                    weight_dtype_name(wd), cuda::kv_format_name(f), d);
      }
    }
}

TEST(CudaDecoder, BatchedStepsEqualEachSequenceRunAlone) {
  REQUIRE_GPU();
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 11);
  const std::vector<int> lens = {1, 3, 17, 30, 8};
  const int n_new = 6, V = static_cast<int>(cfg.n_vocab);
  for (cuda::KvFormat f : testing::kKvFormats) {
    SCOPED_TRACE(cuda::kv_format_name(f));
    auto m = cuda_decoder(*model, f);
    testing::allocate_for_test(*m, cfg, f, 64, 64, 12);
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
      want.push_back(testing::run_alone(*m, blocks, alone, n_new, V));
    }
    DeviceStep pre;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].reserve(*m, blocks, lens[i] + n_new);
      for (int k = 0; k < lens[i]; ++k) {
        pre.token.push_back(batch[i].tokens[static_cast<size_t>(k)]);
        pre.seq.push_back(batch[i].slot);
        pre.pos.push_back(k);
      }
      pre.logit_rows.push_back(static_cast<int32_t>(pre.token.size()) - 1);
    }
    std::vector<float> l = m->forward_logits(pre);
    for (int k = 0; k < n_new; ++k) {
      DeviceStep st;
      for (size_t i = 0; i < batch.size(); ++i) {
        const std::vector<float> row(l.begin() + static_cast<int64_t>(i) * V, l.begin() + static_cast<int64_t>(i + 1) * V);
        ASSERT_LT(testing::rel_max_diff(row, want[i][static_cast<size_t>(k)]), 1e-4) << "sequence " << i << " step " << k;
        const int32_t t = testing::argmax_of(row.data(), V);
        ASSERT_EQ(t, testing::argmax_of(want[i][static_cast<size_t>(k)].data(), V)) << "sequence " << i << " step " << k;
        st.token.push_back(t);
        st.seq.push_back(batch[i].slot);
        st.pos.push_back(lens[i] + k);
        st.logit_rows.push_back(static_cast<int32_t>(i));
      }
      if (k + 1 < n_new) l = m->forward_logits(st);
    }
  }
}

// Three sequences decode 30 steps with mixed sampling, with and without graphs: the same tokens; with graphs,
// one graph per (rows bucket, logit rows bucket, attention split) met, far fewer than steps.
TEST(CudaDecoder, BoundedGraphReplaysGiveTheDirectLaunchesTokens) {
  REQUIRE_GPU();
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 13);
  std::vector<std::vector<int32_t>> outs;
  for (bool graphs : {false, true}) {
    auto m = cuda_decoder(*model, cuda::KvFormat::kInt8, graphs);
    testing::allocate_for_test(*m, cfg, cuda::KvFormat::kInt8, 16, 16, 3);
    TestBlocks blocks(16);
    std::vector<DecoderSeq> seqs(3);
    DeviceStep st;
    for (int i = 0; i < 3; ++i) {
      seqs[static_cast<size_t>(i)].slot = i;
      seqs[static_cast<size_t>(i)].reserve(*m, blocks, 40);
      st.token.push_back(10 + i);
      st.seq.push_back(i);
      st.pos.push_back(0);
      st.logit_rows.push_back(i);
    }
    std::vector<int32_t> all;
    for (int k = 0; k < 30; ++k) {
      std::vector<cuda::SampleParams> smp(3);
      for (int i = 0; i < 3; ++i) {
        smp[static_cast<size_t>(i)].greedy = i != 2;
        smp[static_cast<size_t>(i)].temperature = 0.8f;
        smp[static_cast<size_t>(i)].top_k = k % 2 ? 20 : 0;
        smp[static_cast<size_t>(i)].u = (k * 0.37 + i * 0.11) - std::floor(k * 0.37 + i * 0.11);
      }
      std::vector<int32_t> ids(3);
      m->forward(st, smp, ids.data(), nullptr);
      all.insert(all.end(), ids.begin(), ids.end());
      for (int i = 0; i < 3; ++i) st.token[static_cast<size_t>(i)] = ids[static_cast<size_t>(i)], st.pos[static_cast<size_t>(i)] = k + 1;
    }
    if (graphs) {
      EXPECT_GE(m->graphs_captured(), 1);
      EXPECT_LT(m->graphs_captured(), 30);
      EXPECT_LE(m->graphs_captured(), CudaDecoder::kMaxGraphs);
    }
    outs.push_back(all);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

// Device sampling inside a step against the twin sampler on that step's own logits.
TEST(CudaDecoder, SamplesOnTheDeviceAsTheHostSamplerWould) {
  REQUIRE_GPU();
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 21);
  auto m = cuda_decoder(*model, cuda::KvFormat::kF32);
  testing::allocate_for_test(*m, cfg, cuda::KvFormat::kF32, 16, 16, 8);
  TestBlocks blocks(16);
  DeviceStep st;
  std::vector<cuda::SampleParams> smp;
  for (int i = 0; i < 8; ++i) {
    DecoderSeq s;
    s.slot = i;
    s.reserve(*m, blocks, 4);
    st.token.push_back(5 + 7 * i);
    st.seq.push_back(i);
    st.pos.push_back(0);
    st.logit_rows.push_back(i);
    cuda::SampleParams p;
    p.greedy = i == 0;
    p.temperature = 0.5f + 0.2f * static_cast<float>(i);
    p.top_k = i == 2 || i == 5 ? 7 : 0;
    p.top_p = i == 3 || i == 5 ? 0.6f : 1.f;
    p.min_p = i == 4 || i == 5 ? 0.1f : 0.f;
    p.to_host = i == 6;
    p.u = 0.123 * (i + 1);
    smp.push_back(p);
  }
  const std::vector<float> logits = m->forward_logits(st);
  std::vector<int32_t> ids(8);
  std::vector<float> host(static_cast<size_t>(cfg.n_vocab));
  EXPECT_EQ(m->forward(st, smp, ids.data(), host.data()), 1);  // the one row left to the host came back
  const int V = static_cast<int>(cfg.n_vocab);
  EXPECT_LT(testing::rel_max_diff(host, std::vector<float>(logits.begin() + 6 * V, logits.begin() + 7 * V)), 1e-6);
  for (int i = 0; i < 8; ++i) {
    if (i == 6) {
      EXPECT_EQ(ids[static_cast<size_t>(i)], -1);
      continue;
    }
    EXPECT_EQ(ids[static_cast<size_t>(i)], cuda::ref::sample_row(logits.data() + static_cast<size_t>(i) * V, V, smp[static_cast<size_t>(i)]))
        << "row " << i;
  }
}

TEST(CudaDecoder, Stories260KGreedyEqualsTheGoldenTokenForToken) {
  REQUIRE_GPU();
  const auto golden = stories_golden();
  REQUIRE_GOLDEN(golden);
  const auto model = testing::load_stories260k();
  ASSERT_TRUE(model);
  const LoadedModel& mdl = *model;
  const int V = static_cast<int>(mdl.config.n_vocab);
  for (bool graphs : {false, true}) {
    auto m = cuda_decoder(mdl, cuda::KvFormat::kF32, graphs);
    testing::allocate_for_test(*m, mdl.config, cuda::KvFormat::kF32, 64, 64, 4);
    TestBlocks blocks(64);
    int slot = 0;
    for (const testing::GoldenCase& c : golden) {
      DecoderSeq s;
      s.slot = slot++;
      s.tokens = c.input_ids;
      const std::vector<int32_t>& want = c.greedy_new_ids;
      s.reserve(*m, blocks, static_cast<int>(s.tokens.size() + want.size()));
      DeviceStep pre;
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        pre.token.push_back(s.tokens[i]);
        pre.seq.push_back(s.slot);
        pre.pos.push_back(static_cast<int32_t>(i));
      }
      pre.logit_rows = {static_cast<int32_t>(s.tokens.size()) - 1};
      const std::vector<float> l = m->forward_logits(pre);
      double worst = 0;
      for (const auto& [token, logit] : c.top20_last_position)
        worst = std::max(worst, std::fabs(static_cast<double>(l[static_cast<size_t>(token)]) - logit));
      EXPECT_LT(worst, 1e-4) << c.prompt;
      std::vector<int32_t> got = {testing::argmax_of(l.data(), V)};
      for (size_t k = 1; k < want.size(); ++k) {
        const auto p = static_cast<int32_t>(s.tokens.size() + k - 1);
        int32_t id = -1;
        m->forward(DeviceStep{{got.back()}, {s.slot}, {p}, {0}}, std::vector<cuda::SampleParams>(1), &id, nullptr);
        got.push_back(id);
      }
      EXPECT_EQ(got, want) << c.prompt << (graphs ? " (CUDA graphs)" : "");
      std::printf("  stories260K '%s': top-20 logits max |diff| %.2e, %zu greedy tokens %s%s\n",
                  c.prompt.c_str(), worst, want.size(), got == want ? "equal" : "DIFFER",
                  graphs ? " (graphs)" : "");
    }
  }
}

// stories260K with fp16 weights on the GPU: its logits within 2e-3 of the fp16 reference device's on every
// golden prompt (prefill through cuBLAS fp16 × fp16 → fp32, decode through the fp16 GEMV), and the golden's
// greedy tokens (the fp32 weights' too, tests/unit/exec on the reference device).
TEST(CudaDecoder, Stories260KWithFp16WeightsGivesTheGoldensGreedyTokens) {
  REQUIRE_GPU();
  const auto golden = stories_golden();
  REQUIRE_GOLDEN(golden);
  LoadOptions f16;
  f16.dtype = WeightDtype::kF16;
  const auto model = testing::load_stories260k(f16);
  ASSERT_TRUE(model);
  const LoadedModel& mdl = *model;
  const int V = static_cast<int>(mdl.config.n_vocab);
  auto m = cuda_decoder(mdl, cuda::KvFormat::kF32);
  ASSERT_TRUE(m);
  auto r = twin(mdl, cuda::KvFormat::kF32);
  testing::allocate_for_test(*m, mdl.config, cuda::KvFormat::kF32, 64, 64, 4);
  testing::allocate_for_test(*r, mdl.config, cuda::KvFormat::kF32, 64, 64, 4);
  TestBlocks bm(64), br(64);
  int slot = 0;
  for (const testing::GoldenCase& c : golden) {
    DecoderSeq s;
    s.slot = slot++;
    s.tokens = c.input_ids;
    const std::vector<int32_t>& want = c.greedy_new_ids;
    const auto got = testing::run_alone(*m, bm, s, static_cast<int>(want.size()), V);
    const auto ref = testing::run_alone(*r, br, s, static_cast<int>(want.size()), V);
    std::vector<int32_t> ids;
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      ids.push_back(testing::argmax_of(got[k].data(), V));
      worst = std::max(worst, testing::rel_max_diff(got[k], ref[k]));
    }
    EXPECT_LT(worst, 2e-3) << c.prompt;
    EXPECT_EQ(ids, want) << c.prompt;
    std::printf("  stories260K fp16 '%s': gpu vs reference device max rel diff %.2e, greedy tokens %s\n",
                c.prompt.c_str(), worst, ids == want ? "equal" : "DIFFER");
  }
}

// int8 weights on every path a step's rows take: 1..8 rows the GEMV, 9..32 the GEMV in pieces of 8, above
// the matrix dequantized into the fp32 scratch and cuBLAS; with the GEMV off, cuBLAS at every size. Each
// step's logits within 1e-4 of the reference device (the same function: fp32 weights float(q) · scale, fp32
// x).
TEST(CudaDecoder, Int8WeightsMatchTheReferenceDeviceOnEveryPath) {
  REQUIRE_GPU();
  for (const ModelConfig& cfg : {testing::device_llama_gqa(), testing::device_gpt2()})
    for (bool gemv : {true, false}) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + (gemv ? " gemv" : " cuBLAS only"));
      const auto model = testing::random_loaded_model(cfg, 31, WeightDtype::kInt8);
      DeviceOptions o;
      o.gemv = gemv;
      o.cuda_graphs = false;
      auto weights = CudaWeights::create(cfg, model->model->weights(), o.device);
      ASSERT_TRUE(weights.ok()) << weights.status();
      auto made = CudaDecoder::create(*weights, o);
      ASSERT_TRUE(made.ok()) << made.status();
      auto gpu = std::move(made).value();
      auto ref = twin(*model, cuda::KvFormat::kF32);
      testing::allocate_for_test(*gpu, cfg, cuda::KvFormat::kF32, 16, 64, 4);
      testing::allocate_for_test(*ref, cfg, cuda::KvFormat::kF32, 16, 64, 4);
      // slot 0: a 40-row prefill (the GEMM), slot 1: 20 rows (pieces), slot 2: 5 rows; then 4 decode steps of
      // 3
      std::mt19937 g(5);
      double worst = 0;
      TestBlocks bg(16), br(16);
      std::vector<DecoderSeq> sg(3), sr(3);
      const int lens[3] = {40, 20, 5};
      for (int i = 0; i < 3; ++i) {
        sg[static_cast<size_t>(i)].slot = sr[static_cast<size_t>(i)].slot = i;
        sg[static_cast<size_t>(i)].reserve(*gpu, bg, lens[i] + 4);
        sr[static_cast<size_t>(i)].reserve(*ref, br, lens[i] + 4);
        DeviceStep pre;
        for (int k = 0; k < lens[i]; ++k) {
          pre.token.push_back(static_cast<int32_t>(g() % static_cast<unsigned>(cfg.n_vocab)));
          pre.seq.push_back(i);
          pre.pos.push_back(k);
          pre.logit_rows.push_back(k);
        }
        worst = std::max(worst, testing::rel_max_diff(gpu->forward_logits(pre), ref->forward_logits(pre)));
      }
      for (int k = 0; k < 4; ++k) {
        DeviceStep st;
        for (int i = 0; i < 3; ++i) {
          st.token.push_back(static_cast<int32_t>(g() % static_cast<unsigned>(cfg.n_vocab)));
          st.seq.push_back(i);
          st.pos.push_back(lens[i] + k);
          st.logit_rows.push_back(i);
        }
        worst = std::max(worst, testing::rel_max_diff(gpu->forward_logits(st), ref->forward_logits(st)));
      }
      EXPECT_LT(worst, 1e-4);
      std::printf("  int8 gpu vs reference device: %-5s %s max rel diff %.2e\n", arch_name(cfg.arch),
                  gemv ? "gemv" : "cuBLAS", worst);
      EXPECT_LT(gpu->memory().weight_bytes, ref->memory().weight_bytes + 1);
      EXPECT_GT(gpu->memory().weight_bytes, ref->memory().weight_bytes * 9 / 10);
    }
  // The benchmark's random int8 weights (quantized on the device): a step runs, its logits finite, the
  // weights about 1.125 bytes a matrix weight.
  const ModelConfig cfg = testing::device_llama_gqa();
  DeviceOptions o;
  auto r8 = CudaDecoder::random(cfg, o, WeightDtype::kInt8, 3);
  auto r32 = CudaDecoder::random(cfg, o, WeightDtype::kF32, 3);
  EXPECT_LT(r8->weight_bytes(), r32->weight_bytes() / 2);
  testing::allocate_for_test(*r8, cfg, cuda::KvFormat::kF32, 8, 40, 2);
  TestBlocks blocks(8);
  DecoderSeq s;
  s.reserve(*r8, blocks, 40);
  DeviceStep pre;
  for (int k = 0; k < 40; ++k) {
    pre.token.push_back(k + 1);
    pre.seq.push_back(0);
    pre.pos.push_back(k);
  }
  pre.logit_rows = {39};
  for (float v : r8->forward_logits(pre)) ASSERT_TRUE(std::isfinite(v));
}

// stories260K with int8 weights (the CPU int8 model's): within 1e-4 of the int8 reference device on every
// golden prompt (prefill through the GEMV in pieces, decode through the GEMV, with CUDA graphs), the same
// greedy tokens.
TEST(CudaDecoder, Stories260KWithInt8WeightsMatchesTheReferenceDevice) {
  REQUIRE_GPU();
  const auto golden = stories_golden();
  REQUIRE_GOLDEN(golden);
  LoadOptions i8;
  i8.dtype = WeightDtype::kInt8;
  const auto model = testing::load_stories260k(i8);
  ASSERT_TRUE(model);
  const LoadedModel& mdl = *model;
  const int V = static_cast<int>(mdl.config.n_vocab);
  auto m = cuda_decoder(mdl, cuda::KvFormat::kF32, true);
  ASSERT_TRUE(m);
  auto r = twin(mdl, cuda::KvFormat::kF32);
  testing::allocate_for_test(*m, mdl.config, cuda::KvFormat::kF32, 64, 64, 4);
  testing::allocate_for_test(*r, mdl.config, cuda::KvFormat::kF32, 64, 64, 4);
  TestBlocks bm(64), br(64);
  int slot = 0;
  for (const testing::GoldenCase& c : golden) {
    DecoderSeq s;
    s.slot = slot++;
    s.tokens = c.input_ids;
    const int n = static_cast<int>(c.greedy_new_ids.size());
    const auto got = testing::run_alone(*m, bm, s, n, V);
    const auto ref = testing::run_alone(*r, br, s, n, V);
    std::vector<int32_t> ids, ref_ids;
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      ids.push_back(testing::argmax_of(got[k].data(), V));
      ref_ids.push_back(testing::argmax_of(ref[k].data(), V));
      worst = std::max(worst, testing::rel_max_diff(got[k], ref[k]));
    }
    EXPECT_LT(worst, 1e-4) << c.prompt;
    EXPECT_EQ(ids, ref_ids) << c.prompt;
    std::printf("  stories260K int8 '%s': gpu vs reference device max rel diff %.2e, greedy tokens %s\n",
                c.prompt.c_str(), worst, ids == ref_ids ? "equal" : "DIFFER");
  }
}

TEST(CudaDecoder, RefusesWhatItCannotServeWithTheReason) {
  REQUIRE_GPU();
  const ModelConfig cfg = testing::device_llama_gqa();
  const auto model = testing::random_loaded_model(cfg, 5);
  DeviceOptions o;
  o.device = 99;
  auto none = CudaWeights::create(cfg, model->model->weights(), o.device);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_MSG_HAS(none.status(), "no CUDA device 99");
  {
    auto big = cuda_decoder(*model, cuda::KvFormat::kF32);
    try {
      testing::allocate_for_test(*big, cfg, cuda::KvFormat::kF32, 2000000000, 4, 2);
      ADD_FAILURE() << "a pool of 2e9 blocks must not fit";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("out of device memory allocating"), std::string::npos) << e.what();
      EXPECT_FALSE(e.sticky());
    }
  }
  auto m = cuda_decoder(*model, cuda::KvFormat::kF32);
  testing::allocate_for_test(*m, cfg, cuda::KvFormat::kF32, 8, 4, 2);
  auto step_error = [&](const DeviceStep& st) -> std::string {
    try {
      m->forward_logits(st);
    } catch (const DeviceError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(step_error(DeviceStep{{300}, {0}, {0}, {0}}).find("token 300 out of range"), std::string::npos);
  EXPECT_NE(step_error(DeviceStep{{1}, {0}, {64}, {0}}).find("position 64"), std::string::npos);
  EXPECT_NE(step_error(DeviceStep{{1, 2, 3, 4, 5}, {0, 0, 0, 0, 0}, {0, 1, 2, 3, 4}, {4}}).find("1..4 rows"),
            std::string::npos);
  TestBlocks blocks(8);
  DecoderSeq s;
  s.reserve(*m, blocks, 4);
  EXPECT_EQ(m->forward_logits(DeviceStep{{1}, {0}, {0}, {0}}).size(), 300u);
  const DeviceMemory mem = m->memory();
  EXPECT_GT(mem.weight_bytes, 0);
  EXPECT_GT(mem.kv_pool_bytes, 0);
  EXPECT_GT(mem.device_total_bytes, mem.device_bytes);
}

using Sink = testing::RecordingSink;

std::vector<std::vector<int32_t>> serve(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<Sink>> sinks;
  for (const auto& r : reqs) {
    sinks.push_back(std::make_shared<Sink>());
    EXPECT_TRUE(e.submit(r, sinks.back(), std::make_shared<CancelToken>()).ok());
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->done.WaitForNotificationWithTimeout(absl::Seconds(120)));
    EXPECT_TRUE(s->result.ok()) << s->result.status();
    out.push_back(s->ids);
  }
  return out;
}

TEST(CudaEngine, ServesStories260KOnCuda0WithTheGoldensTokensAndBatchesLikeAlone) {
  REQUIRE_GPU();
  const auto golden = stories_golden();
  REQUIRE_GOLDEN(golden);
  const std::shared_ptr<const LoadedModel> m = testing::load_stories260k();
  ASSERT_TRUE(m);
  auto engine_with = [&](int32_t running, int64_t blocks) {
    ExecutorOptions o;
    o.device = *parse_device("cuda:0");
    auto ex = make_executor(m, o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    EngineConfig c;
    c.max_running = running;
    c.max_batch_tokens = std::max<int32_t>(running, 32);
    c.kv_cache_bytes = blocks * ex.value()->kv_block_bytes(16);
    c.audit_kv = true;
    auto e = Engine::create(m, c, std::move(ex).value());
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  };
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const testing::GoldenCase& cs : golden) {
    GenerationRequest r;
    r.prompt_ids = cs.input_ids;
    want.push_back(cs.greedy_new_ids);
    r.params.max_new_tokens = static_cast<int32_t>(want.back().size());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  auto big = engine_with(8, 256);
  EXPECT_EQ(serve(*big, reqs), want);
  // Mixed sampling, batched with a pool small enough to preempt: each equals itself alone.
  std::vector<GenerationRequest> mixed = reqs;
  for (size_t i = 0; i < 3; ++i) {
    GenerationRequest r = reqs[i];
    r.params.temperature = 0.8f;
    r.params.seed = 40 + i;
    r.params.top_k = i == 0 ? 20 : 0;
    r.params.top_p = i == 1 ? 0.7f : 1.f;
    r.params.repetition_penalty = i == 2 ? 1.2f : 1.f;  // the host sampler's row
    mixed.push_back(r);
  }
  auto small = engine_with(6, 10);
  const auto together = serve(*small, mixed);
  for (size_t i = 0; i < mixed.size(); ++i) EXPECT_EQ(together[i], serve(*big, {mixed[i]})[0]) << i;
  EXPECT_GT(small->stats().n_preemptions, 0u);
  EXPECT_TRUE(small->stats().executor.healthy);
}

}  // namespace
}  // namespace frost
