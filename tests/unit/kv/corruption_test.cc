#include "core/kv/corruption.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/kv/codec.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

CorruptionSpec spec_of(const std::string& text) {
  auto s = parse_corruption(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : CorruptionSpec{};
}

// The fp32 bit patterns of t, as uint32 values.
std::vector<uint32_t> bits_of(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  std::vector<uint32_t> out(c.numel());
  std::memcpy(out.data(), c.data_ptr<float>(), out.size() * sizeof(uint32_t));
  return out;
}

bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && bits_of(a) == bits_of(b);
}

// ---------------------------------------------------------------------------------------------
// parsing

TEST(CorruptionParseTest, GoodSpecsRoundTripThroughToString) {
  for (const char* text :
       {"none", "gaussian:0.1", "quantize:4", "quantize:2", "quantize:16", "bitflip:1e-4", "bitflip:0",
        "bitflip:1", "zero:0.05", "zero:1", "gaussian:0.05,persistent,seed=3", "gaussian:0.05,fresh",
        "bitflip:0.001,exclude_exponent,seed=18446744073709551615", "none,persistent,seed=9",
        " zero:0.5 , seed=7 ", "gaussian:0.30000000000000004"}) {
    SCOPED_TRACE(text);
    auto a = parse_corruption(text);
    ASSERT_TRUE(a.ok()) << a.status();
    const std::string canon = a->to_string();
    auto b = parse_corruption(canon);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->kind, a->kind);
    EXPECT_EQ(b->amount, a->amount);
    EXPECT_EQ(b->mode, a->mode);
    EXPECT_EQ(b->seed, a->seed);
    EXPECT_EQ(b->bitflip_exclude_exponent, a->bitflip_exclude_exponent);
    EXPECT_EQ(b->to_string(), canon);
  }
  EXPECT_EQ(spec_of("gaussian:0.05,persistent,seed=3").to_string(), "gaussian:0.05,persistent,seed=3");
  EXPECT_EQ(spec_of("gaussian:0.05,fresh,seed=0").to_string(), "gaussian:0.05");
  EXPECT_EQ(spec_of("bitflip:1e-4").to_string(), "bitflip:0.0001");
  EXPECT_EQ(spec_of("quantize:4").to_string(), "quantize:4");
  // A whole noise amount prints as a whole number (frost::shortest_number_text), not "1e+02".
  EXPECT_EQ(spec_of("gaussian:100").to_string(), "gaussian:100");
  EXPECT_EQ(spec_of("none").to_string(), "none");

  const CorruptionSpec s = spec_of("bitflip:2.5e-3,seed=42,persistent,exclude_exponent");
  EXPECT_EQ(s.kind, CorruptionKind::kBitFlip);
  EXPECT_EQ(s.amount, 2.5e-3);
  EXPECT_EQ(s.mode, CorruptionMode::kPersistentAtWrite);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_TRUE(s.bitflip_exclude_exponent);
  const CorruptionSpec d = spec_of("zero:0.05");
  EXPECT_EQ(d.kind, CorruptionKind::kZero);
  EXPECT_EQ(d.mode, CorruptionMode::kFreshPerStep);
  EXPECT_EQ(d.seed, 0u);
}

TEST(CorruptionParseTest, BadSpecsAreInvalidArgumentNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty spec"},
      {"bogus:1", "unknown kind \"bogus\""},
      {"Gaussian:0.1", "unknown kind"},
      {"gaussian", "missing amount for gaussian"},
      {"gaussian:", "missing amount"},
      {"gaussian:-0.1", "out of range"},
      {"gaussian:-0.1", ">= 0"},
      {"gaussian:nan", "not a finite number"},
      {"gaussian:abc", "\"abc\""},
      {"quantize:1", "bits 1 out of range"},
      {"quantize:1", "2..16"},
      {"quantize:17", "bits 17 out of range"},
      {"quantize:4.5", "not an integer"},
      {"bitflip:1.5", "probability 1.5 out of range"},
      {"bitflip:1.5", "0..1"},
      {"bitflip:-1e-3", "out of range"},
      {"zero:2", "fraction 2 out of range"},
      {"zero:-0.1", "0..1"},
      {"none:3", "none takes no amount"},
      {"gaussian:0.1,sticky", "unknown option \"sticky\""},
      {"gaussian:0.1,", "empty option"},
      {"gaussian:0.1,seed=abc", "seed \"abc\""},
      {"gaussian:0.1,seed=-1", "seed \"-1\""},
      {"gaussian:0.1,seed=18446744073709551616", "unsigned 64-bit"},
      {"gaussian:0.1,seed=", "seed \"\""},
      {"gaussian:0.1,seed=1,seed=2", "seed given twice"},
      {"gaussian:0.1,persistent,fresh", "mode given twice"},
      {"zero:0.1,exclude_exponent", "only to bitflip"},
  };
  for (const auto& [text, substr] : cases) {
    SCOPED_TRACE(text);
    const absl::Status st = parse_corruption(text).status();
    EXPECT_INVALID(st, substr);
    EXPECT_MSG_HAS(st, "\"" + text + "\"");  // names the spec
  }
}

// ---------------------------------------------------------------------------------------------
// none, and input never modified

TEST(CorruptionTest, NoneIsABitExactCopy) {
  at::manual_seed(1);
  at::Tensor x = at::randn({3, 5, 8});
  x[0][0][0] = -0.0f;
  x[0][0][1] = std::numeric_limits<float>::quiet_NaN();
  x[0][0][2] = std::numeric_limits<float>::infinity();
  const at::Tensor before = x.clone();
  at::Tensor out = corrupt(x, spec_of("none"), 0, 0);
  EXPECT_TRUE(bit_identical(out, x));
  EXPECT_NE(out.data_ptr(), x.data_ptr());
  EXPECT_TRUE(bit_identical(x, before));
}

TEST(CorruptionTest, InputIsNeverModifiedAndShapeIsKept) {
  at::manual_seed(2);
  at::Tensor x = at::randn({2, 7, 16});
  const at::Tensor before = x.clone();
  for (const char* text : {"none", "gaussian:0.5", "quantize:3", "bitflip:0.1", "zero:0.5", "bitflip:1"}) {
    SCOPED_TRACE(text);
    at::Tensor out = corrupt(x, spec_of(text), 1, 2);
    EXPECT_EQ(out.sizes(), x.sizes());
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(bit_identical(x, before));
  }
}

TEST(CorruptionTest, NonContiguousInputGivesTheSameAsItsContiguousCopy) {
  at::manual_seed(3);
  at::Tensor x = at::randn({6, 4, 16}).transpose(0, 1);  // [4, 6, 16], strided
  ASSERT_FALSE(x.is_contiguous());
  for (const char* text : {"gaussian:0.2,seed=1", "quantize:5", "bitflip:0.05", "zero:0.3"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(bit_identical(corrupt(x, spec_of(text), 4, 5), corrupt(x.contiguous(), spec_of(text), 4, 5)));
  }
}

TEST(CorruptionTest, RejectsWrongDtypeAndInvalidSpecs) {
  EXPECT_THROW(corrupt(at::zeros({2, 4}, at::kDouble), spec_of("none"), 0, 0), c10::Error);
  CorruptionSpec s;
  s.kind = CorruptionKind::kBitFlip;
  s.amount = 2;
  EXPECT_THROW(corrupt(at::zeros({2, 4}), s, 0, 0), c10::Error);
  s.kind = CorruptionKind::kQuantize;
  s.amount = 1;
  EXPECT_THROW(corrupt(at::zeros({2, 4}), s, 0, 0), c10::Error);
}

// ---------------------------------------------------------------------------------------------
// gaussian

TEST(CorruptionTest, GaussianNoiseHasSigmaRelativeToEachRowsRms) {
  const double sigma = 0.1;
  at::manual_seed(4);
  // rows [Hkv, T, D] with magnitudes spanning 1e-3 .. 1e3 along T
  const int64_t H = 4, T = 512, D = 64;
  at::Tensor mag = at::logspace(-3, 3, T).view({1, T, 1});
  at::Tensor x = at::randn({H, T, D}) * mag;
  at::Tensor out = corrupt(x, spec_of("gaussian:0.1,seed=11"), 0, 0);
  at::Tensor xd = x.to(at::kDouble), od = out.to(at::kDouble);
  at::Tensor rms = xd.square().mean(-1, true).sqrt();
  at::Tensor z = (od - xd) / rms;  // should be N(0, sigma²)
  EXPECT_NEAR(z.std().item<double>(), sigma, 0.03 * sigma);
  EXPECT_NEAR(z.mean().item<double>(), 0.0, 0.01 * sigma);
  // and separately for the smallest and the largest rows: the noise follows each row
  at::Tensor z_small = z.narrow(1, 0, T / 4), z_large = z.narrow(1, T - T / 4, T / 4);
  EXPECT_NEAR(z_small.std().item<double>(), sigma, 0.05 * sigma);
  EXPECT_NEAR(z_large.std().item<double>(), sigma, 0.05 * sigma);
  // roughly normal: ~68.3% within one sigma
  const double within = (z.abs() < sigma).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(within, 0.6827, 0.01);
}

TEST(CorruptionTest, GaussianLeavesZeroAndNonFiniteRowsUnchanged) {
  at::manual_seed(5);
  at::Tensor x = at::randn({2, 4, 8});
  x[0][1].zero_();
  x[1][2][3] = std::numeric_limits<float>::infinity();
  at::Tensor out = corrupt(x, spec_of("gaussian:0.5"), 0, 0);
  EXPECT_TRUE(bit_identical(out[0][1], x[0][1]));  // rms 0: no noise, still zeros
  EXPECT_TRUE(bit_identical(out[1][2], x[1][2]));  // rms inf: no noise
  EXPECT_FALSE(at::equal(out[0][0], x[0][0]));     // others do get noise
  EXPECT_TRUE(bit_identical(corrupt(x, spec_of("gaussian:0"), 0, 0), x));
}

// ---------------------------------------------------------------------------------------------
// quantize

TEST(CorruptionTest, QuantizeUsesAtMostQLevelsEachSideWithErrorAtMostHalfAStep) {
  at::manual_seed(6);
  const int64_t H = 3, T = 40, D = 32;
  at::Tensor x = at::randn({H, T, D}) * at::logspace(-4, 4, T).view({1, T, 1});
  for (int b : {2, 3, 4, 8, 12, 16}) {
    SCOPED_TRACE(b);
    const double q = std::pow(2.0, b - 1) - 1;
    at::Tensor out = corrupt(x, spec_of("quantize:" + std::to_string(b)), 0, 0).to(at::kDouble);
    at::Tensor xd = x.to(at::kDouble);
    at::Tensor step = xd.abs().amax(-1, true) / q;  // per token-head row
    at::Tensor err = (out - xd).abs();
    // half a step, plus fp32 rounding of the scale and of x / s (relative 2^-24 of up to q steps)
    EXPECT_TRUE((err <= step * (0.5 + 1e-6 + q * 2e-7)).all().item<bool>())
        << "max err/step " << (err / step).max().item<double>();
    at::Tensor level = out / step;
    at::Tensor rounded = level.round();
    // on the grid (up to fp32 rounding of the scale, relative 2^-24 of up to q steps)
    EXPECT_LT((level - rounded).abs().max().item<double>(), 1e-3 + q * 2e-7);
    EXPECT_LE(rounded.abs().max().item<double>(), q);               // at most q levels each side
    // the row maximum lands exactly on the extreme level
    EXPECT_TRUE((rounded.abs().amax(-1) == q).all().item<bool>());
    if (b <= 4) {
      // and the rows really use few values: distinct levels per row ≤ 2q + 1
      at::Tensor r0 = rounded[0][0];
      EXPECT_LE(std::get<0>(at::_unique(r0)).numel(), 2 * q + 1);
    }
  }
}

TEST(CorruptionTest, QuantizeMatchesTheQuantCodecsDecodeBitExactly) {
  at::manual_seed(7);
  const int64_t Hkv = 3, T = 9, D = 16;
  at::Tensor k = at::randn({T, Hkv, D}) * at::logspace(-3, 2, T).view({T, 1, 1});
  k[2][1].zero_();
  for (const auto& [kind, bits] : {std::make_pair(KvCodecKind::kInt8, 8), std::make_pair(KvCodecKind::kInt4, 4)}) {
    SCOPED_TRACE(bits);
    auto codec = make_codec(kind, Hkv, D, T);
    codec->append(k, k, 0);
    at::Tensor want = codec->keys(T);                   // [Hkv, T, D]
    at::Tensor got = corrupt(k.transpose(0, 1), spec_of("quantize:" + std::to_string(bits)), 0, 0);
    EXPECT_TRUE(bit_identical(got, want)) << "max diff " << testing::max_abs_diff(got, want);
  }
  // a zero row decodes to zeros
  EXPECT_EQ(corrupt(k.transpose(0, 1), spec_of("quantize:8"), 0, 0)[1][2].abs().max().item<float>(), 0.f);
}

// ---------------------------------------------------------------------------------------------
// bitflip

// Per bit position, how many elements differ between a and b.
std::vector<int64_t> flips_per_bit(const at::Tensor& a, const at::Tensor& b) {
  std::vector<uint32_t> x = bits_of(a), y = bits_of(b);
  std::vector<int64_t> n(32, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t d = x[i] ^ y[i];
    for (int j = 0; j < 32; ++j) n[j] += (d >> j) & 1u;
  }
  return n;
}

int64_t total(const std::vector<int64_t>& v, int lo = 0, int hi = 32) {
  int64_t s = 0;
  for (int j = lo; j < hi; ++j) s += v[j];
  return s;
}

TEST(CorruptionTest, BitFlipRateMatchesTheProbabilityPerBit) {
  at::manual_seed(8);
  const int64_t n = int64_t{1} << 18;
  at::Tensor x = at::randn({n / 64, 64});
  {
    const double p = 1e-3;
    const auto f = flips_per_bit(x, corrupt(x, spec_of("bitflip:1e-3,seed=1"), 0, 0));
    const double want = p * 32 * n;
    EXPECT_NEAR(static_cast<double>(total(f)), want, 0.1 * want);
  }
  {
    // large p: every bit position, sign and exponent included, flips at rate p
    const double p = 0.25;
    at::Tensor out = corrupt(x, spec_of("bitflip:0.25,seed=2"), 0, 0);
    const auto f = flips_per_bit(x, out);
    EXPECT_NEAR(static_cast<double>(total(f)), p * 32 * n, 0.02 * p * 32 * n);
    for (int j = 0; j < 32; ++j) EXPECT_NEAR(static_cast<double>(f[j]), p * n, 0.1 * p * n) << "bit " << j;
    EXPECT_FALSE(at::isfinite(out).all().item<bool>());  // exponent flips do make Inf/NaN
  }
  // p = 0 is the identity, p = 1 flips every bit
  EXPECT_TRUE(bit_identical(corrupt(x, spec_of("bitflip:0"), 0, 0), x));
  {
    const std::vector<uint32_t> a = bits_of(x), b = bits_of(corrupt(x, spec_of("bitflip:1"), 0, 0));
    bool all = true;
    for (size_t i = 0; i < a.size(); ++i) all = all && b[i] == ~a[i];
    EXPECT_TRUE(all);
  }
}

TEST(CorruptionTest, BitFlipExcludingExponentNeverTouchesExponentBitsAndStaysFinite) {
  at::manual_seed(9);
  const int64_t n = int64_t{1} << 18;
  at::Tensor x = at::randn({4, n / 256, 64}) * 1e30;  // big values: one exponent flip would overflow
  const double p = 0.2;
  at::Tensor out = corrupt(x, spec_of("bitflip:0.2,exclude_exponent,seed=5"), 1, 0);
  const auto f = flips_per_bit(x, out);
  EXPECT_EQ(total(f, 23, 31), 0);  // exponent bits 23..30 never change
  const double want = p * 24 * n;  // 23 mantissa bits + sign
  EXPECT_NEAR(static_cast<double>(total(f)), want, 0.02 * want);
  EXPECT_NEAR(static_cast<double>(f[31]), p * n, 0.1 * p * n);  // sign flips
  EXPECT_NEAR(static_cast<double>(f[0]), p * n, 0.1 * p * n);
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
  // p = 1: exactly the mantissa and the sign flipped
  const std::vector<uint32_t> a = bits_of(x), b = bits_of(corrupt(x, spec_of("bitflip:1,exclude_exponent"), 0, 0));
  bool all = true;
  for (size_t i = 0; i < a.size(); ++i) all = all && b[i] == (a[i] ^ 0x807FFFFFu);
  EXPECT_TRUE(all);
}

// ---------------------------------------------------------------------------------------------
// zero

TEST(CorruptionTest, ZeroSetsAboutTheFractionAndLeavesTheRestExactly) {
  at::manual_seed(10);
  const int64_t n = int64_t{1} << 18;
  at::Tensor x = at::randn({2, n / 128, 64});
  x = at::where(x == 0, at::ones_like(x), x);  // no zeros to start with
  const double f = 0.05;
  at::Tensor out = corrupt(x, spec_of("zero:0.05,seed=3"), 0, 0);
  at::Tensor zeroed = out == 0;
  const double frac = zeroed.to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(frac, f, 0.05 * f);
  EXPECT_TRUE(at::equal(out.masked_select(zeroed.logical_not()), x.masked_select(zeroed.logical_not())));
  EXPECT_TRUE(bit_identical(corrupt(x, spec_of("zero:0"), 0, 0), x));
  EXPECT_EQ(corrupt(x, spec_of("zero:1"), 0, 0).abs().max().item<float>(), 0.f);
}

// ---------------------------------------------------------------------------------------------
// determinism

TEST(CorruptionTest, DeterministicPerSeedStreamAndStep) {
  at::manual_seed(11);
  at::Tensor x = at::randn({2, 32, 16});
  for (const char* text : {"gaussian:0.1,seed=4", "bitflip:0.01,seed=4", "zero:0.2,seed=4"}) {
    SCOPED_TRACE(text);
    const CorruptionSpec s = spec_of(text);
    at::Tensor a = corrupt(x, s, 3, 7);
    EXPECT_TRUE(bit_identical(a, corrupt(x, s, 3, 7)));   // same (seed, stream, step)
    EXPECT_FALSE(bit_identical(a, corrupt(x, s, 3, 8)));  // next step: fresh draw
    EXPECT_FALSE(bit_identical(a, corrupt(x, s, 4, 7)));  // other stream (K vs V, layer)
    CorruptionSpec other = s;
    other.seed = 5;
    EXPECT_FALSE(bit_identical(a, corrupt(x, other, 3, 7)));  // other seed
    EXPECT_FALSE(bit_identical(a, x));
  }
  // quantize has no randomness
  const CorruptionSpec q = spec_of("quantize:4");
  EXPECT_TRUE(bit_identical(corrupt(x, q, 0, 0), corrupt(x, q, 5, 9)));
}

TEST(CorruptionTest, DoesNotTouchTheGlobalRng) {
  at::Tensor x = at::randn({4, 64});
  at::manual_seed(12);
  at::Tensor want = at::rand({8});
  at::manual_seed(12);
  for (const char* text : {"gaussian:0.1", "bitflip:0.1", "zero:0.1"}) corrupt(x, spec_of(text), 0, 0);
  EXPECT_TRUE(at::equal(at::rand({8}), want));
}

}  // namespace
}  // namespace frost
