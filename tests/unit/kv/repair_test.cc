// Repair operators: parameter counts against the seed's formulas, the factorised fast path against
// the materialised reference, option B's bound, the contraction regularizer and a gradient check.
#include "core/kv/repair.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <ATen/core/grad_mode.h>

namespace frost {
namespace {

constexpr int64_t D = 16, R = 4, H = 4, HKV = 2, T = 9;

struct Inputs {
  at::Tensor q, k, v;
};
Inputs inputs(int64_t tq, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::randn({H, tq, D}, g), at::randn({HKV, T, D}, g), at::randn({HKV, T, D}, g)};
}

std::unique_ptr<RepairLayer> make(RepairOption o, std::shared_ptr<RepairShared> shared = nullptr,
                                  int64_t layer = 0) {
  RepairConfig c;
  c.option = o;
  c.rank = R;
  if (o == RepairOption::kC && !shared) shared = make_repair_shared(D, H, R, 7);
  return std::make_unique<RepairLayer>(c, D, H, layer, 3, 11, shared);
}

// Plain causal softmax attention (no repair), GQA.
at::Tensor plain_attention(const Inputs& in, int64_t first_pos, double scale) {
  at::Tensor k = in.k.repeat_interleave(H / HKV, 0), v = in.v.repeat_interleave(H / HKV, 0);
  at::Tensor s = at::matmul(in.q, k.transpose(1, 2)) * scale;
  const int64_t tq = in.q.size(1);
  at::Tensor mask = at::arange(T).unsqueeze(0) > (at::arange(tq).unsqueeze(1) + first_pos);
  return at::matmul(at::softmax(s.masked_fill(mask, -INFINITY), -1), v);
}

TEST(RepairTest, ParameterCountsMatchTheSeedFormulas) {
  EXPECT_EQ(make(RepairOption::kA)->n_params(), 6 * D * R + 2 * R * R);
  EXPECT_EQ(make(RepairOption::kB)->n_params(), 4 * D * R + 4 * R * R);
  auto shared = make_repair_shared(D, H, R, 3);
  const int64_t L = 3;
  int64_t total = shared->n_params();
  for (int64_t l = 0; l < L; ++l) total += make(RepairOption::kC, shared, l)->n_params();
  EXPECT_EQ(total, 4 * D * R + 2 * (D * R + R * R) + H * R + L * R);
}

class RepairPathsTest : public ::testing::TestWithParam<RepairOption> {};

TEST_P(RepairPathsTest, FastPathEqualsTheMaterialisedReference) {
  auto op = make(GetParam());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (auto [tq, first] : {std::pair<int64_t, int64_t>{1, T - 1}, {5, T - 5}, {T, 0}}) {
    Inputs in = inputs(tq, 100 + tq);
    at::NoGradGuard ng;
    at::Tensor ref = op->attend_reference(in.q, in.k, in.v, first, scale);
    auto [kw, vw] = op->projections(in.k, in.v);
    at::Tensor fast = op->attend_fast(in.q, in.k, in.v, kw, vw, first, scale);
    EXPECT_LT((ref - fast).abs().max().item<double>(), 1e-5) << "tq " << tq;
    // and the repair really changes the output (a no-op would pass trivially)
    EXPECT_GT((ref - plain_attention(in, first, scale)).abs().max().item<double>(), 1e-4) << "tq " << tq;
  }
}

TEST_P(RepairPathsTest, NothingRepairedIsPlainAttention) {
  RepairConfig c;
  c.option = GetParam();
  c.rank = R;
  c.repair_k = c.repair_v = false;
  RepairLayer op(c, D, H, 0, 3, 5, GetParam() == RepairOption::kC ? make_repair_shared(D, H, R, 1) : nullptr);
  Inputs in = inputs(5, 9);
  at::NoGradGuard ng;
  const double scale = 0.25;
  EXPECT_LT((op.attend_reference(in.q, in.k, in.v, T - 5, scale) - plain_attention(in, T - 5, scale))
                .abs()
                .max()
                .item<double>(),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(Options, RepairPathsTest,
                         ::testing::Values(RepairOption::kA, RepairOption::kB, RepairOption::kC),
                         [](const auto& p) { return std::string(1, "ABC"[static_cast<int>(p.param)]); });

TEST(RepairTest, OptionBIsBoundedAndNeverGrowsARow) {
  auto op = make(RepairOption::kB);
  Inputs in = inputs(6, 3);
  at::NoGradGuard ng;
  auto [gk, gv] = op->gammas(in.q * 50);  // extreme queries
  const double amax = op->cfg().alpha_max;
  for (const at::Tensor& g : {gk, gv}) {
    EXPECT_GE(g.min().item<double>(), -1.0 - 1e-6);
    EXPECT_LE(g.max().item<double>(), amax - 1.0 + 1e-6);
  }
  // B orthonormal at initialisation: K̂ = K − B diag(1 − s) Bᵀ K only shrinks K's part in span(B)
  at::Tensor kh = op->repaired(in.k, gk, false, H);  // [H, Tq, T, D]
  at::Tensor kn = in.k.repeat_interleave(H / HKV, 0).unsqueeze(1).norm(2, -1);
  EXPECT_TRUE((kh.norm(2, -1) <= kn + 1e-4).all().item<bool>());
}

TEST(RepairTest, ContractionPenaltyIsZeroNearIdentityAndGrowsWithTheCorrection) {
  auto op = make(RepairOption::kA);
  Inputs in = inputs(3, 4);
  EXPECT_EQ(op->contraction_penalty(in.q, in.k, in.v).item<double>(), 0.0);  // U starts at 0.01 scale
  {
    at::NoGradGuard ng;
    for (at::Tensor& p : op->parameters())
      if (p.size(0) == D) p.mul_(100);  // W and U: a large correction
  }
  EXPECT_GT(op->contraction_penalty(in.q, in.k, in.v).item<double>(), 0.0);
}

TEST(RepairTest, GradientsOfEveryParameterMatchFiniteDifferences) {
  for (RepairOption o : {RepairOption::kA, RepairOption::kB, RepairOption::kC}) {
    auto shared = o == RepairOption::kC ? make_repair_shared(D, H, R, 7) : nullptr;
    auto op = make(o, shared);
    Inputs in = inputs(4, 21);
    const double scale = 0.25;
    auto loss = [&] {
      auto [kw, vw] = op->projections(in.k, in.v);
      at::Tensor out = op->attend_fast(in.q, in.k, in.v, kw, vw, T - 4, scale);
      return (out * out).sum() + op->contraction_penalty(in.q, in.k, in.v);
    };
    std::vector<at::Tensor> params = op->parameters();
    if (shared)  // option C: the shared matrices, gates and head embeddings too
      for (const at::Tensor& p : shared->parameters()) params.push_back(p);
    at::Tensor l = loss();
    std::vector<at::Tensor> grads =
        torch::autograd::grad({l}, params, {}, false, false, /*allow_unused=*/true);
    for (size_t i = 0; i < params.size(); ++i) {
      at::NoGradGuard ng;
      at::Tensor flat = params[i].view({-1});
      const int64_t j = flat.numel() / 2;
      const float h = 1e-2f, orig = flat[j].item<float>();
      flat[j] = orig + h;
      const double lp = loss().item<double>();
      flat[j] = orig - h;
      const double lm = loss().item<double>();
      flat[j] = orig;
      const double fd = (lp - lm) / (2 * h);
      const double ad = grads[i].defined() ? grads[i].view({-1})[j].item<double>() : 0.0;
      EXPECT_NEAR(ad, fd, 2e-2 * std::max(1.0, std::abs(fd)))
          << "option " << static_cast<int>(o) << " param " << i;
    }
  }
}

TEST(RepairTest, ParseOption) {
  EXPECT_EQ(*parse_repair_option("B"), RepairOption::kB);
  EXPECT_EQ(parse_repair_option("D").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frost
