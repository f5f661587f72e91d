// JobSpec / JobProgress and their JSON (core/jobs/job_spec.h): each kind round-trips, the specs earlier
// frostd versions wrote into their journals load into the fields they meant, and a spec that does not fit
// the type is refused naming the field.
#include "core/jobs/job_spec.h"

#include <gtest/gtest.h>

#include <cmath>

namespace frost::jobs {
namespace {

JobSpec round_trip(const JobSpec& s) {
  absl::StatusOr<JobSpec> back = spec_from_json(job_kind_name(s), spec_to_json(s));
  EXPECT_TRUE(back.ok()) << back.status();
  return back.ok() ? *back : JobSpec{};
}

TEST(JobSpecTest, EveryKindRoundTripsThroughItsJson) {
  PrototypeJobSpec p;
  p.inline_rows = std::vector<TrainingRow>{{"a \"quoted\" row\n", 2.5, "id-1"}, {"caf\xC3\xA9", -1e-300, ""}};
  p.label_min = 1;
  p.label_max = 5;
  p.holdout_fraction = 0.25;
  p.config = {{"K", "16"}, {"lr", "0.0012345678901234"}};
  p.activate = true;
  EXPECT_EQ(std::get<PrototypeJobSpec>(round_trip(p)), p);

  PrototypeJobSpec q;  // a path, nothing optional
  q.train_path = "/data/emobank/train.jsonl";
  q.test_path = "/data/emobank/test.jsonl";
  EXPECT_EQ(std::get<PrototypeJobSpec>(round_trip(q)), q);

  KvRepairJobSpec k;
  k.calib_path = "/d/train.jsonl";
  k.calib_windows = 64;
  k.eval_windows = 16;
  k.config = {{"codec", "int4"}, {"layers", "mid"}};
  EXPECT_EQ(std::get<KvRepairJobSpec>(round_trip(k)), k);

  KvSpliceJobSpec v;
  v.test_path = "t.jsonl";
  v.fisher_windows = 8;
  v.activate = true;
  EXPECT_EQ(std::get<KvSpliceJobSpec>(round_trip(v)), v);
  EXPECT_EQ(job_kind_name(JobSpec(v)), std::string("kvsplice"));
}

// Verbatim the normalised specs frostd wrote before JobSpec existed (nlohmann dumps, keys sorted).
TEST(JobSpecTest, SpecsFromEarlierJournalsLoad) {
  auto proto = spec_from_json(
      "prototype",
      R"({"activate":false,"config":{"K":"8","epochs_a":"1"},"holdout_fraction":0.1,"label_max":5.0,)"
      R"("label_min":1.0,"train_path":"/tmp/data/emobank_valence/train.jsonl"})");
  ASSERT_TRUE(proto.ok()) << proto.status();
  const auto& p = std::get<PrototypeJobSpec>(*proto);
  EXPECT_EQ(p.train_path, "/tmp/data/emobank_valence/train.jsonl");
  EXPECT_FALSE(p.inline_rows.has_value());
  EXPECT_EQ(p.holdout_fraction, 0.1);
  EXPECT_EQ(p.label_min, 1.0);
  EXPECT_EQ(p.label_max, 5.0);
  EXPECT_EQ(p.config, (ConfigEntries{{"K", "8"}, {"epochs_a", "1"}}));
  EXPECT_FALSE(p.activate);

  auto inl = spec_from_json("prototype",
                            R"({"activate":true,"config":{},"holdout_fraction":0.0,"inline_rows":[{"label":2.0,)"
                            R"("text":"training row 0"},{"id":"r1","label":2.1,"text":"training row 1"}],)"
                            R"("label_max":5.0,"label_min":1.0})");
  ASSERT_TRUE(inl.ok()) << inl.status();
  const auto& i = std::get<PrototypeJobSpec>(*inl);
  ASSERT_TRUE(i.inline_rows.has_value());
  EXPECT_EQ(*i.inline_rows, (std::vector<TrainingRow>{{"training row 0", 2.0, ""}, {"training row 1", 2.1, "r1"}}));
  EXPECT_TRUE(i.activate);

  auto kv = spec_from_json(
      "kv_repair",
      R"({"activate":true,"calib_path":"/d/train.jsonl","calib_windows":64,"config":{"alpha_max":"0.5",)"
      R"("codec":"int4","lr":"0.01","steps":"300"},"eval_windows":16,"test_path":"/d/test.jsonl"})");
  ASSERT_TRUE(kv.ok()) << kv.status();
  const auto& r = std::get<KvRepairJobSpec>(*kv);
  EXPECT_EQ(r.calib_path, "/d/train.jsonl");
  EXPECT_EQ(r.test_path, "/d/test.jsonl");
  EXPECT_EQ(r.calib_windows, 64);
  EXPECT_EQ(r.eval_windows, 16);
  EXPECT_EQ(r.config.size(), 4u);
  EXPECT_TRUE(r.activate);

  auto sp = spec_from_json("kvsplice",
                           R"({"activate":false,"calib_windows":64,"config":{"rank":"16"},"eval_windows":16,)"
                           R"("fisher_windows":16})");
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ(std::get<KvSpliceJobSpec>(*sp).fisher_windows, 16);
}

TEST(JobSpecTest, RefusesWhatDoesNotFitTheTypeNamingTheField) {
  auto expect_refused = [](const std::string& kind, const std::string& json, const std::string& needle) {
    absl::StatusOr<JobSpec> s = spec_from_json(kind, json);
    ASSERT_FALSE(s.ok()) << json;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status();
  };
  expect_refused("prototype", "[1, 2]", "not a JSON object");
  // The known keys come from the spec's table (core/jobs/job_spec.cc) plus the two read by hand.
  expect_refused(
      "prototype", "{\"oops\": 1}",
      "unknown key 'oops' (expected one of train_path|test_path|holdout_fraction|label_min|label_max|"
      "activate|config|inline_rows)");
  expect_refused("prototype", "{\"train_path\": 7}", "train_path: expected a string, got 7");
  expect_refused("prototype", "{\"label_min\": \"1\"}", "label_min: expected a finite number, got \"1\"");
  expect_refused("prototype", "{\"config\": {\"K\": 8}}", "config.K");
  expect_refused("prototype", "{\"inline_rows\": [{\"text\": \"x\"}]}", "inline_rows:1");
  expect_refused("prototype", "{\"activate\": \"yes\"}", "activate: expected true or false, got \"yes\"");
  expect_refused("prototype", "{\"activate\": null}", "activate: expected true or false, got null");
  expect_refused("kv_repair", "{\"fisher_windows\": 3}", "unknown key 'fisher_windows'");
  expect_refused("kv_repair", "{\"calib_windows\": 1.5}", "calib_windows: expected an integer, got 1.5");
  expect_refused("kvsplice", "{\"fisher_windows\": [8]}", "fisher_windows: expected an integer, got [8]");
  expect_refused("nope", "{}", "unknown job kind");
}

// The journal's bytes are what earlier versions wrote: the verbatim specs above come back out unchanged.
TEST(JobSpecTest, WritesTheBytesEarlierVersionsWrote) {
  for (
      const auto& [kind, text] : std::vector<std::pair<std::string, std::string>>{
          {"prototype",
           R"({"activate":false,"config":{"K":"8","epochs_a":"1"},"holdout_fraction":0.1,"label_max":5.0,)"
           R"("label_min":1.0,"train_path":"/tmp/data/emobank_valence/train.jsonl"})"},
          {"prototype", R"({"activate":true,"config":{},"holdout_fraction":0.0,"inline_rows":[{"label":2.0,)"
                        R"("text":"training row 0"},{"id":"r1","label":2.1,"text":"training row 1"}],)"
                        R"("label_max":5.0,"label_min":1.0})"},
          {"kv_repair",
           R"({"activate":true,"calib_path":"/d/train.jsonl","calib_windows":64,"config":{"alpha_max":"0.5",)"
           R"("codec":"int4","lr":"0.01","steps":"300"},"eval_windows":16,"test_path":"/d/test.jsonl"})"},
          {"kvsplice", R"({"activate":false,"calib_windows":64,"config":{"rank":"16"},"eval_windows":16,)"
                       R"("fisher_windows":16})"}}) {
    absl::StatusOr<JobSpec> s = spec_from_json(kind, text);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(spec_to_json(*s), text);
  }
}

// A JSON null unsets an optional field (as it always did for holdout_fraction and the label bounds).
TEST(JobSpecTest, NullLeavesAnOptionalFieldUnset) {
  auto s = spec_from_json("kv_repair", R"({"calib_path":null,"calib_windows":null,"activate":true})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& r = std::get<KvRepairJobSpec>(*s);
  EXPECT_FALSE(r.calib_path.has_value());
  EXPECT_FALSE(r.calib_windows.has_value());
  EXPECT_TRUE(r.activate);
  EXPECT_EQ(spec_to_json(*s), R"({"activate":true,"config":{}})");
}

TEST(JobSpecTest, InlineRowsWriteTheJsonlAFileOfThemHolds) {
  const std::string jsonl = training_rows_jsonl({{"one", 1.5, ""}, {"two \"2\"", 2, "x"}});
  EXPECT_EQ(jsonl, "{\"label\":1.5,\"text\":\"one\"}\n{\"id\":\"x\",\"label\":2.0,\"text\":\"two \\\"2\\\"\"}\n");
}

TEST(JobSpecTest, ConfigDumpsBecomeEntriesInOrder) {
  auto c = config_entries_from_json(R"({"option":"A","rank":8,"lr":0.001,"flag":true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (ConfigEntries{{"option", "A"}, {"rank", "8"}, {"lr", "0.001"}, {"flag", "true"}}));
}

TEST(JobProgressTest, RoundTripsAndReadsEarlierProgress) {
  JobProgress p;
  p.stage = "stage_b";
  p.epoch = 3;
  p.epochs = 8;
  p.step = 120;
  p.steps_total = 344;
  p.loss = 0.125;
  p.kl = 0.5;
  p.examples_per_s = 1778.5;
  p.eta_s = 12.25;
  EXPECT_EQ(progress_from_json(progress_to_json(p)), p);
  // The KV kinds' progress before JobProgress existed.
  auto old = progress_from_json(
      R"({"eta_s":3.5,"examples_per_s":41.0,"kl":0.02,"loss":0.3,"stage":"kv_repair","step":10,"steps_total":300})");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->stage, "kv_repair");
  EXPECT_EQ(old->step, 10);
  EXPECT_EQ(old->steps_total, 300);
  EXPECT_DOUBLE_EQ(old->kl, 0.02);
  EXPECT_EQ(old->epoch, 0);
  EXPECT_FALSE(progress_from_json("not json").has_value());
  // Counts outside their type read as missing (the conversion would be undefined; tests/fuzz found it).
  auto huge = progress_from_json(R"({"epoch":3e9,"epochs":-1e300,"step":7,"steps_total":1.8446744073709552e22})");
  ASSERT_TRUE(huge.has_value());
  EXPECT_EQ(huge->epoch, 0);
  EXPECT_EQ(huge->epochs, 0);
  EXPECT_EQ(huge->step, 7);
  EXPECT_EQ(huge->steps_total, 0);
}

}  // namespace
}  // namespace frost::jobs
