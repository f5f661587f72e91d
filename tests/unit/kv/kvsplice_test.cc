// KVSplice (core/kv/kvsplice.h): the seed's LearnedKVSplice formula, the raw-pointer copies, latent-space
// attention against the reference (expand every cached row, then attend), decode_step against forward()
// with the kvsplice codec, the file round trip and its refusals, PCA initialisation and fine-tuning.
#include "core/kv/kvsplice.h"

#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/common/fs.h"
#include "core/model/builtin_models.h"
#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "core/store/safetensors.h"
#include "core/train/kvsplice_train.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

constexpr int64_t D = 16, H = 4, HKV = 2, L = 2, R = 6;

// A splice set with a non-trivial transform (σ ≠ 1, b ≠ 0), so a formula that ignores either fails.
std::shared_ptr<KvSpliceSet> random_set(KvSpliceRanks ranks = {R, R}, uint64_t seed = 3,
                                        KvLatentDtype latent = KvLatentDtype::kF16) {
  auto s = KvSpliceSet::create({L, HKV, D}, ranks, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  (*s)->set_latent(latent);
  at::NoGradGuard ng;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
  for (auto& [n, t] : (*s)->named_parameters()) {
    if (n.find("scale") != std::string::npos) t.copy_(at::randn(t.sizes(), g));
    if (n.find("shift") != std::string::npos) t.copy_(at::randn(t.sizes(), g));
  }
  (*s)->freeze();
  return *s;
}

TEST(KvSpliceTest, LearnedSpliceIsTheSeedsFourSteps) {
  auto set = random_set();
  at::NoGradGuard ng;
  const LearnedKvSplice& sp = set->k(1);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor x = at::randn({5, HKV * D}, g);
  // direct transcription: x·softplus(scale)+shift → compress → expand → inverse transform
  at::Tensor sig = at::log1p(at::exp(sp.scale));
  at::Tensor c = at::matmul(x * sig + sp.shift, sp.compress.t());
  at::Tensor want = (at::matmul(c, sp.expand.t()) - sp.shift) / sig;
  EXPECT_LT(testing::max_abs_diff(sp.encode(x), c), 1e-5);
  EXPECT_LT(testing::max_abs_diff(sp.reconstruct(x), want), 1e-5);
  // raw-pointer copy
  const KvSpliceFast& f = set->fast_k(1);
  std::vector<float> cf(R), tmp(HKV * D);
  at::Tensor x0 = x[0].contiguous();
  f.encode(x0.data_ptr<float>(), cf.data(), tmp.data());
  for (int64_t k = 0; k < R; ++k) EXPECT_NEAR(cf[static_cast<size_t>(k)], c[0][k].item<float>(), 1e-4);
  // rank d with an orthonormal basis reconstructs exactly; rank < d does not
  auto full = random_set({HKV * D, HKV * D});
  EXPECT_LT(testing::max_abs_diff(full->v(0).reconstruct(x), x), 1e-4);
  EXPECT_GT(testing::max_abs_diff(sp.reconstruct(x), x), 1e-2);
}

TEST(KvSpliceTest, LatentAttentionEqualsExpandThenAttend) {
  // one rank, K and V apart, and int8 latents
  for (auto [rk, latent] : {std::pair{KvSpliceRanks{R, R}, KvLatentDtype::kF16},
                            std::pair{KvSpliceRanks{3, 9}, KvLatentDtype::kF16},
                            std::pair{KvSpliceRanks{3, 9}, KvLatentDtype::kI8}}) {
    SCOPED_TRACE(rk.label() + kv_latent_name(latent));
    auto set = random_set(rk, 3, latent);
    const int64_t n = 11;
    auto codec = make_kvsplice_codec(set, 1, 16);
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(2);
    at::Tensor k = at::randn({n, HKV, D}, g), v = at::randn({n, HKV, D}, g), q = at::randn({H, D}, g);
    codec->append(k.narrow(0, 0, 4), v.narrow(0, 0, 4), 0);  // the LibTorch write path
    for (int64_t t = 4; t < n; ++t) {                        // and the raw one
      at::Tensor kt = k[t].contiguous(), vt = v[t].contiguous();
      codec->append_token(kt.data_ptr<float>(), vt.data_ptr<float>(), t);
    }
    EXPECT_EQ(codec->bytes_per_token(), latent == KvLatentDtype::kF16 ? (rk.k + rk.v) * 2 : rk.k + rk.v + 8);
    EXPECT_EQ(codec->bytes_per_token(), set->bytes_per_token_layer());
    // reference: expand every cached row, then plain attention per head
    at::Tensor K = codec->keys(n), V = codec->values(n);  // [HKV, n, D]
    const float scale = 0.3f;
    std::vector<float> out(H * D);
    at::Tensor qc = q.contiguous();
    codec->attend(qc.data_ptr<float>(), H, n, scale, 0, H, out.data());  // latent-space kernel
    if (latent == KvLatentDtype::kI8) {  // int8 rows with a scale per row, against the fp16-latent cache
      auto c16 = make_kvsplice_codec(random_set(rk, 3), 1, 16);
      c16->append(k.narrow(0, 0, n), v.narrow(0, 0, n), 0);
      EXPECT_EQ(codec->storage_dtype(), at::kChar);
      const at::Tensor K16 = c16->keys(n), V16 = c16->values(n);
      EXPECT_GT(testing::max_abs_diff(K, K16), 1e-5);  // it really is quantised
      EXPECT_LT(testing::max_abs_diff(K, K16), 0.05 * K16.abs().max().item<double>());
      EXPECT_LT(testing::max_abs_diff(V, V16), 0.05 * V16.abs().max().item<double>());
    }
    for (int64_t h = 0; h < H; ++h) {
      at::Tensor kg = K[h / (H / HKV)], vg = V[h / (H / HKV)];
      at::Tensor want = at::matmul(at::softmax(at::matmul(kg, q[h]) * scale, 0), vg);
      for (int64_t i = 0; i < D; ++i)
        EXPECT_NEAR(out[static_cast<size_t>(h * D + i)], want[i].item<float>(), 1e-4);
    }
    // the cache really is lossy at r < d (the test would pass vacuously otherwise)
    EXPECT_GT(testing::max_abs_diff(K.transpose(0, 1), k), 1e-2);
    EXPECT_GT(testing::max_abs_diff(V.transpose(0, 1), v), 1e-2);
  }
}

class KvSpliceModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model("builtin:tiny");  // LLaMA, GQA 4/2 heads, head_dim 16
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m).value();
  }
  const Transformer& tf() const { return *model_->model; }
  std::vector<int64_t> tokens(int64_t n) const {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back((i * 37 + 11) % model_->config.n_vocab);
    return t;
  }
  std::shared_ptr<KvSpliceSet> set(KvSpliceRanks ranks) const {
    auto s = KvSpliceSet::create(kvsplice_dims(model_->config), ranks, 5);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  std::unique_ptr<LoadedModel> model_;
};

TEST_F(KvSpliceModelTest, DecodeStepInTheLatentSpaceEqualsTheReferenceForward) {
  const int64_t n = 14, d = model_->config.n_head_kv * model_->config.head_dim;
  for (auto [rank, latent] : {std::pair{KvSpliceRanks{4, 4}, KvLatentDtype::kF16},
                              std::pair{KvSpliceRanks{3, 7}, KvLatentDtype::kF16},
                              std::pair{KvSpliceRanks{3, 7}, KvLatentDtype::kI8},
                              std::pair{KvSpliceRanks{d, d}, KvLatentDtype::kF16}}) {
    auto sp = set(rank);
    sp->set_latent(latent);
    at::NoGradGuard ng;
    SequenceKv ref_kv(tf().kv_spec(n, KvCodecKind::kKvSplice, sp));
    at::Tensor ref = tf().forward(at::tensor(tokens(n), at::kLong), ref_kv);  // expands every row
    SequenceKv kv(tf().kv_spec(n, KvCodecKind::kKvSplice, sp));
    DecodeScratch s;
    const auto toks = tokens(n);
    for (int64_t t = 0; t < n; ++t) {
      const float* lg = tf().decode_step(static_cast<int32_t>(toks[static_cast<size_t>(t)]), kv, s);
      at::Tensor got = at::from_blob(const_cast<float*>(lg), {model_->config.n_vocab}, at::kFloat);
      EXPECT_LT(testing::max_abs_diff(got, ref[t]), 2e-3) << "rank " << rank.label() << " position " << t;
    }
    const int64_t per_layer = latent == KvLatentDtype::kF16 ? (rank.k + rank.v) * 2 : rank.k + rank.v + 8;
    EXPECT_EQ(kv.bytes_per_token(), model_->config.n_layer * per_layer);
    EXPECT_EQ(sp->bytes_per_token(), kv.bytes_per_token());
    EXPECT_DOUBLE_EQ(sp->compression_vs_fp16(), 4.0 * d / static_cast<double>(per_layer));
    // full rank ≈ the fp32 model (fp16 latent rounding only); low rank differs measurably
    SequenceKv f32(tf().kv_spec(n, KvCodecKind::kF32));
    at::Tensor clean = tf().forward(at::tensor(tokens(n), at::kLong), f32);
    if (rank.k == d)
      EXPECT_LT(testing::max_abs_diff(ref, clean), 5e-2);
    else
      EXPECT_GT(testing::max_abs_diff(ref, clean), 5e-2);
  }
}

TEST_F(KvSpliceModelTest, SequenceWithoutASpliceSetIsRefused) {
  EXPECT_THROW(SequenceKv(tf().kv_spec(8, KvCodecKind::kKvSplice)), c10::Error);
  auto other =
      KvSpliceSet::create({model_->config.n_layer + 1, model_->config.n_head_kv, model_->config.head_dim}, 2);
  ASSERT_TRUE(other.ok());
  EXPECT_THROW(SequenceKv(tf().kv_spec(8, KvCodecKind::kKvSplice, *other)), c10::Error);
  EXPECT_EQ(parse_kv_codec("kvsplice").value(), KvCodecKind::kKvSplice);
  EXPECT_STREQ(kv_codec_name(KvCodecKind::kKvSplice), "kvsplice");
}

TEST_F(KvSpliceModelTest, PcaInitialisationIsExactAtFullRankAndOrderedByEnergy) {
  std::vector<TokenWindow> windows;
  for (int w = 0; w < 3; ++w) {
    TokenWindow t;
    for (int i = 0; i < 16; ++i)
      t.push_back(static_cast<int32_t>((i * 13 + w * 7 + 1) % model_->config.n_vocab));
    windows.push_back(t);
  }
  auto rows = collect_kv_rows(tf(), windows);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const int64_t d = model_->config.n_head_kv * model_->config.head_dim;
  ASSERT_EQ(rows->k[0].sizes(), (std::vector<int64_t>{48, d}));
  std::vector<double> prev(2, 0);
  for (int64_t r : {int64_t{2}, int64_t{8}, d}) {
    std::vector<std::array<double, 2>> energy;
    auto s = kvsplice_from_pca(kvsplice_dims(model_->config), {r, r}, *rows, &energy);
    ASSERT_TRUE(s.ok()) << s.status();
    at::NoGradGuard ng;
    const double err = testing::max_abs_diff((*s)->k(1).reconstruct(rows->k[1]), rows->k[1]);
    if (r == d) {
      EXPECT_LT(err, 1e-3);
      EXPECT_NEAR(energy[1][0], 1.0, 1e-9);
    }
    EXPECT_GE(energy[1][0], prev[0]);
    EXPECT_GE(energy[1][1], prev[1]);
    prev = {energy[1][0], energy[1][1]};
  }
  // K and V apart: each side's energy is the one its own rank gives
  std::vector<std::array<double, 2>> e28, e22, e88;
  ASSERT_TRUE(kvsplice_from_pca(kvsplice_dims(model_->config), {2, 8}, *rows, &e28).ok());
  ASSERT_TRUE(kvsplice_from_pca(kvsplice_dims(model_->config), {2, 2}, *rows, &e22).ok());
  ASSERT_TRUE(kvsplice_from_pca(kvsplice_dims(model_->config), {8, 8}, *rows, &e88).ok());
  // attention-aware PCA: metrics are [d, d], block-diagonal over kv groups, and the metric PCA keeps the
  // subspace with the least metric-weighted error (never more than plain PCA's in that metric)
  ASSERT_EQ(rows->k_metric.size(), static_cast<size_t>(model_->config.n_layer));
  ASSERT_EQ(rows->v_metric.size(), static_cast<size_t>(model_->config.n_layer));
  {
    at::NoGradGuard ng;
    const int64_t Dh = model_->config.head_dim;
    EXPECT_EQ(rows->k_metric[1].sizes(), (std::vector<int64_t>{d, d}));
    EXPECT_EQ(rows->k_metric[1].narrow(0, 0, Dh).narrow(1, Dh, Dh).abs().max().item<double>(), 0.0);
    EXPECT_GT(rows->k_metric[1].narrow(0, 0, Dh).narrow(1, 0, Dh).abs().max().item<double>(), 0.0);
    auto eu = kvsplice_from_pca(kvsplice_dims(model_->config), {3, 3}, *rows);
    auto at_ =
        kvsplice_from_pca(kvsplice_dims(model_->config), {3, 3}, *rows, nullptr, false, /*metric=*/true);
    ASSERT_TRUE(eu.ok() && at_.ok());
    auto werr = [](const at::Tensor& err, const at::Tensor& M) {
      const at::Tensor e = err.to(at::kDouble);
      return (at::matmul(e, M) * e).sum(1).mean().item<double>();
    };
    for (int64_t l = 0; l < model_->config.n_layer; ++l) {
      const auto& K = rows->k[static_cast<size_t>(l)];
      const auto& V = rows->v[static_cast<size_t>(l)];
      const double k_eu = werr((*eu)->k(l).reconstruct(K) - K, rows->k_metric[static_cast<size_t>(l)]);
      const double k_at = werr((*at_)->k(l).reconstruct(K) - K, rows->k_metric[static_cast<size_t>(l)]);
      const double v_eu = werr((*eu)->v(l).reconstruct(V) - V, rows->v_metric[static_cast<size_t>(l)]);
      const double v_at = werr((*at_)->v(l).reconstruct(V) - V, rows->v_metric[static_cast<size_t>(l)]);
      EXPECT_LE(k_at, k_eu * (1 + 1e-6)) << "layer " << l;
      EXPECT_LE(v_at, v_eu * (1 + 1e-6)) << "layer " << l;
      EXPECT_LT(k_at, k_eu * 0.99) << "layer " << l << ": the metric changed nothing";
    }
  }
  // whitened PCA (int8 latents): the same reconstruction, unit-variance latent components
  auto plain = kvsplice_from_pca(kvsplice_dims(model_->config), {8, 8}, *rows);
  auto white = kvsplice_from_pca(kvsplice_dims(model_->config), {8, 8}, *rows, nullptr, /*whiten=*/true);
  ASSERT_TRUE(plain.ok() && white.ok());
  {
    at::NoGradGuard ng;
    for (int64_t l = 0; l < model_->config.n_layer; ++l) {
      EXPECT_LT(testing::max_abs_diff((*white)->v(l).reconstruct(rows->v[l]),
                                      (*plain)->v(l).reconstruct(rows->v[l])),
                1e-4);
      const at::Tensor var = (*white)->k(l).encode(rows->k[l]).var(0, /*unbiased=*/false);
      EXPECT_LT(testing::max_abs_diff(var, at::ones_like(var)), 1e-3) << var;
      EXPECT_GT((*plain)->k(l).encode(rows->k[l]).var(0, false).max().item<double>(), 1.5);  // not white
    }
  }
  EXPECT_DOUBLE_EQ(e28[1][0], e22[1][0]);
  EXPECT_DOUBLE_EQ(e28[1][1], e88[1][1]);
  EXPECT_LT(e28[1][0], e28[1][1]);
}

TEST_F(KvSpliceModelTest, FineTuningLowersTheKlAndTheFileRoundTrips) {
  KvSpliceConfig cfg;
  cfg.rank = 4;
  cfg.v_rank = 6;                   // K and V apart: trained, saved and loaded with their own sizes
  cfg.latent = KvLatentDtype::kI8;  // and trained through int8 latents
  cfg.window = 16;
  cfg.steps = 12;
  cfg.batch = 2;
  cfg.lr = 3e-3;
  std::vector<TokenWindow> windows;
  for (int w = 0; w < 6; ++w) {
    TokenWindow t;
    for (int i = 0; i < 16; ++i)
      t.push_back(static_cast<int32_t>((i * 29 + w * 5 + 3) % model_->config.n_vocab));
    windows.push_back(t);
  }
  KvSpliceConfig pca_only = cfg;
  pca_only.steps = 0;
  auto base = train_kvsplice(tf(), pca_only, windows);
  ASSERT_TRUE(base.ok()) << base.status();
  std::vector<double> kls;
  KvRepairTrainOptions opts;
  opts.progress = [&](const KvRepairProgress& p) { kls.push_back(p.kl); };
  std::shared_ptr<KvSpliceSet> init;
  auto tuned = train_kvsplice(tf(), cfg, windows, opts, &init);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  // the PCA initialisation handed back is exactly the untrained (steps = 0) splice
  ASSERT_TRUE(init);
  EXPECT_EQ(init->latent(), KvLatentDtype::kI8);
  for (size_t i = 0; i < init->parameters().size(); ++i)
    EXPECT_TRUE(at::equal(init->parameters()[i], (*base)->parameters()[i])) << i;
  ASSERT_EQ(kls.size(), 12u);
  auto ev = evaluate_kv(tf(), windows,
                        {KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, *base},
                         KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, *tuned}});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_LT((*ev)[1].mean_kl, (*ev)[0].mean_kl * 0.95)
      << "pca " << (*ev)[0].mean_kl << " tuned " << (*ev)[1].mean_kl;
  for (const auto& p : (*tuned)->parameters()) EXPECT_FALSE(p.requires_grad());

  // file round trip: same logits; refusals name the problem
  testing::TempDir dir;
  ASSERT_TRUE((*tuned)->save(dir.file("s.safetensors"), {{"model", "builtin:tiny"}}).ok());
  auto back = KvSpliceSet::load(dir.file("s.safetensors"), kvsplice_dims(model_->config));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->ranks(), (KvSpliceRanks{4, 6}));
  EXPECT_EQ((*back)->ranks().label(), "4/6");
  EXPECT_EQ((*back)->latent(), KvLatentDtype::kI8);
  EXPECT_EQ((*back)->metadata().at("latent_dtype"), "int8");
  EXPECT_EQ((*back)->metadata().count("rank"), 0u);  // a single-rank reader refuses it instead of misreading
  for (auto& [n, t] : (*tuned)->named_parameters()) {
    bool found = false;
    for (auto& [m, u] : (*back)->named_parameters())
      if (m == n) {
        found = true;
        EXPECT_LT(testing::max_abs_diff(t, u), 0.0 + 1e-12) << n;
      }
    EXPECT_TRUE(found) << n;
  }
  KvSpliceDims wrong = kvsplice_dims(model_->config);
  wrong.head_dim *= 2;
  EXPECT_INVALID(KvSpliceSet::load(dir.file("s.safetensors"), wrong).status(), "head_dim");
  EXPECT_INVALID(
      load_served_kvsplice(dir.file("s.safetensors"), kvsplice_dims(model_->config), "x", "other").status(),
      "trained on model");
  // hand-written files: the tuned tensors (one value replaced when nan) and the given metadata on top of
  // a valid split-rank header; each is refused with the named problem
  auto refused = [&](const std::string& name, std::map<std::string, std::string> meta, bool nan,
                     const std::string& why) {
    std::vector<std::pair<std::string, at::Tensor>> ts;
    for (auto& [n, t] : (*tuned)->named_parameters()) ts.emplace_back(n, t.clone());
    if (nan) ts[0].second[0] = std::nanf("");
    std::map<std::string, std::string> m = {{"format", "frost.kvsplice.v1"},
                                            {"rank_k", "4"},
                                            {"rank_v", "6"},
                                            {"n_layers", std::to_string(model_->config.n_layer)},
                                            {"n_head_kv", std::to_string(model_->config.n_head_kv)},
                                            {"head_dim", std::to_string(model_->config.head_dim)}};
    for (auto& [k, v] : meta) m[k] = v;
    auto bytes = safetensors_serialize(ts, m);
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(write_file_atomic(dir.file(name), *bytes).ok());
    SCOPED_TRACE(name);
    EXPECT_INVALID(KvSpliceSet::load(dir.file(name), kvsplice_dims(model_->config)).status(), why);
  };
  refused("nan.safetensors", {}, /*nan=*/true, "non-finite");
  refused("two.safetensors", {{"rank", "4"}}, false, "contradicts");  // rank against rank_k / rank_v
  refused("int4.safetensors", {{"latent_dtype", "int4"}}, false, "int4");
  // an equal-rank file keeps the single "rank" key older readers need
  auto eq = KvSpliceSet::create(kvsplice_dims(model_->config), 4);
  ASSERT_TRUE(eq.ok());
  ASSERT_TRUE((*eq)->save(dir.file("eq.safetensors")).ok());
  auto eqb = KvSpliceSet::load(dir.file("eq.safetensors"), kvsplice_dims(model_->config));
  ASSERT_TRUE(eqb.ok()) << eqb.status();
  EXPECT_EQ((*eqb)->metadata().at("rank"), "4");
  EXPECT_EQ((*eqb)->ranks(), (KvSpliceRanks{4, 4}));
  EXPECT_INVALID(KvSpliceSet::create(kvsplice_dims(model_->config), KvSpliceRanks{4, 0}).status(), "rank_v");
  EXPECT_INVALID(KvSpliceSet::create(kvsplice_dims(model_->config), 0).status(), "rank");
}

TEST_F(KvSpliceModelTest, FisherFromTheModelsAttentionAndFimTemporalCompression) {
  const int64_t T = 12;
  std::vector<TokenWindow> windows;
  for (int w = 0; w < 4; ++w) {
    TokenWindow t;
    for (int64_t i = 0; i < T; ++i)
      t.push_back(static_cast<int32_t>((i * 11 + w * 3 + 2) % model_->config.n_vocab));
    windows.push_back(t);
  }
  auto acc = accumulate_fisher(tf(), windows);
  ASSERT_TRUE(acc.ok()) << acc.status();
  EXPECT_EQ(acc->window(), T);
  // the accumulated F of layer 0 equals the mean of diag(p) − ppᵀ over the model's own probabilities
  at::Tensor want = at::zeros({model_->config.n_head, T, T}, at::kDouble);
  for (const TokenWindow& w : windows) {
    KvStudy study;
    study.taps.probs = true;
    const KvTaps& taps = study.taps;
    at::NoGradGuard ng;
    window_logprobs(tf(), w, KvCodecKind::kF32, nullptr, &study);
    ASSERT_EQ(static_cast<int64_t>(taps.attention_probs.size()), model_->config.n_layer);
    at::Tensor p = taps.attention_probs[0].to(at::kDouble);  // [H, T, T]
    EXPECT_LT((p.sum(-1) - 1).abs().max().item<double>(), 1e-5);
    want += at::diag_embed(p).sum(1) - at::matmul(p.transpose(1, 2), p);
  }
  want /= static_cast<double>(windows.size() * T);
  EXPECT_LT(testing::max_abs_diff(acc->mean_fisher(0), want), 1e-6);
  auto rep = acc->finish();
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(static_cast<int64_t>(rep->layers.size()), model_->config.n_layer);
  // FIMKVSplice: rank T is lossless, a small rank is not
  auto full = FimKvSplice::from_accumulator(*acc, T);
  auto small = FimKvSplice::from_accumulator(*acc, 2);
  ASSERT_TRUE(full.ok() && small.ok());
  auto ev = evaluate_kv(
      tf(), windows,
      {KvEvalCase{KvCodecKind::kF32, {}, nullptr, nullptr, std::make_shared<FimKvSplice>(*full)},
       KvEvalCase{KvCodecKind::kF32, {}, nullptr, nullptr, std::make_shared<FimKvSplice>(*small)}});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_LT((*ev)[0].mean_kl, 1e-6);
  EXPECT_GT((*ev)[1].mean_kl, 1e-3);
  // a window of another length is refused, not silently mis-compressed
  KvStudy st;
  st.temporal = std::make_shared<FimKvSplice>(*small);
  SequenceKv kv(tf().kv_spec(T + 1, KvCodecKind::kF32));
  EXPECT_THROW(tf().forward(at::tensor(std::vector<int64_t>(T + 1, 3), at::kLong), kv, st), c10::Error);
}

TEST(KvSpliceConfigTest, FieldsAreValidatedWithTheirNames) {
  KvSpliceConfig c;
  EXPECT_INVALID(set_kvsplice_field(c, "rank", "x"), "rank");
  EXPECT_INVALID(set_kvsplice_field(c, "lr", "-1"), "lr");
  EXPECT_INVALID(set_kvsplice_field(c, "nope", "1"), "unknown key");
  ASSERT_TRUE(set_kvsplice_field(c, "rank", "999").ok());
  auto m = builtin_config("builtin:tiny");
  ASSERT_TRUE(m.ok());
  EXPECT_INVALID(validate_kvsplice_config(c, *m), "rank");
  // K and V ranks: their own names, 0 = rank's value
  KvSpliceConfig kv;
  ASSERT_TRUE(set_kvsplice_field(kv, "rank", "8").ok());
  ASSERT_TRUE(set_kvsplice_field(kv, "v_rank", "12").ok());
  EXPECT_EQ(kv.ranks(), (KvSpliceRanks{8, 12}));
  EXPECT_INVALID(set_kvsplice_field(kv, "latent", "int4"), "latent");
  ASSERT_TRUE(set_kvsplice_field(kv, "latent", "int8").ok());
  EXPECT_EQ(kv.latent, KvLatentDtype::kI8);
  EXPECT_TRUE(validate_kvsplice_config(kv, *m).ok());
  EXPECT_INVALID(set_kvsplice_field(kv, "k_rank", "-1"), "k_rank");
  ASSERT_TRUE(set_kvsplice_field(kv, "k_rank", "999").ok());
  EXPECT_INVALID(validate_kvsplice_config(kv, *m), "k_rank");
}

}  // namespace
}  // namespace frost
