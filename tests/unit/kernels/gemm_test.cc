// The packed GEMM of the batched step against its scalar twin: bit-identical, for every shape, batch size,
// weight format (fp32, bf16, int8 per group and per channel, int4, W8A8) and every ISA variant this CPU runs
// (AVX-512, AVX2, scalar, chosen at run time) — and therefore batch-invariant (a row's output does not
// depend on the other rows) and the same on every machine.
#include "kernels/cpu/gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant.h"

namespace frost::kernels {
namespace {

struct GemmCase {
  int64_t n_out, n_in, n_rows;
};

// Weight formats under test: the packed matrix and the fp32 (or bf16) matrix its reference multiplies by.
enum class Fmt { kF32, kBF16, kQ8G32, kQ8Row, kQ4G32 };
const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::kF32: return "f32";
    case Fmt::kBF16: return "bf16";
    case Fmt::kQ8G32: return "q8g32";
    case Fmt::kQ8Row: return "q8row";
    default: return "q4g32";
  }
}

std::pair<PackedMatrix, at::Tensor> make_weights(Fmt f, const at::Tensor& w32) {
  switch (f) {
    case Fmt::kF32:
      return {pack_matrix(w32), w32};
    case Fmt::kBF16: {
      const at::Tensor wb = w32.to(at::kBFloat16).contiguous();
      return {pack_matrix(wb), wb};
    }
    case Fmt::kQ8G32:
    case Fmt::kQ8Row: {
      const QuantizedMatrix q = quantize_int8(w32, f == Fmt::kQ8G32 ? 32 : 0);
      return {pack_quantized(q), dequantize(q)};
    }
    default: {
      const QuantizedMatrix q = quantize_int4(w32, 32);
      return {pack_quantized(q), dequantize(q)};
    }
  }
}

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

// gemm_packed_isa on every ISA this CPU runs equals y_ref bit for bit, and leaves y's padding column
// unwritten.
void expect_every_isa_equals(const PackedMatrix& pm, const at::Tensor& x, int64_t ldx, int64_t n_rows,
                             int64_t n_out, const float* bp, const std::vector<float>& y_ref, int64_t ldy,
                             const std::string& what) {
  for (Isa isa : isas()) {
    std::vector<float> y(static_cast<size_t>(n_rows * ldy), -1.f);
    gemm_packed_isa(isa, pm, x.data_ptr<float>(), ldx, n_rows, bp, y.data(), ldy);
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t o = 0; o < n_out; ++o)
        ASSERT_EQ(y[static_cast<size_t>(r * ldy + o)], y_ref[static_cast<size_t>(r * ldy + o)])
            << isa_name(isa) << " " << what << " row " << r << " col " << o;
    if (ldy > n_out) EXPECT_EQ(y[static_cast<size_t>(n_out)], -1.f) << isa_name(isa);
  }
}

class GemmPackedTest : public ::testing::TestWithParam<std::tuple<GemmCase, Fmt, bool>> {};

TEST_P(GemmPackedTest, EveryIsaIsBitIdenticalToTheScalarFmaChain) {
  const auto [c, fmt, with_bias] = GetParam();
  at::manual_seed(c.n_out * 7 + c.n_in * 3 + c.n_rows);
  const at::Tensor w32 = at::randn({c.n_out, c.n_in}).contiguous();
  const auto [pm, wref] = make_weights(fmt, w32);
  const int64_t ldx = c.n_in + 3, ldy = c.n_out + 5;  // strided rows, like slices of a wider buffer
  const at::Tensor x = at::randn({c.n_rows, ldx});
  const at::Tensor b = at::randn({c.n_out});
  const float* bp = with_bias ? b.data_ptr<float>() : nullptr;
  std::vector<float> y_ref(static_cast<size_t>(c.n_rows * ldy), -1.f);
  EXPECT_EQ(pm.n_out, c.n_out);
  gemm_packed_ref(wref, x.data_ptr<float>(), ldx, c.n_rows, bp, y_ref.data(), ldy);
  expect_every_isa_equals(pm, x, ldx, c.n_rows, c.n_out, bp, y_ref, ldy, fmt_name(fmt));
  // and the scalar twin is the product LibTorch computes, to fp32 rounding
  at::Tensor want = at::mm(x.narrow(1, 0, c.n_in).to(at::kDouble), wref.to(at::kDouble).t());
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
                                                              GemmCase{64, 40, 97}, GemmCase{200, 288, 25},
                                                              // 12 + 8 rows: the tile<8> that prefetches the next panel
                                                              GemmCase{70, 48, 21}),
                                            ::testing::Values(Fmt::kF32, Fmt::kBF16, Fmt::kQ8G32, Fmt::kQ8Row,
                                                              Fmt::kQ4G32),
                                            ::testing::Bool()));

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

TEST(GemmPackedTest2, QuantizedRowsDoNotDependOnTheirBatchEither) {
  // Few rows dequantize in registers, many dequantize the panel into a buffer: the same bits. W8A8
  // quantizes each activation row on its own, so rows of very different ranges side by side change nothing.
  at::manual_seed(4);
  const int64_t n_out = 96, n_in = 100, n_rows = 130;
  const QuantizedMatrix q8 = quantize_int8(at::randn({n_out, n_in}), 32);
  for (const PackedMatrix& pm :
       {pack_quantized(q8), pack_quantized(quantize_int4(at::randn({n_out, n_in}), 32)), pack_quantized_a8(q8)}) {
    const at::Tensor x = at::randn({n_rows, n_in}) * at::rand({n_rows, 1}) * 10;
    std::vector<float> all(n_rows * n_out), one(n_out);
    gemm_packed(pm, x.data_ptr<float>(), n_in, n_rows, nullptr, all.data(), n_out);
    for (int64_t r : {0, 3, 4, 5, 6, 17, 39, 95, 96, 101, 129}) {
      gemm_packed(pm, x.data_ptr<float>() + r * n_in, n_in, 1, nullptr, one.data(), n_out);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * n_out, n_out * sizeof(float)), 0)
          << pack_format_name(pm.format) << " row " << r;
    }
  }
}

TEST(QuantTest, Int8IsSymmetricPerGroupWithinHalfAStep) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({7, 70}) * 0.05;
  for (int64_t group : {32, 0}) {
    const QuantizedMatrix q = quantize_int8(w, group);
    EXPECT_EQ(q.group, group == 0 ? 70 : 32);
    EXPECT_EQ(q.scales.size(1), group == 0 ? 1 : 3);
    const at::Tensor d = dequantize(q);
    for (int64_t o = 0; o < 7; ++o)
      for (int64_t k = 0; k < 70; ++k) {
        const float s = q.scales[o][k / q.group].item<float>();
        const int v = q.q[o][k].item<int8_t>();
        ASSERT_LE(std::abs(v), 127);
        ASSERT_LE(std::fabs(d[o][k].item<float>() - w[o][k].item<float>()), s * 0.5f + 1e-7f) << o << "," << k;
      }
    // the largest magnitude of each group is represented exactly up to the scale's rounding
    EXPECT_NEAR(d.abs().max().item<float>(), w.abs().max().item<float>(), 1e-6);
  }
  EXPECT_EQ(quantize_int8(w, 32).format_bytes(), 7 * 70 + 7 * 3 * 4);
}

TEST(QuantTest, Int4FitsAScaleAndMinimumPerGroupNoWorseThanItsRange) {
  at::manual_seed(6);
  const at::Tensor w = at::rand({5, 64}) + 0.5;  // all positive: symmetric int4 would waste half its levels
  const QuantizedMatrix q = quantize_int4(w, 32);
  const at::Tensor d = dequantize(q);
  for (int64_t o = 0; o < 5; ++o)
    for (int64_t g = 0; g < 2; ++g) {
      // The least-squares fit never loses to plain min/max rounding of the same group.
      const at::Tensor wg = w[o].narrow(0, g * 32, 32);
      const float lo = wg.min().item<float>(), hi = wg.max().item<float>(), s0 = (hi - lo) / 15.f;
      const at::Tensor plain = at::clamp(at::round((wg - lo) / s0), 0, 15) * s0 + lo;
      const double err_plain = (plain - wg).pow(2).sum().item<double>();
      const double err_fit = (d[o].narrow(0, g * 32, 32) - wg).pow(2).sum().item<double>();
      EXPECT_LE(err_fit, err_plain * (1 + 1e-5)) << o << "," << g;
      for (int64_t k = g * 32; k < g * 32 + 32; ++k) ASSERT_LE(q.q[o][k].item<uint8_t>(), 15);
    }
  // an all-equal group is exact
  const QuantizedMatrix c = quantize_int4(at::full({1, 32}, 0.25f), 32);
  EXPECT_TRUE(at::equal(dequantize(c), at::full({1, 32}, 0.25f)));
  EXPECT_TRUE(at::equal(dequantize(quantize_int8(at::zeros({2, 40}), 32)), at::zeros({2, 40})));
  EXPECT_EQ(q.format_bytes(), 5 * 64 / 2 + 5 * 2 * 8);
}

TEST(IsaTest, NamesParseAndNarrowingNeverWidensBeyondTheCpu) {
  Isa i;
  ASSERT_TRUE(parse_isa("auto", &i));
  EXPECT_EQ(i, best_isa());
  EXPECT_FALSE(parse_isa("avx9000", &i));
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  const Isa before = active_isa();
  EXPECT_TRUE(set_isa(Isa::kScalar));
  EXPECT_EQ(active_isa(), Isa::kScalar);
  if (!isa_supported(Isa::kAvx512)) EXPECT_FALSE(set_isa(Isa::kAvx512));
  EXPECT_TRUE(set_isa(before));
}

// ---- W8A8 (int8 weights × int8 activations, VPDPBUSD where the CPU has AVX512-VNNI) ----

class GemmA8Test : public ::testing::TestWithParam<std::tuple<GemmCase, int64_t, bool>> {};

// Every variant (VNNI, the AVX2 sign trick, scalar) equals gemm_q8a8_ref bit for bit; the ref is the int8
// product within the activations' quantization error.
TEST_P(GemmA8Test, EveryIsaIsBitIdenticalToTheScalarTwin) {
  const auto [c, group, with_bias] = GetParam();
  at::manual_seed(c.n_out * 5 + c.n_in * 11 + c.n_rows + group);
  const QuantizedMatrix q = quantize_int8(at::randn({c.n_out, c.n_in}), group);
  const PackedMatrix pm = pack_quantized_a8(q);
  EXPECT_EQ(pm.format, PackFormat::kQ8A8);
  EXPECT_STREQ(pack_format_name(pm.format), "w8a8");
  const int64_t ldx = c.n_in + 3, ldy = c.n_out + 5;
  at::Tensor x = at::randn({c.n_rows, ldx});
  if (c.n_rows > 2) x[1].zero_();  // an all-zero row: scale 0, output = bias
  const at::Tensor b = at::randn({c.n_out});
  const float* bp = with_bias ? b.data_ptr<float>() : nullptr;
  std::vector<float> y_ref(static_cast<size_t>(c.n_rows * ldy), -1.f);
  gemm_q8a8_ref(q, x.data_ptr<float>(), ldx, c.n_rows, bp, y_ref.data(), ldy);
  expect_every_isa_equals(pm, x, ldx, c.n_rows, c.n_out, bp, y_ref, ldy,
                          std::string(cpu_features().avx512_vnni ? "(vnni) " : "") + "group " + std::to_string(group));
  // Against the int8-weight product with fp32 activations: each activation moves by at most half a step
  // (amax / 254 of its group), so |error| <= Σ_k |w_k| · amax_g / 254 + fp32 rounding.
  const at::Tensor wd = dequantize(q).to(at::kDouble);
  at::Tensor xd = x.narrow(1, 0, c.n_in).to(at::kDouble);
  at::Tensor want = at::mm(xd, wd.t());
  if (with_bias) want += b.to(at::kDouble);
  const int64_t G = std::min(q.group, c.n_in);
  for (int64_t r = 0; r < c.n_rows; ++r)
    for (int64_t o = 0; o < c.n_out; ++o) {
      double bound = 1e-5 * std::sqrt(static_cast<double>(c.n_in)) * 4;
      for (int64_t k0 = 0; k0 < c.n_in; k0 += G) {
        const int64_t n = std::min(G, c.n_in - k0);
        const double amax = xd[r].narrow(0, k0, n).abs().max().item<double>();
        bound += wd[o].narrow(0, k0, n).abs().sum().item<double>() * amax / 254.0 * (1 + 1e-6);
      }
      ASSERT_NEAR(y_ref[static_cast<size_t>(r * ldy + o)], want[r][o].item<double>(), bound) << r << " " << o;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmA8Test,
                         ::testing::Combine(::testing::Values(GemmCase{1, 1, 1}, GemmCase{5, 7, 3},
                                                              GemmCase{32, 16, 12}, GemmCase{33, 29, 13},
                                                              GemmCase{100, 64, 1}, GemmCase{70, 48, 31},
                                                              GemmCase{64, 40, 97}, GemmCase{200, 288, 25},
                                                              // 12 + 8 rows: the tile<8> that prefetches the next panel
                                                              GemmCase{70, 48, 21}),
                                            ::testing::Values(int64_t{32}, int64_t{0}, int64_t{8}),
                                            ::testing::Bool()));

TEST(GemmA8Test2, ActivationQuantizationIsSymmetricPerGroupAndPropagatesNaN) {
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 0.f, 3.0f, -0.03f, 1.5f, 0.f, 0.f, 0.f};
  std::vector<int8_t> q(12, 99);
  std::vector<float> s(3, -1.f);
  quantize_activations_a8(x.data(), 10, 1, 10, 4, q.data(), 12, s.data(), 3);
  // group 0: amax 1 → step 1/127
  EXPECT_FLOAT_EQ(s[0], 1.0f / 127.f);
  EXPECT_EQ(q[0], 64);  // 63.5 rounds half to even
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 32);  // 31.75
  EXPECT_EQ(q[3], 0);
  // group 1: amax 3
  EXPECT_EQ(q[4], 127);
  EXPECT_EQ(q[5], -1);  // -1.27
  EXPECT_EQ(q[6], 64);  // 63.5 → even
  // group 2 (two inputs): all zero → scale 0; padding to 12 is zero
  EXPECT_EQ(s[2], 0.f);
  for (int k = 8; k < 12; ++k) EXPECT_EQ(q[static_cast<size_t>(k)], 0) << k;
  // A NaN or infinity makes its group's outputs NaN, as with fp32 activations.
  std::vector<float> bad = x;
  bad[5] = std::numeric_limits<float>::infinity();
  quantize_activations_a8(bad.data(), 10, 1, 10, 4, q.data(), 12, s.data(), 3);
  EXPECT_TRUE(std::isnan(s[1]));
  EXPECT_FALSE(std::isnan(s[0]));
  const QuantizedMatrix w = quantize_int8(at::randn({3, 10}), 0);
  const PackedMatrix pm = pack_quantized_a8(w);
  std::vector<float> y(3);
  for (Isa isa : isas()) {
    gemm_packed_isa(isa, pm, bad.data(), 10, 1, nullptr, y.data(), 3);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << isa_name(isa);
  }
}

TEST(GemmA8Test2, RefusesWhatItCannotPack) {
  EXPECT_THROW(pack_quantized_a8(quantize_int4(at::randn({4, 8}), 4)), c10::Error);       // not int8
  EXPECT_THROW(pack_quantized_a8(quantize_int8(at::randn({4, 12}), 6)), c10::Error);     // group % 4 != 0
  EXPECT_NO_THROW(pack_quantized_a8(quantize_int8(at::randn({4, 6}), 6)));               // one group: fine
}

TEST(GemmPackedTest2, RefusesWhatItCannotPack) {
  EXPECT_THROW(pack_matrix(at::randn({4, 4}).t()), c10::Error);  // not contiguous
  EXPECT_THROW(pack_matrix(at::randn({4}).contiguous()), c10::Error);
  EXPECT_THROW(pack_matrix(at::randn({4, 4}, at::kDouble)), c10::Error);
}

// The packers' one-pass parallel panel layout against its plain-ATen twin, bit for bit: fp32, bf16 and int8
// elements, n_out a multiple of the panel and not (zero padding rows), n_in across the 64-wide tiles.
TEST(PackMatrixTest, OnePassPanelsEqualTheAtenLayout) {
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kChar})
    for (const auto& [n_out, n_in] : std::vector<std::pair<int64_t, int64_t>>{{32, 16}, {45, 130}, {97, 64}, {1, 3}}) {
      const at::Tensor m = dtype == at::kChar ? at::randint(-128, 127, {n_out, n_in}, at::kChar)
                                             : at::randn({n_out, n_in}).to(dtype);
      const int64_t panels = (n_out + 31) / 32;
      const at::Tensor got = kernels::panelize_for_test(m, panels), want = kernels::panelize_reference(m, panels);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::equal(got, want)) << dtype << " " << n_out << "x" << n_in;
    }
}

}  // namespace
}  // namespace frost::kernels
