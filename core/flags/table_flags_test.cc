// Flags made from a typed-field table (core/flags/table_flags.h): the flag's name, placeholder and help come
// from the row, its value goes through the table (the table's range and type, named by the flag), and the
// help shows the value the program starts from.
#include "core/flags/table_flags.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace frost::cli {
namespace {

// The shape of core/generate/sampling_params.h's SamplingParams (frost_flags_tests links no core layer).
struct Sampling {
  float temperature = 1.0f;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
  std::string mode = "plain";
};

const ConfigTable<Sampling>& table() {
  using S = Sampling;
  static const ConfigTable<S> t(
      "",
      {number_field<S>("temperature", &S::temperature, ConfigRange::at_least(0)).doc("0 = greedy"),
       int_field<S>("top_k", &S::top_k, ConfigRange::at_least(0)).doc("keep the K most likely; 0 = off"),
       optional_field<S>(&S::seed, int_field<uint64_t>("seed", self()).doc("same seed, same tokens")),
       string_field<S>("mode", &S::mode, {"plain", "beam"}).doc("how to search")},
      FieldStyle::kPath);
  return t;
}

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(TableFlags, ParseThroughTheTable) {
  Sampling s;
  const std::vector<Flag> flags = table_flags(table(), {"temperature", "top_k", "seed", "mode"}, &s);
  auto rest =
      parse_flags({"--temperature=0.5", "--top-k", "40", "--seed", "7", "--mode", "beam", "x"}, flags);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, std::vector<std::string>{"x"});
  EXPECT_EQ(s.temperature, 0.5f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.mode, "beam");
}

TEST(TableFlags, ErrorsAreTheTablesNamedByTheFlag) {
  Sampling s;
  const std::vector<Flag> flags = table_flags(table(), {"temperature", "top_k", "seed", "mode"}, &s);
  EXPECT_EQ(message(parse_flags({"--top-k", "-1"}, flags).status()), "--top-k: must be >= 0, got -1");
  EXPECT_EQ(message(parse_flags({"--temperature", "-0.5"}, flags).status()),
            "--temperature: must be >= 0, got -0.5");
  // Type errors read as cli::bad_value's: `<flag>: expected <what>, got "<value>"`.
  EXPECT_EQ(message(parse_flags({"--seed", "-3"}, flags).status()),
            message(bad_value("--seed", "an unsigned integer", "-3")));
  EXPECT_EQ(message(parse_flags({"--temperature", "warm"}, flags).status()),
            "--temperature: expected a finite number, got \"warm\"");
  EXPECT_EQ(message(parse_flags({"--mode", "greedy"}, flags).status()),
            "--mode: unknown value \"greedy\" (expected plain|beam)");
  EXPECT_EQ(s.top_k, 0);  // a refused value leaves the field as it was
}

TEST(TableFlags, HelpComesFromTheRowWithTheProgramsDefault) {
  Sampling s;
  s.temperature = 0.8f;  // the program's default, not the struct's
  Command c;
  c.name = "prog";
  c.flag_groups = {{"flags", table_flags(table(), {"temperature", "top_k", "seed", "mode"}, &s)}};
  const std::string help = format_help(c);
  EXPECT_TRUE(absl::StrContains(help, "--temperature X")) << help;
  EXPECT_TRUE(absl::StrContains(help, "0 = greedy (must be >= 0; default 0.8)")) << help;
  EXPECT_TRUE(absl::StrContains(help, "--top-k N")) << help;
  EXPECT_TRUE(absl::StrContains(help, "keep the K most likely; 0 = off (must be >= 0; default 0)")) << help;
  EXPECT_TRUE(absl::StrContains(help, "--mode plain|beam")) << help;
  // An unset optional shows no default.
  EXPECT_TRUE(absl::StrContains(help, "same seed, same tokens\n")) << help;
  s.seed = 1;
  EXPECT_EQ(table_flag(table(), "seed", &s).help, "same seed, same tokens (default 1)");
  EXPECT_EQ(table_flag(table(), "top_k", &s, "--k").name, "--k");
}

}  // namespace
}  // namespace frost::cli
