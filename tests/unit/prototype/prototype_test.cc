// Prototype regression mechanisms against brute-force transcriptions of the seed
// (../shared/seeds/prototype-regression.tex, restr-residual-refinement.md), and the trainer's
// checkpoint/resume, artifact and predictor contracts on builtin:tiny (no files needed).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <ATen/core/grad_mode.h>

#include "core/prototype/artifact.h"
#include "core/prototype/config.h"
#include "core/prototype/evaluate.h"
#include "core/prototype/metrics.h"
#include "core/prototype/features.h"
#include "core/prototype/net.h"
#include "core/prototype/predictor.h"
#include "core/prototype/residual_choice.h"
#include "core/prototype/selection.h"
#include "core/prototype/trainer.h"
#include "tests/testing/test_util.h"

namespace frost::proto {
namespace {

using frost::testing::TempDir;

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

at::Tensor unit_rows(at::Tensor x) { return x / x.norm(2, 1, true); }

PrototypeConfig small_cfg() {
  PrototypeConfig c;
  c.max_tokens = 16;
  c.d_h = 32;
  c.H = 4;
  c.m = 3;
  c.m_q = 2;
  c.K = 4;
  c.T = 8;
  c.L = 2;
  c.ffn_mult = 2;
  c.epochs_a = 2;
  c.epochs_b = 2;
  c.batch_size = 8;
  c.label_hidden = 8;
  c.rlcs_k = 3;
  return c;
}

// ------------------------------------------------------------------------------ config

TEST(PrototypeConfig, DefaultsAreTheSeedTable) {
  PrototypeConfig c;
  EXPECT_EQ(c.max_tokens, 256);
  EXPECT_EQ(c.d_h, 256);
  EXPECT_EQ(c.m, 8);
  EXPECT_EQ(c.m_q, 8);
  EXPECT_EQ(c.K, 128);
  EXPECT_EQ(c.T, 512);
  EXPECT_EQ(c.L, 3);
  EXPECT_EQ(c.H, 8);
  EXPECT_EQ(c.ffn_dim(), 4 * 256);
  EXPECT_EQ(c.huber_delta, 0.5);
  EXPECT_EQ(c.epochs_a, 5);
  EXPECT_EQ(c.epochs_b, 10);
  EXPECT_EQ(c.tau_start, 1.0);
  EXPECT_EQ(c.tau_end, 0.1);
  EXPECT_EQ(c.lambda_emb, 0.1);
  EXPECT_EQ(c.lambda_ov, 1.0);
  EXPECT_EQ(c.lambda_rep, 0.1);
  EXPECT_EQ(c.m_cos, 0.2);
  // Not in the seed's table: frost's attribution departure and slot-initialisation choice.
  EXPECT_EQ(c.key_bias, 16.0);
  EXPECT_EQ(c.slot_init, "kmeans++");
  // Issue 24: the linear probe under the head, its held-out scale, resTR trained inside its guard.
  EXPECT_EQ(c.probe, "ridge");
  EXPECT_EQ(c.val_fraction, 0.1);
  EXPECT_EQ(c.probe_margin, 0.0);
  EXPECT_EQ(c.restr_guard_weight, 1.0);
  EXPECT_TRUE(validate(c).ok());
  PrototypeConfig bad_probe;
  EXPECT_INVALID(set_fields(bad_probe, {"probe=lasso"}), "probe must be 'ridge' or 'none'");
}

TEST(PrototypeConfig, SetFieldsValidatesAndNamesTheField) {
  PrototypeConfig c;
  ASSERT_TRUE(set_fields(c, {"K=16", "T=64", "lr=0.003", "seed=7"}).ok());
  EXPECT_EQ(c.K, 16);
  EXPECT_EQ(c.T, 64);
  EXPECT_EQ(c.lr, 0.003);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_INVALID(set_fields(c, {"bogus=1"}),
                 "prototype config: unknown key 'bogus' (known: max_tokens, d_h,");
  EXPECT_INVALID(set_fields(c, {"K=1"}), "prototype config: K must be in [2, 65536], got 1");
  EXPECT_INVALID(set_fields(c, {"lr=0"}), "prototype config: lr must be > 0, got 0");
  EXPECT_INVALID(set_fields(c, {"ood_quantile=1"}), "ood_quantile must be in [0, 1), got 1");
  EXPECT_INVALID(set_fields(c, {"seed=-1"}), "seed must be an unsigned integer, got '-1'");
  EXPECT_INVALID(set_fields(c, {"K=abc"}), "K must be an integer, got 'abc'");
  EXPECT_INVALID(set_fields(c, {"lr=nan"}), "lr must be a finite number");
  EXPECT_INVALID(set_fields(c, {"K"}), "'K' is not key=value");
  PrototypeConfig d;
  EXPECT_INVALID(set_fields(d, {"T=100"}), "T (100) must be >= K (128)");
  PrototypeConfig e;
  EXPECT_INVALID(set_fields(e, {"d_h=100"}), "d_h (100) must be divisible by H (8)");
  PrototypeConfig f, f2, f3;
  EXPECT_INVALID(set_fields(f2, {"key_bias=-1"}), "key_bias must be >= 0, got -1");
  PrototypeConfig f4;
  EXPECT_INVALID(set_fields(f4, {"label_flip_p=1.5"}), "label_flip_p must be in [0, 1], got 1.5");
  EXPECT_INVALID(set_fields(f3, {"slot_init=zeros"}),
                 "slot_init must be 'kmeans++' or 'normal', got 'zeros'");
  ASSERT_TRUE(set_fields(f, {"key_bias=0", "slot_init=normal"}).ok());
  EXPECT_EQ(f.key_bias, 0.0);
  EXPECT_EQ(f.slot_init, "normal");
}

TEST(PrototypeConfig, JsonRoundTrip) {
  PrototypeConfig c;
  ASSERT_TRUE(set_fields(c, {"K=16", "T=64", "lr=0.0003", "seed=18446744073709551615"}).ok());
  auto back = config_from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(to_json(*back), to_json(c));
  nlohmann::json j = to_json(c);
  j["nope"] = 1;
  EXPECT_INVALID(config_from_json(j).status(), "unknown key 'nope'");
}

// The one field table: every key it lists is in the dump, sets from its own dumped value, and a struct built
// in code is range-checked by validate() with the same words set_field uses.
TEST(PrototypeConfig, OneTableDrivesKeysDumpAndRanges) {
  PrototypeConfig c;
  const nlohmann::json j = to_json(c);
  ASSERT_EQ(j.size(), config_keys().size());
  for (const std::string& key : config_keys()) {
    ASSERT_TRUE(j.contains(key)) << key;
    const nlohmann::json& v = j[key];
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    EXPECT_TRUE(set_field(c, key, text).ok()) << key << "=" << text;
  }
  EXPECT_EQ(to_json(c), j);
  PrototypeConfig d;
  d.restr_alpha_max = 1.5;
  EXPECT_INVALID(validate(d), "prototype config: restr_alpha_max must be in [0, 1], got 1.5");
  PrototypeConfig e;
  e.H = 0;
  EXPECT_INVALID(validate(e), "prototype config: H must be in [1, 256], got 0");
}

TEST(PrototypeConfig, TauAnnealsLinearlyPerEpoch) {
  PrototypeConfig c;  // 10 epochs, 1.0 -> 0.1
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 1), 1.0);
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 10), 0.1);
  for (int e = 1; e <= 10; ++e) EXPECT_NEAR(tau_for_epoch(c, e), 1.0 - (e - 1) / 9.0 * 0.9, 1e-12);
  c.epochs_b = 1;
  EXPECT_DOUBLE_EQ(tau_for_epoch(c, 1), 1.0);
}

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

// ------------------------------------------------------------------------------ net

TEST(PrototypeNet, OutputIsBoundedEvenAtExtremes) {
  PrototypeConfig c = small_cfg();
  PrototypeNet net(c, 16, 1.0, 5.0, 3.0, 0.5);
  at::Generator g = gen(6);
  at::Tensor h = at::randn({4, 7, 16}, g) * 100;
  at::Tensor mask = at::ones({4, 7}, at::kBool);
  at::NoGradGuard ng;
  at::Tensor y = net.bound(net.head()(net.query_tokens(h, mask), net.memory_tokens(h, mask)));
  EXPECT_TRUE((y >= 1.0).all().item<bool>() && (y <= 5.0).all().item<bool>());
  EXPECT_DOUBLE_EQ(net.bound(at::full({1}, 1e4)).item<double>(), 5.0);
  EXPECT_DOUBLE_EQ(net.bound(at::full({1}, -1e4)).item<double>(), 1.0);
}

TEST(PrototypeNet, PaddingDoesNotChangeTheCompressors) {
  PrototypeConfig c = small_cfg();
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  at::Generator g = gen(7);
  at::Tensor h = at::randn({2, 9, 16}, g);
  at::Tensor mask = at::ones({2, 9}, at::kBool);
  mask[0].narrow(0, 5, 4).fill_(false);
  at::NoGradGuard ng;
  at::Tensor batched = net.memory_tokens(h, mask)[0];
  at::Tensor alone = net.memory_tokens(h.narrow(0, 0, 1).narrow(1, 0, 5), at::ones({1, 5}, at::kBool))[0];
  EXPECT_TENSOR_NEAR(batched, alone, 1e-5);
  at::Tensor qb = net.query_tokens(h, mask)[0];
  at::Tensor qa = net.query_tokens(h.narrow(0, 0, 1).narrow(1, 0, 5), at::ones({1, 5}, at::kBool))[0];
  EXPECT_TENSOR_NEAR(qb, qa, 1e-5);
}

TEST(PrototypeNet, SharedMemoryAttentionEqualsPerExampleMemory) {
  // The folded path for one memory shared by the batch equals broadcasting it per example.
  PrototypeConfig c = small_cfg();
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  at::Generator g = gen(8);
  at::Tensor q = at::randn({5, c.m_q, c.d_h}, g);
  at::Tensor mem = at::randn({1, 11, c.d_h}, g);
  at::NoGradGuard ng;
  std::vector<at::Tensor> p1, p2;
  at::Tensor a = net.head()(q, mem, &p1);
  at::Tensor b = net.head()(q, mem.expand({5, 11, c.d_h}).contiguous(), &p2);
  EXPECT_TENSOR_NEAR(a, b, 1e-5);
  for (size_t l = 0; l < p1.size(); ++l) EXPECT_TENSOR_NEAR(p1[l], p2[l], 1e-6);
}

// Brute-force multi-head attention weights with an additive logit bias [B, nk].
at::Tensor brute_attention_probs(const Attention& a, const at::Tensor& q_in, const at::Tensor& kv,
                                 const at::Tensor& bias) {
  const int64_t B = q_in.size(0), nq = q_in.size(1), d = q_in.size(2), H = a.heads, dh = d / H;
  at::Tensor kvb = kv.expand({B, kv.size(1), d});
  at::Tensor out = at::empty({B, H, nq, kv.size(1)});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      at::Tensor q = a.q(q_in[b]).narrow(1, h * dh, dh), k = a.k(kvb[b]).narrow(1, h * dh, dh);
      at::Tensor s = at::matmul(q, k.t()) / std::sqrt(static_cast<double>(dh));
      if (bias.defined()) s = s + bias[b].unsqueeze(0);
      out[b][h] = at::softmax(s, -1);
    }
  return out;
}

TEST(PrototypeNet, KeyBiasAddsGammaCosineToEveryTokenOfABlock) {
  // block_key_bias: gamma * cos(query key, prototype key), the same for the m+1 tokens of a block.
  at::Generator g = gen(21);
  at::Tensor qk = unit_rows(at::randn({3, 8}, g)), pk = unit_rows(at::randn({4, 8}, g));
  at::Tensor bias = block_key_bias(qk, pk, 5, 2.5);
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{3, 20}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t t = 0; t < 5; ++t)
        EXPECT_NEAR(bias[b][k * 5 + t].item<double>(), 2.5 * at::dot(qk[b], pk[k]).item<double>(), 1e-5);
  EXPECT_FALSE(block_key_bias(qk, pk, 5, 0.0).defined());  // gamma 0: the seed's head exactly

  // The attention adds it to every head's logits, in the shared-memory and per-example paths.
  PrototypeConfig c = small_cfg();
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  const Attention& att = net.head().layers[0].att_mem;
  at::Tensor q = at::randn({3, 1, c.d_h}, g), mem = at::randn({1, 20, c.d_h}, g);
  at::NoGradGuard ng;
  at::Tensor p_shared, p_each;
  at::Tensor o_shared = att(q, mem, at::Tensor(), &p_shared, bias);
  at::Tensor o_each = att(q, mem.expand({3, 20, c.d_h}).contiguous(), at::Tensor(), &p_each, bias);
  at::Tensor want = brute_attention_probs(att, q, mem, bias);
  EXPECT_TENSOR_NEAR(p_shared, want, 1e-5);
  EXPECT_TENSOR_NEAR(p_each, want, 1e-5);
  EXPECT_TENSOR_NEAR(o_shared, o_each, 1e-5);
  // A large gamma makes the prototype with the nearest key take the attention.
  at::Tensor p_big;
  (void)att(q, mem, at::Tensor(), &p_big, block_key_bias(qk, pk, 5, 1e4));
  at::Tensor per_block = p_big.mean(1).select(1, 0).view({3, 4, 5}).sum(2);  // [B, K]
  EXPECT_TRUE(at::equal(per_block.argmax(1), at::matmul(qk, pk.t()).argmax(1)));
  EXPECT_GT(std::get<0>(per_block.max(1)).min().item<double>(), 0.99);
}

TEST(PrototypeNet, StageAHasNoPathFromTheLabelToThePrediction) {
  PrototypeConfig c = small_cfg();
  PrototypeNet net(c, 16, 1.0, 5.0, 3.0, 1.0);
  at::Generator g = gen(9);
  at::Tensor h = at::randn({6, 5, 16}, g);
  at::Tensor mask = at::ones({6, 5}, at::kBool);
  at::Tensor y = (at::rand({6}, g) * 4 + 1).set_requires_grad(true);
  StepLoss l = stage_a_loss(net, h, mask, y);
  // ŷ does not depend on y: no gradient path...
  auto gy =
      torch::autograd::grad({l.yhat.sum()}, {y}, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
  EXPECT_FALSE(gy[0].defined() && gy[0].abs().sum().item<double>() != 0.0);
  // ...and the same predictions for any labels, while the loss does depend on them (target).
  StepLoss l2 = stage_a_loss(net, h, mask, at::full({6}, 4.5));
  EXPECT_TRUE(at::equal(l.yhat.detach(), l2.yhat.detach()));
  EXPECT_NE(l.loss.item<double>(), l2.loss.item<double>());
  auto gl = torch::autograd::grad({l.loss}, {y}, {}, false, false, true);
  ASSERT_TRUE(gl[0].defined());
}

TEST(PrototypeNet, HuberMatchesTheSeedPiecewiseForm) {
  at::Tensor pred = at::tensor({0.0, 0.3, -0.5, 2.0, -3.0}, at::kDouble);
  at::Tensor tgt = at::zeros({5}, at::kDouble);
  at::Tensor got = huber(pred, tgt, 0.5);
  const double want[] = {0.0, 0.045, 0.125, 0.5 * (2.0 - 0.25), 0.5 * (3.0 - 0.25)};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got[i].item<double>(), want[i], 1e-12);
}

// ------------------------------------------------------------------------------ resTR

TEST(ResTR, IdentityAtZeroControl) {
  PrototypeConfig c = small_cfg();
  c.restr_guard_weight = 0;  // the seed's init: resTR moves Z as soon as alpha or beta > 0
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  at::Tensor z = at::randn({3, c.m_q, c.d_h}, gen(10));
  RestrStats st;
  at::NoGradGuard ng;
  at::Tensor out = net.restr()(z, at::zeros({3}), at::zeros({3}), 0.5, &st);
  EXPECT_TRUE(at::equal(out, z));
  EXPECT_EQ(st.applied, 0);
  EXPECT_EQ(st.fallbacks(), 0);
  at::Tensor moved = net.restr()(z, at::full({3}, 0.5), at::full({3}, 0.5), 1e9, &st);
  EXPECT_FALSE(at::equal(moved, z));
  EXPECT_EQ(st.applied, 3);
}

TEST(ResTR, GuardsFallBackToIdentityAndCount) {
  PrototypeConfig c = small_cfg();
  c.restr_guard_weight = 0;
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  at::Tensor z = at::randn({4, c.m_q, c.d_h}, gen(11));
  at::NoGradGuard ng;
  // Norm inflation: a huge FFN breaks ||Z_out|| <= (1+eps)||Z_in|| for every example with beta > 0.
  at::Tensor w = net.params().get("restr.ffn.fc2.weight");
  at::Tensor saved = w.clone();
  w.mul_(1000);
  RestrStats st;
  at::Tensor fb;
  at::Tensor beta = at::tensor({0.f, 1.f, 1.f, 1.f});
  at::Tensor out = net.restr()(z, at::zeros({4}), beta, 0.5, &st, &fb);
  EXPECT_EQ(st.fallback_norm, 3);
  EXPECT_TRUE(at::equal(out, z));  // example 0 is identity at zero control, 1..3 fell back
  EXPECT_EQ(fb.sum().item<int64_t>(), 3);
  // Non-finite values: NaN in the weights.
  w.copy_(saved);
  w[0][0] = std::numeric_limits<float>::quiet_NaN();
  RestrStats st2;
  out = net.restr()(z, at::zeros({4}), at::ones({4}), 0.5, &st2);
  EXPECT_EQ(st2.fallback_nonfinite, 4);
  EXPECT_TRUE(at::equal(out, z));
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
}

TEST(ResTR, GuardedDefaultStartsAsTheIdentityAndTheStageBPenaltySeesInflation) {
  PrototypeConfig c = small_cfg();  // restr_guard_weight > 0 by default
  ASSERT_GT(c.restr_guard_weight, 0);
  PrototypeNet net(c, 16, 0, 1, 0.5, 0.2);
  at::Tensor z = at::randn({3, c.m_q, c.d_h}, gen(12));
  RestrStats st;
  at::Tensor infl;
  {
    at::NoGradGuard ng;
    at::Tensor out = net.restr()(z, at::ones({3}), at::ones({3}), 0.5, &st, nullptr, &infl);
    EXPECT_TRUE(at::equal(out, z));  // zero output projections: identity at full control
    EXPECT_EQ(st.fallbacks(), 0);
    EXPECT_TRUE(at::allclose(infl, at::ones({3})));
    // An inflated resTR: the ratio the Stage B penalty reads is what the guard tests.
    net.params().get("restr.ffn.fc2.weight").normal_(0, 10);
  }
  RestrStats st2;
  at::Tensor fb;
  at::Tensor out = net.restr()(z, at::ones({3}), at::ones({3}), 0.5, &st2, &fb, &infl);
  EXPECT_EQ(st2.fallback_norm, 3);
  EXPECT_TRUE((infl > 1.5).all().item<bool>());
  EXPECT_TRUE(infl.requires_grad());  // the penalty trains resTR back inside the bound
  at::Tensor pen = at::relu(infl - (1.0 + c.restr_train_eps)).pow(2).mean();
  pen.backward();
  EXPECT_GT(net.params().get("restr.ffn.fc2.weight").grad().abs().sum().item<double>(), 0);
}

// ------------------------------------------------------------------------------ probe, verdict

TEST(PrototypeNet, TheHeadStartsAtTheLinearProbeAndScaleZeroIsTheProbe) {
  PrototypeConfig c = small_cfg();
  ASSERT_EQ(c.probe, "ridge");
  const int64_t C = 16;
  PrototypeNet net(c, C, 1.0, 5.0, 3.0, 0.5);
  ASSERT_TRUE(net.has_probe());
  at::Tensor w = at::randn({C}, gen(20)) * 0.1;
  net.set_probe(w, 3.0);
  at::Tensor h = at::randn({4, 6, C}, gen(21));
  at::Tensor mask = at::ones({4, 6}, at::kBool);
  mask[1].narrow(0, 3, 3).fill_(false);  // padding is left out of the pooled mean
  at::NoGradGuard ng;
  // The ridge prediction on the masked mean, clipped into (a, b), in double like the baseline
  at::Tensor m = mask.to(at::kDouble).unsqueeze(-1);
  at::Tensor ridge = (at::matmul((h.to(at::kDouble) * m).sum(1) / m.sum(1), w.to(at::kDouble)) + 3.0)
                         .clamp(1.0 + 4e-4, 5.0 - 4e-4);
  at::Tensor zp = net.probe_logit(h, mask);
  ASSERT_EQ(zp.scalar_type(), at::kDouble);
  at::Tensor q = net.query_tokens(h, mask);
  at::Tensor z = net.head()(q, net.memory_tokens(h, mask));
  // f_out starts at 0: the probe to double rounding (the logit/σ round trip), not float's.
  EXPECT_TRUE(at::allclose(net.output(z, zp), ridge, 1e-12, 1e-12));
  // Any head output: s = 0 serves the probe, s = 1 adds the head's logit, c shifts the logit.
  at::Tensor zr = at::randn({4}, gen(22));
  net.set_probe_scale(0.0);
  EXPECT_TRUE(at::allclose(net.output(zr, zp), ridge, 1e-12, 1e-12));
  net.set_probe_scale(1.0);
  EXPECT_TRUE(at::allclose(net.output(zr, zp), net.bound(zp + zr.to(at::kDouble))));
  net.set_probe_scale(0.0);
  net.set_probe_offset(0.25);
  EXPECT_DOUBLE_EQ(net.probe_offset(), 0.25);
  EXPECT_TRUE(at::allclose(net.output(zr, zp), net.bound(zp + 0.25)));
  // probe = none: the seed's output exactly.
  PrototypeConfig seed = small_cfg();
  seed.probe = "none";
  PrototypeNet plain(seed, C, 1.0, 5.0, 3.0, 0.5);
  EXPECT_FALSE(plain.has_probe());
  EXPECT_TRUE(at::equal(plain.output(zr, plain.probe_logit(h, mask)), plain.bound(zr)));
}

RegressionMetrics rm(double mae, double spearman) {
  RegressionMetrics m;
  m.n = 10;
  m.mae = mae;
  m.spearman = spearman;
  return m;
}

TEST(ProbeVerdict, BeatsTrailsMatchesAndTheMarginDecidesTheWarning) {
  ProbeVerdict v = probe_verdict(rm(0.240, 0.30), rm(0.250, 0.20), 0.0);
  EXPECT_FALSE(v.trails);
  EXPECT_NEAR(v.mae_delta, -0.010, 1e-12);
  EXPECT_NEAR(v.spearman_delta, 0.10, 1e-12);
  EXPECT_NE(v.text.find("head beats the linear probe by 0.0100 MAE"), std::string::npos) << v.text;

  v = probe_verdict(rm(0.260, 0.10), rm(0.250, 0.20), 0.0);
  EXPECT_TRUE(v.trails);
  EXPECT_NE(v.text.find("head trails the linear probe by 0.0100 MAE"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("more than the margin"), std::string::npos) << v.text;

  // Inside the margin: still "trails", but no warning.
  v = probe_verdict(rm(0.260, 0.10), rm(0.250, 0.20), 0.02);
  EXPECT_FALSE(v.trails);
  EXPECT_NE(v.text.find("head trails the linear probe by 0.0100 MAE"), std::string::npos) << v.text;
  EXPECT_EQ(v.text.find("margin"), std::string::npos) << v.text;
  // Exactly at the margin is not beyond it.
  EXPECT_FALSE(probe_verdict(rm(0.25, 0.2), rm(0.24, 0.2), 0.01 + 1e-12).trails);

  v = probe_verdict(rm(0.2500000001, 0.2), rm(0.25, 0.2), 0.0);
  EXPECT_NE(v.text.find("head matches the linear probe"), std::string::npos) << v.text;
  EXPECT_FALSE(v.trails);  // a match (within 1e-6, rounding of the same prediction) never warns
}

// ------------------------------------------------------------------------------ trainer, artifact, predictor

struct Toy {
  std::unique_ptr<LoadedModel> model;
  RegressionData data;
  LabelBounds bounds{0.0, 10.0};
};

Toy toy(int n = 40) {
  Toy t;
  auto m = load_model("builtin:tiny");
  EXPECT_TRUE(m.ok()) << m.status();
  t.model = std::move(*m);
  const char* words[] = {"red", "green", "blue", "gold"};
  for (int i = 0; i < n; ++i) {
    t.data.texts.push_back(std::string("a ") + words[i % 4] + " thing number " + std::to_string(i));
    t.data.labels.push_back(static_cast<float>(2 * (i % 4) + 1));
    t.data.ids.push_back("row" + std::to_string(i));
  }
  return t;
}

void expect_same_tensors(const PrototypeArtifact& a, const PrototypeArtifact& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(at::equal(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
  }
  ASSERT_EQ(a.prototypes.size(), b.prototypes.size());
  for (size_t i = 0; i < a.prototypes.size(); ++i) EXPECT_EQ(a.prototypes[i].index, b.prototypes[i].index);
}

// ------------------------------------------------------------------------------ residual choice

namespace {
struct HeldOut {
  std::vector<double> zp, zh, truth;
};
double logit01(double u) { return std::log(u) - std::log1p(-u); }
// 800 held-out rows on [0, 10]: the probe ranks them with some signal; the truth sits `bias` label
// units above the probe, plus `signal` times a feature the probe does not see, plus noise.
HeldOut held_out(double bias, double signal, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  HeldOut h;
  for (int i = 0; i < 800; ++i) {
    const double probe = 5.0 + 0.5 * nd(rng), hidden = nd(rng);
    h.zp.push_back(logit01(probe / 10.0));
    h.truth.push_back(std::clamp(probe + bias + signal * hidden + 0.6 * nd(rng), 0.0, 10.0));
    h.zh.push_back(hidden);  // overwritten by the cases below as needed
  }
  return h;
}
}  // namespace

TEST(ResidualChoice, AConstantResidualServesOnlyTheLevelAndKeepsTheProbesOrderExactly) {
  HeldOut h = held_out(/*bias=*/0.4, /*signal=*/0.0, 1);
  // A head that learned the level (the logit of +0.4 around 5 is ~0.16) plus rounding-size noise
  // that can swap near-equal pairs: on the real sets this moved Spearman in the 6th digit.
  std::mt19937_64 rng(2);
  std::normal_distribution<double> nd;
  for (double& z : h.zh) z = 0.16 + 1e-7 * nd(rng);
  auto rc = choose_residual(h.zp, h.zh, h.truth, 0.0, 10.0);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->mode, "level");
  EXPECT_EQ(rc->scale, 0.0);
  EXPECT_GT(rc->offset, 0.05);
  EXPECT_LE(rc->offset, 0.16 + 1e-6);
  // Served: σ(z_probe + c) — the probe's ranks exactly, a lower MAE.
  std::vector<double> probe, served;
  for (size_t i = 0; i < h.zp.size(); ++i) {
    probe.push_back(10.0 / (1.0 + std::exp(-h.zp[i])));
    served.push_back(10.0 / (1.0 + std::exp(-(h.zp[i] + rc->offset))));
  }
  auto mp = regression_metrics(probe, h.truth), ms = regression_metrics(served, h.truth);
  ASSERT_TRUE(mp.ok() && ms.ok());
  EXPECT_EQ(average_ranks(served), average_ranks(probe));
  EXPECT_EQ(ms->spearman, mp->spearman);
  EXPECT_LT(ms->mae, mp->mae);
  ASSERT_EQ(rc->grid.size(), 20u);  // 10 scales × {level, residual}
}

TEST(ResidualChoice, AnInformativeResidualIsServedAndAHarmfulOneIsNot) {
  // The head sees what the probe misses: its residual raises Spearman and lowers MAE.
  HeldOut h = held_out(/*bias=*/0.0, /*signal=*/0.8, 3);
  for (double& z : h.zh) z *= 0.35;  // ~ the logit of 0.8 label units per unit of the hidden feature
  auto rc = choose_residual(h.zp, h.zh, h.truth, 0.0, 10.0);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->mode, "residual");
  EXPECT_GT(rc->scale, 0.0);
  EXPECT_EQ(rc->offset, 0.0);

  // Noise that has nothing to do with the labels: the probe alone.
  HeldOut n = held_out(/*bias=*/0.0, /*signal=*/0.0, 4);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  for (double& z : n.zh) z = 0.5 * nd(rng);
  rc = choose_residual(n.zp, n.zh, n.truth, 0.0, 10.0);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->mode, "probe");
  EXPECT_EQ(rc->scale, 0.0);
  EXPECT_EQ(rc->offset, 0.0);

  // A level the held-out labels do not support (the truth sits on the probe): the probe alone.
  for (double& z : n.zh) z = 0.3;
  rc = choose_residual(n.zp, n.zh, n.truth, 0.0, 10.0);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->mode, "probe");
}

TEST(ResidualChoice, RefusesMismatchedOrNonFiniteInput) {
  EXPECT_INVALID(choose_residual({}, {}, {}, 0, 1).status(), "non-zero");
  EXPECT_INVALID(choose_residual({0.1, 0.2}, {0.1}, {0.5, 0.5}, 0, 1).status(), "must be equal");
  EXPECT_INVALID(choose_residual({0.1, NAN}, {0.1, 0.2}, {0.5, 0.5}, 0, 1).status(), "row 1");
}

TEST(PrototypeTrainer, ResumeFromACheckpointEqualsAnUninterruptedRun) {
  Toy t = toy();
  PrototypeConfig c = small_cfg();
  c.label_flip_p = 0.5;  // its per-step draw is part of the resumed randomness too
  auto full = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
  ASSERT_TRUE(full.ok()) << full.status();
  auto ref = (*full)->run({});
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t spe = (*full)->steps_per_epoch();  // 5

  // Cancel once in Stage A (step 7) and once in Stage B (step 2*spe + 6), resuming each time.
  TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors");
  for (int64_t cancel_at : {int64_t{7}, 2 * spe + 6}) {
    auto tr = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
    ASSERT_TRUE(tr.ok());
    CancelToken cancel;
    TrainHooks hooks;
    hooks.cancel = &cancel;
    hooks.checkpoint_path = ckpt;
    hooks.checkpoint_every = 3;
    hooks.on_progress = [&](const TrainProgress& p) {
      if (p.global_step == cancel_at && (p.stage == "stage_a" || p.stage == "stage_b")) cancel.cancel();
    };
    auto r = (*tr)->run(hooks);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  }
  auto tr = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
  ASSERT_TRUE(tr.ok());
  TrainHooks hooks;
  hooks.checkpoint_path = ckpt;
  auto resumed = (*tr)->run(hooks);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE((*tr)->report().value("resumed", false));
  expect_same_tensors(*ref, *resumed);

  // A checkpoint of another run is refused, not silently used.
  PrototypeConfig other = c;
  other.lr = 0.5;
  auto tr2 = PrototypeTrainer::create(*t.model, t.data, t.bounds, other);
  ASSERT_TRUE(tr2.ok());
  auto r2 = (*tr2)->run(hooks);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kFailedPrecondition) << r2.status();
}

TEST(PrototypeTrainer, HeldOutRowsAreNeverPrototypesAndResTRActsOnTrainingQueries) {
  Toy t = toy(80);
  PrototypeConfig c = small_cfg();
  c.epochs_b = 4;
  auto tr = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
  ASSERT_TRUE(tr.ok()) << tr.status();
  auto art = (*tr)->run({});
  ASSERT_TRUE(art.ok()) << art.status();
  const std::vector<int64_t>& val = (*tr)->val_rows();
  ASSERT_EQ(val.size(), 8u);  // round(0.1 * 80)
  std::set<int64_t> held(val.begin(), val.end());
  for (const PrototypeEntry& e : art->prototypes) EXPECT_EQ(held.count(e.index), 0u) << e.index;
  const double s = (*tr)->net()->probe_scale();
  EXPECT_GE(s, 0.0);
  EXPECT_LE(s, 1.0);
  EXPECT_TRUE((*tr)->report().contains("val_stage_b"));
  EXPECT_TRUE((*tr)->report().contains("probe"));

  // resTR with its guard penalty: on in-distribution queries the refinement is applied, and the
  // guard falls back on fewer than 10% of them (the seed's unconstrained resTR fell back on 99%).
  auto pred = Predictor::create(*std::move(art), *t.model);
  ASSERT_TRUE(pred.ok()) << pred.status();
  auto out = (*pred)->predict(t.data.texts, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  int64_t in_dist = 0, fell_back = 0, refined = 0;
  for (const Prediction& p : *out) {
    if (p.out_of_distribution) continue;
    ++in_dist;
    fell_back += p.restr_fallback;
    refined += (p.alpha > 0 || p.beta > 0) && !p.restr_fallback;
  }
  ASSERT_GE(in_dist, 40);
  EXPECT_LT(static_cast<double>(fell_back) / static_cast<double>(in_dist), 0.1);
  EXPECT_GT(refined, in_dist / 2);
  EXPECT_EQ((*pred)->restr_stats().fallbacks(), fell_back);
}

TEST(PrototypeTrainer, RefusesConfigsTheDataCannotSatisfy) {
  Toy t = toy(10);
  PrototypeConfig c = small_cfg();
  c.K = 11;
  c.T = 11;
  EXPECT_INVALID(PrototypeTrainer::create(*t.model, t.data, t.bounds, c).status(), "K (11) exceeds the 10");
  c = small_cfg();
  t.data.labels[3] = 11.0f;
  EXPECT_INVALID(PrototypeTrainer::create(*t.model, t.data, t.bounds, c).status(), "row 3 label 11");
}

TEST(PrototypeArtifact, SavesAndLoadsBitExactlyAndPredictsWithTheProbeInDouble) {
  Toy t = toy();
  PrototypeConfig c = small_cfg();
  auto tr = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
  ASSERT_TRUE(tr.ok());
  auto art = (*tr)->run({});
  ASSERT_TRUE(art.ok()) << art.status();
  std::set<int64_t> uniq;
  for (const PrototypeEntry& p : art->prototypes) {
    uniq.insert(p.index);
    EXPECT_EQ(p.text, t.data.texts[static_cast<size_t>(p.index)]);
    EXPECT_EQ(p.label, t.data.labels[static_cast<size_t>(p.index)]);
    EXPECT_EQ(p.id, t.data.ids[static_cast<size_t>(p.index)]);
  }
  EXPECT_EQ(static_cast<int64_t>(uniq.size()), c.K);

  TempDir dir;
  auto bytes = save_artifact(*art, dir.path());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto back = load_artifact(dir.path());
  ASSERT_TRUE(back.ok()) << back.status();
  expect_same_tensors(*art, *back);
  EXPECT_EQ(to_json(back->cfg), to_json(art->cfg));
  EXPECT_EQ(back->backbone.fingerprint, art->backbone.fingerprint);

  auto pred = Predictor::create(*back, *t.model);
  ASSERT_TRUE(pred.ok()) << pred.status();
  auto out = (*pred)->predict({"a red thing", "a gold thing number 3", "zzz qqq"}, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  for (const Prediction& p : *out) {
    EXPECT_GE(p.value, 0.0);
    EXPECT_LE(p.value, 10.0);
    double sum = 0;
    for (double w : p.weights) sum += w;
    EXPECT_NEAR(sum, 1.0, 1e-5);  // attribution sums to 1 over the K prototypes
    ASSERT_EQ(p.top.size(), 2u);
    EXPECT_GE(p.top[0].weight, p.top[1].weight);
    EXPECT_GE(p.population_consistency, 0.0);
    EXPECT_LE(p.population_consistency, 1.0);
    EXPECT_GE(p.label_reliance, 0.0);
    EXPECT_LE(p.label_reliance, 10.0);  // at most b - a
    EXPECT_GE(p.agreement_consistency, 0.0);
    EXPECT_LE(p.agreement_consistency, 1.0);
    if (p.out_of_distribution) {
      EXPECT_EQ(p.alpha, 0.0);
    }
  }
  // Same text alone or in a batch: the same answer.
  auto single = (*pred)->predict({"a red thing"}, 2);
  ASSERT_TRUE(single.ok());
  EXPECT_NEAR((*single)[0].value, (*out)[0].value, 1e-5);
  EXPECT_INVALID((*pred)->predict({"x"}, c.K + 1).status(), "top_k");

  // The probe is stored in double; its level offset survives the round trip and moves the prediction.
  ASSERT_TRUE(art->tensor("probe.w").defined());
  EXPECT_EQ(art->tensor("probe.w").scalar_type(), at::kDouble);
  const std::string mode = (*tr)->report()["val_stage_b"].value("mode", "");
  EXPECT_TRUE(mode == "probe" || mode == "level" || mode == "residual") << mode;
  auto drop_offset = [&] {
    art->tensors.erase(std::remove_if(art->tensors.begin(), art->tensors.end(),
                                      [](const auto& nt) { return nt.first == "probe.offset"; }),
                       art->tensors.end());
  };
  drop_offset();
  art->tensors.emplace_back("probe.offset", at::full({1}, 0.5, at::kDouble));
  TempDir shifted_dir;
  ASSERT_TRUE(save_artifact(*art, shifted_dir.path()).ok());
  auto shifted_art = load_artifact(shifted_dir.path());
  ASSERT_TRUE(shifted_art.ok()) << shifted_art.status();
  EXPECT_EQ(shifted_art->tensor("probe.offset").item<double>(), 0.5);
  auto shifted = Predictor::create(*shifted_art, *t.model);
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  // Written before the offset existed: loads, and serves no offset.
  drop_offset();
  TempDir old_dir;
  ASSERT_TRUE(save_artifact(*art, old_dir.path()).ok());
  auto old = load_artifact(old_dir.path());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->tensor("probe.offset").item<double>(), 0.0);
  auto plain = Predictor::create(*old, *t.model);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto a = (*shifted)->predict({"a red thing"}, 1), b = (*plain)->predict({"a red thing"}, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)[0].value, (*b)[0].value);
}

TEST(PrototypeArtifact, RefusesCorruptFilesAndAnotherBackbone) {
  Toy t = toy();
  PrototypeConfig c = small_cfg();
  c.epochs_a = 1;
  c.epochs_b = 1;
  auto tr = PrototypeTrainer::create(*t.model, t.data, t.bounds, c);
  ASSERT_TRUE(tr.ok());
  auto art = (*tr)->run({});
  ASSERT_TRUE(art.ok());
  TempDir dir;
  ASSERT_TRUE(save_artifact(*art, dir.path()).ok());

  auto other = load_model("builtin:tiny-gpt2");
  ASSERT_TRUE(other.ok());
  auto wrong = Predictor::create(*art, **other);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();
  EXPECT_MSG_HAS(wrong.status(), "trained on backbone");

  // A manifest from before key_bias and slot_init existed describes the seed's head: it loads
  // with key_bias 0 (and N(0, 1) slots), not with today's defaults.
  {
    nlohmann::json m = nlohmann::json::parse(frost::testing::read_text_file(dir.file("manifest.json")));
    ASSERT_EQ(m["config"]["key_bias"].get<double>(), 16.0);
    m["config"].erase("key_bias");
    m["config"].erase("slot_init");
    frost::testing::write_text_file(dir.file("manifest.json"), m.dump());
    auto old = load_artifact(dir.path());
    ASSERT_TRUE(old.ok()) << old.status();
    EXPECT_EQ(old->cfg.key_bias, 0.0);
    EXPECT_EQ(old->cfg.slot_init, "normal");
  }

  // One flipped byte in the tensor file: checksum mismatch, named.
  std::string bytes = frost::testing::read_text_file(dir.file("prototype.safetensors"));
  bytes[bytes.size() - 3] ^= 0x40;
  frost::testing::write_text_file(dir.file("prototype.safetensors"), bytes);
  EXPECT_INVALID(load_artifact(dir.path()).status(), "sha256 does not match");
  // A manifest that is not JSON / lacks fields.
  frost::testing::write_text_file(dir.file("manifest.json"), "{\"format\": \"frost.prototype\"");
  EXPECT_INVALID(load_artifact(dir.path()).status(), "not a JSON object");
  frost::testing::write_text_file(dir.file("manifest.json"),
                                  "{\"format\": \"frost.prototype\", \"format_version\": 1}");
  EXPECT_INVALID(load_artifact(dir.path()).status(), "missing or mistyped field");
  // Integer fields holding floats out of range are refused, not converted (that is undefined; found by
  // tests/fuzz/artifact_manifest_fuzz.cc).
  frost::testing::write_text_file(dir.file("manifest.json"),
                                  "{\"format\": \"frost.prototype\", \"format_version\": 1e300}");
  EXPECT_INVALID(load_artifact(dir.path()).status(), "format_version 1e+300 is not supported");
  frost::testing::write_text_file(
      dir.file("manifest.json"),
      "{\"format\": \"frost.prototype\", \"format_version\": 1, \"backbone\": {\"name\": \"m\", \"arch\": \"llama\", "
      "\"dim\": 1e300, \"n_layer\": 1, \"n_vocab\": 2, \"fingerprint\": \"0\"}}");
  EXPECT_INVALID(load_artifact(dir.path()).status(), "missing or mistyped field: dim must be an integer, got 1e+300");
  EXPECT_EQ(load_artifact(dir.file("nowhere")).status().code(), absl::StatusCode::kNotFound);
}

TEST(FeatureCache, SpillsToDiskWithTheSameValues) {
  Toy t = toy(12);
  FeatureCache::Options mem_opts, disk_opts;
  mem_opts.max_tokens = disk_opts.max_tokens = 8;
  disk_opts.budget_bytes = 0;
  auto a = FeatureCache::build(*t.model, t.data.texts, mem_opts);
  auto b = FeatureCache::build(*t.model, t.data.texts, disk_opts);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)->spilled());
  EXPECT_TRUE((*b)->spilled());
  for (int64_t i = 0; i < 12; ++i) EXPECT_LE((*a)->length(i), 8);
  FeatureBatch x = (*a)->batch({0, 5, 11}), y = (*b)->batch({0, 5, 11});
  EXPECT_TRUE(at::equal(x.h, y.h));
  EXPECT_TRUE(at::equal(x.mask, y.mask));
  // The cached features are the backbone's final-norm hidden states (fp16-rounded).
  auto ids = tokenize_truncated(*t.model, t.data.texts[5], 8);
  ASSERT_TRUE(ids.ok());
  auto h = backbone_hidden(*t.model, *ids);
  ASSERT_TRUE(h.ok());
  EXPECT_TENSOR_NEAR(x.h[1].narrow(0, 0, h->size(0)), *h, 1e-2);
  CancelToken cancel;
  cancel.cancel();
  EXPECT_EQ(FeatureCache::build(*t.model, t.data.texts, mem_opts, &cancel).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace frost::proto
