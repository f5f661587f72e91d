// The codecs' attention kernels over paged storage (core/kv/attend.h): a tile of query rows (a prefill chunk)
// gives every row bit-identically what that row alone gets — for every codec, head_dim (vectorised or
// portable), block size (runs of any length) and row count — and both equal the double-precision reference
// over the decoded cache within a stated tolerance.
#include "core/kv/attend.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <ostream>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/block_storage.h"
#include "core/kv/sequence_kv.h"
#include "kernels/cpu/isa.h"

namespace frost {
namespace {

struct AttendCase {
  KvCodecKind codec;
  int64_t head_dim;
  int64_t block_tokens;  // at fp32; compact codecs hold more per block
};
// Test logs name the case, not its bytes.
void PrintTo(const AttendCase& c, std::ostream* os) {
  *os << kv_codec_name(c.codec) << " head_dim " << c.head_dim << " block_tokens " << c.block_tokens;
}

class AttendRowsTest : public ::testing::TestWithParam<AttendCase> {};
void check_tile_and_reference(const AttendCase& c);

TEST_P(AttendRowsTest, ATileOfRowsEqualsEachRowAloneAndTheReference) {
  // Every kernel variant this CPU runs (AVX-512, and the portable kernels the other machines run), one at a
  // time, the choice restored afterwards.
  const kernels::Isa before = kernels::active_isa();
  for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (!kernels::set_isa(isa)) continue;
    SCOPED_TRACE(kernels::isa_name(isa));
    check_tile_and_reference(GetParam());
  }
  kernels::set_isa(before);
}

// One layer of one paged sequence (Hkv kv heads of D) in a pool of 64 blocks of `bt` fp32 positions, holding
// max_tokens positions at most.
struct PagedLayer {
  std::unique_ptr<HostKvStorage> pool;
  std::unique_ptr<KvBlockBooks> books;
  std::unique_ptr<SequenceKv> kv;
};
PagedLayer paged_layer(KvCodecKind codec, int64_t n_head_kv, int64_t head_dim, int64_t bt, int64_t max_tokens) {
  KvSpec spec;
  spec.n_layer = 1;
  spec.n_head_kv = n_head_kv;
  spec.head_dim = head_dim;
  spec.max_tokens = max_tokens;
  spec.codec = codec;
  auto pool = HostKvStorage::create(64, kv_pool_block_bytes(spec, bt));
  TORCH_CHECK(pool.ok(), pool.status().ToString());
  PagedLayer p;
  p.pool = *std::move(pool);
  p.books = std::make_unique<KvBlockBooks>(p.pool->n_blocks(), p.pool->block_bytes());
  p.kv = std::make_unique<SequenceKv>(spec, p.books.get(), p.pool.get());
  return p;
}

void check_tile_and_reference(const AttendCase& c) {
  const auto [codec, D, bt] = c;
  const int64_t H = 4, Hkv = 2, T = 70;
  PagedLayer paged = paged_layer(codec, Hkv, D, bt, 128);
  SequenceKv& kv = *paged.kv;
  ASSERT_TRUE(kv.reserve(T));
  at::manual_seed(D * 100 + bt);
  const at::Tensor k = at::randn({T, Hkv, D}) * 2, v = at::randn({T, Hkv, D});
  kv.layer(0).append(k, v, 0);
  EXPECT_EQ(static_cast<int64_t>(kv.block_table().size()), kv.blocks_for(T));
  if (bt == 3) EXPECT_GT(kv.block_table().size(), 1u);  // really paged: runs of every length
  // 37 query rows attending 30 .. 66 positions, like a prefill chunk, plus a lone short row
  std::vector<int64_t> n;
  for (int64_t r = 0; r < 37; ++r) n.push_back(30 + r);
  n.push_back(1);
  const auto R = static_cast<int64_t>(n.size());
  const at::Tensor q = at::randn({R, H * D}).contiguous();
  const float scale = 0.2f;
  std::vector<float> tile(static_cast<size_t>(R * H * D)), alone(tile.size());
  std::vector<const float*> qp;
  std::vector<float*> op;
  for (int64_t r = 0; r < R; ++r) {
    qp.push_back(q.data_ptr<float>() + r * H * D);
    op.push_back(tile.data() + r * H * D);
  }
  kv.layer(0).attend_rows(qp.data(), n.data(), R, H, scale, 0, H, op.data());
  for (int64_t r = 0; r < R; ++r) kv.layer(0).attend(qp[r], H, n[r], scale, 0, H, alone.data() + r * H * D);
  ASSERT_EQ(std::memcmp(tile.data(), alone.data(), tile.size() * sizeof(float)), 0);
  // the reference: double precision over the decoded cache
  const at::Tensor kd = kv.layer(0).keys(T).contiguous(), vd = kv.layer(0).values(T).contiguous();
  std::vector<float> ref(static_cast<size_t>(H * D));
  for (int64_t r = 0; r < R; ++r) {
    kernels::attend_one_ref(qp[r], kd.data_ptr<float>(), vd.data_ptr<float>(), c10::kFloat, H, Hkv, D, T, n[r], scale,
                            ref.data());
    for (int64_t i = 0; i < H * D; ++i) ASSERT_NEAR(alone[r * H * D + i], ref[i], 1e-4) << "row " << r << " elem " << i;
  }
}

// Sliding windows and soft-capped scores (KvCodec::attend_window): positions [start, n) only, scores
// cap · tanh(s / cap); equal to a double-precision reference over the decoded rows, and to the codec-agnostic
// default (which decodes the rows, as KVSplice does) — on paged storage with runs that start inside a block.
TEST_P(AttendRowsTest, AWindowAndSoftCapEqualTheReference) {
  const auto [codec, D, bt] = GetParam();
  const int64_t H = 4, Hkv = 2, T = 40;
  PagedLayer paged = paged_layer(codec, Hkv, D, bt, 64);
  SequenceKv& kv = *paged.kv;
  ASSERT_TRUE(kv.reserve(T));
  at::manual_seed(D * 7 + bt);
  kv.layer(0).append(at::randn({T, Hkv, D}) * 2, at::randn({T, Hkv, D}), 0);
  const at::Tensor kd = kv.layer(0).keys(T).contiguous(), vd = kv.layer(0).values(T).contiguous();
  const at::Tensor q = at::randn({H * D}).contiguous();
  const float scale = 0.3f;
  for (const auto& [start, n, cap] : std::vector<std::tuple<int64_t, int64_t, float>>{
           {0, 40, 0.f}, {5, 13, 0.f}, {31, 40, 0.f}, {0, 40, 2.f}, {7, 30, 1.5f}, {39, 40, 3.f}}) {
    SCOPED_TRACE(::testing::Message() << "positions [" << start << ", " << n << ") cap " << cap);
    std::vector<float> got(static_cast<size_t>(H * D)), dflt(got.size());
    kv.layer(0).attend_window(q.data_ptr<float>(), H, start, n, scale, cap, 0, H, got.data());
    kv.layer(0).KvCodec::attend_window(q.data_ptr<float>(), H, start, n, scale, cap, 0, H, dflt.data());
    const float *qp = q.data_ptr<float>(), *kp = kd.data_ptr<float>(), *vp = vd.data_ptr<float>();
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      std::vector<double> s;
      double mx = -INFINITY, sum = 0;
      for (int64_t t = start; t < n; ++t) {
        double acc = 0;
        for (int64_t i = 0; i < D; ++i) acc += static_cast<double>(qp[h * D + i]) * kp[(g * T + t) * D + i];
        double x = acc * scale;
        if (cap > 0) x = cap * std::tanh(x / cap);
        s.push_back(x);
        mx = std::max(mx, x);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t t = start; t < n; ++t) o += s[static_cast<size_t>(t - start)] / sum * vp[(g * T + t) * D + i];
        ASSERT_NEAR(got[static_cast<size_t>(h * D + i)], o, 1e-4) << "head " << h << " elem " << i;
        ASSERT_NEAR(dflt[static_cast<size_t>(h * D + i)], o, 1e-4) << "default, head " << h << " elem " << i;
      }
    }
  }
}

std::vector<AttendCase> cases() {
  std::vector<AttendCase> out;
  for (KvCodecKind c : {KvCodecKind::kF32, KvCodecKind::kF16, KvCodecKind::kBF16, KvCodecKind::kInt8,
                        KvCodecKind::kInt4})
    for (int64_t d : {16, 48, 64, 128, 8, 24, 12})
      for (int64_t bt : {3, 16}) out.push_back({c, d, bt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(CodecsDimsBlocks, AttendRowsTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<AttendCase>& i) {
                           return std::string(kv_codec_name(i.param.codec)) + "_d" + std::to_string(i.param.head_dim) +
                                  "_b" + std::to_string(i.param.block_tokens);
                         });

}  // namespace
}  // namespace frost
