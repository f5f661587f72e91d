// Architecture variants (core/model/variants.h, docs/architecture_variants.md) on random models:
//  (a) incremental decode_step() == full forward() == chunked / one-token forward();
//  (b) all of them == a naive transcription of the seeds' formulas written here (double precision,
//      explicit loops over positions, no code shared with core/model);
//  (c) RA and SBA at decode agree with forward() on every KV codec.
// Config validation and parameter counts: variants_config_test.cc; the loader: variants_loader_test.cc.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/builtin_models.h"
#include "core/model/kv_dims.h"
#include "core/model/model_config.h"
#include "core/model/model_loader.h"
#include "core/model/transformer.h"
#include "core/model/variants.h"
#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/unit/model/variants_testing.h"

namespace frost {
namespace {

using ::frost::testing::max_abs_diff;
using ::frost::testing::NamedTensors;
using ::frost::testing::TempDir;
using ::frost::testing::write_model_dir;
using ojson = nlohmann::ordered_json;
using namespace variants_testing;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------------------------
// The naive reference: the seeds' formulas, transcribed directly (double precision).

at::Tensor dbl(const at::Tensor& t) { return t.defined() ? t.to(at::kDouble) : t; }

at::Tensor naive_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int64_t>& toks) {
  const auto T = static_cast<int64_t>(toks.size());
  const int64_t H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim, F = c.ffn_dim;
  const bool gpt2 = c.arch == Arch::kGpt2;
  const VariantConfig& var = c.variants;
  auto norm = [&](const at::Tensor& x, const at::Tensor& g, const at::Tensor& b) {
    if (gpt2) {
      const at::Tensor mu = x.mean(-1, true);
      const at::Tensor v = (x - mu).pow(2).mean(-1, true);
      return (x - mu) / (v + c.norm_eps).sqrt() * dbl(g) + dbl(b);
    }
    return x / (x.pow(2).mean(-1, true) + c.norm_eps).sqrt() * dbl(g);
  };
  auto lin = [](const at::Tensor& x, const at::Tensor& W, const at::Tensor& b) {
    at::Tensor y = at::matmul(x, dbl(W).t());
    return b.defined() ? y + dbl(b) : y;
  };
  const at::Tensor ids = at::tensor(toks, at::kLong);
  const at::Tensor E = dbl(w.tok_embed).index_select(0, ids);  // [T, C], no position
  at::Tensor x = E.clone();
  if (gpt2) x = x + dbl(w.pos_embed).narrow(0, 0, T);

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const at::Tensor qkv = lin(norm(x, lw.attn_norm_w, lw.attn_norm_b), lw.wqkv, lw.bqkv);
    at::Tensor q = qkv.narrow(1, 0, H * D).reshape({T, H, D}).clone();
    at::Tensor k = qkv.narrow(1, H * D, Hkv * D).reshape({T, Hkv, D}).clone();
    const at::Tensor v = qkv.narrow(1, H * D + Hkv * D, Hkv * D).reshape({T, Hkv, D});
    if (!gpt2) {  // RoPE, rotate-half pairs (j, j + D/2), angle t·θ^(−2j/D)
      for (at::Tensor* m : {&q, &k}) {
        auto a = m->accessor<double, 3>();
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < m->size(1); ++h)
            for (int64_t j = 0; j < D / 2; ++j) {
              const double ang =
                  static_cast<double>(t) * std::pow(c.rope_theta, -2.0 * j / static_cast<double>(D));
              const double x1 = a[t][h][j], x2 = a[t][h][j + D / 2];
              a[t][h][j] = x1 * std::cos(ang) - x2 * std::sin(ang);
              a[t][h][j + D / 2] = x2 * std::cos(ang) + x1 * std::sin(ang);
            }
      }
    }
    // softmax over j <= i of probe·rows_j / √D
    auto probs = [&](const at::Tensor& probe, const at::Tensor& rows, int64_t i) {
      std::vector<double> p(static_cast<size_t>(i + 1));
      double m = -1e300, z = 0;
      for (int64_t j = 0; j <= i; ++j) {
        p[static_cast<size_t>(j)] =
            (probe * rows[j]).sum().item<double>() / std::sqrt(static_cast<double>(D));
        m = std::max(m, p[static_cast<size_t>(j)]);
      }
      for (double& s : p) z += (s = std::exp(s - m));
      for (double& s : p) s /= z;
      return p;
    };
    at::Tensor o = at::zeros({T, H, D}, at::kDouble);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      const at::Tensor qh = q.select(1, h), kg = k.select(1, g), vg = v.select(1, g);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p;
        if (var.is_ra(l)) {  // s_ij = k_i·q_j
          p = probs(kg[i], qh, i);
        } else if (var.is_sba(l)) {  // α·p_fwd + (1 − α)·p_rev
          const std::vector<double> pf = probs(qh[i], kg, i), pr = probs(kg[i], qh, i);
          for (size_t j = 0; j < pf.size(); ++j)
            p.push_back(var.sba_alpha * pf[j] + (1 - var.sba_alpha) * pr[j]);
        } else {  // s_ij = q_i·k_j
          p = probs(qh[i], kg, i);
        }
        at::Tensor acc = at::zeros({D}, at::kDouble);
        for (int64_t j = 0; j <= i; ++j) acc = acc + p[static_cast<size_t>(j)] * vg[j];
        o[i][h] = acc;
      }
    }
    o = o.reshape({T, H * D});
    at::Tensor a_out;
    if (var.is_router(l)) {
      const int64_t nf = (H - var.router_ra_heads) * D;
      const at::Tensor out_full = lin(o.narrow(1, 0, nf), lw.var.proj_full, lw.var.proj_full_b);
      const at::Tensor out_ra = lin(o.narrow(1, nf, H * D - nf), lw.var.proj_ra, lw.var.proj_ra_b);
      at::Tensor f = at::zeros({T, 4}, at::kDouble);
      for (int64_t t = 0; t < T; ++t) {
        f[t][0] = (x[t] - E[t]).pow(2).sum().sqrt();  // shift = ‖x − E(x)‖
        f[t][1] = x[t].pow(2).sum().sqrt();
        f[t][2] = E[t].pow(2).sum().sqrt();
        f[t][3] = (x[t] * E[t]).sum();
      }
      at::Tensor hid = lin(f, lw.var.router_w1, lw.var.router_b1);
      hid = 0.5 * hid * (1 + at::erf(hid / std::sqrt(2.0)));
      const at::Tensor z = lin(hid, lw.var.router_w2, lw.var.router_b2);
      const at::Tensor p = z.exp() / z.exp().sum(-1, true);  // (p_ra, p_full)
      a_out = p.narrow(1, 0, 1) * out_ra + p.narrow(1, 1, 1) * out_full;
    } else {
      a_out = lin(o, lw.wo, lw.bo);
    }
    x = x + a_out;
    const at::Tensor hn = norm(x, lw.mlp_norm_w, lw.mlp_norm_b);
    at::Tensor act;
    if (gpt2) {
      at::Tensor u = lin(hn, lw.w_in, lw.b_in);
      if (var.has_mlp_ctx(l)) {
        const bool use = !var.mlp_ctx_conductor || lw.var.route_gate.item<double>() < 0.5;
        if (use) {
          const double alpha = lw.var.ctx_alpha.item<double>();
          const at::Tensor ctx_h =
              lin(lin(a_out, lw.var.ctx_down, at::Tensor()), lw.var.ctx_up, at::Tensor());
          u = (1 - alpha) * u + alpha * ctx_h;
        }
      }
      act = 0.5 * u * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u.pow(3))));
    } else {
      const at::Tensor gu = lin(hn, lw.w_in, lw.b_in);
      const at::Tensor g = gu.narrow(1, 0, F);
      act = g / (1 + (-g).exp()) * gu.narrow(1, F, F);
    }
    x = x + lin(act, lw.w_out, lw.b_out);
  }
  return lin(norm(x, w.final_norm_w, w.final_norm_b), w.lm_head, at::Tensor()).to(at::kFloat);
}

// ---------------------------------------------------------------------------------------------
// Random variant models.

struct VCase {
  std::string name;
  std::string base;  // builtin:tiny (LLaMA) | builtin:tiny-gpt2
  bool mha;          // LLaMA: n_head_kv = n_head (RA/SBA need it)
  VariantConfig v;
};

std::vector<VCase> cases() {
  return {
      {"ra_gpt2", "builtin:tiny-gpt2", false, ra({0})},
      {"ra_llama", "builtin:tiny", true, ra({1})},
      {"sba_gpt2", "builtin:tiny-gpt2", false, sba({1}, 0.3)},
      {"sba_llama", "builtin:tiny", true, sba({0}, 0.6)},
      {"router_gpt2", "builtin:tiny-gpt2", false, router({0, 1}, 1, 16)},
      {"router_llama_gqa", "builtin:tiny", false, router({1}, 2, 8)},
      {"router_on_ra_layer_gpt2", "builtin:tiny-gpt2", false, router({1}, 3, 16, {1})},
      {"mlp_ctx_gpt2", "builtin:tiny-gpt2", false, mlp_ctx(8, false)},
      {"conductor_gpt2", "builtin:tiny-gpt2", false, mlp_ctx(8, true)},
      {"all_gpt2", "builtin:tiny-gpt2", false, all_of_them()},
  };
}

void PrintTo(const VCase& c, std::ostream* os) { *os << c.name; }

class VariantPathsTest : public ::testing::TestWithParam<VCase> {};

// (a) + (b)
TEST_P(VariantPathsTest, DecodeEqualsForwardEqualsNaiveFormulas) {
  c10::InferenceMode im;
  const ModelConfig cfg = make_config(GetParam().base, GetParam().mha, GetParam().v);
  const auto tf = make_model(cfg);
  const int64_t T = 16, V = cfg.n_vocab;
  const std::vector<int64_t> toks = tokens(T, V);
  const at::Tensor ids = at::tensor(toks, at::kLong);

  SequenceKv kv_full(tf->kv_spec(T, KvCodecKind::kF32));
  const at::Tensor full = tf->forward(ids, kv_full);
  SequenceKv kv_chunk(tf->kv_spec(T, KvCodecKind::kF32));
  const at::Tensor chunked =
      at::cat({tf->forward(ids.narrow(0, 0, 7), kv_chunk), tf->forward(ids.narrow(0, 7, 9), kv_chunk)});
  SequenceKv kv_fast(tf->kv_spec(T, KvCodecKind::kF32)), kv_ref(tf->kv_spec(T, KvCodecKind::kF32));
  DecodeScratch s;
  double err_fast = 0, err_ref = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* lf = tf->decode_step(static_cast<int32_t>(toks[static_cast<size_t>(t)]), kv_fast, s);
    err_fast =
        std::max(err_fast, max_abs_diff(at::from_blob(const_cast<float*>(lf), {V}, at::kFloat), full[t]));
    err_ref = std::max(err_ref, max_abs_diff(tf->forward(ids.narrow(0, t, 1), kv_ref)[0], full[t]));
  }
  const at::Tensor naive = naive_logits(cfg, tf->weights(), toks);
  const double err_naive = max_abs_diff(full, naive);
  std::fprintf(stderr, "%s: max |diff| decode_step %.3g, forward T=1 %.3g, chunked %.3g, naive %.3g\n",
               GetParam().name.c_str(), err_fast, err_ref, max_abs_diff(chunked, full), err_naive);
  EXPECT_LE(err_fast, 1e-4);
  EXPECT_LE(err_ref, 1e-4);
  EXPECT_LE(max_abs_diff(chunked, full), 1e-4);
  EXPECT_LE(err_naive, 1e-4);

  // The variant matters: the plain model with the same base weights gives other logits.
  ModelConfig plain = cfg;
  plain.variants = VariantConfig();
  const auto tf_plain = make_model(plain);
  SequenceKv kv_plain(tf_plain->kv_spec(T, KvCodecKind::kF32));
  EXPECT_GT(max_abs_diff(tf_plain->forward(ids, kv_plain), full), 1e-2);
  EXPECT_GT(max_abs_diff(full[0], full[T - 1]), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantPathsTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<VCase>& i) { return i.param.name; });

// bf16 weights: the variant matrices go through the bf16 mat-vec kernel too.
TEST(VariantPathsBf16Test, DecodeEqualsForward) {
  c10::InferenceMode im;
  const ModelConfig cfg = make_config("builtin:tiny-gpt2", false, all_of_them());
  const auto tf = make_model(cfg, at::kBFloat16);
  const int64_t T = 12;
  const std::vector<int64_t> toks = tokens(T, cfg.n_vocab);
  SequenceKv kv_full(tf->kv_spec(T, KvCodecKind::kF32)), kv_fast(tf->kv_spec(T, KvCodecKind::kF32));
  const at::Tensor full = tf->forward(at::tensor(toks, at::kLong), kv_full);
  DecodeScratch s;
  for (int64_t t = 0; t < T; ++t) {
    const float* lf = tf->decode_step(static_cast<int32_t>(toks[static_cast<size_t>(t)]), kv_fast, s);
    EXPECT_LE(max_abs_diff(at::from_blob(const_cast<float*>(lf), {cfg.n_vocab}, at::kFloat), full[t]), 1e-4)
        << t;
  }
}

// The conductor's gate really switches the context: with every g >= 0.5 the model equals the plain
// one; with g < 0.5 it does not.
TEST(ConductorTest, GateAboveHalfTurnsTheContextOff) {
  c10::InferenceMode im;
  const ModelConfig cfg = make_config("builtin:tiny-gpt2", false, mlp_ctx(8, true));
  ModelConfig plain = cfg;
  plain.variants = VariantConfig();
  const std::vector<int64_t> toks = tokens(10, cfg.n_vocab);
  auto logits = [&](const ModelConfig& c, const ModelWeights& w) {
    Transformer tf(c, w);
    SequenceKv kv(tf.kv_spec(10, KvCodecKind::kF32));
    return tf.forward(at::tensor(toks, at::kLong), kv);
  };
  const at::Tensor ref = logits(plain, random_weights(plain, kSeed, at::kFloat));
  for (float g : {0.5f, 0.49f}) {
    ModelWeights w = random_weights(cfg, kSeed, at::kFloat);
    for (auto& lw : w.layers) lw.var.route_gate = at::full({}, g, at::kFloat);
    const double d = max_abs_diff(logits(cfg, w), ref);
    if (g >= 0.5f) {
      EXPECT_EQ(d, 0.0) << "g = " << g;
    } else {
      EXPECT_GT(d, 1e-3) << "g = " << g;
    }
  }
}

// (c) RA and SBA at decode on every codec agree with forward() on the same codec.
struct CodecCase {
  std::string name;
  std::string base;
  VariantConfig v;
  KvCodecKind codec;
};

void PrintTo(const CodecCase& c, std::ostream* os) { *os << c.name; }

class VariantCodecTest : public ::testing::TestWithParam<CodecCase> {};

// As TransformerPathsTest: K/V rows computed by a mat-vec vs a GEMM differ in the last fp32 bit,
// which may flip one storage rounding.
double codec_tolerance(KvCodecKind k) {
  switch (k) {
    case KvCodecKind::kF32:
      return 1e-4;
    case KvCodecKind::kF16:
      return 2e-3;
    case KvCodecKind::kBF16:
      return 2e-2;
    case KvCodecKind::kInt8:
      return 1e-2;
    case KvCodecKind::kInt4:
      return 5e-2;
    case KvCodecKind::kKvSplice:  // as KvSpliceModelTest
      return 2e-3;
  }
  return 0;
}

TEST_P(VariantCodecTest, DecodeStepEqualsForwardOnTheSameCodec) {
  c10::InferenceMode im;
  const CodecCase& p = GetParam();
  const ModelConfig cfg = make_config(p.base, true, p.v);
  const auto tf = make_model(cfg);
  const int64_t T = 24, V = cfg.n_vocab;
  const std::vector<int64_t> toks = tokens(T, V);
  SequenceKv kv_full(tf->kv_spec(T, p.codec)), kv_fast(tf->kv_spec(T, p.codec)),
      kv_ref(tf->kv_spec(T, p.codec));
  const at::Tensor full = tf->forward(at::tensor(toks, at::kLong), kv_full);
  DecodeScratch s;
  double err_fast = 0, err_ref = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* lf = tf->decode_step(static_cast<int32_t>(toks[static_cast<size_t>(t)]), kv_fast, s);
    err_fast =
        std::max(err_fast, max_abs_diff(at::from_blob(const_cast<float*>(lf), {V}, at::kFloat), full[t]));
    err_ref = std::max(
        err_ref,
        max_abs_diff(tf->forward(at::tensor({toks[static_cast<size_t>(t)]}, at::kLong), kv_ref)[0], full[t]));
  }
  std::fprintf(stderr, "%s: max |diff| decode_step %.3g forward T=1 %.3g\n", p.name.c_str(), err_fast,
               err_ref);
  EXPECT_LE(err_fast, codec_tolerance(p.codec));
  EXPECT_LE(err_ref, codec_tolerance(p.codec));
  // the codec is really in the loop: its logits differ from the fp32 cache's (fp16 barely)
  if (p.codec != KvCodecKind::kF32 && p.codec != KvCodecKind::kF16) {
    SequenceKv kv32(tf->kv_spec(T, KvCodecKind::kF32));
    EXPECT_GT(max_abs_diff(tf->forward(at::tensor(toks, at::kLong), kv32), full), 1e-5);
  }
}

std::vector<CodecCase> codec_cases() {
  std::vector<CodecCase> out;
  for (KvCodecKind k : {KvCodecKind::kF16, KvCodecKind::kBF16, KvCodecKind::kInt8, KvCodecKind::kInt4}) {
    const std::string n = kv_codec_name(k);
    out.push_back({"ra_gpt2_" + n, "builtin:tiny-gpt2", ra({0, 1}), k});
    out.push_back({"ra_llama_" + n, "builtin:tiny", ra({0}), k});
    out.push_back({"sba_gpt2_" + n, "builtin:tiny-gpt2", sba({0}, 0.4), k});
    out.push_back({"sba_llama_" + n, "builtin:tiny", sba({1}, 0.7), k});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Codecs, VariantCodecTest, ::testing::ValuesIn(codec_cases()),
                         [](const ::testing::TestParamInfo<CodecCase>& i) { return i.param.name; });

// RA on the kvsplice codec: the splice compresses the cached q rows; decode_step (attention in the
// latent space) equals forward() (expanded rows). SBA's reverse store refuses kvsplice by name.
TEST(VariantCodecTest, RaOnKvSpliceAndSbaRefusesIt) {
  c10::InferenceMode im;
  for (const std::string base : {"builtin:tiny-gpt2", "builtin:tiny"}) {
    const ModelConfig cfg = make_config(base, true, ra({0}));
    const auto tf = make_model(cfg);
    auto sp = KvSpliceSet::create(kvsplice_dims(cfg), 4, 5);
    ASSERT_TRUE(sp.ok()) << sp.status();
    const int64_t T = 14;
    const std::vector<int64_t> toks = tokens(T, cfg.n_vocab);
    SequenceKv kv_full(tf->kv_spec(T, KvCodecKind::kKvSplice, *sp)),
        kv_fast(tf->kv_spec(T, KvCodecKind::kKvSplice, *sp));
    const at::Tensor full = tf->forward(at::tensor(toks, at::kLong), kv_full);
    DecodeScratch s;
    double err = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* lf = tf->decode_step(static_cast<int32_t>(toks[static_cast<size_t>(t)]), kv_fast, s);
      err = std::max(err,
                     max_abs_diff(at::from_blob(const_cast<float*>(lf), {cfg.n_vocab}, at::kFloat), full[t]));
    }
    std::fprintf(stderr, "ra kvsplice %s: max |diff| decode_step %.3g\n", base.c_str(), err);
    EXPECT_LE(err, codec_tolerance(KvCodecKind::kKvSplice)) << base;
  }
  const ModelConfig cs = make_config("builtin:tiny", true, sba({1}, 0.5));
  auto sp = KvSpliceSet::create(kvsplice_dims(cs), 4, 5);
  ASSERT_TRUE(sp.ok()) << sp.status();
  try {
    SequenceKv kv(make_model(cs)->kv_spec(8, KvCodecKind::kKvSplice, *sp));
    ADD_FAILURE() << "SBA with kvsplice did not throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvsplice codec is not supported there"), std::string::npos)
        << e.what();
  }
}

// RA goes through the KV pipeline unchanged: with a repair operator on an int4 cache, decode_step still
// equals forward(), and persistent corruption (a KvStudy, forward() only) acts on the RA layers. SBA refuses
// the repair stage and the corruption with a clear error.
TEST(VariantStagesTest, RaKeepsCorruptionAndRepairSbaRefusesThem) {
  c10::InferenceMode im;
  const ModelConfig cfg = make_config("builtin:tiny", true, ra({0, 1}));
  const auto tf = make_model(cfg);
  RepairConfig rc;
  auto set = RepairSet::create(rc, {0, 1}, repair_dims(cfg), 5);
  ASSERT_TRUE(set.ok()) << set.status();
  KvStudy st;
  st.corruption.kind = CorruptionKind::kGaussian;
  st.corruption.mode = CorruptionMode::kPersistentAtWrite;
  st.corruption.amount = 0.05;
  const int64_t T = 12;
  const std::vector<int64_t> toks = tokens(T, cfg.n_vocab);
  SequenceKv kv_ref(tf->kv_spec(T, KvCodecKind::kInt4)), kv_fast(tf->kv_spec(T, KvCodecKind::kInt4));
  kv_ref.set_repair(*set);
  kv_fast.set_repair(*set);
  DecodeScratch s;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t tok = toks[static_cast<size_t>(t)];
    const at::Tensor want = tf->forward(at::tensor({tok}, at::kLong), kv_ref)[0];
    const float* lf = tf->decode_step(static_cast<int32_t>(tok), kv_fast, s);
    EXPECT_LE(max_abs_diff(at::from_blob(const_cast<float*>(lf), {cfg.n_vocab}, at::kFloat), want), 5e-2)
        << t;
  }
  // the stages are really active on the RA layers
  SequenceKv kv_plain(tf->kv_spec(T, KvCodecKind::kInt4)), kv_staged(tf->kv_spec(T, KvCodecKind::kInt4));
  kv_staged.set_repair(*set);
  EXPECT_GT(max_abs_diff(tf->forward(at::tensor(toks, at::kLong), kv_plain),
                         tf->forward(at::tensor(toks, at::kLong), kv_staged, st)),
            1e-3);

  const ModelConfig cs = make_config("builtin:tiny", true, sba({1}, 0.5));
  const auto tfs = make_model(cs);
  SequenceKv kv(tfs->kv_spec(T, KvCodecKind::kF32));
  kv.set_repair(*set);
  try {
    tfs->forward(at::tensor(toks, at::kLong), kv);
    ADD_FAILURE() << "SBA with repair did not throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported with symmetric bidirectional attention"),
              std::string::npos)
        << e.what();
  }
  SequenceKv kv_c(tfs->kv_spec(T, KvCodecKind::kF32));
  try {
    tfs->forward(at::tensor(toks, at::kLong), kv_c, st);
    ADD_FAILURE() << "SBA with corruption did not throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported with symmetric bidirectional attention"),
              std::string::npos)
        << e.what();
  }
  DecodeScratch s2;
  SequenceKv kv2(tfs->kv_spec(T, KvCodecKind::kF32));
  kv2.set_repair(*set);
  EXPECT_THROW(tfs->decode_step(3, kv2, s2), c10::Error);
  // a SequenceKv made without the reverse store is refused by name
  KvSpec bare = tfs->kv_spec(T, KvCodecKind::kF32);
  bare.reverse_layers.clear();
  SequenceKv kv3(bare);
  try {
    tfs->forward(at::tensor(toks, at::kLong), kv3);
    ADD_FAILURE() << "SBA without reverse store did not throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reverse store"), std::string::npos) << e.what();
  }
  // the reverse store is counted in the cache's bytes
  EXPECT_EQ(SequenceKv(tfs->kv_spec(T, KvCodecKind::kF32)).bytes_per_token(),
            3 * SequenceKv(bare).bytes_per_token() / 2);
}

}  // namespace
}  // namespace frost
