// The packed GEMM of the batched step against its scalar twin: bit-identical, for every shape, batch size
// and weight dtype — and therefore batch-invariant (a row's output does not depend on the other rows).
#include "kernels/cpu/gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace frost::kernels {
namespace {

struct GemmCase {
  int64_t n_out, n_in, n_rows;
};

class GemmPackedTest : public ::testing::TestWithParam<std::tuple<GemmCase, c10::ScalarType, bool>> {};

TEST_P(GemmPackedTest, BitIdenticalToTheScalarFmaChain) {
  const auto [c, dtype, with_bias] = GetParam();
  at::manual_seed(c.n_out * 7 + c.n_in * 3 + c.n_rows);
  const at::Tensor w = at::randn({c.n_out, c.n_in}).to(dtype).contiguous();
  const int64_t ldx = c.n_in + 3, ldy = c.n_out + 5;  // strided rows, like slices of a wider buffer
  const at::Tensor x = at::randn({c.n_rows, ldx});
  const at::Tensor b = at::randn({c.n_out});
  const float* bp = with_bias ? b.data_ptr<float>() : nullptr;
  std::vector<float> y(static_cast<size_t>(c.n_rows * ldy), -1.f), y_ref(y);
  const PackedMatrix pm = pack_matrix(w);
  EXPECT_EQ(pm.n_out, c.n_out);
  gemm_packed(pm, x.data_ptr<float>(), ldx, c.n_rows, bp, y.data(), ldy);
  gemm_packed_ref(w, x.data_ptr<float>(), ldx, c.n_rows, bp, y_ref.data(), ldy);
  for (int64_t r = 0; r < c.n_rows; ++r)
    for (int64_t o = 0; o < c.n_out; ++o)
      ASSERT_EQ(y[static_cast<size_t>(r * ldy + o)], y_ref[static_cast<size_t>(r * ldy + o)]) << r << "," << o;
  // padding columns of y are never written
  if (ldy > c.n_out) EXPECT_EQ(y[static_cast<size_t>(c.n_out)], -1.f);
  // and the scalar twin is the product LibTorch computes, to fp32 rounding
  at::Tensor want = at::mm(x.narrow(1, 0, c.n_in).to(at::kDouble), w.to(at::kDouble).t());
  if (with_bias) want += b.to(at::kDouble);
  const double tol = 2e-6 * std::sqrt(static_cast<double>(c.n_in)) * 4;
  for (int64_t r = 0; r < c.n_rows; ++r)
    for (int64_t o = 0; o < c.n_out; ++o)
      ASSERT_NEAR(y_ref[static_cast<size_t>(r * ldy + o)], want[r][o].item<double>(), tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmPackedTest,
                         ::testing::Combine(::testing::Values(GemmCase{1, 1, 1}, GemmCase{5, 7, 3},
                                                              GemmCase{32, 16, 12}, GemmCase{33, 29, 13},
                                                              GemmCase{100, 64, 1}, GemmCase{70, 48, 31},
                                                              GemmCase{64, 40, 97}, GemmCase{200, 288, 25}),
                                            ::testing::Values(c10::kFloat, c10::kBFloat16), ::testing::Bool()));

TEST(GemmPackedTest2, ARowsResultDoesNotDependOnItsBatch) {
  at::manual_seed(3);
  const int64_t n_out = 130, n_in = 77;
  const at::Tensor w = at::randn({n_out, n_in});
  const PackedMatrix pm = pack_matrix(w);
  const at::Tensor x = at::randn({200, n_in});
  std::vector<float> all(200 * n_out), one(n_out);
  gemm_packed(pm, x.data_ptr<float>(), n_in, 200, nullptr, all.data(), n_out);
  for (int64_t r : {0, 11, 12, 95, 96, 150, 199}) {
    gemm_packed(pm, x.data_ptr<float>() + r * n_in, n_in, 1, nullptr, one.data(), n_out);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * n_out, n_out * sizeof(float)), 0) << "row " << r;
  }
}

TEST(GemmPackedTest2, RefusesWhatItCannotPack) {
  EXPECT_THROW(pack_matrix(at::randn({4, 4}).t()), c10::Error);  // not contiguous
  EXPECT_THROW(pack_matrix(at::randn({4}).contiguous()), c10::Error);
  EXPECT_THROW(pack_matrix(at::randn({4, 4}, at::kDouble)), c10::Error);
}

}  // namespace
}  // namespace frost::kernels
