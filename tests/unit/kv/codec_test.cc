#include "core/kv/codec.h"

#include <gtest/gtest.h>

#include "core/kv/sequence_kv.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

class FloatCodecTest : public ::testing::TestWithParam<KvCodecKind> {};

TEST_P(FloatCodecTest, AppendBatchAndTokenRoundTrip) {
  const KvCodecKind kind = GetParam();
  const int64_t Hkv = 2, D = 8, Tmax = 16;
  auto codec = make_codec(kind, Hkv, D, Tmax);
  at::manual_seed(1);
  at::Tensor k = at::randn({5, Hkv, D}), v = at::randn({5, Hkv, D});
  codec->append(k.narrow(0, 0, 3), v.narrow(0, 0, 3), 0);  // batch append
  for (int64_t t = 3; t < 5; ++t) {                          // token appends
    at::Tensor kt = k[t].contiguous(), vt = v[t].contiguous();
    codec->append_token(kt.data_ptr<float>(), vt.data_ptr<float>(), t);
  }
  const double tol = kind == KvCodecKind::kF32 ? 0 : kind == KvCodecKind::kF16 ? 2e-3 : 2e-2;
  EXPECT_TENSOR_NEAR(codec->keys(5), k.transpose(0, 1), tol * 4);
  EXPECT_TENSOR_NEAR(codec->values(5), v.transpose(0, 1), tol * 4);
  // storage is exactly the dtype's rounding of the input
  const at::ScalarType st = codec->storage_dtype();
  EXPECT_TENSOR_NEAR(codec->keys(5), k.transpose(0, 1).to(st).to(at::kFloat), 0);
  const int64_t elem = kind == KvCodecKind::kF32 ? 4 : 2;
  EXPECT_EQ(codec->bytes_per_token(), 2 * Hkv * D * elem);
}

TEST_P(FloatCodecTest, RejectsWritesPastCapacity) {
  auto codec = make_codec(GetParam(), 1, 4, 4);
  at::Tensor k = at::zeros({2, 1, 4});
  EXPECT_THROW(codec->append(k, k, 3), c10::Error);
  std::vector<float> row(4);
  EXPECT_THROW(codec->append_token(row.data(), row.data(), 4), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FloatCodecTest,
                         ::testing::Values(KvCodecKind::kF32, KvCodecKind::kF16, KvCodecKind::kBF16));

class QuantCodecTest : public ::testing::TestWithParam<KvCodecKind> {};

TEST_P(QuantCodecTest, RoundTripErrorIsAtMostHalfAStepPerTokenAndHead) {
  const KvCodecKind kind = GetParam();
  const int64_t Hkv = 3, D = 16, Tmax = 12;
  const double q_max = kind == KvCodecKind::kInt8 ? 127 : 7;
  auto codec = make_codec(kind, Hkv, D, Tmax);
  at::manual_seed(2);
  // rows of very different magnitudes: per-token per-head scales must follow them
  at::Tensor k = at::randn({6, Hkv, D}) * at::logspace(-3, 2, 6).view({6, 1, 1});
  at::Tensor v = at::randn({6, Hkv, D});
  codec->append(k.narrow(0, 0, 4), v.narrow(0, 0, 4), 0);
  for (int64_t t = 4; t < 6; ++t) {
    at::Tensor kt = k[t].contiguous(), vt = v[t].contiguous();
    codec->append_token(kt.data_ptr<float>(), vt.data_ptr<float>(), t);
  }
  for (const auto& [x, got] : {std::make_pair(k, codec->keys(6)), std::make_pair(v, codec->values(6))}) {
    at::Tensor want = x.transpose(0, 1);                                        // [Hkv, T, D]
    at::Tensor step = want.abs().amax(-1, /*keepdim=*/true) / q_max;            // per token, head
    at::Tensor err = (got - want).abs();
    EXPECT_TRUE((err <= step * 0.5 + 1e-7).all().item<bool>()) << "max err/step "
                                                                << (err / (step + 1e-30)).max().item<double>();
    // and it really is quantised: at most 2*q_max+1 distinct levels per row
    at::Tensor levels = (got / step).round();
    EXPECT_LE(levels.abs().max().item<double>(), q_max);
    EXPECT_GT(err.max().item<double>(), 0);
  }
  const int64_t row = kind == KvCodecKind::kInt8 ? D : D / 2;
  EXPECT_EQ(codec->bytes_per_token(), 2 * Hkv * (row + 4));
}

TEST_P(QuantCodecTest, ZeroRowsAndExtremesDecodeExactly) {
  const KvCodecKind kind = GetParam();
  const int64_t D = 8;
  auto codec = make_codec(kind, 1, D, 4);
  const float q = kind == KvCodecKind::kInt8 ? 127.f : 7.f;
  std::vector<float> zero(D, 0.f), ext(D);
  for (int64_t i = 0; i < D; ++i) ext[static_cast<size_t>(i)] = (i % 2 ? -1.f : 1.f) * q * 0.5f;  // ±amax
  codec->append_token(zero.data(), ext.data(), 0);
  EXPECT_EQ(codec->keys(1).abs().max().item<float>(), 0.f);
  at::Tensor got = codec->values(1).flatten();
  for (int64_t i = 0; i < D; ++i) EXPECT_FLOAT_EQ(got[i].item<float>(), ext[static_cast<size_t>(i)]) << i;
}

TEST(QuantCodecTest2, Int4NeedsAnEvenHeadDim) {
  EXPECT_THROW(make_codec(KvCodecKind::kInt4, 1, 7, 4), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Kinds, QuantCodecTest, ::testing::Values(KvCodecKind::kInt8, KvCodecKind::kInt4),
                         [](const auto& p) { return std::string(kv_codec_name(p.param)); });

TEST(SequenceKvTest, ByteAccountingAndTruncate) {
  KvSpec spec{3, 2, 8, 32, KvCodecKind::kF16};
  SequenceKv kv(spec);
  EXPECT_EQ(kv.bytes_per_token(), 3 * 2 * 2 * 8 * 2);
  EXPECT_EQ(kv.bytes_allocated(), kv.bytes_per_token() * 32);
  kv.advance(10);
  EXPECT_EQ(kv.bytes_in_use(), kv.bytes_per_token() * 10);
  kv.truncate(4);
  EXPECT_EQ(kv.n_tokens(), 4);
  EXPECT_THROW(kv.truncate(5), c10::Error);
}

TEST(KvSpecTest, ParseCodecNames) {
  EXPECT_EQ(*parse_kv_codec("fp16"), KvCodecKind::kF16);
  EXPECT_EQ(*parse_kv_codec("int8"), KvCodecKind::kInt8);
  EXPECT_EQ(*parse_kv_codec("int4"), KvCodecKind::kInt4);
  auto bad = parse_kv_codec("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"int3\""), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace frost
