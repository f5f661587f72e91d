// The typed seams of the job kinds: PrototypeJobKind::prepare hands inline rows to the row rules of
// core/prototype as rows (prototype::check_regression_rows), not as JSONL written and parsed back, and refuses a
// bad row as "inline_rows:<row>: <reason>" like a file's line; the KV kinds' window counts are a struct
// (KvJobCounts) with their defaults, checked naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/jobs/prototype_job.h"
#include "core/jobs/text_job_spec.h"

namespace frost::jobs {
namespace {

PrototypeJobSpec inline_spec(std::vector<TrainingRow> rows) {
  PrototypeJobSpec s;
  s.inline_rows = std::move(rows);
  s.label_min = 1;
  s.label_max = 5;
  s.holdout_fraction = 0;
  s.config = {{"K", "2"}};
  return s;
}

std::vector<TrainingRow> rows(int n) {
  std::vector<TrainingRow> out;
  for (int i = 0; i < n; ++i) out.push_back({"training row " + std::to_string(i), 2.0 + i / 10.0, ""});
  return out;
}

TEST(PrototypeJobInlineRowsTest, GoodRowsAreKeptAsGivenAndBadOnesNamedByRow) {
  PrototypeJobOptions o;
  o.max_inline_rows = 8;
  PrototypeJobKind kind(o);
  std::vector<TrainingRow> good = rows(4);
  good[1].id = "r1";
  good[2].text = "a \"quoted\" row\n";
  absl::StatusOr<JobSpec> prepared = kind.prepare(inline_spec(good));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(*std::get<PrototypeJobSpec>(*prepared).inline_rows, good) << "the normalised spec keeps the rows";

  std::vector<TrainingRow> bad = rows(6);
  bad[3].label = 7;
  bad[4].text = "";
  bad[5].label = std::numeric_limits<double>::quiet_NaN();
  const absl::Status st = kind.prepare(inline_spec(bad)).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "inline_rows:4: \"label\" 7 is outside [1, 5]\n"
            "inline_rows:5: \"text\" is empty\n"
            "inline_rows:6: \"label\" nan is not finite")
      << st;

  const absl::Status too_many = kind.prepare(inline_spec(rows(9))).status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("jobs.max_inline_rows=8"), std::string::npos) << too_many;
}

TEST(KvJobCountsTest, DefaultsFillInAndEachCountIsCheckedByName) {
  KvSpliceJobSpec s;
  s.calib_windows = 8;
  absl::StatusOr<TextJobSpec> t = parse_text_job_spec(s, "/nonexistent-data-root");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->counts.calib_windows, 8);
  EXPECT_EQ(t->counts.eval_windows, 16);
  EXPECT_EQ(t->counts.fisher_windows, 16);
  absl::StatusOr<KvSpliceJobSpec> norm = normalised_text_job_spec<KvSpliceJobSpec>(*t, "{}");
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(norm->calib_windows, 8);
  EXPECT_EQ(norm->fisher_windows, 16);

  s.fisher_windows = 0;
  EXPECT_EQ(parse_text_job_spec(s, "/").status().message(),
            "fisher_windows: expected an integer in [1, 100000], got 0");
  KvRepairJobSpec r;
  r.eval_windows = 100001;
  EXPECT_EQ(parse_text_job_spec(r, "/").status().message(),
            "eval_windows: expected an integer in [1, 100000], got 100001");
  r.eval_windows.reset();
  absl::StatusOr<KvRepairJobSpec> rn =
      normalised_text_job_spec<KvRepairJobSpec>(*parse_text_job_spec(r, "/"), "{}");
  ASSERT_TRUE(rn.ok()) << rn.status();
  EXPECT_EQ(rn->calib_windows, 64);
  EXPECT_EQ(rn->eval_windows, 16);
}

}  // namespace
}  // namespace frost::jobs
