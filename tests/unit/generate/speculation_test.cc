// The speculation policy (core/generate/speculation.h): the step-cost fit, the draft length it gives for an
// acceptance rate and a threshold, and the probes of a sequence whose drafts do not pay.
#include "core/generate/speculation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace frost {
namespace {

TEST(RoundCostTest, FitsAFixedAndAPerRowCost) {
  RoundCost c;
  EXPECT_EQ(c.threshold(1, 1, 0.3), 0.3) << "the fallback until rows vary";
  for (int i = 0; i < 200; ++i) {
    const int64_t rows = 1 + i % 5;
    c.observe(rows, 1e-3 + 1e-4 * static_cast<double>(rows));
  }
  EXPECT_NEAR(c.fixed_s(), 1e-3, 1e-6);
  EXPECT_NEAR(c.per_row_s(), 1e-4, 1e-7);
  EXPECT_NEAR(c.threshold(1, 1, 0.3), 1e-4 / 1.1e-3, 1e-3);   // batch 1: b / (a + b)
  EXPECT_NEAR(c.threshold(32, 32, 0.3), 3.2e-3 / 4.2e-3, 1e-3);  // a large batch: nearly 1
}

// A busy machine: one round in twenty loses a time slice (4 ms against rounds of ~1 ms), more often the
// larger rounds (they last longer). The fit still finds the rounds' own cost, so θ stays where it was.
TEST(RoundCostTest, PreemptedRoundsDoNotMoveTheFit) {
  RoundCost c;
  for (int i = 0; i < 2000; ++i) {
    const int64_t rows = 1 + i % 5;
    const bool preempted = i >= 200 && (i * 7919) % 20 < (rows >= 4 ? 2 : 1);
    c.observe(rows, 1e-3 + 1e-4 * static_cast<double>(rows) + (preempted ? 4e-3 : 0.0));
  }
  EXPECT_NEAR(c.per_row_s(), 1e-4, 1e-5);
  EXPECT_NEAR(c.threshold(1, 1, 0.3), 1e-4 / 1.1e-3, 0.01);
  // A lasting change is not an outlier: rounds that now cost 3x are taken after a short streak.
  for (int i = 0; i < 400; ++i) {
    const int64_t rows = 1 + i % 5;
    c.observe(rows, 3e-3 + 3e-4 * static_cast<double>(rows));
  }
  EXPECT_NEAR(c.per_row_s(), 3e-4, 3e-5);
  EXPECT_NEAR(c.fixed_s(), 3e-3, 3e-4);
}

// Drafting happens in the rounds that draft: a drafter catching up after a pause makes a round with more rows
// slower for a reason that is not its rows. The fit leaves the drafting out (b is the rows' own cost) and θ
// counts its average back into what a round is worth.
TEST(RoundCostTest, DraftingTimeIsNotReadAsPerRowCost) {
  RoundCost c;
  double d_sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t rows = 1 + i % 5;
    const double drafting = rows > 1 ? 5e-4 : 0.0;  // a catch-up with every draft
    d_sum += drafting;
    c.observe(rows, 1e-3 + 1e-4 * static_cast<double>(rows) + drafting, drafting);
  }
  EXPECT_NEAR(c.per_row_s(), 1e-4, 1e-6);
  EXPECT_NEAR(c.fixed_s(), 1e-3, 1e-5);
  EXPECT_NEAR(c.draft_s(), d_sum / 2000, 2e-5);
  EXPECT_NEAR(c.threshold(1, 1, 0.3), 1e-4 / (1.1e-3 + c.draft_s()), 1e-3);
}

TEST(RoundCostTest, RowsThatNeverVaryKeepTheLastFit) {
  RoundCost c;
  for (int i = 0; i < 100; ++i) c.observe(1, 2e-3);
  EXPECT_EQ(c.threshold(1, 1, 0.25), 0.25) << "never fitted: the fallback";
  for (int i = 0; i < 100; ++i) c.observe(1 + i % 3, 1e-3 + 1e-3 * (1 + i % 3));
  const double fitted = c.threshold(1, 1, 0.25);
  EXPECT_NEAR(fitted, 0.5, 1e-3);
  for (int i = 0; i < 400; ++i) c.observe(1, 2e-3);  // no drafts for a while: the spread decays away
  EXPECT_NEAR(c.threshold(1, 1, 0.25), fitted, 1e-3) << "the last fit stands";
}

// What a busy machine's 32 streams look like (issue 54): rows 32 or 33 (a probe now and then), round times
// ~10 ms ± 1.5 ms of noise from other work. The slope of that noise is no per-row cost: it must not become a
// fit (the unchecked fit's slope here is ~0 or negative, clamped to 1e-9: θ ≈ 0, draft every step). The same
// noise over rows that vary widely (batch 1 with drafts: 1-5 rows of 2 ms each) still fits.
TEST(RoundCostTest, NoiseWithoutASlopeIsNoFit) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 1.5e-3);
  RoundCost c;
  for (int i = 0; i < 400; ++i) {
    const int64_t rows = 32 + (i % 7 == 0 ? 1 : 0);
    c.observe(rows, 0.3e-3 * static_cast<double>(rows) + noise(rng));
  }
  EXPECT_EQ(c.threshold(32, 32, 0.3), 0.3) << "never fitted: the fallback, not θ ≈ 0";
  EXPECT_EQ(c.per_row_s(), 0);
  RoundCost d;
  for (int i = 0; i < 400; ++i) {
    const int64_t rows = 1 + i % 5;
    d.observe(rows, 1e-3 + 2e-3 * static_cast<double>(rows) + noise(rng));
  }
  EXPECT_NEAR(d.per_row_s(), 2e-3, 0.5e-3);
  EXPECT_NEAR(d.threshold(1, 1, 0.3), 2.0 / 3.0, 0.1);
}

TEST(SpeculationTest, DraftsWhileTheExpectedYieldBeatsTheThreshold) {
  Speculation s(SpecMethod::kNgram, 6, 512, nullptr);
  EXPECT_NEAR(s.acceptance(), 0.5, 1e-12);  // the prior
  EXPECT_EQ(s.length(0.3), 1);              // 0.5 > 0.3, 0.25 < 0.3
  EXPECT_EQ(s.length(0.0), 6) << "θ = 0 (not adaptive): always k";
  for (int i = 0; i < 20; ++i) s.record(4, 4);  // everything accepted: α → 1
  const double alpha = s.acceptance();
  EXPECT_GT(alpha, 0.9);
  const int32_t n = s.length(0.5);
  EXPECT_EQ(n, std::min(6, static_cast<int32_t>(std::floor(std::log(0.5) / std::log(alpha)))));
  EXPECT_GT(n, 3);
}

TEST(SpeculationTest, ASequenceWhoseDraftsFailOnlyProbesAndBacksOff) {
  Speculation s(SpecMethod::kNgram, 4, 512, nullptr);
  for (int i = 0; i < 10; ++i) s.record(4, 0);  // α → small
  ASSERT_LT(s.acceptance(), 0.1);
  // θ = 0.8: nothing is worth drafting; a one-token probe every 4 steps, the gap doubling while probes fail.
  int probes = 0, steps = 0, last = 0;
  std::vector<int> gaps;
  for (; steps < 400; ++steps) {
    const int32_t n = s.length(0.8);
    ASSERT_LE(n, 1);
    if (n == 1) {
      ++probes;
      gaps.push_back(steps - last);
      last = steps;
      s.record(1, 0);
    }
  }
  ASSERT_GE(gaps.size(), 4u);
  EXPECT_LE(gaps.back(), 64);
  EXPECT_GE(gaps.back(), 32);
  EXPECT_LT(probes, 400 / 20) << "at most one wasted row every ~32 steps once backed off";
  // A probe that is accepted brings the sequence back.
  for (int i = 0; i < 6; ++i) s.record(1, 1);
  EXPECT_GT(s.acceptance(), 0.6);
  EXPECT_GE(s.length(0.5), 1);
}

}  // namespace
}  // namespace frost
