// The repair stage inside the model (SequenceKv::set_repair): the folded raw-pointer form against the
// factorised and materialised forms (KvStudy::repair_path), forward() against decode_step() with repair,
// persistent and fresh corruption (KvStudy) on forward(), the repair file round trip and its refusals, and
// kv_repair training (KL goes down, resume is exact).
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/kv/repair_set.h"
#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "core/train/repair_train.h"

namespace frost {
namespace {

constexpr int64_t D = 16, R = 4, H = 4, HKV = 2, T = 9;

std::unique_ptr<RepairLayer> make_layer(RepairOption o, std::shared_ptr<RepairShared> shared = nullptr) {
  RepairConfig c;
  c.option = o;
  c.rank = R;
  if (o == RepairOption::kC && !shared) shared = make_repair_shared(D, H, R, 7);
  auto l = std::make_unique<RepairLayer>(c, D, H, 1, 3, 11, shared);
  at::NoGradGuard ng;  // make the correction large enough that a wrong formula shows
  for (auto& [n, t] : l->named_parameters())
    if (n[0] == 'u') t.mul_(50);
  if (shared) {
    shared->uk.mul_(50);
    shared->uv.mul_(50);
  }
  return l;
}

class RepairFormsTest : public ::testing::TestWithParam<RepairOption> {};

TEST_P(RepairFormsTest, FoldedAndRawPointerFormsEqualTheMaterialisedReference) {
  at::NoGradGuard ng;
  auto op = make_layer(GetParam());
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor q = at::randn({H, 3, D}, g), k = at::randn({HKV, T, D}, g), v = at::randn({HKV, T, D}, g);
  const double scale = 0.25;
  at::Tensor ref = op->attend_reference(q, k, v, T - 3, scale);
  EXPECT_LT((op->attend_folded(q, k, v, T - 3, scale) - ref).abs().max().item<double>(), 1e-4);
  // raw-pointer form, one query (the last position) at a time per head
  RepairLayer::Fast f = op->fast();
  at::Tensor q1 = q.narrow(1, 2, 1).contiguous();                             // [H, 1, D] at position T-1
  at::Tensor want = op->attend_reference(q1, k, v, T - 1, scale).squeeze(1);  // [H, D]
  std::vector<float> q2(D), gv(R), tmp(8 * R), o(D);
  for (int64_t h = 0; h < H; ++h) {
    f.query(q1[h][0].data_ptr<float>(), h, q2.data(), gv.data(), tmp.data());
    // plain attention of q' over the unrepaired cache of this head's kv group
    at::Tensor qq = at::from_blob(q2.data(), {1, D}, at::kFloat);
    at::Tensor kg = k[h / (H / HKV)], vg = v[h / (H / HKV)];
    at::Tensor out = at::matmul(at::softmax(at::matmul(qq, kg.t()) * scale, -1), vg).squeeze(0).contiguous();
    std::copy(out.data_ptr<float>(), out.data_ptr<float>() + D, o.begin());
    f.output(gv.data(), o.data(), tmp.data());
    for (int64_t i = 0; i < D; ++i)
      EXPECT_NEAR(o[static_cast<size_t>(i)], want[h][i].item<float>(), 1e-4) << h;
  }
  // the repair did something measurable
  at::Tensor unrepaired =
      at::matmul(at::softmax(at::matmul(q1, k.repeat_interleave(H / HKV, 0).transpose(1, 2)) * scale, -1),
                 v.repeat_interleave(H / HKV, 0))
          .squeeze(1);
  EXPECT_GT((want - unrepaired).abs().max().item<double>(), 1e-2);
}

TEST_P(RepairFormsTest, GramContractionPenaltyEqualsTheMaterialisedOne) {
  auto op = make_layer(GetParam());
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(9);
  at::Tensor q = at::randn({H, 4, D}, g), k = at::randn({HKV, T, D}, g), v = at::randn({HKV, T, D}, g);
  const double fast = op->contraction_penalty(q, k, v).item<double>();
  const double ref = op->contraction_penalty_reference(q, k, v).item<double>();
  EXPECT_GT(ref, 0.0);
  EXPECT_NEAR(fast, ref, 1e-4 * std::max(1.0, ref));
}

INSTANTIATE_TEST_SUITE_P(
    Options, RepairFormsTest, ::testing::Values(RepairOption::kA, RepairOption::kB, RepairOption::kC),
    [](const auto& i) {
      return std::string(i.param == RepairOption::kA ? "A" : i.param == RepairOption::kB ? "B" : "C");
    });

// ---- in the model ----

class RepairModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model("builtin:tiny");  // LLaMA, GQA 4/2 heads, head_dim 16
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m).value();
  }
  const Transformer& tf() const { return *model_->model; }
  RepairDims dims() const { return repair_dims(model_->config); }
  std::shared_ptr<RepairSet> strong_set(RepairOption o, const std::string& layers = "all") const {
    RepairConfig c;
    c.option = o;
    auto ls = parse_repair_layers(layers, model_->config.n_layer);
    EXPECT_TRUE(ls.ok());
    auto s = RepairSet::create(c, *ls, dims(), 3);
    EXPECT_TRUE(s.ok()) << s.status();
    at::NoGradGuard ng;
    for (auto& [n, t] : (*s)->named_parameters())
      if (n.find(".u") != std::string::npos) t.mul_(40);
    (*s)->freeze();
    return *s;
  }
  std::vector<int64_t> tokens(int64_t n) const {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back((i * 37 + 11) % model_->config.n_vocab);
    return t;
  }
  at::Tensor full_logits(KvCodecKind codec, std::shared_ptr<const RepairSet> repair, int64_t n,
                         KvStudy study = {}) const {
    at::NoGradGuard ng;
    SequenceKv kv(tf().kv_spec(n, codec));
    kv.set_repair(std::move(repair));
    return tf().forward(at::tensor(tokens(n), at::kLong), kv, study);
  }
  std::unique_ptr<LoadedModel> model_;
};

TEST_F(RepairModelTest, ForwardFormsAgreeAndRepairChangesTheLogits) {
  for (RepairOption o : {RepairOption::kA, RepairOption::kB, RepairOption::kC}) {
    const std::shared_ptr<const RepairSet> rs = strong_set(o);
    KvStudy st;
    st.repair_path = KvStudy::RepairPath::kMaterialised;
    at::Tensor ref = full_logits(KvCodecKind::kInt4, rs, 12, st);
    st.repair_path = KvStudy::RepairPath::kFactorised;
    EXPECT_LT((full_logits(KvCodecKind::kInt4, rs, 12, st) - ref).abs().max().item<double>(), 1e-4);
    st.repair_path = KvStudy::RepairPath::kFolded;
    EXPECT_LT((full_logits(KvCodecKind::kInt4, rs, 12, st) - ref).abs().max().item<double>(), 1e-4);
    EXPECT_GT((full_logits(KvCodecKind::kInt4, nullptr, 12) - ref).abs().max().item<double>(), 1e-2);
  }
}

TEST_F(RepairModelTest, DecodeStepWithRepairEqualsForward) {
  for (KvCodecKind codec : {KvCodecKind::kF32, KvCodecKind::kInt8}) {
    const std::shared_ptr<const RepairSet> rs = strong_set(RepairOption::kA, "mid");
    const int64_t n = 14;
    at::Tensor want = full_logits(codec, rs, n);
    SequenceKv kv(tf().kv_spec(n, codec));
    kv.set_repair(rs);
    DecodeScratch s;
    const std::vector<int64_t> toks = tokens(n);
    for (int64_t i = 0; i < n; ++i) {
      const float* lg = tf().decode_step(static_cast<int32_t>(toks[static_cast<size_t>(i)]), kv, s);
      at::Tensor got = at::from_blob(const_cast<float*>(lg), {model_->config.n_vocab}, at::kFloat);
      EXPECT_LT((got - want[i]).abs().max().item<double>(), codec == KvCodecKind::kF32 ? 1e-4 : 1e-2)
          << kv_codec_name(codec) << " position " << i;
    }
  }
}

// Corruption is a study of the pipeline (KvStudy), run by forward() only. Persistent corruption is stored:
// the cache holds the corrupted rows, once, and later steps leave them as written; fresh corruption
// leaves the cache clean and corrupts what attention reads. Layer 0's rows depend on the tokens alone, so a
// clean run stores the same rows the corruption starts from.
TEST_F(RepairModelTest, PersistentCorruptionIsStoredFreshIsNot) {
  const int64_t n = 8;
  const std::vector<int64_t> toks = tokens(n);
  at::NoGradGuard ng;
  auto run = [&](const char* spec, SequenceKv& kv) {
    KvStudy st;
    if (*spec) st.corruption = *parse_corruption(spec);
    at::Tensor first;
    for (int64_t i = 0; i < n; ++i) {
      tf().forward(at::tensor({toks[static_cast<size_t>(i)]}, at::kLong), kv, st);
      if (i == 0) first = kv.layer(0).keys(1).clone();
    }
    EXPECT_TRUE(at::equal(kv.layer(0).keys(1), first)) << spec << ": a stored row changed after its write";
    return kv.layer(0).keys(n);
  };
  SequenceKv clean(tf().kv_spec(n, KvCodecKind::kF32)), persistent(tf().kv_spec(n, KvCodecKind::kF32)),
      fresh(tf().kv_spec(n, KvCodecKind::kF32));
  const at::Tensor k_clean = run("", clean);
  EXPECT_GT((run("gaussian:0.3,persistent,seed=4", persistent) - k_clean).abs().max().item<double>(), 1e-3);
  EXPECT_TRUE(at::equal(run("gaussian:0.3,seed=4", fresh), k_clean));
  // and both corruptions are real
  for (const char* spec : {"gaussian:0.3,persistent,seed=4", "gaussian:0.3,seed=4"}) {
    KvStudy st;
    st.corruption = *parse_corruption(spec);
    EXPECT_GT((full_logits(KvCodecKind::kF32, nullptr, n, st) - full_logits(KvCodecKind::kF32, nullptr, n))
                  .abs()
                  .max()
                  .item<double>(),
              1e-3)
        << spec;
  }
}

TEST_F(RepairModelTest, FileRoundTripAndRefusals) {
  const std::string dir = ::testing::TempDir() + "/repair_file_test";
  std::filesystem::create_directories(dir);
  auto set = strong_set(RepairOption::kC, "0,1");
  ASSERT_TRUE(set->save(dir + "/r.safetensors", {{"codec", "int4"}}).ok());
  auto back = RepairSet::load(dir + "/r.safetensors", dims());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->metadata().at("codec"), "int4");
  EXPECT_EQ((full_logits(KvCodecKind::kInt4, set, 10) - full_logits(KvCodecKind::kInt4, *back, 10))
                .abs()
                .max()
                .item<double>(),
            0.0);
  // another model's dimensions
  RepairDims other = dims();
  other.n_layers = 6;
  auto wrong = RepairSet::load(dir + "/r.safetensors", other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("n_layers = 2"), std::string::npos) << wrong.status();
  // a truncated file
  std::filesystem::resize_file(dir + "/r.safetensors", 100);
  EXPECT_FALSE(RepairSet::load(dir + "/r.safetensors", dims()).ok());
  EXPECT_FALSE(RepairSet::load(dir + "/missing.safetensors", dims()).ok());
  // reserved metadata
  EXPECT_FALSE(set->save(dir + "/x.safetensors", {{"rank", "3"}}).ok());
}

TEST(RepairConfigTest, FieldsAndLayersAreValidatedWithTheirNames) {
  KvRepairConfig c;
  EXPECT_TRUE(set_kv_repair_field(c, "option", "B").ok());
  EXPECT_EQ(c.repair.option, RepairOption::kB);
  absl::Status s = set_kv_repair_field(c, "rank", "zero");
  EXPECT_NE(s.message().find("kv_repair config: rank must be an integer, got 'zero'"), std::string::npos)
      << s;
  s = set_kv_repair_field(c, "alpha_max", "1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = set_kv_repair_field(c, "corruption", "bogus:1");
  EXPECT_NE(s.message().find("corruption"), std::string::npos) << s;
  s = set_kv_repair_field(c, "nope", "1");
  EXPECT_NE(s.message().find("unknown key 'nope' (known: option, rank, apply_to,"), std::string::npos) << s;
  s = set_kv_repair_field(c, "lr", "0");
  EXPECT_NE(s.message().find("lr must be in (0, 10], got 0"), std::string::npos) << s;
  // every key of the table sets from its own dump
  const nlohmann::json j = nlohmann::json::parse(kv_repair_config_json(c));
  ASSERT_EQ(j.size(), kv_repair_config_keys().size());
  for (const std::string& key : kv_repair_config_keys()) {
    const std::string text = j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
    EXPECT_TRUE(set_kv_repair_field(c, key, text).ok()) << key << "=" << text;
  }
  EXPECT_EQ(nlohmann::json::parse(kv_repair_config_json(c)), j);
  EXPECT_EQ(*parse_repair_layers("mid", 6), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*parse_repair_layers("mid", 5), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*parse_repair_layers("1-2,4", 5), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_FALSE(parse_repair_layers("5", 5).ok());
  EXPECT_FALSE(parse_repair_layers("1,1", 5).ok());
  EXPECT_FALSE(parse_repair_layers("x", 5).ok());
}

TEST_F(RepairModelTest, TrainingLowersKlAndResumesExactly) {
  KvRepairConfig cfg;
  cfg.layers = "all";
  cfg.codec = KvCodecKind::kInt4;
  cfg.window = 24;
  cfg.steps = 30;
  cfg.batch = 2;
  cfg.lr = 1e-2;
  auto windows = sample_windows(tf(), -1, 6, cfg.window, 1);
  ASSERT_TRUE(windows.ok()) << windows.status();
  auto before = evaluate_kv(tf(), *windows, KvCodecKind::kInt4, {}, nullptr);
  ASSERT_TRUE(before.ok());
  auto set = train_kv_repair(tf(), cfg, *windows);
  ASSERT_TRUE(set.ok()) << set.status();
  auto after = evaluate_kv(tf(), *windows, KvCodecKind::kInt4, {}, *set);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(before->mean_kl, 0.0);
  EXPECT_LT(after->mean_kl, 0.9 * before->mean_kl) << before->mean_kl << " -> " << after->mean_kl;

  // cancel after 7 steps (checkpoint written), resume: the same parameters as the straight run
  const std::string ckpt = ::testing::TempDir() + "/kv_repair_ckpt.safetensors";
  std::filesystem::remove(ckpt);
  CancelToken cancel;
  KvRepairTrainOptions o;
  o.cancel = &cancel;
  o.checkpoint_path = ckpt;
  o.checkpoint_every = 5;
  o.progress = [&](const KvRepairProgress& p) {
    if (p.step == 7) cancel.cancel();
  };
  auto stopped = train_kv_repair(tf(), cfg, *windows, o);
  ASSERT_EQ(stopped.status().code(), absl::StatusCode::kCancelled);
  KvRepairTrainOptions resume;
  resume.checkpoint_path = ckpt;
  auto resumed = train_kv_repair(tf(), cfg, *windows, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto a = (*set)->named_parameters(), b = (*resumed)->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
}

}  // namespace
}  // namespace frost
