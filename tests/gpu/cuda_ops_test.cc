// Every CUDA kernel of the decoder step against its CPU twin (kernels/cuda/reference.h) on random inputs.
// Tolerances, as max |gpu − cpu| / max(1, max |cpu|): bytes of the KV encoders and RoPE exact; norms, GEMV,
// attention and elementwise ops within 2e-5 (fp32 sums against double ones); bf16 / fp16 GEMV within 2e-5 of
// the twin that rounds the same inputs to bf16 / fp16 (2e-3 with a norm or SwiGLU fused in: its fp32 input
// may round to the neighbouring 2-byte value); the fp16 / bf16 conversions (to_half, fill_uniform, embed) bit
// for bit; int8 GEMV (every row count, plain and fused, 16-byte loads and the scalar path) within 2e-5 of
// ref::linear_q8 (the same fp32 weights float(q) · scale, unrounded activations); the device's int8 quantizer
// and dequantizer bit for bit kernels/cpu/quant.h's. Skipped, with the reason, where no CUDA device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <tuple>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reference.h"
#include "tests/gpu/gpu_test_util.h"

namespace frost::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::rel_max_diff;

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// A weight matrix on the device in every storage dtype (bf16 / fp16: rounded to nearest even by the twins, as
// the model uploads).
struct DeviceWeights {
  DeviceArray<float> f32;
  DeviceArray<uint16_t> bf16, f16;
  static std::vector<uint16_t> bits(const std::vector<float>& w, uint16_t (*round)(float)) {
    std::vector<uint16_t> b(w.size());
    for (size_t i = 0; i < w.size(); ++i) b[i] = round(w[i]);
    return b;
  }
  explicit DeviceWeights(std::vector<float> w)
      : f32(std::move(w)), bf16(bits(f32.host, ref::bf16_bits)), f16(bits(f32.host, ref::f16_bits)) {}
  const void* as(DType dt) const {
    return dt == DType::kF32    ? static_cast<const void*>(f32.dev)
           : dt == DType::kBF16 ? static_cast<const void*>(bf16.dev)
                                : static_cast<const void*>(f16.dev);
  }
};

TEST(CudaOps, NormsMatchTheirTwins) {
  FROST_REQUIRE_GPU();
  for (int dim : {64, 288, 2048}) {
    const int rows = 5;
    DeviceArray<float> x(random_floats(static_cast<size_t>(rows) * dim, dim, -3.f, 3.f));
    DeviceArray<float> w(random_floats(dim, dim + 1, 0.5f, 1.5f)), b(random_floats(dim, dim + 2));
    DeviceArray<float> out(x.host.size(), std::nanf(""));
    std::vector<float> ref(x.host.size());
    rmsnorm(x.dev, w.dev, rows, dim, 1e-5f, out.dev, nullptr);
    ref::rmsnorm(x.host.data(), w.host.data(), rows, dim, 1e-5f, ref.data());
    EXPECT_LT(rel_max_diff(out.download(), ref), 2e-5) << "rmsnorm dim " << dim;
    layernorm(x.dev, w.dev, b.dev, rows, dim, 1e-5f, out.dev, nullptr);
    ref::layernorm(x.host.data(), w.host.data(), b.host.data(), rows, dim, 1e-5f, ref.data());
    EXPECT_LT(rel_max_diff(out.download(), ref), 2e-5) << "layernorm dim " << dim;
  }
}

TEST(CudaOps, EmbedGathersRowsAndAddsPositions) {
  FROST_REQUIRE_GPU();
  const int V = 100, C = 48, rows = 6;
  const DeviceWeights tw(random_floats(static_cast<size_t>(V) * C, 1));
  const DeviceArray<float>& table = tw.f32;
  DeviceArray<float> pos_table(random_floats(static_cast<size_t>(20) * C, 2));
  DeviceArray<int32_t> tok(std::vector<int32_t>{5, 99, 0, 5, 42, 7}),
      pos(std::vector<int32_t>{0, 3, 19, 1, 2, 9});
  StepRows r;
  r.token = tok.dev;
  r.pos = pos.dev;
  DeviceArray<float> out(static_cast<size_t>(rows) * C, std::nanf(""));
  embed(table.dev, DType::kF32, pos_table.dev, r, rows, C, out.dev, nullptr);
  out.download();
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < C; ++c)
      ASSERT_EQ(out.host[static_cast<size_t>(i) * C + c],
                table.host[static_cast<size_t>(tok.host[i]) * C + c] +
                    pos_table.host[static_cast<size_t>(pos.host[i]) * C + c]);
  // bf16 / fp16 tables: the rounded values, no positions.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    embed(tw.as(dt), dt, nullptr, r, rows, C, out.dev, nullptr);
    out.download();
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < C; ++c)
        ASSERT_EQ(out.host[static_cast<size_t>(i) * C + c],
                  ref::dtype_round(dt, table.host[static_cast<size_t>(tok.host[i]) * C + c]))
            << dtype_name(dt);
  }
}

// The activations' conversion for the 2-byte GEMM and the device's random weights: the twins' rounding bit
// for bit (fp16: subnormals, ties to even, ±inf from 65520 on).
TEST(CudaOps, HalfConversionsAreTheTwinsBitForBit) {
  FROST_REQUIRE_GPU();
  std::vector<float> v = random_floats(4096, 41, -70000.f, 70000.f);
  const std::vector<float> small = random_floats(4096, 42, -1e-4f, 1e-4f);
  v.insert(v.end(), small.begin(), small.end());
  for (float x : {0.f, -0.f, 65504.f, 65519.99f, 65520.f, -65520.f, 5.9604645e-8f, 2.9802322e-8f,
                  8.940697e-8f, 1.00048828125f, 1.00146484375f, 6.1035156e-5f})
    v.push_back(x);
  DeviceArray<float> src(v);
  DeviceArray<uint16_t> dst(v.size(), 0xFFFF);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    to_half(src.dev, static_cast<int64_t>(v.size()), dt, dst.dev, nullptr);
    dst.download();
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(dst.host[i], dt == DType::kF16 ? ref::f16_bits(v[i]) : ref::bf16_bits(v[i]))
          << dtype_name(dt) << " " << v[i];
  }
  EXPECT_THROW(to_half(src.dev, 4, DType::kF32, dst.dev, nullptr), std::invalid_argument);
  const int64_t n = 10000;
  DeviceArray<float> f32(static_cast<size_t>(n), 0.f);
  DeviceArray<uint16_t> half(static_cast<size_t>(n), 0), bf(static_cast<size_t>(n), 0);
  fill_uniform(f32.dev, DType::kF32, n, 7, 3.f, 0.5f, nullptr);
  fill_uniform(half.dev, DType::kF16, n, 7, 3.f, 0.5f, nullptr);
  fill_uniform(bf.dev, DType::kBF16, n, 7, 3.f, 0.5f, nullptr);
  f32.download();
  half.download();
  bf.download();
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    ASSERT_EQ(half.host[i], ref::f16_bits(f32.host[i])) << i;
    ASSERT_EQ(bf.host[i], ref::bf16_bits(f32.host[i])) << i;
  }
}

// A pool with two sequences' block tables (blocks in a scrambled order); rows at scattered positions.
struct PoolFixture {
  KvLayout kv;
  int n_head, max_blocks, n_blocks;
  DeviceArray<uint8_t> pool;
  DeviceArray<int32_t> table;
  static size_t pool_bytes(KvFormat f, int hkv, int d, int n_layer, int n_blocks) {
    return static_cast<size_t>(KvLayout{f, n_layer, hkv, d, 16}.block_bytes()) * n_blocks;
  }
  PoolFixture(KvFormat f, int h, int hkv, int d, int n_layer = 2, int blocks_per_seq = 8)
      : kv{f, n_layer, hkv, d, 16},
        n_head(h),
        max_blocks(blocks_per_seq),
        n_blocks(2 * blocks_per_seq),
        pool(pool_bytes(f, hkv, d, n_layer, 2 * blocks_per_seq), 0xAB),
        table(static_cast<size_t>(2 * blocks_per_seq), 0) {
    for (int i = 0; i < n_blocks; ++i)
      table.host[static_cast<size_t>(i)] = (i * 7 + 3) % n_blocks;  // 7 ⟂ n_blocks
    table.upload();
  }
};

class CudaOpsKv : public ::testing::TestWithParam<KvFormat> {};

TEST_P(CudaOpsKv, RopeAndAppendWriteTheTwinsBytes) {
  FROST_REQUIRE_GPU();
  const KvFormat f = GetParam();
  for (bool rope : {true, false}) {
    const int H = 8, Hkv = 2, D = 48, rows = 7, layer = 1, QKV = (H + 2 * Hkv) * D;
    PoolFixture px(f, H, Hkv, D);
    DeviceArray<float> qkv(random_floats(static_cast<size_t>(rows) * QKV, 11, -4.f, 4.f));
    qkv.host[5] = 0.f;  // an exact zero and a half-way value among the inputs
    qkv.upload();
    const std::vector<float> in = qkv.host;
    DeviceArray<int32_t> seq(std::vector<int32_t>{0, 0, 1, 1, 0, 1, 0}),
        pos(std::vector<int32_t>{0, 17, 5, 63, 40, 100, 127});
    std::vector<float> cos_t, sin_t;
    ref::rope_tables(128, D, 10000.0, &cos_t, &sin_t);
    DeviceArray<float> cd(cos_t), sd(sin_t);
    StepRows r;
    r.seq = seq.dev;
    r.pos = pos.dev;
    r.block_table = px.table.dev;
    r.max_blocks = px.max_blocks;
    rope_kv_append(qkv.dev, rope ? cd.dev : nullptr, rope ? sd.dev : nullptr, r, rows, H, px.kv, layer,
                   px.pool.dev, nullptr);
    qkv.download();
    px.pool.download();
    const int64_t rb = px.kv.row_bytes();
    for (int i = 0; i < rows; ++i) {
      std::vector<float> row(in.begin() + static_cast<int64_t>(i) * QKV,
                             in.begin() + static_cast<int64_t>(i + 1) * QKV);
      if (rope)
        for (int h = 0; h < H + Hkv; ++h)
          ref::rope_row(row.data() + h * D, D, cos_t.data(), sin_t.data(), pos.host[i]);
      for (int c = 0; c < (H + Hkv) * D; ++c)  // rotated q and k (in place), v untouched
        ASSERT_EQ(qkv.host[static_cast<size_t>(i) * QKV + c], row[static_cast<size_t>(c)])
            << "row " << i << " col " << c;
      const int p = pos.host[i];
      const int blk = px.table.host[static_cast<size_t>(seq.host[i]) * px.max_blocks + p / 16];
      const uint8_t* base = px.pool.host.data() +
                            (static_cast<int64_t>(blk) * px.kv.n_layer + layer) * px.kv.layer_block_bytes();
      for (int g = 0; g < Hkv; ++g)
        for (int kvi = 0; kvi < 2; ++kvi) {
          std::vector<uint8_t> want(static_cast<size_t>(rb));
          const float s = ref::encode_row(row.data() + (H + kvi * Hkv + g) * D, D, f, want.data());
          const int64_t idx = static_cast<int64_t>(g) * 16 + p % 16;
          ASSERT_EQ(0, std::memcmp(want.data(), base + kvi * px.kv.rows_bytes() + idx * rb,
                                   static_cast<size_t>(rb)))
              << kv_format_name(f) << " row " << i << " head " << g << (kvi ? " v" : " k");
          if (kv_has_scales(f)) {
            float got;
            std::memcpy(&got, base + 2 * px.kv.rows_bytes() + kvi * px.kv.scales_bytes() + idx * 4, 4);
            ASSERT_EQ(got, s) << "scale of row " << i;
          }
        }
    }
  }
}

TEST_P(CudaOpsKv, AttentionReadsThePagedPoolLikeTheTwin) {
  FROST_REQUIRE_GPU();
  const KvFormat f = GetParam();
  struct Shape {
    int h, hkv, d, n;
  };  // n positions per sequence: over 256 spans several attention tiles
  for (Shape sh : {Shape{8, 4, 8, 70}, Shape{6, 6, 48, 300}, Shape{32, 8, 64, 70}, Shape{16, 2, 128, 600}}) {
    const int H = sh.h, Hkv = sh.hkv, D = sh.d, QKV = (H + 2 * Hkv) * D, layer = 0;
    const int n = sh.n;
    PoolFixture px(f, H, Hkv, D, 1, (n + 15) / 16);
    // Fill positions 0..n-1 of both sequences through the append kernel (no RoPE).
    std::vector<int32_t> seqs, poss;
    for (int s = 0; s < 2; ++s)
      for (int p = 0; p < n; ++p) seqs.push_back(s), poss.push_back(p);
    const int rows = static_cast<int>(seqs.size());
    DeviceArray<float> qkv(random_floats(static_cast<size_t>(rows) * QKV, 21 + D, -2.f, 2.f));
    DeviceArray<int32_t> seq(seqs), pos(poss);
    StepRows r;
    r.seq = seq.dev;
    r.pos = pos.dev;
    r.block_table = px.table.dev;
    r.max_blocks = px.max_blocks;
    rope_kv_append(qkv.dev, nullptr, nullptr, r, rows, H, px.kv, layer, px.pool.dev, nullptr);
    const float scale = 1.f / std::sqrt(static_cast<float>(D));
    DeviceArray<float> part(static_cast<size_t>(attention_partials_floats(rows, H, D)), std::nanf(""));
    // Two ways to split the positions: the step's own (pieces of 32, merged) and the fewest pieces of 256.
    const AttentionSplit wide{kAttnMaxSplit, n <= 256 ? 1 : n <= 512 ? 2 : 4};
    DeviceArray<float> out_wide(static_cast<size_t>(rows) * H * D, std::nanf(""));
    attention(qkv.dev, r, rows, H, px.kv, layer, px.pool.dev, scale, wide, part.dev, out_wide.dev, nullptr);
    DeviceArray<float> out(static_cast<size_t>(rows) * H * D, std::nanf(""));
    const AttentionSplit narrow = attention_split(n, 1, 1, 528);  // as for one short sequence: many pieces
    attention(qkv.dev, r, rows, H, px.kv, layer, px.pool.dev, scale, narrow, part.dev, out.dev, nullptr);
    out.download();
    out_wide.download();
    px.pool.download();
    EXPECT_GT(narrow.n_splits, 1);
    // Twin: decode every stored row from the pool bytes, attend in double.
    std::vector<float> ref(out.host.size());
    const int64_t rb = px.kv.row_bytes();
    std::vector<int> checked;
    for (int i = 0; i<rows; i += n> 100 ? 7 : 1) checked.push_back(i);
    checked.push_back(rows - 1);  // the longest row
    for (int i : checked) {
      const int s = seqs[static_cast<size_t>(i)], p = poss[static_cast<size_t>(i)];
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / Hkv);
        std::vector<float> K(static_cast<size_t>(p + 1) * D), V(K.size());
        for (int j = 0; j <= p; ++j) {
          const int blk = px.table.host[static_cast<size_t>(s) * px.max_blocks + j / 16];
          const uint8_t* base = px.pool.host.data() + static_cast<int64_t>(blk) * px.kv.layer_block_bytes();
          const int64_t idx = static_cast<int64_t>(g) * 16 + j % 16;
          for (int kvi = 0; kvi < 2; ++kvi) {
            float sc = 0;
            if (kv_has_scales(f))
              std::memcpy(&sc, base + 2 * px.kv.rows_bytes() + kvi * px.kv.scales_bytes() + idx * 4, 4);
            for (int e = 0; e < D; ++e)
              (kvi ? V : K)[static_cast<size_t>(j) * D + e] =
                  ref::decode_element(base + kvi * px.kv.rows_bytes() + idx * rb, e, f, sc);
          }
        }
        ref::attend_head(qkv.host.data() + static_cast<int64_t>(i) * QKV + h * D, K.data(), V.data(), p + 1,
                         D, scale, ref.data() + (static_cast<int64_t>(i) * H + h) * D);
      }
    }
    std::vector<float> got_checked, wide_checked, ref_checked;
    for (int i : checked)
      for (int c = 0; c < H * D; ++c) {
        got_checked.push_back(out.host[static_cast<size_t>(i) * H * D + c]);
        wide_checked.push_back(out_wide.host[static_cast<size_t>(i) * H * D + c]);
        ref_checked.push_back(ref[static_cast<size_t>(i) * H * D + c]);
      }
    EXPECT_LT(rel_max_diff(got_checked, ref_checked), 2e-5)
        << kv_format_name(f) << " H " << H << " Hkv " << Hkv << " D " << D << " n " << n << " split "
        << narrow.split_len;
    EXPECT_LT(rel_max_diff(wide_checked, ref_checked), 2e-5)
        << kv_format_name(f) << " H " << H << " Hkv " << Hkv << " D " << D << " n " << n << " split 256";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaOpsKv,
                         ::testing::Values(KvFormat::kF32, KvFormat::kF16, KvFormat::kBF16, KvFormat::kInt8,
                                           KvFormat::kInt4),
                         [](const ::testing::TestParamInfo<KvFormat>& i) {
                           return std::string(kv_format_name(i.param));
                         });

// Host-side choice of the attention split: no GPU needed.
TEST(CudaAttentionSplit, CoversEveryPositionInPowersOfTwo) {
  const AttentionSplit one = attention_split(160, 1, 8, 528);  // one short sequence: many short pieces
  EXPECT_EQ(one.split_len, 16);
  EXPECT_EQ(one.n_splits, 16);
  const AttentionSplit many = attention_split(160, 256, 8, 528);  // a large batch fills the GPU alone
  EXPECT_EQ(many.split_len, 256);
  EXPECT_EQ(many.n_splits, 1);
  for (int p : {1, 17, 255, 4096, 16384})
    for (int rows : {1, 7, 512}) {
      const AttentionSplit a = attention_split(p, rows, 4, 528);
      EXPECT_GE(static_cast<int64_t>(a.split_len) * a.n_splits, p);
      EXPECT_LE(a.n_splits, kAttnSplits);
      EXPECT_LE(a.split_len, kAttnMaxSplit);
      EXPECT_EQ(a.n_splits & (a.n_splits - 1), 0);
      EXPECT_EQ(a.split_len & (a.split_len - 1), 0);
    }
  try {
    attention_split(16385, 1, 1, 528);
    ADD_FAILURE() << "16,385 positions accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("16384"), std::string::npos) << e.what();
  }
}

TEST(CudaOps, ElementwiseMatchTheirTwins) {
  FROST_REQUIRE_GPU();
  const int rows = 3, F = 768;
  DeviceArray<float> gu(random_floats(static_cast<size_t>(rows) * 2 * F, 31, -6.f, 6.f));
  DeviceArray<float> out(static_cast<size_t>(rows) * F, std::nanf(""));
  swiglu(gu.dev, rows, F, out.dev, nullptr);
  std::vector<float> ref(out.host.size());
  ref::swiglu(gu.host.data(), rows, F, ref.data());
  EXPECT_LT(rel_max_diff(out.download(), ref), 2e-5);
  std::vector<float> g = gu.host;
  gelu_new(gu.dev, static_cast<int64_t>(g.size()), nullptr);
  ref::gelu_new(g.data(), static_cast<int64_t>(g.size()));
  EXPECT_LT(rel_max_diff(gu.download(), g), 2e-5);
  DeviceArray<float> y(random_floats(static_cast<size_t>(rows) * F, 32)), b(random_floats(F, 33));
  std::vector<float> yr = y.host;
  add_bias(y.dev, b.dev, rows, F, nullptr);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < F; ++j) yr[static_cast<size_t>(r) * F + j] += b.host[static_cast<size_t>(j)];
  EXPECT_EQ(y.download(), yr);
}

TEST(CudaOps, GemvMatchesItsTwinForEveryRowCountAndDtype) {
  FROST_REQUIRE_GPU();
  struct Shape {
    int n_out, n_in;
  };
  for (DType dt : kDTypes)
    for (Shape sh : {Shape{1000, 288}, Shape{2048, 8192}, Shape{172, 64}, Shape{10, 172}, Shape{33, 13}}) {
      const DeviceWeights dw(random_floats(static_cast<size_t>(sh.n_out) * sh.n_in, sh.n_out, -0.1f, 0.1f));
      const std::vector<float>& w = dw.f32.host;
      const void* wd = dw.as(dt);
      DeviceArray<float> bias(random_floats(static_cast<size_t>(sh.n_out), 3));
      for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
        DeviceArray<float> x(random_floats(static_cast<size_t>(rows) * sh.n_in, 100 + rows, -2.f, 2.f));
        DeviceArray<float> y(random_floats(static_cast<size_t>(rows) * sh.n_out, 200 + rows));
        std::vector<float> ref = y.host;
        const bool acc = rows % 2 == 0;
        gemv(wd, dt, x.dev, rows, sh.n_out, sh.n_in, rows % 3 == 0 ? bias.dev : nullptr, acc, y.dev, nullptr);
        ref::linear(w.data(), x.host.data(), rows, sh.n_out, sh.n_in,
                    rows % 3 == 0 ? bias.host.data() : nullptr, acc, dt, ref.data());
        ASSERT_LT(rel_max_diff(y.download(), ref), 2e-5)
            << dtype_name(dt) << " " << sh.n_out << "x" << sh.n_in << " rows " << rows;
      }
    }
}

TEST(CudaOps, GemvWithItsNormOrActivationFusedMatchesTheSeparateTwins) {
  FROST_REQUIRE_GPU();
  struct Shape {
    int n_out, n_in;
  };
  for (DType dt : kDTypes)
    for (Shape sh : {Shape{1000, 288}, Shape{64, 2048}, Shape{10, 172}})
      for (GemvInput in : {GemvInput::kRmsNorm, GemvInput::kSwiGlu}) {
        const DeviceWeights dw(random_floats(static_cast<size_t>(sh.n_out) * sh.n_in, sh.n_in, -0.1f, 0.1f));
        const std::vector<float>& w = dw.f32.host;
        const void* wd = dw.as(dt);
        DeviceArray<float> nw(random_floats(static_cast<size_t>(sh.n_in), 9, 0.5f, 1.5f));
        for (int rows : {1, 3, 8}) {
          const int cols = in == GemvInput::kSwiGlu ? 2 * sh.n_in : sh.n_in;
          DeviceArray<float> x(random_floats(static_cast<size_t>(rows) * cols, 300 + rows, -3.f, 3.f));
          DeviceArray<float> y(static_cast<size_t>(rows) * sh.n_out, std::nanf(""));
          gemv(wd, dt, x.dev, rows, sh.n_out, sh.n_in, nullptr, false, y.dev, nullptr, in, nw.dev, 1e-5f);
          std::vector<float> xt(static_cast<size_t>(rows) * sh.n_in), ref(y.host.size());
          if (in == GemvInput::kRmsNorm)
            ref::rmsnorm(x.host.data(), nw.host.data(), rows, sh.n_in, 1e-5f, xt.data());
          else
            ref::swiglu(x.host.data(), rows, sh.n_in, xt.data());
          ref::linear(w.data(), xt.data(), rows, sh.n_out, sh.n_in, nullptr, false, dt, ref.data());
          ASSERT_LT(rel_max_diff(y.download(), ref), dt == DType::kF32 ? 2e-5 : 2e-3)
              << dtype_name(dt) << " " << (in == GemvInput::kRmsNorm ? "rmsnorm " : "swiglu ") << sh.n_out
              << "x" << sh.n_in << " rows " << rows;
        }
      }
}

// An int8 matrix (kernels/cpu/quant.h's quantize_int8 of w, `group` inputs a scale; 0 = the whole row) on the
// device: its int8 values and scales.
struct DeviceInt8 {
  kernels::QuantizedMatrix qm;
  DeviceArray<int8_t> q;
  DeviceArray<float> scales;
  static kernels::QuantizedMatrix quantize(const std::vector<float>& w, int n_out, int n_in, int64_t group) {
    const at::Tensor t = at::from_blob(const_cast<float*>(w.data()), {n_out, n_in}, at::kFloat).clone();
    return kernels::quantize_int8(t, group);
  }
  DeviceInt8(const std::vector<float>& w, int n_out, int n_in, int64_t group)
      : qm(quantize(w, n_out, n_in, group)),
        q(std::vector<int8_t>(qm.q.data_ptr<int8_t>(), qm.q.data_ptr<int8_t>() + qm.q.numel())),
        scales(std::vector<float>(qm.scales.data_ptr<float>(),
                                  qm.scales.data_ptr<float>() + qm.scales.numel())) {}
  int group() const { return static_cast<int>(qm.group); }
};

TEST(CudaOps, Int8GemvMatchesItsTwinForEveryRowCountInputAndGroup) {
  FROST_REQUIRE_GPU();
  struct Shape {
    int n_out, n_in;
  };
  // n_in 288, 2048, 8192, 64 with group 32 or 0 (one scale a row): 16-byte loads; n_in 172 or 13, or group 20
  // (a chunk of 16 would straddle two groups): the scalar path.
  for (Shape sh : {Shape{1000, 288}, Shape{2048, 8192}, Shape{4096, 2048}, Shape{172, 64}, Shape{10, 172},
                   Shape{33, 13}})
    for (int64_t group : {int64_t{32}, int64_t{0}, int64_t{20}}) {
      const std::vector<float> w =
          random_floats(static_cast<size_t>(sh.n_out) * sh.n_in, sh.n_out + sh.n_in, -0.1f, 0.1f);
      const DeviceInt8 dw(w, sh.n_out, sh.n_in, group);
      DeviceArray<float> bias(random_floats(static_cast<size_t>(sh.n_out), 3));
      DeviceArray<float> nw(random_floats(static_cast<size_t>(sh.n_in), 9, 0.5f, 1.5f));
      const bool big =
          static_cast<int64_t>(sh.n_out) * sh.n_in > 1000000;  // its twin is slow: three row counts
      for (int rows = 1; rows <= kGemvMaxRows; ++rows)
        for (GemvInput in : {GemvInput::kPlain, GemvInput::kRmsNorm, GemvInput::kSwiGlu}) {
          if (big && rows != 1 && rows != 3 && rows != kGemvMaxRows) continue;
          const int cols = in == GemvInput::kSwiGlu ? 2 * sh.n_in : sh.n_in;
          DeviceArray<float> x(random_floats(static_cast<size_t>(rows) * cols, 100 + rows, -2.f, 2.f));
          DeviceArray<float> y(random_floats(static_cast<size_t>(rows) * sh.n_out, 200 + rows));
          std::vector<float> ref = y.host, xt(static_cast<size_t>(rows) * sh.n_in);
          const bool acc = rows % 2 == 0;
          const float* b = rows % 3 == 0 ? bias.dev : nullptr;
          gemv(dw.q.dev, DType::kInt8, x.dev, rows, sh.n_out, sh.n_in, b, acc, y.dev, nullptr, in, nw.dev,
               1e-5f, dw.scales.dev, dw.group());
          if (in == GemvInput::kRmsNorm)
            ref::rmsnorm(x.host.data(), nw.host.data(), rows, sh.n_in, 1e-5f, xt.data());
          else if (in == GemvInput::kSwiGlu)
            ref::swiglu(x.host.data(), rows, sh.n_in, xt.data());
          else
            xt = x.host;
          ref::linear_q8(dw.q.host.data(), dw.scales.host.data(), dw.group(), xt.data(), rows, sh.n_out,
                         sh.n_in, b ? bias.host.data() : nullptr, acc, ref.data());
          ASSERT_LT(rel_max_diff(y.download(), ref), 2e-5)
              << "int8 " << sh.n_out << "x" << sh.n_in << " group " << group << " rows " << rows << " input "
              << static_cast<int>(in);
        }
    }
  DeviceArray<float> x(4), y(4);
  EXPECT_THROW(gemv(x.dev, DType::kInt8, x.dev, 1, 2, 2, nullptr, false, y.dev, nullptr),
               std::invalid_argument);
}

TEST(CudaOps, Int8QuantizeAndDequantizeAreTheCpusBitForBit) {
  FROST_REQUIRE_GPU();
  for (auto [n_out, n_in, group] :
       {std::tuple{300, 288, 32}, std::tuple{17, 45, 32}, std::tuple{5, 64, 64}}) {
    std::vector<float> w = random_floats(static_cast<size_t>(n_out) * n_in, n_in, -0.3f, 0.3f);
    for (int k = 0; k < n_in; ++k) w[static_cast<size_t>(k)] = 0.f;  // an all-zero row: scale 0, q 0
    const DeviceInt8 cpu(w, n_out, n_in, group);
    DeviceArray<float> wd(w);
    DeviceArray<int8_t> q(w.size());
    DeviceArray<float> s(cpu.scales.host.size(), std::nanf(""));
    quantize_int8(wd.dev, n_out, n_in, group, q.dev, s.dev, nullptr);
    ASSERT_EQ(q.download(), cpu.q.host) << n_out << "x" << n_in;
    ASSERT_EQ(s.download(), cpu.scales.host) << n_out << "x" << n_in;
    DeviceArray<float> dq(w.size(), std::nanf(""));
    dequantize_int8(q.dev, s.dev, n_out, n_in, group, dq.dev, nullptr);
    const at::Tensor want = kernels::dequantize(cpu.qm).contiguous();
    ASSERT_EQ(dq.download(),
              std::vector<float>(want.data_ptr<float>(), want.data_ptr<float>() + want.numel()));
  }
}

// The device sampler against its twin (ref::sample_row, the host sampler's function): greedy, temperature,
// top-k, top-p, min-p and their mixes, rows left to the host. The sums run in another order on the device, so a
// token may differ only where the draw sits on a cumulative boundary: there the twin with u moved by 1e-12 (of
// the total) must give the device's token.
TEST(CudaOps, ArgmaxAndSamplingChooseTheTwinsTokens) {
  FROST_REQUIRE_GPU();
  const int V = 32000, rows = 96;
  std::vector<float> l = random_floats(static_cast<size_t>(rows) * V, 41, -8.f, 8.f);
  for (int r = 0; r < rows; ++r) {  // NaNs everywhere, ties for the maximum in some rows, a dominant token
    l[static_cast<size_t>(r) * V + (r * 7919) % V] = std::nanf("");
    if (r % 4 == 0) l[static_cast<size_t>(r) * V + 100 + r] = l[static_cast<size_t>(r) * V + 30000 - r] = 9.f;
    if (r % 4 == 1) l[static_cast<size_t>(r) * V + (r * 131) % V] = 20.f;
  }
  DeviceArray<float> logits(l);
  DeviceArray<int32_t> ids(static_cast<size_t>(rows), -1);
  argmax(logits.dev, rows, V, ids.dev, nullptr);
  ids.download();
  for (int r = 0; r < rows; ++r)
    ASSERT_EQ(ids.host[r], ref::argmax(l.data() + static_cast<size_t>(r) * V, V)) << r;
  std::mt19937_64 g(5);
  std::vector<SampleParams> params(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    SampleParams& p = params[static_cast<size_t>(r)];
    p.greedy = r % 12 == 11;
    p.to_host = r % 16 == 15;
    p.temperature = 0.3f + 0.1f * static_cast<float>(r % 10);
    p.top_k = r % 3 == 1 ? 1 + (r * 37) % 200 : 0;
    p.top_p = r % 4 == 2 ? 0.5f + 0.05f * static_cast<float>(r % 9) : 1.f;
    p.min_p = r % 5 == 3 ? 0.05f : 0.f;
    p.u = static_cast<double>(g() >> 11) * 0x1.0p-53;
  }
  DeviceArray<SampleParams> pd(params);
  DeviceArray<float> scratch(static_cast<size_t>(rows) * V);
  sample_rows(logits.dev, rows, V, pd.dev, scratch.dev, ids.dev, nullptr);
  ids.download();
  int distinct_from_greedy = 0, on_boundary = 0;
  for (int r = 0; r < rows; ++r) {
    const float* lr = l.data() + static_cast<size_t>(r) * V;
    const SampleParams& p = params[static_cast<size_t>(r)];
    if (p.to_host) {
      ASSERT_EQ(ids.host[r], -1) << "row " << r << " is the host's";
      continue;
    }
    const int want = ref::sample_row(lr, V, p);
    if (ids.host[r] != want) {
      SampleParams lo = p, hi = p;
      lo.u = std::max(0.0, p.u - 1e-12);
      hi.u = std::min(1.0 - 0x1.0p-53, p.u + 1e-12);
      ASSERT_TRUE(ref::sample_row(lr, V, lo) == ids.host[r] || ref::sample_row(lr, V, hi) == ids.host[r])
          << "row " << r << ": device " << ids.host[r] << ", twin " << want << " (u " << p.u << ")";
      ++on_boundary;
    }
    distinct_from_greedy += ids.host[r] != ref::argmax(lr, V);
  }
  EXPECT_LE(on_boundary, 1);
  EXPECT_GT(distinct_from_greedy, rows / 4);  // the draws are draws, not the argmax
}

// Constrained decoding on the device (issue 54): apply_token_masks before sample_rows leaves only each masked
// row's allowed tokens — the twin's (ref::apply_token_mask then ref::sample_row) token, always inside the
// mask — and leaves unmasked rows and the host's rows as they were.
TEST(CudaOps, TokenMasksBeforeSamplingDrawInsideTheMaskAsTheTwin) {
  FROST_REQUIRE_GPU();
  const int V = 32000, rows = 48, W = (V + 31) / 32;
  const std::vector<float> l = random_floats(static_cast<size_t>(rows) * V, 43, -8.f, 8.f);
  std::mt19937_64 g(7);
  std::vector<uint32_t> masks(static_cast<size_t>(rows) * W, 0u);
  std::vector<SampleParams> params(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    SampleParams& p = params[static_cast<size_t>(r)];
    p.masked = r % 4 != 3;
    p.to_host = r % 8 == 7;
    p.greedy = r % 6 == 5;
    p.top_k = r % 3 == 1 ? 20 : 0;
    p.top_p = r % 5 == 2 ? 0.8f : 1.f;
    p.u = static_cast<double>(g() >> 11) * 0x1.0p-53;
    const int allowed = 1 + (r * 577) % 3000;  // a few to a few thousand tokens, never the argmax on purpose
    for (int k = 0; k < allowed; ++k) {
      const auto id = static_cast<int>(g() % V);
      masks[static_cast<size_t>(r) * W + id / 32] |= 1u << (id % 32);
    }
  }
  DeviceArray<float> logits(l);
  DeviceArray<uint32_t> md(masks);
  DeviceArray<SampleParams> pd(params);
  DeviceArray<float> scratch(static_cast<size_t>(rows) * V);
  DeviceArray<int32_t> ids(static_cast<size_t>(rows), -1);
  apply_token_masks(logits.dev, rows, V, pd.dev, md.dev, nullptr);
  sample_rows(logits.dev, rows, V, pd.dev, scratch.dev, ids.dev, nullptr);
  ids.download();
  int on_boundary = 0;
  for (int r = 0; r < rows; ++r) {
    const SampleParams& p = params[static_cast<size_t>(r)];
    if (p.to_host) {
      ASSERT_EQ(ids.host[r], -1) << r;
      continue;
    }
    std::vector<float> lr(l.begin() + static_cast<int64_t>(r) * V,
                          l.begin() + static_cast<int64_t>(r + 1) * V);
    const uint32_t* m = masks.data() + static_cast<size_t>(r) * W;
    if (p.masked) {
      ref::apply_token_mask(lr.data(), V, m);
      ASSERT_TRUE((m[ids.host[r] / 32] >> (ids.host[r] % 32)) & 1u)
          << "row " << r << " drew outside its mask";
    }
    if (ids.host[r] != ref::sample_row(lr.data(), V, p)) {
      SampleParams lo = p, hi = p;
      lo.u = std::max(0.0, p.u - 1e-12);
      hi.u = std::min(1.0 - 0x1.0p-53, p.u + 1e-12);
      ASSERT_TRUE(ref::sample_row(lr.data(), V, lo) == ids.host[r] ||
                  ref::sample_row(lr.data(), V, hi) == ids.host[r])
          << "row " << r;
      ++on_boundary;
    }
  }
  EXPECT_LE(on_boundary, 1);
}

}  // namespace
}  // namespace frost::cuda
