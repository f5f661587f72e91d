// verify_draft (core/generate/spec_verify.h): greedy and seeded sampling identical to stepping the sampler,
// the sampled output distributed exactly as the target (chi-square over seeded runs of a toy model), seeded
// reproducibility, logprobs, masks and k = 0.
#include "core/generate/spec_verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/generate/sampler.h"
#include "core/generate/sampling_params.h"

namespace frost {
namespace {

std::vector<float> random_rows(std::mt19937_64& rng, int rows, int v, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> out(static_cast<size_t>(rows) * v);
  for (float& x : out) x = u(rng);
  return out;
}

void expect_same_token(const SampledToken& a, const SampledToken& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.logprob, b.logprob);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(a.top[i].id, b.top[i].id);
    EXPECT_EQ(a.top[i].logprob, b.top[i].logprob);
  }
}

// verify_draft appends exactly what sample() gives row by row up to the first mismatch, and leaves the
// sampler in the same state (the next plain step agrees, penalties and the RNG included): greedy, and seeded
// sampling too (the rule draws each row's token as plain decoding would).
void check_equals_stepping(const SamplingParams& p) {
  constexpr int kV = 40;
  std::mt19937_64 rng(1234);
  int accepted_total = 0, drafted_total = 0, calls_with_mismatch = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int k = static_cast<int>(rng() % 7);
    // Small logit spread so the penalties change the argmax often.
    const auto rows = random_rows(rng, k + 2, kV, 1.5f);  // k + 1 rows, then one more for a plain step
    const std::vector<int32_t> prompt = {3, 7, 11};
    Sampler probe(p, kV), ref(p, kV), spec(p, kV);
    for (Sampler* s : {&probe, &ref, &spec}) s->add_prompt(prompt);
    // Drafts: the true next greedy token 80% of the time, something else otherwise.
    std::vector<int32_t> draft;
    for (int i = 0; i < k; ++i) {
      const int32_t t = probe.sample(rows.data() + static_cast<size_t>(i) * kV).id;
      draft.push_back(rng() % 5 == 0 ? static_cast<int32_t>((t + 1 + rng() % (kV - 1)) % kV) : t);
    }
    const DraftVerdict v = verify_draft(spec, draft, rows.data());
    std::vector<SampledToken> expected;
    for (int i = 0; i <= k; ++i) {
      expected.push_back(ref.sample(rows.data() + static_cast<size_t>(i) * kV));
      if (i == k || expected.back().id != draft[static_cast<size_t>(i)]) break;
    }
    ASSERT_EQ(v.tokens.size(), expected.size()) << "trial " << trial;
    EXPECT_EQ(v.accepted, static_cast<int32_t>(expected.size()) - 1);
    for (size_t i = 0; i < expected.size(); ++i) expect_same_token(v.tokens[i], expected[i]);
    const float* next = rows.data() + static_cast<size_t>(k + 1) * kV;
    expect_same_token(spec.sample(next), ref.sample(next));
    accepted_total += v.accepted;
    drafted_total += k;
    calls_with_mismatch += v.accepted < k;
  }
  // Both branches were exercised.
  EXPECT_GT(accepted_total, drafted_total / 4);
  EXPECT_GT(calls_with_mismatch, 50);
}

TEST(SpecVerifyTest, GreedyEqualsSteppingTheSampler) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  check_equals_stepping(p);
}

TEST(SpecVerifyTest, GreedyEqualsSteppingWithPenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.8f;
  p.presence_penalty = 0.6f;
  p.frequency_penalty = 0.4f;
  p.logprobs = 2;
  check_equals_stepping(p);
  p.temperature = 0.7f;  // top_k == 1 is greedy too
  p.top_k = 1;
  p.seed = 5;
  check_equals_stepping(p);
}

// ---- distribution: a toy target model and deterministic drafters over V = 5 ----

constexpr int kV = 5;
constexpr int kLen = 3;  // tokens generated per run; the joint over 5^3 outcomes is tested

// The target model: logits as a fixed pseudo-random function of the prefix.
std::vector<float> model_logits(const std::vector<int32_t>& prefix) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t + 1)) * 0x100000001B3ull;
  std::mt19937_64 rng(h + prefix.size());
  std::vector<float> out(kV);
  for (float& x : out) x = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  return out;
}

// The processed distribution Sampler::sample draws from (sampler.h's steps 2-8, in double), for a
// history of generated tokens (no prompt).
std::vector<double> target_probs(const SamplingParams& p, const std::vector<int32_t>& history) {
  const std::vector<float> raw = model_logits(history);
  std::vector<double> l(raw.begin(), raw.end());
  std::vector<int> count(kV, 0);
  for (int32_t t : history) count[static_cast<size_t>(t)]++;
  for (int i = 0; i < kV; ++i) {
    if (count[i] == 0) continue;
    if (p.repetition_penalty != 1.0f)
      l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
    l[i] -= p.presence_penalty + p.frequency_penalty * count[i];
  }
  std::vector<int> order(kV);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  std::vector<double> w(kV, 0.0);
  const int keep_k = p.top_k > 0 ? std::min(p.top_k, kV) : kV;
  for (int r = 0; r < keep_k; ++r) w[order[r]] = std::exp((l[order[r]] - l[order[0]]) / p.temperature);
  double total = 0;
  for (double x : w) total += x;
  if (p.top_p < 1.0f) {
    double cum = 0;
    int r = 0;
    for (; r < keep_k; ++r) {
      cum += w[order[r]];
      if (cum >= p.top_p * total) break;
    }
    for (int j = r + 1; j < kV; ++j) w[order[j]] = 0;
  }
  if (p.min_p > 0.0f)
    for (double& x : w)
      if (x < p.min_p) x = 0;  // p_max == 1
  total = 0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

enum class Drafter { kLikely, kUnlikely, kImpossible, kMixed };

// A deterministic drafter: its proposal is a function of the prefix only.
int32_t draft_token(Drafter d, const SamplingParams& p, const std::vector<int32_t>& prefix) {
  const auto q = target_probs(p, prefix);
  switch (d) {
    case Drafter::kLikely:
      return static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
    case Drafter::kUnlikely: {
      int32_t best = -1;
      for (int i = 0; i < kV; ++i)
        if (q[i] > 0 && (best < 0 || q[i] < q[best])) best = i;
      return best;
    }
    case Drafter::kImpossible:
      for (int i = 0; i < kV; ++i)
        if (q[i] == 0) return i;
      return 0;
    case Drafter::kMixed:
      return static_cast<int32_t>((prefix.size() * 3 + (prefix.empty() ? 0 : prefix.back() * 2)) % kV);
  }
  return 0;
}

// Upper 1e-4 quantile of chi-square with `dof` degrees of freedom (Wilson-Hilferty; z = 3.719).
double chi2_critical(int dof) {
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + 3.719 * std::sqrt(a), 3.0);
}

// The exact joint of kLen tokens without speculation: p(x0) p(x1 | x0) p(x2 | x0 x1), index x0·25 + x1·5 +
// x2.
std::vector<double> joint_probs(const SamplingParams& p) {
  std::vector<double> out(125, 0.0);
  for (int a = 0; a < kV; ++a)
    for (int b = 0; b < kV; ++b)
      for (int e = 0; e < kV; ++e)
        out[a * 25 + b * 5 + e] =
            target_probs(p, {})[a] * target_probs(p, {a})[b] * target_probs(p, {a, b})[e];
  return out;
}

// Pearson chi-square of `counts` against `probs` over the cells expected >= 5 times, the rest pooled into
// one cell; *dof = cells - 1. An outcome of probability 0 that occurred gives +inf.
double joint_chi2(const std::vector<int>& counts, const std::vector<double>& probs, int* dof) {
  double n = 0;
  for (int c : counts) n += c;
  double chi2 = 0, pooled_expected = 0, pooled_count = 0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    if (probs[i] == 0) {
      if (counts[i] > 0) return std::numeric_limits<double>::infinity();
    } else if (e < 5) {
      pooled_expected += e;
      pooled_count += counts[i];
    } else {
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
      ++cells;
    }
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
    ++cells;
  }
  *dof = cells - 1;
  return chi2;
}

struct DistCase {
  const char* name;
  SamplingParams params;
  Drafter drafter;
  int k;
};

TEST(SpecVerifyTest, SampledOutputHasTheTargetDistribution) {
  auto params = [](int top_k, float top_p, float min_p, float rep, float pres, float freq) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = rep;
    p.presence_penalty = pres;
    p.frequency_penalty = freq;
    return p;
  };
  const std::vector<DistCase> cases = {
      {"plain, likely drafts", params(0, 1, 0, 1, 0, 0), Drafter::kLikely, 2},
      {"plain, unlikely drafts", params(0, 1, 0, 1, 0, 0), Drafter::kUnlikely, 2},
      {"top_k 3, impossible drafts", params(3, 1, 0, 1, 0, 0), Drafter::kImpossible, 2},
      {"top_k 3, likely drafts", params(3, 1, 0, 1, 0, 0), Drafter::kLikely, 3},
      {"top_p 0.8, unlikely drafts", params(0, 0.8f, 0, 1, 0, 0), Drafter::kUnlikely, 2},
      {"top_k 4 + top_p 0.9 + min_p + penalties, mixed drafts", params(4, 0.9f, 0.05f, 1.5f, 0.4f, 0.3f),
       Drafter::kMixed, 3},
  };
  constexpr int kRuns = 200000;
  for (const DistCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<double> expected = joint_probs(c.params);
    // Speculative runs: draft k tokens, score them, verify, cut at kLen (the engine's max_tokens).
    struct Scored {
      std::vector<int32_t> draft;
      std::vector<float> rows;  // [(k + 1) x V]
    };
    std::map<std::vector<int32_t>, Scored> cache;  // by prefix: the drafter and the model are deterministic
    std::vector<int> counts(125, 0);
    int64_t drafted = 0, accepted = 0;
    for (int run = 0; run < kRuns; ++run) {
      SamplingParams p = c.params;
      p.seed = 1000003ull * run + 17;
      Sampler s(p, kV);
      std::vector<int32_t> seq;
      while (static_cast<int>(seq.size()) < kLen) {
        Scored& sc = cache[seq];
        if (sc.rows.empty()) {
          std::vector<int32_t> ext = seq;
          for (int i = 0; i < c.k; ++i)
            ext.push_back(sc.draft.emplace_back(draft_token(c.drafter, c.params, ext)));
          for (int i = 0; i <= c.k; ++i) {
            const auto l = model_logits(std::vector<int32_t>(ext.begin(), ext.begin() + seq.size() + i));
            sc.rows.insert(sc.rows.end(), l.begin(), l.end());
          }
        }
        const DraftVerdict v = verify_draft(s, sc.draft, sc.rows.data());
        ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.accepted) + 1);
        drafted += c.k;
        accepted += v.accepted;
        for (const auto& t : v.tokens)
          if (static_cast<int>(seq.size()) < kLen) seq.push_back(t.id);
      }
      counts[seq[0] * 25 + seq[1] * 5 + seq[2]]++;
    }
    int dof = 0;
    const double chi2 = joint_chi2(counts, expected, &dof);
    // Fixed seeds: deterministic, so it cannot flake; 1e-4 is the bound a correct rule fails with.
    EXPECT_LT(chi2, chi2_critical(dof));
    // Power: the same counts against the target at temperature 1 instead of 0.8 are rejected.
    SamplingParams wrong = c.params;
    wrong.temperature = 1.0f;
    int dof_wrong = 0;
    const double chi2_wrong = joint_chi2(counts, joint_probs(wrong), &dof_wrong);
    EXPECT_GT(chi2_wrong, chi2_critical(dof_wrong));
    const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
    if (c.drafter == Drafter::kImpossible) {
      EXPECT_EQ(accepted, 0);
    }
    if (c.drafter == Drafter::kLikely) {
      EXPECT_GT(rate, 0.3);
    }
    if (c.drafter == Drafter::kUnlikely) {
      EXPECT_GT(accepted, 0);
    }
    std::printf("[spec_verify] %-55s chi2 %.1f (dof %d, bound %.1f; at T=1: %.1f), acceptance %.3f\n", c.name,
                chi2, dof, chi2_critical(dof), chi2_wrong, rate);
  }
}

// The rule against a wrong one: accepting every draft is caught by the same statistic (power).
TEST(SpecVerifyTest, TheChiSquareBoundHasPower) {
  SamplingParams p;
  p.temperature = 0.8f;
  const auto q = target_probs(p, {});
  const int32_t d = draft_token(Drafter::kLikely, p, {});
  // A rule that accepted d with probability min(1, 1.2 * p(d)) instead: the statistic over 200k runs.
  const double n = 200000, wrong_pd = std::min(1.0, 1.2 * q[d]);
  double chi2 = 0;
  for (int i = 0; i < kV; ++i) {
    const double observed = i == d ? n * wrong_pd : n * (1 - wrong_pd) * q[i] / (1 - q[d]);
    chi2 += (observed - n * q[i]) * (observed - n * q[i]) / (n * q[i]);
  }
  EXPECT_GT(chi2, chi2_critical(kV - 1));
}

// ---- reproducibility, RNG consumption, logprobs, k = 0, masks ----

SamplingParams sampled(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = 0.9f;
  p.top_k = 20;
  p.top_p = 0.95f;
  p.logprobs = 4;
  p.frequency_penalty = 0.2f;
  return p;
}

TEST(SpecVerifyTest, SeededRunsReproduce) {
  constexpr int kVocab = 64;
  std::mt19937_64 rng(9);
  const auto rows = random_rows(rng, 5, kVocab, 2.0f);
  const std::vector<int32_t> draft = {1, 2, 3, 4};
  bool any_differs = false;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Sampler a(sampled(seed), kVocab), b(sampled(seed), kVocab), c(sampled(seed + 1000), kVocab);
    for (int call = 0; call < 4; ++call) {
      const auto va = verify_draft(a, draft, rows.data()), vb = verify_draft(b, draft, rows.data());
      const auto vc = verify_draft(c, draft, rows.data());
      ASSERT_EQ(va.accepted, vb.accepted);
      ASSERT_EQ(va.tokens.size(), vb.tokens.size());
      for (size_t i = 0; i < va.tokens.size(); ++i) expect_same_token(va.tokens[i], vb.tokens[i]);
      any_differs |= va.accepted != vc.accepted || va.tokens.back().id != vc.tokens.back().id;
    }
  }
  EXPECT_TRUE(any_differs);
}

// Seeded sampling: the same tokens as plain decoding with the same seed, whatever the draft (so a seeded
// request does not depend on whether, or how far, it speculated).
TEST(SpecVerifyTest, SeededSamplingEqualsSteppingTheSampler) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.logprobs = 2;
  for (uint64_t seed : {1u, 2u, 3u}) {
    p.seed = seed;
    check_equals_stepping(p);
  }
  p.top_p = 0.8f;  // the truncating path
  p.top_k = 12;
  p.repetition_penalty = 1.3f;
  p.seed = 4;
  check_equals_stepping(p);
}

TEST(SpecVerifyTest, LogprobsAreWhatSampleReportsForTheRow) {
  constexpr int kVocab = 32;
  std::mt19937_64 rng(77);
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const auto rows = random_rows(rng, 4, kVocab, 2.0f);
    const std::vector<int32_t> draft = {static_cast<int32_t>(rng() % kVocab),
                                        static_cast<int32_t>(rng() % kVocab),
                                        static_cast<int32_t>(rng() % kVocab)};
    Sampler s(sampled(seed), kVocab);
    const auto v = verify_draft(s, draft, rows.data());
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const float* row = rows.data() + i * kVocab;
      // A greedy sampler with logprobs on: its token is the argmax, its top list the row's.
      SamplingParams g;
      g.temperature = 0.0f;
      g.logprobs = 4;
      const SampledToken ref = Sampler(g, kVocab).sample(row);
      ASSERT_EQ(v.tokens[i].top.size(), ref.top.size());
      for (size_t j = 0; j < ref.top.size(); ++j) {
        EXPECT_EQ(v.tokens[i].top[j].id, ref.top[j].id);
        EXPECT_EQ(v.tokens[i].top[j].logprob, ref.top[j].logprob);
      }
      // The token's own logprob: log_softmax of the raw row.
      double m = *std::max_element(row, row + kVocab), z = 0;
      for (int j = 0; j < kVocab; ++j) z += std::exp(row[j] - m);
      EXPECT_NEAR(v.tokens[i].logprob, row[v.tokens[i].id] - m - std::log(z), 1e-5);
      if (i < static_cast<size_t>(v.accepted)) {
        EXPECT_EQ(v.tokens[i].id, draft[i]);
      }
    }
  }
}

TEST(SpecVerifyTest, NoDraftsIsOnePlainSample) {
  constexpr int kVocab = 300;  // several 64-id blocks for the vectorised full-vocabulary path
  std::mt19937_64 rng(5);
  const auto rows = random_rows(rng, 3, kVocab, 2.0f);
  std::vector<SamplingParams> configs;
  for (int c = 0; c < 4; ++c) {
    SamplingParams p;
    p.seed = 11;
    p.logprobs = c == 1 ? 3 : -1;
    if (c == 1) p.top_k = 10;
    if (c == 2) p.temperature = 0.0f;
    if (c == 3) p.repetition_penalty = 1.3f;
    configs.push_back(p);
  }
  for (const auto& p : configs) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      SamplingParams ps = p;
      ps.seed = seed;
      Sampler a(ps, kVocab), b(ps, kVocab);
      for (int step = 0; step < 3; ++step) {
        const float* row = rows.data() + static_cast<size_t>(step) * kVocab;
        const auto v = verify_draft(a, {}, row);
        ASSERT_EQ(v.accepted, 0);
        ASSERT_EQ(v.tokens.size(), 1u);
        expect_same_token(v.tokens[0], b.sample(row));
      }
    }
  }
}

TEST(SpecVerifyTest, MaskedDraftIsRejectedAndTheCorrectionObeysTheMask) {
  constexpr int kVocab = 40;
  std::mt19937_64 rng(8);
  const auto rows = random_rows(rng, 3, kVocab, 1.0f);
  std::vector<uint32_t> mask((kVocab + 31) / 32, 0);
  for (int i = 10; i < 20; ++i) mask[i / 32] |= 1u << (i % 32);  // only ids 10..19
  const std::vector<const uint32_t*> masks = {mask.data(), nullptr, nullptr};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Sampler s(sampled(seed), kVocab);
    const auto v = verify_draft(s, {3, 4}, rows.data(), masks);  // 3 is outside the mask
    ASSERT_EQ(v.accepted, 0);
    EXPECT_GE(v.tokens[0].id, 10);
    EXPECT_LT(v.tokens[0].id, 20);
  }
}

}  // namespace
}  // namespace frost
