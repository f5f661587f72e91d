// Fast CPU kernels against their naive reference twins.
#include "core/model/cpu_kernels.h"
#include "core/kv/attend.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/kv/codec.h"

#include <vector>

#include "tests/testing/test_util.h"

namespace frost::kernels {
namespace {

// Shapes cover the AVX-512 main loop, the masked tail, the 4-row blocks and leftover rows.
struct MatvecCase {
  int64_t n_out, n_in;
};

class MatvecTest : public ::testing::TestWithParam<std::tuple<MatvecCase, c10::ScalarType, bool>> {};

TEST_P(MatvecTest, MatchesReference) {
  const auto [shape, dtype, with_bias] = GetParam();
  at::manual_seed(shape.n_out * 131 + shape.n_in);
  at::Tensor w = at::randn({shape.n_out, shape.n_in}).to(dtype).contiguous();
  at::Tensor x = at::randn({shape.n_in});
  at::Tensor b = at::randn({shape.n_out});
  std::vector<float> y(static_cast<size_t>(shape.n_out)), y_ref(static_cast<size_t>(shape.n_out));
  const float* bp = with_bias ? b.data_ptr<float>() : nullptr;
  matvec(w.data_ptr(), dtype, x.data_ptr<float>(), bp, y.data(), shape.n_out, shape.n_in);
  matvec_ref(w.data_ptr(), dtype, x.data_ptr<float>(), bp, y_ref.data(), shape.n_out, shape.n_in);
  // fp32 accumulation vs double: |error| grows ~ sqrt(n_in) * eps * |terms|
  const double tol = 1e-5 * std::sqrt(static_cast<double>(shape.n_in)) * 4;
  for (int64_t o = 0; o < shape.n_out; ++o) ASSERT_NEAR(y[o], y_ref[o], tol) << "row " << o;
  // and the reference itself equals LibTorch's mat-vec in double
  at::Tensor expect = at::mv(w.to(at::kDouble), x.to(at::kDouble));
  if (with_bias) expect += b.to(at::kDouble);
  for (int64_t o = 0; o < shape.n_out; ++o) ASSERT_NEAR(y_ref[o], expect[o].item<double>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatvecTest,
                         ::testing::Combine(::testing::Values(MatvecCase{1, 1}, MatvecCase{3, 7}, MatvecCase{4, 16},
                                                              MatvecCase{13, 172}, MatvecCase{64, 64},
                                                              MatvecCase{301, 288}, MatvecCase{2048, 33}),
                                            ::testing::Values(c10::kFloat, c10::kBFloat16),
                                            ::testing::Bool()));

// head_dim 48 takes the AVX-512 path (multiple of 16), 12 the portable one.
class AttendTest : public ::testing::TestWithParam<std::tuple<c10::ScalarType, int64_t, int64_t>> {};

TEST_P(AttendTest, MatchesReferenceAndTorch) {
  const auto [dtype, n, D] = GetParam();
  const int64_t H = 6, Hkv = 3, t_max = 300;
  at::manual_seed(7 + n);
  at::Tensor q = at::randn({H, D});
  at::Tensor k = at::randn({Hkv, t_max, D}).to(dtype);
  at::Tensor v = at::randn({Hkv, t_max, D}).to(dtype);
  const float scale = 0.25f;
  std::vector<float> out(H * D), out_ref(H * D), scores(H * n);
  attend_one(q.data_ptr<float>(), k.data_ptr(), v.data_ptr(), dtype, H, Hkv, D, t_max, n, scale, scores.data(),
             out.data());
  attend_one_ref(q.data_ptr<float>(), k.data_ptr(), v.data_ptr(), dtype, H, Hkv, D, t_max, n, scale, out_ref.data());
  for (int64_t i = 0; i < H * D; ++i) ASSERT_NEAR(out[i], out_ref[i], 2e-5) << i;
  // LibTorch formulation: softmax(q K^T · scale) V with GQA head mapping
  at::Tensor kf = k.narrow(1, 0, n).to(at::kFloat).repeat_interleave(H / Hkv, 0);  // [H, n, D]
  at::Tensor vf = v.narrow(1, 0, n).to(at::kFloat).repeat_interleave(H / Hkv, 0);
  at::Tensor p = at::softmax(at::bmm(q.unsqueeze(1), kf.transpose(1, 2)) * scale, -1);  // [H, 1, n]
  at::Tensor expect = at::bmm(p, vf).squeeze(1).contiguous();
  for (int64_t i = 0; i < H * D; ++i) ASSERT_NEAR(out[i], expect.data_ptr<float>()[i], 1e-4) << i;
}

INSTANTIATE_TEST_SUITE_P(DtypesAndLengths, AttendTest,
                         ::testing::Combine(::testing::Values(c10::kFloat, c10::kHalf, c10::kBFloat16),
                                            ::testing::Values(1, 5, 300), ::testing::Values(48, 12)));

// The quantised kernel against the float reference over the same cache decoded by the codec
// (the naive path: dequantise every row, then attend).
class AttendQuantTest : public ::testing::TestWithParam<std::tuple<KvCodecKind, int64_t, int64_t>> {};

TEST_P(AttendQuantTest, MatchesAttentionOverTheDecodedCache) {
  const auto [kind, n, D] = GetParam();
  const int64_t H = 6, Hkv = 3, t_max = 300;
  at::manual_seed(11 + n);
  auto codec = make_codec(kind, Hkv, D, t_max);
  at::Tensor k = at::randn({n, Hkv, D}) * 3, v = at::randn({n, Hkv, D});
  codec->append(k, v, 0);
  at::Tensor q = at::randn({H, D});
  const float scale = 0.25f;
  std::vector<float> out(H * D), out_ref(H * D);
  codec->attend(q.data_ptr<float>(), H, n, scale, 0, H, out.data());  // the codec's own kernel
  // reference: the decoded rows copied into a [Hkv, t_max, D] fp32 cache
  at::Tensor kd = at::zeros({Hkv, t_max, D}), vd = at::zeros({Hkv, t_max, D});
  kd.narrow(1, 0, n).copy_(codec->keys(n));
  vd.narrow(1, 0, n).copy_(codec->values(n));
  attend_one_ref(q.data_ptr<float>(), kd.data_ptr(), vd.data_ptr(), c10::kFloat, H, Hkv, D, t_max, n, scale,
                 out_ref.data());
  for (int64_t i = 0; i < H * D; ++i) ASSERT_NEAR(out[i], out_ref[i], 2e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(CodecsAndLengths, AttendQuantTest,
                         ::testing::Combine(::testing::Values(KvCodecKind::kInt8, KvCodecKind::kInt4),
                                            ::testing::Values(1, 5, 300), ::testing::Values(48, 12)));

}  // namespace
}  // namespace frost::kernels
