// Unit tests of frostctl's pure helpers (client/frostctl/format.h).
#include "client/frostctl/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace frost::ctl {
namespace {

using frost::v1::Job;
using frost::v1::JobProgress;

// ---- Text

TEST(Utf8, Validity) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(is_valid_utf8("\xC3"));                                      // truncated
  EXPECT_FALSE(is_valid_utf8("\x80"));                                      // lone continuation
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));                                  // overlong "/"
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));                              // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));                          // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xFF"));
}

TEST(Utf8, LengthCountsCodePoints) {
  EXPECT_EQ(utf8_length(""), 0u);
  EXPECT_EQ(utf8_length("abc"), 3u);
  EXPECT_EQ(utf8_length("caf\xC3\xA9"), 4u);
  EXPECT_EQ(utf8_length("\xF0\x9F\x98\x80!"), 2u);
}

TEST(Utf8, TruncateKeepsShortStrings) {
  EXPECT_EQ(utf8_truncate("hello", 5), "hello");
  EXPECT_EQ(utf8_truncate("hello", 60), "hello");
  EXPECT_EQ(utf8_truncate("", 3), "");
}

TEST(Utf8, TruncateAddsEllipsis) {
  EXPECT_EQ(utf8_truncate("hello world", 6), "hello\u2026");
  EXPECT_EQ(utf8_length(utf8_truncate("abcdefghij", 4)), 4u);
  EXPECT_EQ(utf8_truncate("abcdefghij", 4), "abc\u2026");
  EXPECT_EQ(utf8_truncate("abcdefghij", 1), "\u2026");
  EXPECT_EQ(utf8_truncate("abcdefghij", 0), "");
}

TEST(Utf8, TruncateDropsTrailingSpaceBeforeEllipsis) {
  EXPECT_EQ(utf8_truncate("hello   world", 8), "hello\u2026");
}

TEST(Utf8, TruncateNeverSplitsMultiByteSequences) {
  // 10 two-byte characters, 10 three-byte ones, 10 four-byte ones.
  const std::string two = [] {
    std::string s;
    for (int i = 0; i < 10; ++i) s += "\xC3\xA9";
    return s;
  }();
  const std::string three = [] {
    std::string s;
    for (int i = 0; i < 10; ++i) s += "\xE2\x82\xAC";
    return s;
  }();
  const std::string four = [] {
    std::string s;
    for (int i = 0; i < 10; ++i) s += "\xF0\x9F\x98\x80";
    return s;
  }();
  for (const std::string& s : {two, three, four, "a" + two + "b" + four}) {
    for (size_t n = 0; n <= 12; ++n) {
      const std::string t = utf8_truncate(s, n);
      EXPECT_TRUE(is_valid_utf8(t)) << "n=" << n;
      EXPECT_LE(utf8_length(t), n);
    }
  }
  EXPECT_EQ(utf8_truncate(two, 3), "\xC3\xA9\xC3\xA9\u2026");
  EXPECT_EQ(utf8_truncate(four, 2), "\xF0\x9F\x98\x80\u2026");
}

TEST(Text, OneLineReplacesControlCharacters) {
  EXPECT_EQ(one_line("a\tb\nc\r\nd\x7F"), "a b c  d ");
  EXPECT_EQ(one_line("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(Text, TrimTrailingWhitespace) {
  EXPECT_EQ(trim_trailing_whitespace("tok3n\n"), "tok3n");
  EXPECT_EQ(trim_trailing_whitespace("tok3n \t\r\n\n"), "tok3n");
  EXPECT_EQ(trim_trailing_whitespace("  lead"), "  lead");
  EXPECT_EQ(trim_trailing_whitespace(" \n"), "");
  EXPECT_EQ(trim_trailing_whitespace(""), "");
}

TEST(Text, TextLinesSkipsBlankLinesAndCr) {
  EXPECT_EQ(text_lines("one\r\n\ntwo\n  \nthree"), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_TRUE(text_lines("").empty());
  EXPECT_TRUE(text_lines("\n\n").empty());
  EXPECT_EQ(text_lines(" padded \n"), (std::vector<std::string>{" padded "}));
}

// ---- Auth

TEST(Token, Check) {
  EXPECT_TRUE(check_bearer_token("abc.DEF-123_~+/=").ok());
  EXPECT_FALSE(check_bearer_token("").ok());
  EXPECT_FALSE(check_bearer_token("two words").ok());
  EXPECT_FALSE(check_bearer_token("line\nbreak").ok());
  EXPECT_FALSE(check_bearer_token("caf\xC3\xA9").ok());
}

TEST(Token, ErrorDoesNotQuoteTheToken) {
  const absl::Status s = check_bearer_token("s3cr3t value");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()).find("s3cr3t"), std::string::npos) << s.message();
}

// ---- Numbers and times

TEST(Format, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(12897484), "12.3 MiB");
  EXPECT_EQ(format_bytes(1048575), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(format_bytes(-5), "-5");
}

TEST(Format, Duration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(3599.8), "1h00m");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600), "2d03h");
  EXPECT_EQ(format_duration(1e12), ">99d");
  EXPECT_EQ(format_duration(-1), "-");
  EXPECT_EQ(format_duration(std::nan("")), "-");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "-");
}

TEST(Format, UnixTime) {
  EXPECT_EQ(format_unix_time(0), "-");
  EXPECT_EQ(format_unix_time(-3), "-");
  EXPECT_EQ(format_unix_time(std::nan("")), "-");
  EXPECT_EQ(format_unix_time(1), "1970-01-01T00:00:01Z");
  EXPECT_EQ(format_unix_time(1714566896.75), "2024-05-01T12:34:56Z");
}

// ---- Jobs

TEST(JobState, ParseAcceptsShortAndFullNamesInAnyCase) {
  EXPECT_EQ(*parse_job_state("queued"), frost::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(*parse_job_state("RUNNING"), frost::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*parse_job_state("Succeeded"), frost::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(*parse_job_state("failed"), frost::v1::JOB_STATE_FAILED);
  EXPECT_EQ(*parse_job_state("cancelled"), frost::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(*parse_job_state("canceled"), frost::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(*parse_job_state("interrupted"), frost::v1::JOB_STATE_INTERRUPTED);
  EXPECT_EQ(*parse_job_state("JOB_STATE_RUNNING"), frost::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*parse_job_state("job_state_failed"), frost::v1::JOB_STATE_FAILED);
}

TEST(JobState, ParseRejectsUnknownNames) {
  for (const char* bad :
       {"", "unspecified", "JOB_STATE_UNSPECIFIED", "done", "run", "JOB_STATE_", "0", "2"}) {
    const absl::StatusOr<frost::v1::JobState> s = parse_job_state(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.status().message()).find("interrupted"), std::string::npos);
  }
}

TEST(JobState, NamesAndTerminalStates) {
  EXPECT_EQ(job_state_name(frost::v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(job_state_name(frost::v1::JOB_STATE_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_EQ(job_state_name(static_cast<frost::v1::JobState>(42)), "STATE_42");
  EXPECT_FALSE(is_terminal_state(frost::v1::JOB_STATE_UNSPECIFIED));
  EXPECT_FALSE(is_terminal_state(frost::v1::JOB_STATE_QUEUED));
  EXPECT_FALSE(is_terminal_state(frost::v1::JOB_STATE_RUNNING));
  EXPECT_TRUE(is_terminal_state(frost::v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(is_terminal_state(frost::v1::JOB_STATE_FAILED));
  EXPECT_TRUE(is_terminal_state(frost::v1::JOB_STATE_CANCELLED));
  EXPECT_TRUE(is_terminal_state(frost::v1::JOB_STATE_INTERRUPTED));
}

TEST(Progress, Bar) {
  EXPECT_EQ(render_bar(0, 10, 12), "[..........]");
  EXPECT_EQ(render_bar(5, 10, 12), "[#####.....]");
  EXPECT_EQ(render_bar(10, 10, 12), "[##########]");
  EXPECT_EQ(render_bar(99, 100, 12), "[#########.]");  // rounds down: full only when done
  EXPECT_EQ(render_bar(15, 10, 12), "[##########]");   // clamped
  EXPECT_EQ(render_bar(-3, 10, 12), "[..........]");
  EXPECT_EQ(render_bar(1, 3, 5), "[#..]");
  EXPECT_EQ(render_bar(5, 0, 12), "");
  EXPECT_EQ(render_bar(5, 10, 2), "");
  EXPECT_EQ(render_bar(int64_t{1} << 62, int64_t{1} << 62, 7), "[#####]");
}

JobProgress progress(const char* stage, int epoch, int64_t step, int64_t total, double loss, double ex_s,
                     double eta) {
  JobProgress p;
  p.set_stage(stage);
  p.set_epoch(epoch);
  p.set_step(step);
  p.set_steps_total(total);
  p.set_loss(loss);
  p.set_examples_per_s(ex_s);
  p.set_eta_s(eta);
  return p;
}

Job job(frost::v1::JobState state, const JobProgress& p) {
  Job j;
  j.set_id("j-1");
  j.set_state(state);
  *j.mutable_progress() = p;
  return j;
}

TEST(Progress, Text) {
  EXPECT_EQ(progress_text(JobProgress()), "");
  EXPECT_EQ(progress_text(progress("stage_b", 2, 120, 400, 0.123456, 512.34, 80)),
            "stage=stage_b epoch=2 step=120/400 loss=0.1235 ex/s=512.3 eta=1m20s");
  EXPECT_EQ(progress_text(progress("features", 0, 0, 0, 0, 0, 0)), "stage=features epoch=0 step=0");
  EXPECT_EQ(progress_text(progress("", 1, 7, 0, 2.5, 0, 0)), "epoch=1 step=7 loss=2.5");
}

TEST(Progress, EventLine) {
  EXPECT_EQ(job_event_line(job(frost::v1::JOB_STATE_QUEUED, JobProgress())), "QUEUED");
  Job done = job(frost::v1::JOB_STATE_SUCCEEDED, progress("evaluate", 3, 10, 10, 0.05, 0, 0));
  done.set_artifact("prototype/3");
  done.set_reason("not shown");
  EXPECT_EQ(job_event_line(done),
            "SUCCEEDED stage=evaluate epoch=3 step=10/10 loss=0.05 artifact=prototype/3");
}

TEST(Progress, LiveLineWithBar) {
  const Job j = job(frost::v1::JOB_STATE_RUNNING, progress("stage_b", 2, 120, 400, 0.1234, 512.3, 80));
  const std::string line = render_progress_line(j, 120);
  EXPECT_EQ(
      line,
      "RUNNING stage_b epoch 2 [########....................] 120/400 30% loss 0.1234 512.3 ex/s ETA 1m20s");
  EXPECT_LE(utf8_length(line), 120u);
}

TEST(Progress, LiveLineDropsFieldsForTheBarThenTheBar) {
  const Job j = job(frost::v1::JOB_STATE_RUNNING, progress("stage_b", 2, 200, 400, 0.5, 300.5, 45));
  // Without a bar: "RUNNING stage_b epoch 2" (23) + " 200/400 50%" (12) + " loss 0.5" (9) + " 300.5 ex/s"
  // (11) + " ETA 45s" (8) = 63 columns.
  EXPECT_EQ(render_progress_line(j, 74),
            "RUNNING stage_b epoch 2 [####....] 200/400 50% loss 0.5 300.5 ex/s ETA 45s");
  EXPECT_EQ(render_progress_line(j, 73),
            "RUNNING stage_b epoch 2 [#########.........] 200/400 50% loss 0.5 ETA 45s");
  EXPECT_EQ(render_progress_line(j, 62), "RUNNING stage_b epoch 2 [#######........] 200/400 50% loss 0.5");
  EXPECT_EQ(render_progress_line(j, 46), "RUNNING stage_b epoch 2 [####....] 200/400 50%");
  // No room for a 10-column bar even without the optional fields: they stay, cut off at the edge.
  EXPECT_EQ(render_progress_line(j, 45), "RUNNING stage_b epoch 2 200/400 50% loss 0.5\u2026");
  const std::string tiny = render_progress_line(j, 20);
  EXPECT_EQ(utf8_length(tiny), 20u);
  EXPECT_EQ(tiny, "RUNNING stage_b epo\u2026");
  EXPECT_EQ(render_progress_line(j, 0), "");
}

TEST(Progress, LiveLineWithoutTotalOrProgress) {
  EXPECT_EQ(render_progress_line(job(frost::v1::JOB_STATE_QUEUED, JobProgress()), 80), "QUEUED");
  EXPECT_EQ(
      render_progress_line(job(frost::v1::JOB_STATE_RUNNING, progress("cache", 0, 42, 0, 0.7, 0, 0)), 80),
      "RUNNING cache epoch 0 step 42 loss 0.7");
}

// ---- train submit

TEST(InlineJsonl, ParsesRows) {
  const absl::StatusOr<frost::v1::InlineRows> rows = parse_inline_jsonl(
      "{\"text\": \"good\", \"label\": 4.5, \"id\": \"r1\"}\r\n"
      "\n"
      "   \n"
      "{\"label\": 1, \"text\": \"bad \\u00e9\", \"extra\": [1, 2]}\n"
      "{\"text\": \"numeric id\", \"label\": -2e0, \"id\": 7}",
      "data.jsonl");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows_size(), 3);
  EXPECT_EQ(rows->rows(0).text(), "good");
  EXPECT_EQ(rows->rows(0).label(), 4.5);
  EXPECT_EQ(rows->rows(0).id(), "r1");
  EXPECT_EQ(rows->rows(1).text(), "bad \xC3\xA9");
  EXPECT_EQ(rows->rows(1).label(), 1.0);
  EXPECT_EQ(rows->rows(1).id(), "");
  EXPECT_EQ(rows->rows(2).label(), -2.0);
  EXPECT_EQ(rows->rows(2).id(), "");  // only string ids are kept, as the server does for files
}

// The message of parsing `content` as "f.jsonl", or "" when it parses.
std::string jsonl_error(const std::string& content, std::optional<LabelRange> range = std::nullopt) {
  const absl::StatusOr<frost::v1::InlineRows> rows = parse_inline_jsonl(content, "f.jsonl", range);
  if (rows.ok()) return "";
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(rows.status().message());
}

TEST(InlineJsonl, NamesFileAndLineOfTheFirstBadRow) {
  const std::string ok = "{\"text\": \"a\", \"label\": 1}\n";
  EXPECT_EQ(jsonl_error(ok + "\n{\"text\": \"b\"}\n{\"label\": 2}\n"), "f.jsonl:3: \"label\" is missing");
  EXPECT_EQ(jsonl_error(ok + "{\"label\": 2}"), "f.jsonl:2: \"text\" is missing");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": \"b\", \"label\": \"2\"}"),
            "f.jsonl:2: \"label\" is a string, not a number");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": \"b\", \"label\": true}"),
            "f.jsonl:2: \"label\" is a boolean, not a number");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": 5, \"label\": 2}"), "f.jsonl:2: \"text\" is a number, not a string");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": \"  \", \"label\": 2}"), "f.jsonl:2: \"text\" is empty");
  EXPECT_EQ(jsonl_error(ok + "[1, 2]"), "f.jsonl:2: expected a JSON object, got an array");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": \"b\", \"label\": 1e999}"), "f.jsonl:2: a number is out of range");
  EXPECT_EQ(jsonl_error(ok + "{\"text\": \"\xC3\", \"label\": 1}"), "f.jsonl:2: not valid UTF-8");
  const std::string not_json = jsonl_error(ok + "{\"text\": \"b\", label: 1}");
  EXPECT_EQ(not_json.rfind("f.jsonl:2: not valid JSON", 0), 0u) << not_json;
}

TEST(InlineJsonl, ChecksLabelRangeWhenGiven) {
  const std::string content = "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": 7}\n";
  EXPECT_EQ(jsonl_error(content), "");
  EXPECT_EQ(jsonl_error(content, LabelRange{0, 10}), "");
  EXPECT_EQ(jsonl_error(content, LabelRange{1, 5}), "f.jsonl:2: \"label\" 7 is outside [1, 5]");
}

TEST(InlineJsonl, NoRows) {
  EXPECT_EQ(jsonl_error(""), "f.jsonl: no rows");
  EXPECT_EQ(jsonl_error("\n  \n\r\n"), "f.jsonl: no rows");
}

TEST(KeyValue, Parse) {
  EXPECT_EQ(*parse_key_value("epochs=3"), std::make_pair(std::string("epochs"), std::string("3")));
  EXPECT_EQ(*parse_key_value("expr=a=b"), std::make_pair(std::string("expr"), std::string("a=b")));
  EXPECT_EQ(*parse_key_value("empty="), std::make_pair(std::string("empty"), std::string("")));
  EXPECT_FALSE(parse_key_value("novalue").ok());
  EXPECT_FALSE(parse_key_value("=3").ok());
  EXPECT_FALSE(parse_key_value("").ok());
}

// ---- Output

TEST(Table, AlignsColumnsWithoutTrailingSpaces) {
  EXPECT_EQ(
      render_table({"NAME", "ACTIVE", "JOB"}, {{"prototype/12", "yes", "j-1"}, {"prototype/3", "no", ""}}),
      "NAME          ACTIVE  JOB\n"
      "prototype/12  yes     j-1\n"
      "prototype/3   no\n");
}

TEST(Table, MeasuresCodePointsAndFillsShortRows) {
  EXPECT_EQ(render_table({"A", "B"}, {{"caf\xC3\xA9", "x"}, {"z"}}),
            "A     B\n"
            "caf\xC3\xA9  x\n"
            "z\n");
  EXPECT_EQ(render_table({"ONLY"}, {}), "ONLY\n");
}

TEST(Json, Pretty) {
  EXPECT_EQ(pretty_json("{\"b\":1,\"a\":[true,null]}"),
            "{\n  \"a\": [\n    true,\n    null\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(pretty_json("not json {"), "not json {");
  EXPECT_EQ(pretty_json(""), "");
}

}  // namespace
}  // namespace frost::ctl
