// Prototype regression end to end on the real stories260K backbone (../shared/models):
//  * a synthetic dataset whose label is fixed by one keyword in the text: the trained head must
//    get the labels right and explain a query with a prototype that shares its keyword;
//  * a small-config run on ../shared/data/emobank_valence that must beat the train-mean baseline.
#include <cstdio>
#include <map>
#include <random>

#include "core/prototype/data.h"
#include "core/prototype/evaluate.h"
#include "core/prototype/predictor.h"
#include "core/prototype/trainer.h"
#include "tests/testing/test_util.h"

namespace frost::prototype {
namespace {

struct KeywordData {
  RegressionData train, test;
  std::vector<std::string> test_keyword;
};

const std::map<std::string, float> kKeywords = {{"cat", 1.0f}, {"dog", 3.0f}, {"bird", 5.0f}};

std::string keyword_of(const std::string& text) {
  for (const auto& [kw, label] : kKeywords)
    if (text.find(" " + kw + " ") != std::string::npos) return kw;
  return "";
}

// 3 keywords × 6 names × 5 places × 2 templates = 180 texts; 30 held out at random.
KeywordData keyword_dataset() {
  const char* names[] = {"Tim", "Lily", "Sue", "Ben", "Max", "Anna"};
  const char* places[] = {"park", "garden", "house", "forest", "town"};
  std::vector<std::pair<std::string, float>> rows;
  for (const auto& [kw, label] : kKeywords)
    for (const char* n : names)
      for (const char* p : places) {
        rows.push_back({std::string("One day, ") + n + " saw a " + kw + " in the " + p + ".", label});
        rows.push_back({std::string("In the ") + p + ", a " + kw + " played with " + n + " all day.", label});
      }
  std::mt19937 rng(42);
  std::shuffle(rows.begin(), rows.end(), rng);
  KeywordData d;
  for (size_t i = 0; i < rows.size(); ++i) {
    RegressionData& dst = i < 30 ? d.test : d.train;
    dst.texts.push_back(rows[i].first);
    dst.labels.push_back(rows[i].second);
    dst.ids.push_back("");
    if (i < 30) d.test_keyword.push_back(keyword_of(rows[i].first));
  }
  return d;
}

struct KeywordRun {
  double mae = 0;             // test MAE
  int keyword_match = 0;      // test queries whose top prototype shares their keyword, of 30
  double label_reliance = 0;  // mean Prediction::label_reliance
};

// Trains the e2e test's small config (plus `extra` fields) on the keyword dataset and explains
// the 30 held-out texts with their top prototype.
void run_keyword(const std::vector<std::string>& extra, KeywordRun* r) {
  FROST_REQUIRE_SHARED(model_dir, "models/stories260K");
  auto model = load_model(model_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  KeywordData d = keyword_dataset();
  PrototypeConfig c;
  ASSERT_TRUE(set_fields(c, {"max_tokens=32", "d_h=64", "H=4", "L=2", "m=4", "m_q=4", "K=12", "T=48",
                             "epochs_a=8", "epochs_b=4", "batch_size=16", "lr=0.002", "label_hidden=16"})
                  .ok());
  ASSERT_TRUE(set_fields(c, extra).ok());
  auto tr = PrototypeTrainer::create(**model, d.train, LabelBounds{0.0, 6.0}, c);
  ASSERT_TRUE(tr.ok()) << tr.status();
  auto art = (*tr)->run({});
  ASSERT_TRUE(art.ok()) << art.status();
  auto pred = Predictor::create(*std::move(art), **model);
  ASSERT_TRUE(pred.ok()) << pred.status();
  auto out = (*pred)->predict(d.test.texts, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < out->size(); ++i) {
    const Prediction& p = (*out)[i];
    r->mae += std::abs(p.value - d.test.labels[i]) / static_cast<double>(out->size());
    r->label_reliance += p.label_reliance / static_cast<double>(out->size());
    ASSERT_EQ(p.top.size(), 1u);
    // the explanation names a real training example with its true label
    const int64_t idx = p.top[0].index;
    ASSERT_GE(idx, 0);
    ASSERT_LT(idx, d.train.size());
    EXPECT_EQ(p.top[0].text, d.train.texts[static_cast<size_t>(idx)]);
    EXPECT_EQ(p.top[0].label, d.train.labels[static_cast<size_t>(idx)]);
    r->keyword_match += keyword_of(p.top[0].text) == d.test_keyword[i];
  }
  std::fprintf(stderr,
               "keyword test: MAE %.3f, top prototype shares the keyword %d/30, label reliance %.3f\n",
               r->mae, r->keyword_match, r->label_reliance);
}

TEST(PrototypeE2E, KeywordDeterminedLabelsAreLearnedAndExplained) {
  KeywordRun r;
  run_keyword({}, &r);
  if (HasFatalFailure() || IsSkipped()) return;
  // Labels 1/3/5 in equal shares: predicting the mean scores MAE 1.33. The head must be far better.
  EXPECT_LT(r.mae, 0.5) << "test MAE on keyword-determined labels";
  // The top prototype of a query shares its keyword (chance: 1/3). This holds because of the
  // key_bias departure (docs/prototype.md, "Attribution"): with the seed's head (key_bias=0) the
  // figure is 0-18 of 30 over seeds 0-9 (median 9); with the default it is 28-30 over
  // seeds 0-9. k-means++ slot initialisation makes every keyword appear among the prototypes.
  EXPECT_GE(r.keyword_match, 27) << "top prototype shares the query's keyword";
}

TEST(PrototypeE2E, WithLabelReflectionThePrototypesLabelsDriveThePrediction) {
  // label_flip_p makes the query alone ambiguous in Stage B, so the head learns to read the
  // labels of the prototypes it attends to: hiding them moves ŷ by about the label spacing (2).
  // With the default head it moves ŷ by ~0.003 (printed by the test above).
  KeywordRun r;
  // Reflection asks the head alone to answer from the prototypes' labels, so it runs without the
  // linear probe (docs/prototype.md): a probe fitted to unreflected labels answers the other half.
  run_keyword({"label_flip_p=0.5", "epochs_b=12", "probe=none"}, &r);
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_LT(r.mae, 0.5) << "test MAE on keyword-determined labels";
  EXPECT_GE(r.keyword_match, 27) << "top prototype shares the query's keyword";
  EXPECT_GT(r.label_reliance, 0.5) << "mean |ŷ - ŷ with the prototype labels hidden|";
}

TEST(PrototypeE2E, SmallConfigOnEmobankBeatsTheTrainMean) {
  FROST_REQUIRE_SHARED(model_dir, "models/stories260K");
  FROST_REQUIRE_SHARED(data_dir, "data/emobank_valence");
  auto model = load_model(model_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto data = load_dataset_dir(data_dir);
  ASSERT_TRUE(data.ok()) << data.status();
  EvalOptions opts;
  ASSERT_TRUE(set_fields(opts.cfg, {"max_tokens=64", "d_h=64", "H=4", "L=1", "m=4", "m_q=4", "K=16", "T=64",
                                    "epochs_a=2", "epochs_b=1"})
                  .ok());
  auto res = evaluate_prototype(**model, *data, opts);
  ASSERT_TRUE(res.ok()) << res.status();
  const auto& m = (*res)["test_metrics"];
  const double mae = m["prototype"]["mae"].get<double>();
  const double mean_mae = m["train_mean"]["mae"].get<double>();
  EXPECT_NEAR(mean_mae, 0.2525, 5e-4);  // meta.json's train_mean baseline, recomputed
  EXPECT_LT(mae, mean_mae) << res->dump();
  EXPECT_GT(m["prototype"]["spearman"].get<double>(), 0.1) << res->dump();
  EXPECT_EQ((*res)["n_train"].get<int64_t>(), 7925);
  EXPECT_EQ((*res)["n_test"].get<int64_t>(), 1981);
  // The report names what the served head does, as chosen on the held-out rows.
  const auto& v = (*res)["validation"];
  EXPECT_EQ(v["mode"], v["stage_b"]["mode"]) << v.dump();
}

}  // namespace
}  // namespace frost::prototype
