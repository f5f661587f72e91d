#include "core/generate/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/common/config_fields.h"
#include "core/common/field_error.h"
#include "core/generate/sampling_params.h"
#include "kernels/cpu/exp.h"

namespace frost {
namespace {

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// How often each id is drawn in `n` samples.
std::vector<int> draw_counts(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) counts.at(s.sample(logits.data()).id)++;
  return counts;
}

// Pearson chi-square of `counts` against `probs` (ids with probability 0 must be unseen).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs) {
  double n = 0;
  for (int c : counts) n += c;
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "id " << i << " has probability 0";
      continue;
    }
    const double expected = n * probs[i];
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double sum = 0;
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(sum));
  return out;
}

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  {
    Sampler s(p, 4);
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
    EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
  {
    Sampler s(p, 4);
    const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f};
    EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
  {
    Sampler s(p, 3);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> logits = {nan, -5.0f, nan};
    EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
}

TEST(SamplerTest, SampleDoesNotModifyLogits) {
  SamplingParams p = seeded(1);
  p.top_k = 2;
  p.top_p = 0.9f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  Sampler s(p, 5);
  s.add_prompt({0, 3});
  const std::vector<float> logits = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f};
  std::vector<float> copy = logits;
  for (int i = 0; i < 10; ++i) s.sample(copy.data());
  EXPECT_EQ(copy, logits);
}

TEST(SamplerTest, TemperatureOneMatchesSoftmax) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  Sampler s(seeded(42), 4);
  const auto counts = draw_counts(s, logits_of(probs), 40000);
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. The seed is fixed, so this is not flaky.
  EXPECT_LT(chi_square(counts, probs), 16.27);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  for (float t : {0.5f, 2.0f}) {
    SamplingParams p = seeded(7);
    p.temperature = t;
    Sampler s(p, 4);
    // softmax(log(p) / T) ∝ p^(1/T)
    std::vector<double> expected;
    double z = 0;
    for (double q : probs) z += std::pow(q, 1.0 / t);
    for (double q : probs) expected.push_back(std::pow(q, 1.0 / t) / z);
    const auto counts = draw_counts(s, logits_of(probs), 40000);
    EXPECT_LT(chi_square(counts, expected), 16.27) << "T=" << t;
    // And the plain softmax is clearly rejected, so the check has power.
    EXPECT_GT(chi_square(counts, probs), 100.0) << "T=" << t;
  }
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  const std::vector<float> flat(100, 0.0f);
  auto run = [&](uint64_t seed) {
    Sampler s(seeded(seed), 100);
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(s.sample(flat.data()).id);
    return ids;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
  Sampler s(seeded(99), 100);
  EXPECT_EQ(s.seed(), 99u);
}

TEST(SamplerTest, FixedSeedFollowsDocumentedDraw) {
  // The platform-independent RNG path (mt19937_64 + our own uniform double + inverse CDF in
  // id order): a change of generator, draw or candidate order shows up here.
  std::vector<float> logits(16);
  for (int i = 0; i < 16; ++i) logits[i] = 0.25f * static_cast<float>(i % 5);
  Sampler a(seeded(2024), 16);
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(a.sample(logits.data()).id);
  // Reference: the same computation done by hand — uniform u = (mt19937_64() >> 11) * 2^-53,
  // inverse CDF over ids in ascending order.
  std::mt19937_64 rng(2024);
  std::vector<double> w;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - 1.0);
  for (float l : logits) w.push_back(std::exp(static_cast<double>(l) - 1.0) / z);
  std::vector<int32_t> expected;
  for (int i = 0; i < 12; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double cum = 0;
    int32_t id = 15;
    for (int32_t j = 0; j < 16; ++j) {
      cum += w[j];
      if (cum > u) {
        id = j;
        break;
      }
    }
    expected.push_back(id);
  }
  EXPECT_EQ(ids, expected);
}

TEST(SamplerTest, DominantTokenIsDrawnWhereverItSits) {
  // A vocabulary the size of a real one, logits over a wide range, NaNs scattered, and one token 100 above
  // the rest: temperature sampling must find the true maximum (a smaller one would overflow exp) and draw
  // that token every time, whether it sits in the vectorised body of the scan or its tail.
  const int32_t V = 1000;
  for (int32_t at : {0, 7, 15, 16, 500, 991, 992, 999}) {
    std::vector<float> logits(V);
    for (int32_t i = 0; i < V; ++i) logits[i] = static_cast<float>((i * 37) % 100);
    for (int32_t i = 3; i < V; i += 97) logits[i] = std::numeric_limits<float>::quiet_NaN();
    logits[at] = 200.0f;
    Sampler s(seeded(5), V);
    for (int k = 0; k < 20; ++k) ASSERT_EQ(s.sample(logits.data()).id, at) << "dominant token at " << at;
  }
}

TEST(SamplerTest, TopK1EqualsGreedy) {
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(50);
    for (float& l : logits) l = static_cast<float>(gen() % 1000) / 100.0f;
    logits[17] = logits[3] = 11.0f;  // a tie at the top: lowest id wins
    SamplingParams p = seeded(static_cast<uint64_t>(trial));
    p.top_k = 1;
    p.temperature = 1.5f;
    Sampler s(p, 50);
    SamplingParams g;
    g.temperature = 0.0f;
    Sampler greedy(g, 50);
    EXPECT_EQ(s.sample(logits.data()).id, 3);
    EXPECT_EQ(greedy.sample(logits.data()).id, 3);
  }
}

TEST(SamplerTest, TopKKeepsTheKLargest) {
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.3, 0.15};
  SamplingParams p = seeded(11);
  p.top_k = 2;
  Sampler s(p, 5);
  const auto counts = draw_counts(s, logits_of(probs), 20000);
  // Renormalized over {1, 3}: 4/7 and 3/7.
  EXPECT_LT(chi_square(counts, {0, 4.0 / 7, 0, 3.0 / 7, 0}), 10.83);  // 1 dof, p = 0.001
}

TEST(SamplerTest, TopKOnLargeVocab) {
  const int32_t n_vocab = 32000;
  std::vector<float> logits(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) {
    logits[i] = static_cast<float>((i * 7919) % n_vocab) / 1000.0f;
  }
  SamplingParams p = seeded(3);
  p.top_k = 5;
  Sampler s(p, n_vocab);
  // The five largest values are 31.995..31.999, at ids with (i * 7919) % V >= 31995.
  for (int i = 0; i < 200; ++i) {
    const int32_t id = s.sample(logits.data()).id;
    EXPECT_GE((id * 7919) % n_vocab, 31995) << id;
  }
}

TEST(SamplerTest, TopPKeepsMinimalNucleus) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};
  struct Case {
    float top_p;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {0.4f, {0, 1, 0, 0}},                   // 0.5 alone covers 0.4
      {0.75f, {0, 0.5 / 0.8, 0, 0.3 / 0.8}},  // 0.5 + 0.3
      {0.9f, {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}},
      {0.99f, probs},
  };
  for (const Case& c : cases) {
    SamplingParams p = seeded(17);
    p.top_p = c.top_p;
    Sampler s(p, 4);
    const auto counts = draw_counts(s, logits_of(probs), 20000);
    EXPECT_LT(chi_square(counts, c.expected), 16.27) << "top_p=" << c.top_p;
  }
}

TEST(SamplerTest, TopPOnLargeVocabSortsAsFarAsNeeded) {
  // 100 tokens with logit 10 (ids 1000..1099) and 4900 with logit 0: the nucleus for 0.9 is
  // the smallest n with n * e^10 >= 0.9 * total, taken from the tied block by lowest id.
  const int32_t n_vocab = 5000;
  std::vector<float> logits(n_vocab, 0.0f);
  for (int32_t i = 1000; i < 1100; ++i) logits[i] = 10.0f;
  const double e10 = std::exp(10.0);
  const double total = 100 * e10 + 4900;
  const int expected_n = static_cast<int>(std::ceil(static_cast<double>(0.9f) * total / e10));
  ASSERT_GT(expected_n, 64);  // beyond the first partial sort
  ASSERT_LT(expected_n, 100);
  SamplingParams p = seeded(8);
  p.top_p = 0.9f;
  Sampler s(p, n_vocab);
  int32_t lo = n_vocab, hi = -1;
  for (int i = 0; i < 4000; ++i) {
    const int32_t id = s.sample(logits.data()).id;
    lo = std::min(lo, id);
    hi = std::max(hi, id);
  }
  EXPECT_EQ(lo, 1000);
  EXPECT_EQ(hi, 1000 + expected_n - 1);
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};
  {
    SamplingParams p = seeded(21);
    p.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
    Sampler s(p, 4);
    const auto counts = draw_counts(s, logits_of(probs), 20000);
    EXPECT_LT(chi_square(counts, {0, 0.5 / 0.8, 0, 0.3 / 0.8}), 10.83);
  }
  {
    SamplingParams p = seeded(22);
    p.min_p = 0.2f;  // threshold 0.1: drops only 0.05
    Sampler s(p, 4);
    const auto counts = draw_counts(s, logits_of(probs), 20000);
    EXPECT_LT(chi_square(counts, {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}), 13.82);  // 2 dof
  }
  {
    SamplingParams p = seeded(23);
    p.min_p = 1.0f;  // only the max
    Sampler s(p, 4);
    const auto counts = draw_counts(s, logits_of(probs), 1000);
    EXPECT_EQ(counts[1], 1000);
  }
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p;
  p.temperature = 0.0f;
  {
    Sampler plain(p, 3);
    const std::vector<float> logits = {2.0f, 1.5f, -1.0f};
    EXPECT_EQ(plain.sample(logits.data()).id, 0);
  }
  p.repetition_penalty = 2.0f;
  {
    // Prompt tokens count: 2.0 / 2 = 1.0 < 1.5.
    Sampler s(p, 3);
    s.add_prompt({0});
    const std::vector<float> logits = {2.0f, 1.5f, -1.0f};
    EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
  {
    // Negative logits are multiplied: -0.5 * 2 = -1.0 < -0.6. (Dividing would raise it.)
    Sampler s(p, 3);
    s.add_prompt({0, 0, 0});  // repeats count once
    const std::vector<float> logits = {-0.5f, -0.6f, -3.0f};
    EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
  {
    // Generated tokens count too: 3 → 1.5 after the first pick, below 2.0.
    Sampler s(p, 3);
    const std::vector<float> logits = {3.0f, 2.0f, -1.0f};
    EXPECT_EQ(s.sample(logits.data()).id, 0);
    EXPECT_EQ(s.sample(logits.data()).id, 1);
    EXPECT_EQ(s.sample(logits.data()).id, 0);  // 1.5 vs 1.0, once each
  }
}

TEST(SamplerTest, PresencePenaltyCountsGeneratedTokensOnce) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 1.0f;
  Sampler s(p, 2);
  s.add_prompt({0, 0, 0});  // the prompt does not count for presence
  const std::vector<float> logits = {2.0f, 1.5f};
  std::vector<int32_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(s.sample(logits.data()).id);
  // 2.0 | 1.0 vs 1.5 | 1.0 vs 0.5 | 1.0 vs 0.5
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0, 0}));
}

TEST(SamplerTest, FrequencyPenaltyGrowsWithCount) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 0.8f;
  Sampler s(p, 2);
  const std::vector<float> logits = {3.0f, 1.0f};
  std::vector<int32_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(s.sample(logits.data()).id);
  // 3.0 | 2.2 | 1.4 | 0.6 vs 1.0 | 0.6 vs 0.2
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 0, 0, 1, 0}));
}

TEST(SamplerTest, LogprobsAreLogSoftmaxOfRawLogits) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, 2.0f};
  const auto expected = log_softmax(logits);
  SamplingParams p = seeded(4);
  p.logprobs = 3;
  p.temperature = 0.3f;  // none of these change the reported logprobs
  p.repetition_penalty = 5.0f;
  p.top_k = 2;
  Sampler s(p, 5);
  s.add_prompt({2});
  for (int i = 0; i < 20; ++i) {
    const SampledToken t = s.sample(logits.data());
    EXPECT_NEAR(t.logprob, expected[t.id], 1e-6);
    ASSERT_EQ(t.top.size(), 3u);
    // Sorted descending; the 2.0 tie lists id 1 before id 4.
    EXPECT_EQ(t.top[0].id, 2);
    EXPECT_EQ(t.top[1].id, 1);
    EXPECT_EQ(t.top[2].id, 4);
    for (const TokenLogprob& lp : t.top) EXPECT_NEAR(lp.logprob, expected[lp.id], 1e-6);
  }
}

TEST(SamplerTest, LogprobsOffOrOnlySampled) {
  const std::vector<float> logits = {0.0f, 1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  {
    Sampler s(p, 2);  // logprobs = -1
    const SampledToken t = s.sample(logits.data());
    EXPECT_EQ(t.logprob, 0.0f);
    EXPECT_TRUE(t.top.empty());
  }
  p.logprobs = 0;
  {
    Sampler s(p, 2);
    const SampledToken t = s.sample(logits.data());
    EXPECT_EQ(t.id, 1);
    EXPECT_NEAR(t.logprob, -std::log1p(std::exp(-1.0)), 1e-6);
    EXPECT_TRUE(t.top.empty());
  }
  p.logprobs = 20;  // more than V: clamped
  {
    Sampler s(p, 2);
    EXPECT_EQ(s.sample(logits.data()).top.size(), 2u);
  }
}

TEST(SamplerTest, LogprobsStableForLargeLogits) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  Sampler s(p, 3);
  const SampledToken t = s.sample(logits.data());
  EXPECT_EQ(t.id, 0);
  EXPECT_NEAR(t.logprob, -std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(t.top[1].logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_TRUE(std::isfinite(t.top[2].logprob));
}

TEST(SamplerTest, DegenerateLogitsStillSample) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  {
    // NaN is -inf: ids 1 and 3 share the mass, 0 and 2 never come up.
    Sampler s(seeded(1), 4);
    const std::vector<float> logits = {nan, 0.5f, nan, 0.4f};
    const auto counts = draw_counts(s, logits, 400);
    EXPECT_EQ(counts[0] + counts[2], 0);
    EXPECT_GT(counts[1], 100);
    EXPECT_GT(counts[3], 100);
  }
  {
    Sampler s(seeded(1), 3);
    const std::vector<float> logits = {-inf, -inf, -inf};
    const int32_t id = s.sample(logits.data()).id;
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 3);
  }
  {
    SamplingParams p = seeded(1);
    p.temperature = 1e-30f;  // tiny but valid: behaves like greedy, no NaN
    Sampler s(p, 3);
    const std::vector<float> logits = {0.1f, 0.3f, 0.2f};
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits.data()).id, 1);
  }
}

// Constrained rows (sampler.cc sample_sparse): sampled over the allowed ids alone where few are, they get the
// dense reference's token (the whole row copied with refused logits at -inf) from the same seed, step after
// step — so the RNG advanced alike — on a 32,000-token vocabulary (builtin:15m's) with masks from one token
// to every token (the dense path takes those over 1/8), logits with ties, NaN, -inf and +inf among the
// allowed ids; greedy, plain temperature, with logprobs, and with truncation (dense both ways: checked all
// the same).
TEST(SamplerTest, SparseMaskedSamplingDrawsTheDenseReferencesTokens) {
  const int32_t V = 32000;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  struct Variant {
    const char* name;
    float temperature;
    int32_t top_k;
    int32_t logprobs;
  } variants[] = {{"greedy", 0.0f, 0, -1},
                  {"t=0.8", 0.8f, 0, -1},
                  {"t=1.7", 1.7f, 0, -1},
                  {"t=0.8 top_k", 0.8f, 40, -1},
                  {"t=0.8 logprobs", 0.8f, 0, 2}};
  int sparse_draws = 0;
  for (double share : {0.0, 0.0005, 0.01, 0.05, 0.12, 0.2, 1.0}) {
    for (int round = 0; round < 3; ++round) {
      std::vector<float> logits(V);
      for (float& l : logits) l = normal(rng);
      std::vector<uint32_t> mask((V + 31) / 32, 0u);
      int32_t n_allowed = 0;
      for (int32_t i = 0; i < V; ++i)
        if (unit(rng) < share) {
          mask[i / 32] |= 1u << (i % 32);
          ++n_allowed;
        }
      if (n_allowed == 0) mask[12345 / 32] |= 1u << (12345 % 32);  // one token: what jump-forward meets
      int32_t k = 0;
      for (int32_t i = 0; i < V && round > 0; ++i) {
        if (!((mask[i / 32] >> (i % 32)) & 1u)) continue;
        if (round == 1 && k % 3 == 0) logits[i] = 1.25f;  // ties, and degenerate values among the allowed ids
        if (round == 1 && k % 7 == 1) logits[i] = nan;
        if (round == 1 && k % 11 == 2) logits[i] = -inf;
        if (round == 2 && k == 0) logits[i] = inf;  // greedy takes it; a draw goes down the general path
        ++k;
      }
      for (const Variant& v : variants) {
        SamplingParams p = seeded(42 + round);
        p.temperature = v.temperature;
        p.top_k = v.top_k;
        p.logprobs = v.logprobs;
        Sampler fast(p, V), dense(p, V);
        dense.set_sparse_masks(false);
        for (int step = 0; step < 40; ++step) {
          const SampledToken a = fast.sample(logits.data(), mask.data());
          const SampledToken b = dense.sample(logits.data(), mask.data());
          ASSERT_EQ(a.id, b.id) << v.name << ", share " << share << ", round " << round << ", step " << step;
          ASSERT_TRUE((mask[a.id / 32] >> (a.id % 32)) & 1u) << "token " << a.id << " is not allowed";
          EXPECT_EQ(a.logprob, b.logprob);
          sparse_draws += share <= 0.12 && v.top_k == 0 ? 1 : 0;
        }
      }
    }
  }
  EXPECT_GT(sparse_draws, 1000);
  // Every allowed logit degenerate: the dense path's rules (argmax 0, the general path) decide both ways.
  std::vector<float> degenerate(V, 0.5f);
  std::vector<uint32_t> few((V + 31) / 32, 0u);
  for (int32_t i : {5, 700, 31999}) {
    few[i / 32] |= 1u << (i % 32);
    degenerate[i] = i == 700 ? nan : -inf;
  }
  for (float t : {0.0f, 0.8f}) {
    SamplingParams p = seeded(3);
    p.temperature = t;
    Sampler fast(p, V), dense(p, V);
    dense.set_sparse_masks(false);
    for (int step = 0; step < 10; ++step)
      EXPECT_EQ(fast.sample(degenerate.data(), few.data()).id,
                dense.sample(degenerate.data(), few.data()).id);
  }
}

// ---- validation ----

TEST(SamplingParamsTest, DefaultsAreValidAndOff) {
  const SamplingParams p;
  EXPECT_TRUE(validate_sampling_params(p, 100).ok());
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.min_p, 0.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_EQ(p.presence_penalty, 0.0f);
  EXPECT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_EQ(p.max_new_tokens, 256);
  EXPECT_FALSE(p.ignore_eos);
  EXPECT_EQ(p.logprobs, -1);
}

TEST(SamplingParamsTest, AcceptsBoundaryValues) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1000;  // larger than the vocabulary: same as off
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_new_tokens = 4096;
  p.stop = {"é", std::string(256, 'x')};
  p.stop_token_ids = {0, 99};
  p.logprobs = 20;
  EXPECT_TRUE(validate_sampling_params(p, 100).ok()) << validate_sampling_params(p, 100);
}

// SamplingParams' table (frost-bench's sampling flags) and validate_sampling_params share their ranges: a
// value the table refuses, validate refuses with the same range; the edge the table takes, validate takes.
TEST(SamplingParamsTest, TheTableAndValidateAgree) {
  struct Case {
    const char* key;
    const char* bad;
    std::function<void(SamplingParams&)> set_bad;
    const char* edge;
  };
  const std::vector<Case> cases = {
      {"temperature", "-0.5", [](SamplingParams& p) { p.temperature = -0.5f; }, "0"},
      {"top_k", "-1", [](SamplingParams& p) { p.top_k = -1; }, "0"},
      {"top_p", "0", [](SamplingParams& p) { p.top_p = 0; }, "1"},
      {"min_p", "1.5", [](SamplingParams& p) { p.min_p = 1.5f; }, "1"},
      {"repetition_penalty", "0", [](SamplingParams& p) { p.repetition_penalty = 0; }, "0.01"},
      {"presence_penalty", "2.5", [](SamplingParams& p) { p.presence_penalty = 2.5f; }, "2"},
      {"frequency_penalty", "-3", [](SamplingParams& p) { p.frequency_penalty = -3; }, "-2"},
      {"max_new_tokens", "0", [](SamplingParams& p) { p.max_new_tokens = 0; }, "1"},
      {"logprobs", "-2", [](SamplingParams& p) { p.logprobs = -2; }, "-1"},
  };
  const ConfigTable<SamplingParams>& table = sampling_params_table();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    SamplingParams p;
    const absl::Status refused = table.set(p, c.key, c.bad);
    ASSERT_FALSE(refused.ok());
    SamplingParams q;
    c.set_bad(q);
    const absl::Status invalid = validate_sampling_params(q, 100);
    ASSERT_FALSE(invalid.ok());
    // One range, one message: validate checks through the table's rows ("top_p: must be in (0, 1], got 0"
    // both ways); max_new_tokens and logprobs add the server's upper limit to the range.
    const std::string range = table.find(c.key)->range.substr(std::string("must be ").size());
    EXPECT_TRUE(absl::StrContains(refused.message(), range)) << refused;
    if (std::string(c.key) != "max_new_tokens" && std::string(c.key) != "logprobs") {
      EXPECT_EQ(invalid.message(), refused.message());
    }
    EXPECT_TRUE(absl::StartsWith(invalid.message(), c.key)) << invalid;
    ASSERT_TRUE(table.set(p, c.key, c.edge).ok());
    EXPECT_TRUE(validate_sampling_params(p, 100).ok()) << validate_sampling_params(p, 100);
  }
  // Every plain field has a row; the dump shows floats by their own shortest text.
  SamplingParams d;
  d.top_p = 0.9f;
  d.seed = 3;
  EXPECT_EQ(
      table.to_json(d).dump(),
      R"({"temperature":1.0,"top_k":0,"top_p":0.9,"min_p":0.0,"repetition_penalty":1.0,)"
      R"("presence_penalty":0.0,"frequency_penalty":0.0,"seed":3,"max_new_tokens":256,"ignore_eos":false,)"
      R"("logprobs":-1})");
}

TEST(SamplingParamsTest, RejectsEachBadFieldWithNameAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, "temperature: must be >= 0, got -0.5"},
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature: expected a finite number, got nan"},
      {[&](SamplingParams& p) { p.temperature = inf; }, "temperature: expected a finite number, got inf"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k: must be >= 0, got -1"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p: must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p: must be in (0, 1], got 0"},
      {[&](SamplingParams& p) { p.top_p = nan; }, "top_p: expected a finite number, got nan"},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, "min_p: must be in [0, 1], got -0.1"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p: must be in [0, 1], got 1.5"},
      {[&](SamplingParams& p) { p.min_p = nan; }, "min_p: expected a finite number, got nan"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty: must be > 0, got 0"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty: must be > 0, got -1"},
      {[&](SamplingParams& p) { p.repetition_penalty = nan; },
       "repetition_penalty: expected a finite number, got nan"},
      {[&](SamplingParams& p) { p.repetition_penalty = inf; },
       "repetition_penalty: expected a finite number, got inf"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty: must be in [-2, 2], got 2.5"},
      {[&](SamplingParams& p) { p.presence_penalty = nan; },
       "presence_penalty: expected a finite number, got nan"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; },
       "frequency_penalty: must be in [-2, 2], got -3"},
      {[&](SamplingParams& p) { p.frequency_penalty = nan; },
       "frequency_penalty: expected a finite number, got nan"},
      {[](SamplingParams& p) { p.max_new_tokens = 0; }, "max_new_tokens: must be in [1, 4096], got 0"},
      {[](SamplingParams& p) { p.max_new_tokens = 4097; }, "max_new_tokens: must be in [1, 4096], got 4097"},
      {[](SamplingParams& p) { p.stop.assign(17, "x"); }, "stop: must have at most 16 strings, got 17"},
      {[](SamplingParams& p) {
         p.stop = {"a", ""};
       },
       "stop[1]: must not be empty"},
      {[](SamplingParams& p) { p.stop = {std::string(257, 'x')}; },
       "stop[0]: must be at most 256 bytes, got 257"},
      {[](SamplingParams& p) {
         p.stop = {"ok", "bad\xC3"};
       },
       "stop[1]: must be valid UTF-8"},
      {[](SamplingParams& p) {
         p.stop_token_ids = {5, 100};
       },
       "stop_token_ids[1]: must be in [0, 100), got 100"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids[0]: must be in [0, 100), got -1"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs: must be in [-1, 20], got 21"},
      {[](SamplingParams& p) { p.logprobs = -2; }, "logprobs: must be in [-1, 20], got -2"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const absl::Status s = validate_sampling_params(p, 100);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    // The field travels as data too (each transport writes its own name for it): the same sentence.
    const std::optional<FieldError> e = field_error_of(s);
    ASSERT_TRUE(e.has_value()) << c.message;
    EXPECT_EQ(absl::StrCat(e->field, e->subscript, ": ", e->detail), c.message);
  }
}

TEST(SamplingParamsTest, LimitsAreConfigurable) {
  SamplingLimits limits;
  limits.max_new_tokens = 8;
  limits.max_stop_strings = 1;
  limits.max_stop_bytes = 3;
  limits.max_logprobs = 2;
  SamplingParams p;
  p.max_new_tokens = 9;
  EXPECT_EQ(validate_sampling_params(p, 10, limits).message(), "max_new_tokens: must be in [1, 8], got 9");
  p.max_new_tokens = 8;
  p.stop = {"abcd"};
  EXPECT_EQ(validate_sampling_params(p, 10, limits).message(), "stop[0]: must be at most 3 bytes, got 4");
  p.stop = {"a", "b"};
  EXPECT_EQ(validate_sampling_params(p, 10, limits).message(), "stop: must have at most 1 strings, got 2");
  p.stop = {"abc"};
  p.logprobs = 3;
  EXPECT_EQ(validate_sampling_params(p, 10, limits).message(), "logprobs: must be in [-1, 2], got 3");
  p.logprobs = 2;
  EXPECT_TRUE(validate_sampling_params(p, 10, limits).ok());
}

}  // namespace
}  // namespace frost

namespace frost {
namespace {

// The sampler's exp (kernels/cpu/exp.h): the vectorised loop equals the scalar function bit for bit,
// and both are exp to < 2e-7 relative error over the softmax range; NaN, -inf and underflow give 0.
TEST(SoftmaxExpTest, VectorEqualsScalarAndMatchesExp) {
  std::vector<float> l;
  for (int i = 0; i <= 200000; ++i) l.push_back(-90.0f + 90.0f * static_cast<float>(i) / 200000.0f);
  l.push_back(std::numeric_limits<float>::quiet_NaN());
  l.push_back(-std::numeric_limits<float>::infinity());
  l.push_back(-1e30f);
  std::vector<float> out(l.size());
  softmax::exp_shifted(l.data(), static_cast<int64_t>(l.size()), 0.0f, 1.0f, out.data());
  double worst = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const float scalar = softmax::exp_nonpositive(l[i]);
    ASSERT_EQ(std::memcmp(&scalar, &out[i], sizeof(float)), 0) << "x = " << l[i];
    if (std::isfinite(l[i]) && l[i] >= -87.0f) {
      const double want = std::exp(static_cast<double>(l[i]));
      worst = std::max(worst, std::fabs(out[i] - want) / want);
    } else if (!(l[i] >= -87.3f)) {
      EXPECT_EQ(out[i], 0.0f) << l[i];
    }
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(softmax::exp_nonpositive(0.0f), 1.0f);
}

}  // namespace
}  // namespace frost

namespace frost {
namespace {

// SwiGLU with the same exp: vectorised equals scalar bit for bit, and both follow g·σ(g)·u to fp32 rounding,
// saturating correctly for large |g|.
TEST(SoftmaxExpTest, SwigluVectorEqualsScalarAndTheFormula) {
  std::vector<float> g, u;
  for (int i = 0; i <= 20000; ++i) {
    g.push_back(-120.0f + 240.0f * static_cast<float>(i) / 20000.0f);
    u.push_back(0.5f + static_cast<float>(i % 7));
  }
  g.push_back(std::numeric_limits<float>::infinity());
  u.push_back(1.0f);
  g.push_back(-std::numeric_limits<float>::infinity());
  u.push_back(1.0f);
  std::vector<float> out(g.size());
  softmax::swiglu(g.data(), u.data(), static_cast<int64_t>(g.size()), out.data());
  for (size_t i = 0; i < g.size(); ++i) {
    const float scalar = g[i] / (1.f + softmax::exp_any(-g[i])) * u[i];
    ASSERT_EQ(std::memcmp(&scalar, &out[i], sizeof(float)), 0) << "g = " << g[i];
    if (std::isfinite(g[i])) {
      const double want = static_cast<double>(g[i]) / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      ASSERT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "g = " << g[i];
    }
  }
  EXPECT_EQ(out[out.size() - 2], std::numeric_limits<float>::infinity());  // silu(+inf) = +inf
  EXPECT_TRUE(std::isnan(out.back()));  // -inf · σ(-inf) = -inf · 0, NaN as in torch.nn.functional.silu
}

}  // namespace
}  // namespace frost
