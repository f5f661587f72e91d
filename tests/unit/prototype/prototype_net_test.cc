// The prototype network (core/prototype/net.h) against the seed: bounded output, padding invariance, the
// shared-memory and key-bias attention paths, Stage A's missing label path, Huber, resTR
// (restr-residual-refinement.md) and its guards, and the head's start at the linear probe with its verdict.
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
  MinibatchLoss l = stage_a_loss(net, h, mask, y);
  // ŷ does not depend on y: no gradient path...
  auto gy =
      torch::autograd::grad({l.yhat.sum()}, {y}, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
  EXPECT_FALSE(gy[0].defined() && gy[0].abs().sum().item<double>() != 0.0);
  // ...and the same predictions for any labels, while the loss does depend on them (target).
  MinibatchLoss l2 = stage_a_loss(net, h, mask, at::full({6}, 4.5));
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

}  // namespace
}  // namespace frost::prototype
