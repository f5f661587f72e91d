// The CUDA decoder's reference (kernels/cuda/reference.h) against frost's CPU transformer, through the bridge
// a GPU engine uploads from (core/model/cuda_weights.h). No GPU needed: it proves that the function the GPU
// tests hold the device to is the CPU path's, on LLaMA (GQA, untied / tied) and GPT-2 shapes and with the
// int8 KV format, and that the bridge refuses what the decoder does not run.
#include <gtest/gtest.h>

#include "core/kv/sequence_kv.h"
#include "core/model/builtin_models.h"
#include "core/model/cuda_weights.h"
#include "core/model/model_loader.h"
#include "kernels/cuda/reference.h"

namespace frost {
namespace {

struct Case {
  const char* model;
  KvCodecKind codec;
  cuda::KvFormat format;
  double tol;  // max |Δlogit| / max(1, max |logit|)
};

class CudaBridgeTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaBridgeTest, TheGpuReferenceIsTheCpuTransformer) {
  c10::InferenceMode im;
  const Case& c = GetParam();
  auto lm = load_model(c.model);
  ASSERT_TRUE(lm.ok()) << lm.status();
  const Transformer& tf = *(*lm)->model;
  auto hm = cuda_host_model(tf.config(), tf.weights());
  ASSERT_TRUE(hm.ok()) << hm.status();
  std::vector<int32_t> toks;
  for (int i = 0; i < 12; ++i) toks.push_back((i * 37 + 11) % static_cast<int32_t>(tf.config().n_vocab));
  SequenceKv kv(tf.kv_spec(16, c.codec));
  const at::Tensor cpu =
      tf.forward(at::tensor(std::vector<int64_t>(toks.begin(), toks.end()), at::kLong), kv).contiguous();
  const std::vector<float> ref = cuda::ref::forward(hm->spec, hm->weights, cuda::DType::kF32, c.format, toks);
  ASSERT_EQ(static_cast<int64_t>(ref.size()), cpu.numel());
  const float* p = cpu.data_ptr<float>();
  double worst = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(p[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(p[i])));
  }
  std::printf("  %s kv %s: max |cpu transformer - cuda reference| / scale = %.2e\n", c.model,
              cuda::kv_format_name(c.format), worst / scale);
  EXPECT_LT(worst / scale, c.tol);
}

// fp32 KV: both sides exact up to summation order (seen ~1e-6). int8: both store through
// kernels/cpu/kv_quant_row.h, but K rows that differ in the last bit can round one element a step apart.
INSTANTIATE_TEST_SUITE_P(
    Models, CudaBridgeTest,
    ::testing::Values(Case{"builtin:tiny", KvCodecKind::kF32, cuda::KvFormat::kF32, 1e-5},
                      Case{"builtin:tiny-gpt2", KvCodecKind::kF32, cuda::KvFormat::kF32, 1e-5},
                      Case{"builtin:15m", KvCodecKind::kF32, cuda::KvFormat::kF32, 1e-5},
                      Case{"builtin:tiny", KvCodecKind::kInt8, cuda::KvFormat::kInt8, 1e-2},
                      Case{"builtin:tiny-gpt2", KvCodecKind::kInt4, cuda::KvFormat::kInt4, 5e-2}),
    [](const ::testing::TestParamInfo<Case>& i) {
      std::string n = std::string(i.param.model).substr(8) + "_" + cuda::kv_format_name(i.param.format);
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(CudaBridge, RefusesWhatTheDecoderDoesNotRun) {
  c10::InferenceMode im;
  LoadOptions q;
  q.dtype = WeightDtype::kInt8;
  auto lm = load_model("builtin:tiny", q);
  ASSERT_TRUE(lm.ok()) << lm.status();
  auto r = cuda_host_model((*lm)->config, (*lm)->model->weights());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("weights int8"), std::string::npos) << r.status();

  auto plain = load_model("builtin:tiny");
  ASSERT_TRUE(plain.ok());
  ModelConfig cfg = (*plain)->config;
  cfg.variants.ra_layers = {0};
  r = cuda_host_model(cfg, (*plain)->model->weights());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("variants"), std::string::npos) << r.status();
  cfg = (*plain)->config;
  cfg.max_pos = 20000;
  r = cuda_host_model(cfg, (*plain)->model->weights());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("20000"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace frost
