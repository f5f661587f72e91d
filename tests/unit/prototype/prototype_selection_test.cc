// Prototype selection (core/prototype/selection.h) against brute-force transcriptions of the seed
// (docs/prototype.md): masked Gumbel picks, straight-through gradients, overlap,
// repulsion, k-means++ seeding and greedy finalize.
// The other prototype tests: prototype_config_test.cc, prototype_selection_test.cc, prototype_net_test.cc,
// prototype_trainer_test.cc.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "core/prototype/artifact.h"
#include "core/prototype/config.h"
#include "core/prototype/evaluate.h"
#include "core/prototype/features.h"
#include "core/prototype/metrics.h"
#include "core/prototype/net.h"
#include "core/prototype/predictor.h"
#include "core/prototype/residual_choice.h"
#include "core/prototype/selection.h"
#include "core/prototype/trainer.h"
#include "tests/testing/test_util.h"
#include "tests/unit/prototype/prototype_testing.h"

namespace frost::prototype {
namespace {

using frost::testing::TempDir;
using namespace frost::prototype::prototype_testing;  // NOLINT(build/namespaces)

// ------------------------------------------------------------------------------ selection

// The seed's Algorithm 3 inner loop, slot by slot, as written.
struct BruteSelection {
  std::vector<int64_t> hard;
  at::Tensor p;  // [K, T]
};
BruteSelection brute_select(const at::Tensor& slots, const at::Tensor& keys, int64_t T, double tau,
                            const at::Tensor& u) {
  const int64_t K = slots.size(0), N = keys.size(0);
  at::Tensor sbar = slots / (slots.norm(2, 1, true) + 1e-6);
  std::vector<bool> avail(static_cast<size_t>(N), true);
  BruteSelection out;
  out.p = at::zeros({K, T});
  for (int64_t k = 0; k < K; ++k) {
    at::Tensor logit = at::matmul(keys, sbar[k]);  // [N]
    at::Tensor I = std::get<1>(logit.topk(T));
    at::Tensor v = logit.index_select(0, I).clone();
    for (int64_t t = 0; t < T; ++t)
      if (!avail[static_cast<size_t>(I[t].item<int64_t>())]) v[t] = -std::numeric_limits<float>::infinity();
    at::Tensor g = -at::log(-at::log(u[k] + 1e-10) + 1e-10);
    at::Tensor p = at::softmax((v + g) / tau, 0);
    const int64_t t_star = p.argmax().item<int64_t>();
    const int64_t i_star = I[t_star].item<int64_t>();
    avail[static_cast<size_t>(i_star)] = false;
    out.hard.push_back(i_star);
    out.p[k] = p;
  }
  return out;
}

TEST(Selection, MaskedGumbelPicksAreUniqueAndMatchTheSequentialFormula) {
  // Slots drawn from 3 directions only, so many slots compete for the same candidates: without
  // the availability mask they would pick duplicates.
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const int64_t K = 12, N = 40, T = 16, d = 8;
    at::Generator g = gen(seed);
    at::Tensor keys = unit_rows(at::randn({N, d}, g));
    at::Tensor base = at::randn({3, d}, g);
    at::Tensor slots = base.index_select(0, at::randint(3, {K}, g)) + 0.01 * at::randn({K, d}, g);
    at::Tensor u = at::rand({K, T}, g);
    const double tau = 0.1 + 0.9 * static_cast<double>(seed % 10) / 9.0;
    Selection s = select_prototypes(slots, keys, T, tau, u, 1e-6, 1e-10);
    std::set<int64_t> uniq(s.hard.begin(), s.hard.end());
    ASSERT_EQ(static_cast<int64_t>(uniq.size()), K) << "seed " << seed;
    BruteSelection b = brute_select(slots, keys, T, tau, u);
    ASSERT_EQ(s.hard, b.hard) << "seed " << seed;
    EXPECT_TENSOR_NEAR(s.p, b.p, 1e-5);
    // straight-through weights are one-hot in value
    at::Tensor onehot = at::zeros({K, T}).scatter_(1, at::tensor(s.hard_t).view({K, 1}), 1.0);
    EXPECT_TENSOR_NEAR(s.w.detach(), onehot, 1e-6);
  }
}

TEST(Selection, StraightThroughGradientsReachTheSlots) {
  at::Generator g = gen(1);
  const int64_t K = 4, N = 20, T = 8, d = 6, F = 5;
  at::Tensor keys = unit_rows(at::randn({N, d}, g));
  at::Tensor slots = at::randn({K, d}, g).set_requires_grad(true);
  at::Tensor table = at::randn({N, F}, g);
  Selection s = select_prototypes(slots, keys, T, 0.5, at::rand({K, T}, g), 1e-6, 1e-10);
  at::Tensor out = weighted_rows(table, s.cand, s.w);  // [K, F]
  // forward value: exactly the hard-picked rows
  EXPECT_TENSOR_NEAR(out.detach(), table.index_select(0, at::tensor(s.hard)), 1e-5);
  (out * at::randn({K, F}, g)).sum().backward();
  ASSERT_TRUE(slots.grad().defined());
  EXPECT_GT(slots.grad().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(at::isfinite(slots.grad()).all().item<bool>());
}

TEST(Selection, WeightedRowsIsTheWeightedSumOfCandidateRows) {
  at::Generator g = gen(2);
  at::Tensor table = at::randn({10, 3}, g).set_requires_grad(true);
  at::Tensor cand = at::randint(10, {4, 5}, g);
  at::Tensor w = at::rand({4, 5}, g).set_requires_grad(true);
  at::Tensor got = weighted_rows(table, cand, w);
  at::Tensor want = (w.unsqueeze(-1) * table.index_select(0, cand.reshape({-1})).view({4, 5, 3})).sum(1);
  EXPECT_TENSOR_NEAR(got.detach(), want.detach(), 1e-6);
  at::Tensor r = at::randn({4, 3}, g);
  auto g1 = torch::autograd::grad({(got * r).sum()}, {table, w});
  auto g2 = torch::autograd::grad({(want * r).sum()}, {table, w});
  EXPECT_TENSOR_NEAR(g1[0], g2[0], 1e-5);
  EXPECT_TENSOR_NEAR(g1[1], g2[1], 1e-5);
}

TEST(Selection, OverlapEqualsPairwiseCollisionProbability) {
  at::Generator g = gen(3);
  const int64_t K = 6, N = 15, T = 7;
  // candidate sets that overlap
  at::Tensor cand = at::empty({K, T}, at::kLong);
  for (int64_t k = 0; k < K; ++k) cand[k] = at::randperm(N, g).narrow(0, 0, T);
  at::Tensor p = at::softmax(at::randn({K, T}, g), 1);
  double brute = 0;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = k + 1; j < K; ++j)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < T; ++s)
          if (cand[k][t].item<int64_t>() == cand[j][s].item<int64_t>())
            brute += p[k][t].item<double>() * p[j][s].item<double>();  // P(both slots draw index i)
  brute *= 2.0 / static_cast<double>(K * (K - 1));
  EXPECT_NEAR(overlap_loss(cand, p, N).item<double>(), brute, 1e-6);
  // disjoint candidate sets never collide
  at::Tensor disjoint = at::arange(K * T).view({K, T});
  EXPECT_NEAR(overlap_loss(disjoint, p, K * T).item<double>(), 0.0, 1e-9);
}

TEST(Selection, RepulsionIsTheMeanCosineHinge) {
  at::Generator g = gen(4);
  const int64_t K = 5, N = 12, T = 6, d = 4;
  at::Tensor keys = unit_rows(at::randn({N, d}, g));
  at::Tensor cand = at::empty({K, T}, at::kLong);
  for (int64_t k = 0; k < K; ++k) cand[k] = at::randperm(N, g).narrow(0, 0, T);
  at::Tensor p = at::softmax(at::randn({K, T}, g), 1);
  const double m_cos = 0.2;
  std::vector<at::Tensor> kt;
  for (int64_t k = 0; k < K; ++k) {
    at::Tensor e = at::zeros({d});
    for (int64_t t = 0; t < T; ++t) e += p[k][t] * keys[cand[k][t].item<int64_t>()];
    kt.push_back(e / (e.norm() + 1e-6));
  }
  double brute = 0;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = k + 1; j < K; ++j) brute += std::max(0.0, at::dot(kt[k], kt[j]).item<double>() - m_cos);
  brute *= 2.0 / static_cast<double>(K * (K - 1));
  EXPECT_NEAR(repulsion_loss(cand, p, keys, m_cos, 1e-6).item<double>(), brute, 1e-5);
  // orthogonal expected keys sit below the margin: zero loss
  at::Tensor eye = at::eye(4);
  at::Tensor c4 = at::arange(4).view({4, 1});
  EXPECT_NEAR(repulsion_loss(c4, at::ones({4, 1}), eye, m_cos, 1e-6).item<double>(), 0.0, 1e-9);
  // identical ones pay 1 - m_cos per pair
  at::Tensor same = at::zeros({4, 1}, at::kLong);
  EXPECT_NEAR(repulsion_loss(same, at::ones({4, 1}), eye, m_cos, 1e-6).item<double>(), 1.0 - m_cos, 1e-5);
}

TEST(Selection, KmeansppSeedsEveryClusterAndNeverRepeats) {
  // Three tight clusters of unit keys: the first three k-means++ picks land one in each, for
  // every seed (a pick inside a cluster leaves its members with D² ≈ 0).
  at::Generator g = gen(30);
  at::Tensor centers = unit_rows(at::randn({3, 16}, g));
  at::Tensor keys =
      unit_rows(centers.repeat({20, 1}) + 0.01 * at::randn({60, 16}, g));  // row i: cluster i % 3
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::vector<int64_t> idx = kmeanspp_indices(keys, 3, gen(seed));
    std::set<int64_t> clusters;
    for (int64_t i : idx) clusters.insert(i % 3);
    EXPECT_EQ(clusters.size(), 3u) << "seed " << seed;
  }
  // Identical keys (D² = 0 everywhere): still K distinct rows.
  std::vector<int64_t> same = kmeanspp_indices(unit_rows(at::ones({6, 4})), 6, gen(1));
  EXPECT_EQ(std::set<int64_t>(same.begin(), same.end()).size(), 6u);
  // A pure function of the keys and the generator's seed.
  EXPECT_EQ(kmeanspp_indices(keys, 10, gen(4)), kmeanspp_indices(keys, 10, gen(4)));
}

TEST(Selection, FinalizeIsGreedyMaskedDecoding) {
  at::Generator g = gen(5);
  at::Tensor keys = unit_rows(at::randn({30, 5}, g));
  at::Tensor base = at::randn({1, 5}, g);
  at::Tensor slots = base.repeat({10, 1}) + 0.001 * at::randn({10, 5}, g);  // all want the same key
  std::vector<int64_t> got = finalize_prototypes(slots, keys, 1e-6);
  std::set<int64_t> uniq(got.begin(), got.end());
  EXPECT_EQ(uniq.size(), 10u);
  at::Tensor logits = at::matmul(slots / (slots.norm(2, 1, true) + 1e-6), keys.t());
  std::set<int64_t> taken;
  for (int64_t k = 0; k < 10; ++k) {
    at::Tensor l = logits[k].clone();
    for (int64_t i : taken) l[i] = -1e9;
    const int64_t best = l.argmax().item<int64_t>();
    EXPECT_EQ(got[static_cast<size_t>(k)], best);
    taken.insert(best);
  }
}

}  // namespace
}  // namespace frost::prototype
