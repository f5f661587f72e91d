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
  auto codec = make_float_codec(kind, Hkv, D, Tmax);
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
  auto codec = make_float_codec(GetParam(), 1, 4, 4);
  at::Tensor k = at::zeros({2, 1, 4});
  EXPECT_THROW(codec->append(k, k, 3), c10::Error);
  std::vector<float> row(4);
  EXPECT_THROW(codec->append_token(row.data(), row.data(), 4), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FloatCodecTest,
                         ::testing::Values(KvCodecKind::kF32, KvCodecKind::kF16, KvCodecKind::kBF16));

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
  auto bad = parse_kv_codec("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"int3\""), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace frost
