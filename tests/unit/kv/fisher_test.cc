// Fisher information of attention (spectrum metrics, rank selection, JSON) and FIMKVSplice, the
// Fisher-guided temporal compression: hand-computed cases, an explicit-sum reference and properties.
#include "core/kv/fisher.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace frost {
namespace {

at::Tensor dbl(std::initializer_list<double> v) { return at::tensor(std::vector<double>(v), at::kDouble); }

// Uniform causal attention [H, T, T] (row i attends uniformly to 0..i).
at::Tensor uniform_causal(int64_t h, int64_t t) {
  at::Tensor p = at::ones({t, t}).tril();
  p = p / p.sum(-1, true);
  return p.unsqueeze(0).repeat({h, 1, 1});
}

// Softmax of random scores under a causal mask, float32 [H, T, T].
at::Tensor softmax_causal(int64_t h, int64_t t, uint64_t seed, double scale = 2.0) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor s = at::randn({h, t, t}, g) * scale;
  at::Tensor mask = at::ones({t, t}, at::kBool).triu(1);
  return at::softmax(s.masked_fill(mask, -INFINITY), -1);
}

// Σ over windows and rows of diag(p) − p pᵀ for one head, by an explicit loop, / rows.
at::Tensor explicit_mean_fisher(const std::vector<at::Tensor>& windows, int64_t head) {
  const int64_t t = windows[0].size(1);
  at::Tensor f = at::zeros({t, t}, at::kDouble);
  for (const at::Tensor& w : windows)
    for (int64_t i = 0; i < t; ++i) {
      at::Tensor p = w[head][i].to(at::kDouble);
      f += at::diag(p) - at::outer(p, p);
    }
  return f / static_cast<double>(windows.size() * t);
}

FisherReport report_of(const std::vector<at::Tensor>& windows, int64_t layers = 1) {
  FisherAccumulator acc(layers, windows[0].size(0));
  for (int64_t l = 0; l < layers; ++l)
    for (const at::Tensor& w : windows) EXPECT_TRUE(acc.add(l, w).ok());
  absl::StatusOr<FisherReport> r = acc.finish();
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// Σ_h tr(Eᵀ F_h E), E = x − x̂ ([H, T, D]), the Fisher-weighted reconstruction error.
double fisher_error(const at::Tensor& f, const at::Tensor& x, const at::Tensor& xh) {
  at::Tensor e = (x - xh).to(at::kDouble);
  return (e * at::matmul(f, e)).sum().item<double>();
}

bool has(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(FisherTest, OneHotRowsGiveZeroFisherWithDefinedMetrics) {
  // T = 1 (the single row is one-hot) and T = 3 with every row on token 0.
  at::Tensor t1 = at::ones({2, 1, 1});
  at::Tensor t3 = at::zeros({2, 3, 3});
  t3.select(2, 0).fill_(1);
  for (const at::Tensor& p : {t1, t3}) {
    FisherReport r = report_of({p});
    for (const FisherHeadMetrics& m : r.layers[0].heads) {
      EXPECT_EQ(m.eigmax, 0);
      EXPECT_EQ(m.trace, 0);
      EXPECT_EQ(m.cond, 1);
      EXPECT_EQ(m.decay, 1);
      EXPECT_EQ(m.energy_r8, 1);
      EXPECT_EQ(m.energy_r16, 1);
      for (double e : m.energy) EXPECT_EQ(e, 1);
    }
    EXPECT_EQ(r.layers[0].eigmax_std, 0);
    EXPECT_EQ(*r.suggested_rank(), 1);
    absl::StatusOr<nlohmann::json> j = r.to_json();
    ASSERT_TRUE(j.ok());
    EXPECT_EQ(j->dump().find("null"), std::string::npos) << j->dump();  // NaN / Inf dump as null
  }
}

TEST(FisherTest, UniformCausalT2ByHand) {
  // Row 0 = [1, 0] → 0; row 1 = [½, ½] → [[¼, −¼], [−¼, ¼]]. Mean over 2 rows: eigenvalues ¼ and 0.
  FisherReport r = report_of({uniform_causal(1, 2)});
  const FisherHeadMetrics& m = r.layers[0].heads[0];
  EXPECT_EQ(r.window, 2);
  EXPECT_EQ(r.rows, 2);
  EXPECT_NEAR(m.eigmax, 0.25, 1e-15);
  EXPECT_NEAR(m.trace, 0.25, 1e-15);
  EXPECT_NEAR(m.eigenvalues[1], 0, 1e-15);
  EXPECT_DOUBLE_EQ(m.cond, 1);  // one non-null eigenvalue
  EXPECT_DOUBLE_EQ(m.decay, 1);
  EXPECT_DOUBLE_EQ(m.energy[0], 1);
}

TEST(FisherTest, UniformCausalT3ByHand) {
  // Σ rows = [[17, −13, −4], [−13, 17, −4], [−4, −4, 8]] / 36, eigenvectors (1,−1,0): 5/6, (1,1,−2): 1/3,
  // (1,1,1): 0. Mean over 3 rows: {5/18, 1/9, 0}; trace 7/18, cond = decay = 5/2, energy {5/7, 1, 1}.
  FisherAccumulator acc(1, 1);
  ASSERT_TRUE(acc.add(0, uniform_causal(1, 3)).ok());
  at::Tensor expect =
      at::tensor({17., -13., -4., -13., 17., -4., -4., -4., 8.}, at::kDouble).view({1, 3, 3}) / 108.0;
  EXPECT_TRUE(at::allclose(acc.mean_fisher(0), expect, 0, 1e-15));
  FisherReport r = *acc.finish();
  const FisherHeadMetrics& m = r.layers[0].heads[0];
  EXPECT_NEAR(m.eigmax, 5.0 / 18, 1e-15);
  EXPECT_NEAR(m.eigenvalues[1], 1.0 / 9, 1e-15);
  EXPECT_NEAR(m.eigenvalues[2], 0, 1e-15);
  EXPECT_NEAR(m.trace, 7.0 / 18, 1e-15);
  EXPECT_NEAR(m.cond, 2.5, 1e-12);
  EXPECT_NEAR(m.decay, 2.5, 1e-12);
  EXPECT_NEAR(m.energy[0], 5.0 / 7, 1e-14);
  EXPECT_EQ(m.energy[1], 1);  // clamped: 1 − 1e-16 would otherwise fail a threshold of 1
  EXPECT_EQ(m.energy[2], 1);
  EXPECT_EQ(m.energy_r8, 1);
  EXPECT_EQ(*r.suggested_rank(0.9), 2);
  EXPECT_EQ(*r.suggested_rank(0.7), 1);
}

TEST(FisherTest, EigenvaluesMatchExplicitlySummedFisher) {
  const int64_t h = 3, t = 12;
  std::vector<at::Tensor> w = {softmax_causal(h, t, 1), softmax_causal(h, t, 2)};
  FisherAccumulator acc(1, h);
  for (const auto& p : w) ASSERT_TRUE(acc.add(0, p).ok());
  FisherReport r = *acc.finish();
  EXPECT_EQ(r.windows, 2);
  EXPECT_EQ(r.rows, 2 * t);
  for (int64_t i = 0; i < h; ++i) {
    at::Tensor f = explicit_mean_fisher(w, i);
    EXPECT_TRUE(at::allclose(acc.mean_fisher(0)[i], f, 0, 1e-7));  // float32 rows vs renormalised
    at::Tensor ev = at::linalg_eigvalsh(f).flip({0});
    const FisherHeadMetrics& m = r.layers[0].heads[i];
    ASSERT_EQ(static_cast<int64_t>(m.eigenvalues.size()), t);
    for (int64_t k = 0; k < t; ++k) EXPECT_NEAR(m.eigenvalues[k], std::max(0.0, ev[k].item<double>()), 1e-7);
    EXPECT_NEAR(m.trace, at::trace(f).item<double>(), 1e-7);
    EXPECT_NEAR(fisher_metrics(f).eigmax, m.eigmax, 1e-7);
  }
}

TEST(FisherTest, EnergyR8AndR16AreOneWhenWindowAtMostEight) {
  for (int64_t t : {5, 8}) {
    FisherReport r = report_of({softmax_causal(2, t, 3)});
    for (const auto& m : r.layers[0].heads) {
      EXPECT_EQ(m.energy_r8, 1);
      EXPECT_EQ(m.energy_r16, 1);
      EXPECT_LT(m.energy[0], 1);
    }
    EXPECT_EQ(r.layers[0].energy_r8_mean, 1);
  }
}

TEST(FisherTest, DecayAndCondOnConstructedSpectra) {
  // Full spectrum 8, 4, 2, 1, ½, ¼, 0 (in a rotated basis): cond = 8/¼, decay = 8/½ (5th largest).
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor q = std::get<0>(at::linalg_qr(at::randn({7, 7}, g).to(at::kDouble)));
  at::Tensor lam = dbl({8, 4, 2, 1, 0.5, 0.25, 0});
  at::Tensor f = at::matmul(q * lam, q.t());
  FisherHeadMetrics m = fisher_metrics(f);
  EXPECT_NEAR(m.eigmax, 8, 1e-12);
  EXPECT_NEAR(m.trace, 15.75, 1e-12);
  EXPECT_NEAR(m.cond, 32, 1e-9);
  EXPECT_NEAR(m.decay, 16, 1e-9);
  EXPECT_NEAR(m.energy[0], 8 / 15.75, 1e-12);
  EXPECT_NEAR(m.energy[3], 15 / 15.75, 1e-12);
  EXPECT_EQ(m.energy_r8, 1);  // T = 7
  // Rank 3: decay falls back to the last non-null eigenvalue (4 / 1), as does cond.
  m = fisher_metrics(at::diag(dbl({4, 2, 1, 0, 0, 0})));
  EXPECT_DOUBLE_EQ(m.decay, 4);
  EXPECT_DOUBLE_EQ(m.cond, 4);
  // An eigenvalue below 1e-10 · λ_max counts as null; one above does not.
  EXPECT_DOUBLE_EQ(fisher_metrics(at::diag(dbl({1, 1e-12, 0}))).cond, 1);
  EXPECT_NEAR(fisher_metrics(at::diag(dbl({1, 1e-9, 0}))).cond, 1e9, 1e-3);
}

TEST(FisherTest, StdAcrossHeadsIsThePopulationStd) {
  // T = 2, row 0 one-hot, row 1 = [a, 1 − a]: mean F = a(1 − a)/2 · [[1, −1], [−1, 1]], so
  // eigmax = trace = a(1 − a). Heads a = ½, 1, 0.2 → 0.25, 0, 0.16.
  at::Tensor p = at::zeros({3, 2, 2});
  p.select(1, 0).select(1, 0).fill_(1);
  const double a[3] = {0.5, 1.0, 0.2};
  for (int h = 0; h < 3; ++h) {
    p[h][1][0] = a[h];
    p[h][1][1] = 1 - a[h];
  }
  FisherReport r = report_of({p});
  const double e[3] = {0.25, 0, 0.16};
  const double mean = (e[0] + e[1] + e[2]) / 3;
  const double sd =
      std::sqrt(((e[0] - mean) * (e[0] - mean) + mean * mean + (e[2] - mean) * (e[2] - mean)) / 3);
  const FisherLayerMetrics& l = r.layers[0];
  EXPECT_NEAR(l.eigmax_mean, mean, 1e-7);
  EXPECT_NEAR(l.eigmax_std, sd, 1e-7);
  EXPECT_NEAR(l.trace_mean, mean, 1e-7);
  EXPECT_NEAR(l.trace_std, sd, 1e-7);
  EXPECT_DOUBLE_EQ(l.cond_mean, 1);  // every spectrum has one non-null eigenvalue (or none)
  EXPECT_DOUBLE_EQ(l.cond_std, 0);
  EXPECT_DOUBLE_EQ(l.energy_r8_std, 0);
}

TEST(FisherTest, SuggestedRankOnConstructedEnergies) {
  FisherReport r;
  r.window = 4;
  r.layers.resize(2);
  r.layers[0].energy_mean = {0.5, 0.85, 0.95, 1};
  r.layers[1].energy_mean = {0.7, 0.92, 0.96, 1};
  EXPECT_EQ(*r.suggested_rank(0.9), 3);  // layer 0 needs 3
  EXPECT_EQ(*r.suggested_rank(0.8), 2);
  EXPECT_EQ(*r.suggested_rank(0.5), 1);
  EXPECT_EQ(*r.suggested_rank(0.95), 3);  // ≥, not >
  EXPECT_EQ(*r.suggested_rank(0.96), 4);
  EXPECT_EQ(*r.suggested_rank(1.0), 4);
  EXPECT_FALSE(r.suggested_rank(0).ok());
  EXPECT_FALSE(r.suggested_rank(1.5).ok());
  EXPECT_FALSE(r.to_json(-1).ok());
}

TEST(FisherTest, InvariantToRowAndWindowOrder) {
  const int64_t h = 2, t = 9;
  at::Tensor a = softmax_causal(h, t, 7), b = softmax_causal(h, t, 8);
  at::Tensor perm = at::randperm(t, at::make_generator<at::CPUGeneratorImpl>(9));
  FisherAccumulator x(1, h), y(1, h);
  ASSERT_TRUE(x.add(0, a).ok());
  ASSERT_TRUE(x.add(0, b).ok());
  ASSERT_TRUE(y.add(0, b.index_select(1, perm)).ok());  // rows (queries) shuffled
  ASSERT_TRUE(y.add(0, a.index_select(1, perm)).ok());
  EXPECT_TRUE(at::allclose(x.mean_fisher(0), y.mean_fisher(0), 0, 1e-15));
}

TEST(FisherTest, AccumulatorRejectsBadInputWithClearErrors) {
  FisherAccumulator acc(2, 2);
  EXPECT_TRUE(has(acc.add(2, uniform_causal(2, 4)), "layer 2"));
  EXPECT_TRUE(has(acc.add(-1, uniform_causal(2, 4)), "layer -1"));
  EXPECT_TRUE(has(acc.add(0, at::Tensor()), "undefined"));
  EXPECT_TRUE(has(acc.add(0, at::ones({4, 4})), "[H, T, T]"));
  EXPECT_TRUE(has(acc.add(0, at::ones({2, 4, 3}) / 3), "[H, T, T]"));
  EXPECT_TRUE(has(acc.add(0, uniform_causal(3, 4)), "3 heads, expected 2"));
  EXPECT_TRUE(has(acc.add(0, at::ones({2, 2, 2}, at::kLong)), "floating point"));
  at::Tensor bad = uniform_causal(2, 4);
  bad[1][2][0] = NAN;
  EXPECT_TRUE(has(acc.add(0, bad), "non-finite"));
  bad[1][2][0] = INFINITY;
  EXPECT_TRUE(has(acc.add(0, bad), "non-finite"));
  bad = uniform_causal(2, 4);
  bad[0][3][0] = -0.25;
  bad[0][3][1] = 0.75;
  EXPECT_TRUE(has(acc.add(0, bad), "negative"));
  EXPECT_TRUE(has(acc.add(0, uniform_causal(2, 4) * 1.01), "sum to 1"));
  EXPECT_EQ(acc.window(), 0);  // nothing accepted so far
  ASSERT_TRUE(acc.add(0, uniform_causal(2, 4)).ok());
  EXPECT_EQ(acc.window(), 4);
  absl::Status s = acc.add(1, uniform_causal(2, 5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(s, "T = 5")) << s;
  EXPECT_TRUE(has(s, "window is T = 4")) << s;
  EXPECT_EQ(acc.windows(1), 0);
  // finish: layer 1 empty, then unequal window counts.
  EXPECT_EQ(acc.finish().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(acc.add(1, uniform_causal(2, 4)).ok());
  ASSERT_TRUE(acc.add(1, uniform_causal(2, 4)).ok());
  EXPECT_TRUE(has(acc.finish().status(), "layer 1 has 2 windows but layer 0 has 1"));
  ASSERT_TRUE(acc.add(0, uniform_causal(2, 4)).ok());
  EXPECT_TRUE(acc.finish().ok());
}

TEST(FisherTest, RealisticSoftmaxAttention) {
  const int64_t layers = 2, h = 4, t = 32;
  FisherAccumulator acc(layers, h);
  for (int w = 0; w < 3; ++w)
    for (int64_t l = 0; l < layers; ++l)  // layer 1 sharper (larger score scale)
      ASSERT_TRUE(acc.add(l, softmax_causal(h, t, 100 + w * layers + l, l == 0 ? 1.0 : 4.0)).ok());
  FisherReport r = *acc.finish();
  for (int64_t l = 0; l < layers; ++l) {
    // The all-ones vector is in the null space to double precision (rows renormalised).
    at::Tensor f = acc.mean_fisher(l);
    EXPECT_LT(at::matmul(f, at::ones({t, 1}, at::kDouble)).abs().max().item<double>(), 1e-15);
    for (const FisherHeadMetrics& m : r.layers[l].heads) {
      EXPECT_GT(m.eigmax, 0);
      EXPECT_LE(m.eigenvalues[t - 1], 1e-12 * m.eigmax);
      EXPECT_NEAR(m.cond, m.eigmax / m.eigenvalues[t - 2], 1e-9 * m.cond);  // softmax: rank T − 1
      EXPECT_NEAR(m.decay, m.eigmax / m.eigenvalues[4], 1e-9 * m.decay);
      EXPECT_GE(m.cond, m.decay);
      EXPECT_GE(m.decay, 1);
      for (int64_t k = 1; k < t; ++k) EXPECT_GE(m.energy[k], m.energy[k - 1]);
      EXPECT_EQ(m.energy[t - 1], 1);
      EXPECT_EQ(m.energy_r8, m.energy[7]);
      EXPECT_EQ(m.energy_r16, m.energy[15]);
    }
  }
  const int64_t rank = *r.suggested_rank(0.9);
  ASSERT_GE(rank, 1);
  for (const auto& l : r.layers) EXPECT_GE(l.energy_mean[rank - 1], 0.9);
  if (rank > 1) {
    bool some_below = false;
    for (const auto& l : r.layers) some_below = some_below || l.energy_mean[rank - 2] < 0.9;
    EXPECT_TRUE(some_below);
  }
  // JSON schema.
  nlohmann::json j = *r.to_json(0.9);
  EXPECT_EQ(j["window"], t);
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["rows"], 3 * t);
  EXPECT_EQ(j["threshold"], 0.9);
  EXPECT_EQ(j["suggested_rank"], rank);
  ASSERT_EQ(j["layers"].size(), 2u);
  const nlohmann::json& l1 = j["layers"][1];
  EXPECT_EQ(l1["layer"], 1);
  for (const char* k :
       {"eigmax_mean", "eigmax_std", "trace_mean", "trace_std", "cond_mean", "cond_std", "energy_r8_mean",
        "energy_r8_std", "energy_r16_mean", "energy_r16_std", "decay_mean", "decay_std"})
    EXPECT_TRUE(l1[k].is_number()) << k;
  EXPECT_EQ(l1["eigmax_mean"].get<double>(), r.layers[1].eigmax_mean);
  EXPECT_EQ(l1["energy_mean"].size(), static_cast<size_t>(t));
  ASSERT_EQ(l1["heads"].size(), static_cast<size_t>(h));
  EXPECT_EQ(l1["heads"][3]["head"], 3);
  EXPECT_EQ(l1["heads"][3]["cond"].get<double>(), r.layers[1].heads[3].cond);
  for (const char* k : {"eigmax", "trace", "cond", "energy_r8", "energy_r16", "decay"})
    EXPECT_TRUE(l1["heads"][0][k].is_number()) << k;
  EXPECT_EQ(l1["heads"][0]["energy"].size(), static_cast<size_t>(t));
}

// ---- FimKvSplice ----

struct Calibrated {
  FisherAccumulator acc{2, 3};
  explicit Calibrated(int64_t t) {
    for (int w = 0; w < 4; ++w)
      for (int64_t l = 0; l < 2; ++l) EXPECT_TRUE(acc.add(l, softmax_causal(3, t, 200 + 2 * w + l)).ok());
  }
};

at::Tensor randn_kv(int64_t h, int64_t t, int64_t d, uint64_t seed, at::ScalarType dt = at::kDouble) {
  return at::randn({h, t, d}, at::make_generator<at::CPUGeneratorImpl>(seed)).to(dt);
}

TEST(FimKvSpliceTest, OrthonormalBasisAndExactAtFullRank) {
  const int64_t t = 16;
  Calibrated c(t);
  for (int64_t r : {int64_t{1}, int64_t{4}, t}) {
    FimKvSplice s = *FimKvSplice::from_accumulator(c.acc, r);
    EXPECT_EQ(s.n_layers(), 2);
    EXPECT_EQ(s.n_heads(), 3);
    EXPECT_EQ(s.window(), t);
    EXPECT_EQ(s.rank(), r);
    for (int64_t l = 0; l < 2; ++l) {
      const at::Tensor& u = s.basis(l);
      ASSERT_EQ(u.sizes(), (std::vector<int64_t>{3, t, r}));
      EXPECT_TRUE(at::allclose(at::matmul(u.transpose(1, 2), u), at::eye(r, at::kDouble).expand({3, r, r}), 0,
                               1e-12));
    }
  }
  FimKvSplice full = *FimKvSplice::from_accumulator(c.acc, t);
  at::Tensor x = randn_kv(3, t, 8, 1);
  EXPECT_TRUE(at::allclose(full.reconstruct(1, x), x, 0, 1e-12));
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor rf = full.reconstruct(0, xf);
  EXPECT_EQ(rf.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(rf, xf, 0, 1e-5));
}

TEST(FimKvSpliceTest, ErrorDecreasesMonotonicallyInRank) {
  const int64_t t = 16;
  Calibrated c(t);
  at::Tensor x = randn_kv(3, t, 8, 2), f = c.acc.mean_fisher(0);
  double prev_l2 = INFINITY, prev_fisher = INFINITY;
  for (int64_t r = 1; r <= t; ++r) {
    FimKvSplice s = *FimKvSplice::from_accumulator(c.acc, r);
    at::Tensor xh = s.reconstruct(0, x);
    const double l2 = (x - xh).norm().item<double>(), fe = fisher_error(f, x, xh);
    EXPECT_LE(l2, prev_l2 + 1e-12) << "r = " << r;
    EXPECT_LE(fe, prev_fisher + 1e-12) << "r = " << r;
    prev_l2 = l2;
    prev_fisher = fe;
  }
  EXPECT_LT(prev_l2, 1e-12);
}

TEST(FimKvSpliceTest, BeatsRandomOrthonormalBasisOnFisherWeightedError) {
  const int64_t t = 16, h = 3;
  Calibrated c(t);
  at::Tensor f = c.acc.mean_fisher(1);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int64_t r : {2, 4, 8}) {
    FimKvSplice s = *FimKvSplice::from_accumulator(c.acc, r);
    at::Tensor q = std::get<0>(at::linalg_qr(at::randn({h, t, r}, g).to(at::kDouble)));  // random U_r
    auto random_rec = [&](const at::Tensor& x) { return at::matmul(q, at::matmul(q.transpose(1, 2), x)); };
    // X = I: the error is tr((I − P) F), Σ of the bottom eigenvalues for the FIM basis (Ky Fan's minimum).
    at::Tensor eye = at::eye(t, at::kDouble).expand({h, t, t}).contiguous();
    const double fim_eye = fisher_error(f, eye, s.reconstruct(1, eye));
    double bottom = 0;
    // The report is held in a local: a range-for over a member of the temporary StatusOr would read it after
    // its destruction (the range-init temporary dies at the end of that full-expression before C++23).
    const FisherReport rep = *c.acc.finish();
    for (const auto& m : rep.layers[1].heads)
      for (int64_t k = r; k < t; ++k) bottom += m.eigenvalues[k];
    EXPECT_NEAR(fim_eye, bottom, 1e-12) << "r = " << r;
    EXPECT_LT(fim_eye, fisher_error(f, eye, random_rec(eye)));
    // Random K.
    at::Tensor x = randn_kv(h, t, 64, 10 + r);
    EXPECT_LT(fisher_error(f, x, s.reconstruct(1, x)), fisher_error(f, x, random_rec(x))) << "r = " << r;
  }
}

TEST(FimKvSpliceTest, ShapesBatchDimsAndErrors) {
  const int64_t t = 8;
  Calibrated c(t);
  FimKvSplice s = *FimKvSplice::from_accumulator(c.acc, 3);
  at::Tensor x = at::randn({5, 3, t, 4});
  at::Tensor comp = s.compress(0, x);
  EXPECT_EQ(comp.sizes(), (std::vector<int64_t>{5, 3, 3, 4}));
  EXPECT_EQ(s.expand(0, comp).sizes(), x.sizes());
  EXPECT_TRUE(at::allclose(s.compress(0, x[2]), comp[2], 1e-6, 1e-6));
  EXPECT_THROW(s.compress(0, at::randn({3, t + 1, 4})), c10::Error);
  EXPECT_THROW(s.expand(0, at::randn({3, 4, 4})), c10::Error);
  EXPECT_EQ(FimKvSplice::from_accumulator(c.acc, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FimKvSplice::from_accumulator(c.acc, t + 1).status().code(), absl::StatusCode::kInvalidArgument);
  FisherAccumulator empty(2, 3);
  ASSERT_TRUE(empty.add(0, softmax_causal(3, t, 1)).ok());
  EXPECT_EQ(FimKvSplice::from_accumulator(empty, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(FimKvSplice::from_fisher({}, 1).ok());
  EXPECT_FALSE(
      FimKvSplice::from_fisher({at::eye(4).expand({2, 4, 4}), at::eye(5).expand({2, 5, 5})}, 1).ok());
}

TEST(FimKvSpliceTest, PerWindowVariantMatchesACalibrationOnThatWindow) {
  const int64_t h = 2, t = 10, r = 4;
  at::Tensor probs = softmax_causal(h, t, 42);
  at::Tensor k = randn_kv(h, t, 6, 43, at::kFloat);
  FimCompressed fc = *fim_compress(k, probs, r);
  EXPECT_EQ(fc.c.sizes(), (std::vector<int64_t>{h, r, 6}));
  EXPECT_EQ(fc.c.scalar_type(), at::kFloat);
  FisherAccumulator acc(1, h);
  ASSERT_TRUE(acc.add(0, probs).ok());
  FimKvSplice s = *FimKvSplice::from_accumulator(acc, r);
  // Same subspace (eigenvector signs may differ): same reconstruction.
  EXPECT_TRUE(at::allclose(fim_expand(fc), s.reconstruct(0, k), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(fc.basis.abs(), s.basis(0).abs(), 0, 1e-9));
  EXPECT_EQ(fim_compress(k, probs, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fim_compress(k, probs, t + 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fim_compress(k.narrow(1, 0, t - 1), probs, r).ok());
  EXPECT_FALSE(fim_compress(k, probs * 2, r).ok());
}

}  // namespace
}  // namespace frost
