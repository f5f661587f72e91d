// The prototype trainer's contracts on builtin:tiny (no files needed): the residual choice, checkpoint /
// resume, held-out rows, the artifact's round trip and refusals, the predictor, and the feature-cache spill.
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
  frost::testing::write_text_file(dir.file("manifest.json"),
                                  "{\"format\": \"frost.prototype\", \"format_version\": 1, \"backbone\": "
                                  "{\"name\": \"m\", \"arch\": \"llama\", "
                                  "\"dim\": 1e300, \"n_layer\": 1, \"n_vocab\": 2, \"fingerprint\": \"0\"}}");
  EXPECT_INVALID(load_artifact(dir.path()).status(),
                 "missing or mistyped field: dim must be an integer, got 1e+300");
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
}  // namespace frost::prototype
