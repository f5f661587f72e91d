// The transformer's two paths agree: incremental decode (fast fused path and reference path
// with T = 1) equals a full-sequence recompute at every position, for LLaMA (GQA) and GPT-2
// shapes, fp32 and bf16 weights, and every float KV codec.
#include "core/model/transformer.h"

#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/model/model_loader.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

struct Case {
  std::string model;
  WeightDtype dtype;
  KvCodecKind codec;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.model.substr(8) + "_" + weight_dtype_name(info.param.dtype) + "w_" +
                  kv_codec_name(info.param.codec);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

class TransformerPathsTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    LoadOptions o;
    o.dtype = GetParam().dtype;
    auto m = load_model(GetParam().model, o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m).value();
  }
  // A fixed, varied token sequence.
  std::vector<int64_t> tokens(int64_t n) const {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back((i * 37 + 11) % model_->config.n_vocab);
    return t;
  }
  KvSpec spec(int64_t n) const { return model_->model->kv_spec(n, GetParam().codec); }
  // Both sides store through the same codec, but K/V computed by a mat-vec, a GEMM of another
  // shape or another chunking differ in the last fp32 bit, which can flip one fp16/bf16
  // rounding of a stored value: allow that storage ulp's effect on the logits.
  double tolerance() const {
    switch (GetParam().codec) {
      case KvCodecKind::kF32: return 1e-4;
      case KvCodecKind::kF16: return 2e-3;
      case KvCodecKind::kBF16: return 2e-2;
      // Measured ~1e-5 (both sides store the same quantised rows). A last-bit difference in K/V
      // could move one stored value by a whole step (amax/127, amax/7) if it sat exactly on a
      // rounding boundary; these bounds leave room for one such flip, not for a wrong kernel.
      case KvCodecKind::kInt8: return 1e-2;
      case KvCodecKind::kInt4: return 5e-2;
      case KvCodecKind::kKvSplice: return 2e-3;  // not a parameter here: kvsplice_test.cc covers it
    }
    return 0;
  }
  std::unique_ptr<LoadedModel> model_;
};

TEST_P(TransformerPathsTest, IncrementalDecodeEqualsFullRecompute) {
  c10::InferenceMode im;
  const Transformer& tf = *model_->model;
  const int64_t T = 40;
  const auto toks = tokens(T);
  // full sequence, one forward pass                                           [T, V]
  SequenceKv kv_full(spec(T));
  at::Tensor hidden_full;
  at::Tensor full = tf.forward(at::tensor(toks, at::kLong), kv_full, false, &hidden_full);
  ASSERT_EQ(full.size(0), T);
  EXPECT_EQ(kv_full.n_tokens(), T);

  // fast path, one token at a time
  SequenceKv kv_fast(spec(T));
  DecodeScratch s;
  // reference path, one token at a time
  SequenceKv kv_ref(spec(T));
  double err_fast = 0, err_ref = 0, err_hidden = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* lf = tf.decode_step(static_cast<int32_t>(toks[t]), kv_fast, s);
    at::Tensor fast = at::from_blob(const_cast<float*>(lf), {model_->config.n_vocab}, at::kFloat);
    err_fast = std::max(err_fast, testing::max_abs_diff(fast, full[t]));
    at::Tensor hf = at::from_blob(const_cast<float*>(s.hidden()), {model_->config.dim}, at::kFloat);
    err_hidden = std::max(err_hidden, testing::max_abs_diff(hf, hidden_full[t]));
    at::Tensor ref = tf.forward(at::tensor({toks[t]}, at::kLong), kv_ref)[0];
    err_ref = std::max(err_ref, testing::max_abs_diff(ref, full[t]));
  }
  const double tol = tolerance();
  std::fprintf(stderr, "max |logit diff| fast %.3g ref %.3g hidden %.3g (tolerance %.3g)\n", err_fast, err_ref,
               err_hidden, tol);
  EXPECT_LE(err_fast, tol);
  EXPECT_LE(err_ref, tol);
  EXPECT_LE(err_hidden, tol);
  EXPECT_EQ(kv_fast.n_tokens(), T);
  // logits really differ across positions (a constant output would pass trivially)
  EXPECT_GT(testing::max_abs_diff(full[0], full[T - 1]), 1e-2);
}

TEST_P(TransformerPathsTest, ChunkedPrefillEqualsFull) {
  c10::InferenceMode im;
  const Transformer& tf = *model_->model;
  const auto toks = tokens(24);
  at::Tensor all = at::tensor(toks, at::kLong);
  SequenceKv kv_full(spec(24)), kv_chunk(spec(24));
  at::Tensor full = tf.forward(all, kv_full);
  at::Tensor a = tf.forward(all.narrow(0, 0, 7), kv_chunk);
  at::Tensor b = tf.forward(all.narrow(0, 7, 16), kv_chunk);
  at::Tensor c = tf.forward(all.narrow(0, 23, 1), kv_chunk, /*last_only=*/true);
  EXPECT_TENSOR_NEAR(at::cat({a, b, c}, 0), full, tolerance());
}

TEST_P(TransformerPathsTest, TruncateForgetsRolledBackTokens) {
  c10::InferenceMode im;
  const Transformer& tf = *model_->model;
  const auto toks = tokens(12);
  // with a detour: token 5 at position 12, rolled back, then token 9
  SequenceKv kv(spec(16));
  DecodeScratch s;
  tf.forward(at::tensor(toks, at::kLong), kv);
  tf.decode_step(5, kv, s);
  kv.truncate(12);
  const float* l1 = tf.decode_step(9, kv, s);
  std::vector<float> v1(l1, l1 + model_->config.n_vocab);
  // without the detour
  SequenceKv kv2(spec(16));
  DecodeScratch s2;
  tf.forward(at::tensor(toks, at::kLong), kv2);
  const float* l2 = tf.decode_step(9, kv2, s2);
  for (int64_t i = 0; i < model_->config.n_vocab; ++i) ASSERT_NEAR(v1[i], l2[i], 1e-6) << i;
}

TEST_P(TransformerPathsTest, RejectsPositionsPastCapacity) {
  c10::InferenceMode im;
  const Transformer& tf = *model_->model;
  SequenceKv kv(spec(4));
  EXPECT_THROW(tf.forward(at::tensor(tokens(5), at::kLong), kv), c10::Error);
  EXPECT_EQ(kv.n_tokens(), 0);
  EXPECT_THROW(tf.forward(at::tensor(std::vector<int64_t>{model_->config.n_vocab}, at::kLong), kv), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(
    Models, TransformerPathsTest,
    ::testing::Values(Case{"builtin:tiny", WeightDtype::kF32, KvCodecKind::kF32},
                      Case{"builtin:tiny", WeightDtype::kF32, KvCodecKind::kF16},
                      Case{"builtin:tiny", WeightDtype::kF32, KvCodecKind::kBF16},
                      Case{"builtin:tiny", WeightDtype::kBF16, KvCodecKind::kF32},
                      Case{"builtin:tiny-gpt2", WeightDtype::kF32, KvCodecKind::kF32},
                      Case{"builtin:tiny-gpt2", WeightDtype::kF32, KvCodecKind::kF16},
                      Case{"builtin:tiny-gpt2", WeightDtype::kBF16, KvCodecKind::kBF16},
                      Case{"builtin:tiny", WeightDtype::kF32, KvCodecKind::kInt8},
                      Case{"builtin:tiny", WeightDtype::kF32, KvCodecKind::kInt4},
                      Case{"builtin:tiny-gpt2", WeightDtype::kF32, KvCodecKind::kInt8},
                      Case{"builtin:tiny-gpt2", WeightDtype::kF32, KvCodecKind::kInt4},
                      // int8 / int4 weights: the reference computes with the dequantized matrices, the fast
                      // paths read the packed quantized ones: the same model, to fp32 rounding.
                      Case{"builtin:tiny", WeightDtype::kInt8, KvCodecKind::kF32},
                      Case{"builtin:tiny", WeightDtype::kInt4, KvCodecKind::kF32},
                      Case{"builtin:tiny-gpt2", WeightDtype::kInt8, KvCodecKind::kF16},
                      Case{"builtin:tiny-gpt2", WeightDtype::kInt4, KvCodecKind::kInt8},
                      Case{"builtin:tiny", WeightDtype::kInt4, KvCodecKind::kInt4}),
    case_name);

// w8a8 (int8 weights and int8 activations): its reference is the int8 model (the same dequantized matrices,
// fp32 activations); the fast path quantizes each activation row per 32 inputs. Tolerance stated against
// the logits' own spread, and greedy decoding must agree on nearly every position.
TEST(W8A8Test, DecodeStaysCloseToTheInt8Model) {
  c10::InferenceMode im;
  LoadOptions o8, oa8;
  o8.dtype = WeightDtype::kInt8;
  oa8.dtype = WeightDtype::kW8A8;
  for (const char* name : {"builtin:tiny", "builtin:tiny-gpt2"}) {
    SCOPED_TRACE(name);
    auto m8 = load_model(name, o8), ma8 = load_model(name, oa8);
    ASSERT_TRUE(m8.ok() && ma8.ok());
    const Transformer &t8 = *(*m8)->model, &ta8 = *(*ma8)->model;
    EXPECT_EQ(ta8.weight_format(), WeightDtype::kW8A8);
    EXPECT_EQ(ta8.packed_weight_bytes(), t8.packed_weight_bytes());  // the same 1.125 bytes per weight
    const int64_t T = 40, V = (*m8)->config.n_vocab;
    SequenceKv kv8(t8.kv_spec(T, KvCodecKind::kF32)), kva8(ta8.kv_spec(T, KvCodecKind::kF32));
    DecodeScratch s8, sa8;
    double worst = 0, spread = 0;
    int agree = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t tok = static_cast<int32_t>((t * 37 + 11) % V);
      const float* l8 = t8.decode_step(tok, kv8, s8);
      std::vector<float> a(l8, l8 + V);
      const float* la8 = ta8.decode_step(tok, kva8, sa8);
      const std::vector<float> b(la8, la8 + V);
      double lo = a[0], hi = a[0];
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, static_cast<double>(std::fabs(a[v] - b[v])));
        lo = std::min<double>(lo, a[v]);
        hi = std::max<double>(hi, a[v]);
      }
      spread = std::max(spread, hi - lo);
      agree += std::max_element(a.begin(), a.end()) == a.begin() + (std::max_element(b.begin(), b.end()) - b.begin());
    }
    std::fprintf(stderr, "%s w8a8 vs int8: max |logit diff| %.3g, logit range %.3g, greedy agreement %d/%lld\n",
                 name, worst, spread, agree, static_cast<long long>(T));
    EXPECT_GT(worst, 0.0);              // the activations really are quantized
    EXPECT_LE(worst, 0.02 * spread);    // within 2% of the logits' range
    EXPECT_GE(agree, T - 2);
  }
}

TEST(BuiltinModelsTest, ShapesAndDeterminism) {
  auto a = load_model("builtin:15m");
  ASSERT_TRUE(a.ok()) << a.status();
  const ModelConfig& c = (*a)->config;
  EXPECT_EQ(c.dim, 288);
  EXPECT_EQ(c.n_layer, 6);
  EXPECT_EQ(c.n_head, 6);
  EXPECT_EQ(c.ffn_dim, 768);
  EXPECT_EQ(c.n_vocab, 32000);
  EXPECT_TRUE((*a)->model->weights().lm_head.is_same((*a)->model->weights().tok_embed));
  // TinyStories-15M has 15.2M parameters (tied embeddings)
  EXPECT_NEAR(static_cast<double>((*a)->model->n_params()), 15.19e6, 0.05e6);
  auto b = load_model("builtin:15m");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*a)->model->weights().layers[3].wqkv.equal((*b)->model->weights().layers[3].wqkv));
  auto bad = load_model("builtin:nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("builtin:tiny"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace frost
