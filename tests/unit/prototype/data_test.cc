// parse_regression_jsonl / load_regression_jsonl / load_meta_bounds / load_dataset_dir.
#include "core/prototype/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_util.h"

namespace frost::prototype {
namespace {

using ::frost::testing::TempDir;
using ::frost::testing::write_text_file;

const LabelBounds kB15{1, 5};

absl::Status parse_status(const std::string& content, const LabelBounds& b = kB15, const DataLimits& l = {}) {
  return parse_regression_jsonl(content, "train.jsonl", b, l).status();
}

// ---- positive cases -------------------------------------------------------------------------

TEST(RegressionDataTest, ParsesRowsKeepsStringIds) {
  const std::string content =
      "{\"text\": \"good day\", \"label\": 4.5, \"id\": \"a1\"}\n"
      "{\"text\": \"bad day\", \"label\": 1, \"id\": 17, \"extra\": [1, 2]}\n"
      "{\"label\": 5, \"text\": \"caf\\u00e9 \\u2764\"}\n";
  auto d = parse_regression_jsonl(content, "train.jsonl", kB15);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 3);
  EXPECT_EQ(d->texts[0], "good day");
  EXPECT_EQ(d->texts[1], "bad day");
  EXPECT_EQ(d->texts[2], "caf\xC3\xA9 \xE2\x9D\xA4");
  EXPECT_FLOAT_EQ(d->labels[0], 4.5f);
  // Integer labels on the inclusive lower and upper bounds.
  EXPECT_FLOAT_EQ(d->labels[1], 1.0f);
  EXPECT_FLOAT_EQ(d->labels[2], 5.0f);
  // A numeric id is not kept.
  EXPECT_EQ(d->ids, (std::vector<std::string>{"a1", "", ""}));
}

TEST(RegressionDataTest, BlankLinesSkippedButCounted) {
  // Line 1 blank, line 3 whitespace only, CRLF line endings, no final newline.
  const std::string content = "\n{\"text\": \"x\", \"label\": 2}\r\n \t \r\n{\"text\": \"y\", \"label\": 9}";
  auto st = parse_status(content);
  EXPECT_INVALID(st, "train.jsonl:4: \"label\" 9 is outside [1, 5]");
  EXPECT_EQ(std::string(st.message()).find("train.jsonl:2"), std::string::npos) << st;

  auto d = parse_regression_jsonl("\n{\"text\": \"x\", \"label\": 2}\r\n\n\n", "t", kB15);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 1);
  EXPECT_EQ(d->texts[0], "x");
}

TEST(RegressionDataTest, TextKeepsInnerWhitespace) {
  auto d = parse_regression_jsonl("{\"text\": \"  a b \\n\", \"label\": 3}\n", "t", kB15);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->texts[0], "  a b \n");  // not stripped: the text is evaluated as given
}

TEST(RegressionDataTest, ValidateBounds) {
  EXPECT_TRUE(validate_bounds({1, 5}).ok());
  EXPECT_TRUE(validate_bounds({-1e9, 1e9}).ok());
  EXPECT_INVALID(validate_bounds({5, 1}), "a=5 must be < b=1");
  EXPECT_INVALID(validate_bounds({2, 2}), "a=2 must be < b=2");
  EXPECT_INVALID(validate_bounds({0, std::numeric_limits<double>::infinity()}), "must be finite");
  EXPECT_INVALID(validate_bounds({std::nan(""), 1}), "must be finite");
  EXPECT_INVALID(parse_status("{\"text\": \"x\", \"label\": 2}", {3, 1}), "train.jsonl: label bounds: a=3");
}

// ---- bad rows -------------------------------------------------------------------------------

struct BadRowCase {
  const char* line;
  const char* expected;  // substring of the reason
};

void PrintTo(const BadRowCase& c, std::ostream* os) { *os << c.line; }

class BadRowTest : public ::testing::TestWithParam<BadRowCase> {};

TEST_P(BadRowTest, RefusedWithFileLineAndReason) {
  // The bad row is line 2, after a good row, so the line number is checked too.
  const std::string content = absl::StrCat("{\"text\": \"fine\", \"label\": 3}\n", GetParam().line, "\n");
  const absl::Status st = parse_status(content);
  EXPECT_INVALID(st, absl::StrCat("train.jsonl:2: ", GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Rows, BadRowTest,
    ::testing::Values(
        BadRowCase{"{\"text\": \"x\", \"label\": 7.5}", "\"label\" 7.5 is outside [1, 5]"},
        BadRowCase{"{\"text\": \"x\", \"label\": 0.999}", "\"label\" 0.999 is outside [1, 5]"},
        // Just above the bound: printed with enough digits not to read "5".
        BadRowCase{"{\"text\": \"x\", \"label\": 5.000000001}", "\"label\" 5.000000001 is outside"},
        BadRowCase{"{\"text\": \"x\", \"label\": \"3.5\"}", "\"label\" \"3.5\" is a string, not a number"},
        BadRowCase{"{\"text\": \"x\", \"label\": true}", "\"label\" true is a boolean, not a number"},
        BadRowCase{"{\"text\": \"x\", \"label\": null}", "\"label\" null is null, not a number"},
        BadRowCase{"{\"text\": \"x\"}", "\"label\" is missing"},
        BadRowCase{"{\"label\": 2}", "\"text\" is missing"},
        BadRowCase{"{\"text\": 12, \"label\": 2}", "\"text\" 12 is a number, not a string"},
        BadRowCase{"{\"text\": [\"a\"], \"label\": 2}", "\"text\" [\"a\"] is an array, not a string"},
        BadRowCase{"{\"text\": \"\", \"label\": 2}", "\"text\" is empty"},
        BadRowCase{"{\"text\": \" \\t\\n \", \"label\": 2}", "\"text\" \" \\t\\n \" is only whitespace"},
        BadRowCase{"{\"text\": \"x\xff\", \"label\": 2}", "not valid UTF-8 (bad byte at offset 11"},
        BadRowCase{"{\"text\": \"\xC0\xAF\", \"label\": 2}", "not valid UTF-8"},  // overlong '/'
        BadRowCase{"{\"text\": \"\\ud800\", \"label\": 2}", "not valid JSON"},    // lone surrogate
        BadRowCase{"[\"x\", 2]", "row is an array, not a JSON object"},
        BadRowCase{"3.5", "row is a number, not a JSON object"},
        BadRowCase{"{\"text\": \"x\", \"label\": 2", "not valid JSON"},
        BadRowCase{"{\"text\": \"x\", \"label\": NaN}", "not valid JSON"},
        BadRowCase{"{\"text\": \"x\", \"label\": 1e400}", "not valid JSON"},  // overflows to inf
        BadRowCase{"{\"text\": \"x\", \"label\": 2} {}", "not valid JSON"},   // two values
        // Both fields bad: both reasons are given.
        BadRowCase{"{\"text\": \"\", \"label\": 9}", "\"text\" is empty; \"label\" 9 is outside"}));

TEST(RegressionDataTest, DeepNestingRefused) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_INVALID(parse_status(absl::StrCat("{\"text\": \"x\", \"label\": 2, \"id\": ", deep, "}")),
                 "train.jsonl:1: JSON nests deeper than 64 levels");
}

TEST(RegressionDataTest, ListsFirstTenBadRowsAndTotal) {
  std::string content;
  for (int i = 1; i <= 25; ++i) {
    absl::StrAppend(&content, "{\"text\": \"t\", \"label\": ", (i % 2 ? 3 : 8), "}\n");  // even lines bad
  }
  const absl::Status st = parse_status(content);
  EXPECT_INVALID(st, "train.jsonl:2: \"label\" 8 is outside [1, 5]");
  EXPECT_MSG_HAS(st, "train.jsonl:20: ");
  EXPECT_EQ(std::string(st.message()).find("train.jsonl:22:"), std::string::npos) << st;  // the 11th
  EXPECT_MSG_HAS(st, "(12 bad rows in total)");

  // Exactly 10 bad rows: all listed, no total line.
  std::string ten;
  for (int i = 0; i < 10; ++i) absl::StrAppend(&ten, "{\"text\": \"t\", \"label\": 0}\n");
  const absl::Status st10 = parse_status(ten);
  EXPECT_MSG_HAS(st10, "train.jsonl:10:");
  EXPECT_EQ(std::string(st10.message()).find("in total"), std::string::npos) << st10;
}

TEST(RegressionDataTest, NoRows) {
  EXPECT_INVALID(parse_status(""), "train.jsonl: no rows");
  EXPECT_INVALID(parse_status("\n  \n\r\n"), "train.jsonl: no rows");
}

TEST(RegressionDataTest, Limits) {
  const std::string three =
      "{\"text\": \"a\", \"label\": 2}\n{\"text\": \"b\", \"label\": 2}\n"
      "\n{\"text\": \"c\", \"label\": 2}\n";
  DataLimits l;
  l.max_rows = 2;
  EXPECT_INVALID(parse_status(three, kB15, l), "train.jsonl:4: more than max_rows=2 rows");
  l.max_rows = 3;
  EXPECT_TRUE(parse_status(three, kB15, l).ok());

  DataLimits t;
  t.max_text_bytes = 4;
  EXPECT_TRUE(parse_status("{\"text\": \"abcd\", \"label\": 2}", kB15, t).ok());
  EXPECT_INVALID(parse_status("{\"text\": \"abcde\", \"label\": 2}", kB15, t),
                 "train.jsonl:1: \"text\" is 5 bytes, over max_text_bytes=4");

  DataLimits f;
  f.max_file_bytes = 10;
  EXPECT_INVALID(parse_status("{\"text\": \"abcd\", \"label\": 2}", kB15, f),
                 "larger than max_file_bytes=10");

  DataLimits bad;
  bad.max_rows = 0;
  EXPECT_INVALID(parse_status("{\"text\": \"a\", \"label\": 2}", kB15, bad), "data limits must be >= 1");
}

// ---- files and directories ------------------------------------------------------------------

TEST(RegressionDataTest, LoadFileUsesPathAsSource) {
  TempDir dir;
  const std::string path = dir.file("train.jsonl");
  write_text_file(path, "{\"text\": \"a\", \"label\": 2}\n{\"text\": \"b\", \"label\": 6}\n");
  const absl::Status st = load_regression_jsonl(path, kB15).status();
  EXPECT_INVALID(st, absl::StrCat(path, ":2: \"label\" 6 is outside [1, 5]"));

  EXPECT_EQ(load_regression_jsonl(dir.file("missing.jsonl"), kB15).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_INVALID(load_regression_jsonl(dir.path(), kB15).status(), "not a regular file");
  DataLimits l;
  l.max_file_bytes = 8;
  EXPECT_INVALID(load_regression_jsonl(path, kB15, l).status(), "larger than max_file_bytes=8");
}

TEST(RegressionDataTest, MetaBounds) {
  TempDir dir;
  const std::string meta = dir.file("meta.json");
  write_text_file(meta, R"({"name": "x", "label_min": 1.0, "label_max": 5})");
  auto b = load_meta_bounds(meta);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->a, 1.0);
  EXPECT_EQ(b->b, 5.0);

  write_text_file(meta, R"({"label_min": 1.0})");
  EXPECT_INVALID(load_meta_bounds(meta).status(), absl::StrCat(meta, ": \"label_max\" is missing"));
  write_text_file(meta, R"({"label_min": "1", "label_max": 5})");
  EXPECT_INVALID(load_meta_bounds(meta).status(), "\"label_min\" \"1\" is a string, not a number");
  write_text_file(meta, R"({"label_min": 5, "label_max": 5})");
  EXPECT_INVALID(load_meta_bounds(meta).status(), "label bounds: a=5 must be < b=5");
  write_text_file(meta, R"([1, 5])");
  EXPECT_INVALID(load_meta_bounds(meta).status(), "top level is an array, not a JSON object");
  write_text_file(meta, R"({"label_min": )");
  EXPECT_INVALID(load_meta_bounds(meta).status(), "not valid JSON");
  EXPECT_EQ(load_meta_bounds(dir.file("none.json")).status().code(), absl::StatusCode::kNotFound);
}

TEST(RegressionDataTest, DatasetDir) {
  TempDir tmp;
  const std::string dir = tmp.file("my_set");
  std::filesystem::create_directories(dir);
  write_text_file(dir + "/train.jsonl",
                  "{\"text\": \"a\", \"label\": 0.5}\n{\"text\": \"b\", \"label\": 1}\n");
  write_text_file(dir + "/test.jsonl", "{\"text\": \"c\", \"label\": 0}\n");

  // No meta.json: needs an override; name falls back to the basename (trailing '/' ignored).
  EXPECT_EQ(load_dataset_dir(dir).status().code(), absl::StatusCode::kNotFound);
  auto d = load_dataset_dir(dir + "/", LabelBounds{0, 1});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->name, "my_set");
  EXPECT_EQ(d->train.size(), 2);
  EXPECT_EQ(d->test.size(), 1);

  // meta.json supplies name and bounds; an override replaces the bounds.
  write_text_file(dir + "/meta.json", R"({"name": "nice", "label_min": 0.5, "label_max": 1})");
  const absl::Status st = load_dataset_dir(dir).status();
  EXPECT_INVALID(st, absl::StrCat(dir, "/test.jsonl:1: \"label\" 0 is outside [0.5, 1]"));
  d = load_dataset_dir(dir, LabelBounds{0, 2});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->name, "nice");
  EXPECT_EQ(d->bounds.b, 2.0);

  EXPECT_INVALID(load_dataset_dir(dir, LabelBounds{2, 0}).status(), "bounds override: label bounds");
  EXPECT_EQ(load_dataset_dir(tmp.file("nope")).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(::remove((dir + "/test.jsonl").c_str()), 0);
  const absl::Status missing = load_dataset_dir(dir, LabelBounds{0, 2}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_MSG_HAS(missing, "test.jsonl");
}

TEST(RegressionDataTest, SharedEmobankValence) {
  FROST_REQUIRE_SHARED(dir, "data/emobank_valence");
  auto d = load_dataset_dir(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->name, "emobank_valence");
  EXPECT_EQ(d->bounds.a, 1.0);
  EXPECT_EQ(d->bounds.b, 5.0);
  EXPECT_EQ(d->train.size(), 7925);
  EXPECT_EQ(d->test.size(), 1981);
  for (const RegressionData* split : {&d->train, &d->test}) {
    ASSERT_EQ(split->labels.size(), split->texts.size());
    ASSERT_EQ(split->ids.size(), split->texts.size());
    for (int64_t i = 0; i < split->size(); ++i) {
      EXPECT_GE(split->labels[i], 1.0f);
      EXPECT_LE(split->labels[i], 5.0f);
      EXPECT_FALSE(split->ids[i].empty()) << "row " << i;
    }
  }
  EXPECT_EQ(d->train.ids[0], "110CYL068_1036_1079");
  EXPECT_FLOAT_EQ(d->train.labels[2], 3.44f);
  // Train mean as recorded in meta.json label_stats_train.
  double sum = 0;
  for (float y : d->train.labels) sum += y;
  EXPECT_NEAR(sum / d->train.size(), 2.976287, 1e-5);
}

}  // namespace
}  // namespace frost::prototype
