// The programs' flag tables (core/flags/flags.h): the table parser, --help detection, the strict value
// parsers with the error messages the programs print, and the help generated from a Command.
#include "core/flags/flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace frost::cli {
namespace {

using Args = std::vector<std::string>;

// A table with one flag of every kind, recording what it was given.
struct Parsed {
  int32_t n = 0;
  int64_t big = 0;
  uint64_t seed = 0;
  float t = 0;
  double d = 0;
  std::string name;
  std::vector<std::string> stops;
  bool quiet = false;

  std::vector<Flag> flags() {
    return {int32_flag("--n", [this](int32_t v) { n = v; }),
            int64_flag("--big", [this](int64_t v) { big = v; }),
            uint64_flag("--seed", [this](uint64_t v) { seed = v; }),
            float_flag("--t", [this](float v) { t = v; }),
            double_flag("--d", [this](double v) { d = v; }),
            string_flag("--name", [this](const std::string& v) { name = v; }),
            string_flag("--stop", [this](const std::string& v) { stops.push_back(v); }),
            switch_flag("--quiet", [this] { quiet = true; }),
            switch_flag("-q", [this] { quiet = true; })};
  }
};

TEST(ParseFlags, SpaceAndEqualsForms) {
  Parsed p;
  auto pos = parse_flags(
      {"--n", "3", "--big=5000000000", "--seed", "7", "--t=0.5", "--d", "-2.5", "--name=a=b", "--quiet"},
      p.flags());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_TRUE(pos->empty());
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.big, 5000000000LL);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_FLOAT_EQ(p.t, 0.5f);
  EXPECT_DOUBLE_EQ(p.d, -2.5);
  EXPECT_EQ(p.name, "a=b");  // only the first '=' splits
  EXPECT_TRUE(p.quiet);
}

TEST(ParseFlags, ValueIsTheNextArgumentWhateverItLooksLike) {
  Parsed p;
  auto pos = parse_flags({"--name", "--quiet", "--stop", "-", "--stop", ""}, p.flags());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(p.name, "--quiet");
  EXPECT_FALSE(p.quiet);
  EXPECT_EQ(p.stops, (Args{"-", ""}));
}

TEST(ParseFlags, RepeatableAppendsOthersKeepTheLast) {
  Parsed p;
  auto pos = parse_flags({"--stop", "a", "--n", "1", "--stop=b", "--n", "2"}, p.flags());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(p.stops, (Args{"a", "b"}));
  EXPECT_EQ(p.n, 2);
}

TEST(ParseFlags, PositionalsDashAndDoubleDash) {
  Parsed p;
  auto pos = parse_flags({"x", "--quiet", "-", "y", "--", "--n", "z"}, p.flags());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(*pos, (Args{"x", "-", "y", "--n", "z"}));
  EXPECT_TRUE(p.quiet);
  EXPECT_EQ(p.n, 0);
}

TEST(ParseFlags, StopAtPositional) {
  Parsed p;
  auto pos =
      parse_flags({"-q", "--n", "4", "cmd", "--n", "5", "--bogus"}, p.flags(), /*stop_at_positional=*/true);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(*pos, (Args{"cmd", "--n", "5", "--bogus"}));
  EXPECT_EQ(p.n, 4);
  EXPECT_TRUE(p.quiet);
}

TEST(ParseFlags, ErrorsNameTheFlag) {
  Parsed p;
  auto unknown = parse_flags({"--n", "1", "--bogus", "2"}, p.flags());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(), "unknown flag --bogus");
  EXPECT_EQ(parse_flags({"--bogus=2"}, p.flags()).status().message(), "unknown flag --bogus");
  EXPECT_EQ(parse_flags({"-x"}, p.flags()).status().message(), "unknown flag -x");
  EXPECT_EQ(parse_flags({"--n"}, p.flags()).status().message(), "--n needs a value");
  EXPECT_EQ(parse_flags({"--quiet=1"}, p.flags()).status().message(), "--quiet takes no value");
  EXPECT_EQ(parse_flags({"--n", "x"}, p.flags()).status().message(),
            "--n: expected a 32-bit integer, got \"x\"");
  EXPECT_EQ(parse_flags({"--seed=-1"}, p.flags()).status().message(),
            "--seed: expected an unsigned 64-bit integer, got \"-1\"");
}

TEST(ParseFlags, StopsAtTheFirstErrorAfterApplyingEarlierFlags) {
  Parsed p;
  EXPECT_FALSE(parse_flags({"--n", "1", "--t", "nan", "--name", "late"}, p.flags()).ok());
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.name, "");
}

TEST(ParseFlags, ApplyErrorsPassThrough) {
  std::vector<Flag> flags = {value_flag("--mode", [](const std::string& v) {
    return v == "a" || v == "b" ? absl::OkStatus() : bad_value("--mode", "a or b", v);
  })};
  EXPECT_TRUE(parse_flags({"--mode", "a"}, flags).ok());
  EXPECT_EQ(parse_flags({"--mode", "c"}, flags).status().message(), "--mode: expected a or b, got \"c\"");
}

TEST(ParseFlags, LowerBounds) {
  int32_t n = -1;
  int64_t big = -1;
  double t = -1;
  const std::vector<Flag> flags = {int32_flag("--n", 1, [&](int32_t v) { n = v; }),
                                   int64_flag("--big", 0, [&](int64_t v) { big = v; }),
                                   double_flag("--t", 0, [&](double v) { t = v; })};
  ASSERT_TRUE(parse_flags({"--n", "1", "--big=0", "--t", "0"}, flags).ok());
  EXPECT_EQ(n, 1);
  EXPECT_EQ(big, 0);
  EXPECT_EQ(t, 0.0);
  EXPECT_EQ(parse_flags({"--n", "0"}, flags).status().message(), "--n: expected an integer >= 1, got \"0\"");
  EXPECT_EQ(parse_flags({"--big", "-3"}, flags).status().message(),
            "--big: expected an integer >= 0, got \"-3\"");
  EXPECT_EQ(parse_flags({"--t", "-0.5"}, flags).status().message(),
            "--t: expected a number >= 0, got \"-0.5\"");
  // A value that does not parse keeps the parser's own message.
  EXPECT_EQ(parse_flags({"--n", "one"}, flags).status().message(),
            "--n: expected a 32-bit integer, got \"one\"");
  EXPECT_EQ(parse_flags({"--t", "inf"}, flags).status().message(),
            "--t: expected a finite number, got \"inf\"");
  EXPECT_EQ(n, 1);  // refused values are not applied
  EXPECT_EQ(t, 0.0);
}

TEST(WantsHelp, BeforeDoubleDashOnly) {
  EXPECT_TRUE(wants_help({"--help"}));
  EXPECT_TRUE(wants_help({"x", "-h"}));
  EXPECT_FALSE(wants_help({"--", "--help"}));
  EXPECT_FALSE(wants_help({"--helpful", "-help"}));
  EXPECT_FALSE(wants_help({}));
}

TEST(ParseValue, Int32) {
  EXPECT_EQ(*parse_int32("--k", "42"), 42);
  EXPECT_EQ(*parse_int32("--k", "-7"), -7);
  EXPECT_EQ(*parse_int32("--k", "+7"), 7);
  EXPECT_EQ(*parse_int32("--k", "2147483647"), std::numeric_limits<int32_t>::max());
  for (const char* bad : {"", "x", "1x", "1.5", "0x10", "2147483648", "1e3"}) {
    absl::StatusOr<int32_t> v = parse_int32("--k", bad);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(), absl::StrCat("--k: expected a 32-bit integer, got \"", bad, "\""));
  }
}

TEST(ParseValue, Int64) {
  EXPECT_EQ(*parse_int64("--k", "5000000000"), 5000000000LL);
  EXPECT_EQ(*parse_int64("--k", "-1"), -1);
  for (const char* bad : {"", "x", "12abc", "9223372036854775808"}) {
    absl::StatusOr<int64_t> v = parse_int64("--k", bad);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(), absl::StrCat("--k: expected a 64-bit integer, got \"", bad, "\""));
  }
}

TEST(ParseValue, Uint64) {
  EXPECT_EQ(*parse_uint64("--s", "18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*parse_uint64("--s", "0"), 0u);
  for (const char* bad : {"", "-1", "-0", "x", "18446744073709551616"}) {
    absl::StatusOr<uint64_t> v = parse_uint64("--s", bad);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(),
              absl::StrCat("--s: expected an unsigned 64-bit integer, got \"", bad, "\""));
  }
}

TEST(ParseValue, FloatAndDoubleMustBeFinite) {
  EXPECT_FLOAT_EQ(*parse_float("--t", "0.8"), 0.8f);
  EXPECT_FLOAT_EQ(*parse_float("--t", "5e-4"), 5e-4f);
  EXPECT_DOUBLE_EQ(*parse_double("--t", "-1.25"), -1.25);
  EXPECT_DOUBLE_EQ(*parse_double("--t", "300"), 300.0);
  for (const char* bad : {"", "x", "0.5x", "nan", "inf", "-inf", "1e999"}) {
    EXPECT_EQ(parse_float("--t", bad).status().message(),
              absl::StrCat("--t: expected a finite number, got \"", bad, "\""))
        << bad;
    EXPECT_EQ(parse_double("--t", bad).status().message(),
              absl::StrCat("--t: expected a finite number, got \"", bad, "\""))
        << bad;
  }
}

TEST(BadValue, Format) {
  absl::Status s = bad_value("--repeat", "an integer >= 1", "0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--repeat: expected an integer >= 1, got \"0\"");
}

Command simple(const std::string& name, const std::string& synopsis, std::vector<Flag> flags) {
  Command c;
  c.name = name;
  c.synopsis = synopsis;
  if (!flags.empty()) c.flag_groups = {{"flags", std::move(flags)}};
  return c;
}

// A command as the programs write one: two groups, a subcommand list, a footer.
struct Demo {
  int32_t n = 0;
  bool quiet = false;
  std::string addr;
  Command command() {
    Command c;
    c.name = "demo run";
    c.synopsis = "[flags] FILE...\n--list";
    c.description = "Runs the demo on each FILE.";
    c.flag_groups = {
        {"flags",
         {int32_flag("--n", [this](int32_t v) { n = v; }).doc("N", "how many times (default 1)"),
          switch_flag("--quiet", [this] { quiet = true; }).doc("print nothing"),
          string_flag("--a-rather-long-flag-name", [](const std::string&) {})
              .doc("HOST:PORT", "a long name: its help starts on the next line")}},
        {"common flags",
         {string_flag("--addr", [this](const std::string& v) { addr = v; }).doc("HOST:PORT", "where")}}};
    c.commands_title = "modes";
    c.commands = {{"fast", "the quick one"}};
    c.footer = "Exit 0 on success.";
    return c;
  }
};

TEST(FormatHelp, EveryFlagWithItsValueAndHelpInItsGroup) {
  Demo d;
  const std::string help = format_help(d.command());
  EXPECT_EQ(help,
            "usage: demo run [flags] FILE...\n"
            "       demo run --list\n"
            "\n"
            "Runs the demo on each FILE.\n"
            "\n"
            "flags:\n"
            "  --n N                       how many times (default 1)\n"
            "  --quiet                     print nothing\n"
            "  --a-rather-long-flag-name HOST:PORT\n"
            "                              a long name: its help starts on the next line\n"
            "  -h, --help                  print this help and exit\n"
            "\n"
            "common flags:\n"
            "  --addr HOST:PORT            where\n"
            "\n"
            "modes:\n"
            "  fast                        the quick one\n"
            "\n"
            "Exit 0 on success.\n");
}

TEST(FormatHelp, WrapsLongHelpAndKeepsLineBreaks) {
  std::string words;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&words, "word", i, " ");
  Command c = simple("p", "", {switch_flag("--x", [] {}).doc(words + "\nsecond line")});
  const std::string help = format_help(c);
  size_t longest = 0;
  for (absl::string_view line : absl::StrSplit(help, '\n')) longest = std::max(longest, line.size());
  EXPECT_LE(longest, 110u) << help;
  EXPECT_NE(help.find("word39"), std::string::npos);
  EXPECT_NE(help.find("\n                              second line\n"), std::string::npos) << help;
  EXPECT_EQ(help.substr(0, 9), "usage: p\n");
}

TEST(FormatHelp, NoFlagsStillListsHelp) {
  Command c = simple("p", "ARG", {});
  EXPECT_EQ(format_help(c),
            "usage: p ARG\n\nflags:\n  -h, --help                  print this help and exit\n");
}

TEST(ParseCommand, ParsesEveryGroupAndFindsHelp) {
  Demo d;
  absl::StatusOr<ParsedArgs> r = parse_command(d.command(), {"--n", "3", "x", "--addr=h:1", "--quiet"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->help);
  EXPECT_EQ(r->positional, (Args{"x"}));
  EXPECT_EQ(d.n, 3);
  EXPECT_EQ(d.addr, "h:1");
  EXPECT_TRUE(d.quiet);

  r = parse_command(d.command(), {"x", "-h"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  // Help works beside a bad argument, but not as a value or after "--".
  r = parse_command(d.command(), {"--bogus", "--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  r = parse_command(d.command(), {"--addr", "--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->help);
  EXPECT_EQ(d.addr, "--help");
  r = parse_command(d.command(), {"--", "--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->help);
  EXPECT_EQ(r->positional, (Args{"--help"}));
  EXPECT_EQ(parse_command(d.command(), {"--bogus"}).status().message(), "unknown flag --bogus");
}

TEST(ParseCommandDeathTest, MalformedTablesAbortNamingTheFlag) {
  auto run = [](std::vector<Flag> flags) { (void)parse_command(simple("p", "", std::move(flags)), {}); };
  EXPECT_DEATH(run({string_flag("--x", [](const std::string&) {})}), "--x has no help text");
  EXPECT_DEATH(run({string_flag("--x", [](const std::string&) {}).doc("", "t")}),
               "--x takes a value but names none");
  EXPECT_DEATH(run({switch_flag("--x", [] {}).doc("V", "t")}), "--x is a switch but names a value");
  EXPECT_DEATH(run({switch_flag("--x", [] {}).doc("t"), switch_flag("--x", [] {}).doc("t")}),
               "--x is listed twice");
  EXPECT_DEATH(run({switch_flag("--help", [] {}).doc("t")}), "--help is listed twice");
}

TEST(ExitUsageError, MessageThenHelpOnStderr) {
  Demo d;
  EXPECT_EXIT(exit_usage_error(d.command(), "unknown flag --bogus", 2), testing::ExitedWithCode(2),
              "demo: unknown flag --bogus\n\nusage: demo run");
  EXPECT_EXIT((void)parse_or_exit(d.command(), {"--n", "x"}, 1), testing::ExitedWithCode(1),
              "demo: --n: expected a 32-bit integer, got \"x\"");
  EXPECT_EXIT((void)parse_or_exit(d.command(), {"--help"}, 1), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace frost::cli
