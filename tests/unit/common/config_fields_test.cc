// core/common/config_fields.h: one declaration per field drives key=value, JSON and structured (YAML-like)
// input, the known keys with "did you mean", check() on a struct built in code, the dump and the help; both
// message styles; the one shortest round-trip number text.
#include "core/common/config_fields.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>

namespace frost {
namespace {

enum class Mode { kFast, kSlow, kUnnamed };

struct Inner {
  int32_t depth = 2;
  bool on = false;
};

struct Demo {
  int32_t max_running = 32;
  uint64_t seed = 7;
  double ratio = 0.5;
  std::string name = "x";
  std::string probe = "ridge";
  Mode mode = Mode::kFast;
  int64_t cache_bytes = 1024;
  Inner inner;
};

std::vector<ConfigField<Demo>> demo_fields() {
  using C = Demo;
  using R = ConfigRange;
  return fields_of<C>({
      {int_field<C>("max_running", &C::max_running, R::in(1, 4096)).doc("sequences in one step"),
       int_field<C>("seed", &C::seed), number_field<C>("ratio", &C::ratio, R::in(0, 1)),
       string_field<C>("name", &C::name, {}, true), string_field<C>("probe", &C::probe, {"ridge", "none"}),
       enum_field<C>("mode", &C::mode,
                     std::vector<std::pair<std::string, Mode>>{{"fast", Mode::kFast}, {"slow", Mode::kSlow}}),
       bytes_field<C>("cache_bytes", &C::cache_bytes, R::in(0, 1 << 20))},
      group<C, Inner>(
          "inner", &C::inner,
          {int_field<Inner>("depth", &Inner::depth, R::in(0, 8)), bool_field<Inner>("on", &Inner::on)}),
  });
}

const ConfigTable<Demo>& config_table() {
  static const ConfigTable<Demo> t("demo", demo_fields());
  return t;
}
const ConfigTable<Demo>& path_table() {
  static const ConfigTable<Demo> t("engine", demo_fields(), FieldStyle::kPath);
  return t;
}

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(ShortestNumberText, RoundTripsAndChecksFiniteness) {
  EXPECT_EQ(shortest_number_text(65536), "65536");
  EXPECT_EQ(shortest_number_text(0.1), "0.1");
  EXPECT_EQ(shortest_number_text(1e-7), "1e-07");
  EXPECT_EQ(shortest_number_text(1e300), "1e+300");
  EXPECT_EQ(shortest_number_text(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(shortest_number_text(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(shortest_number_text(std::nan("")), "nan");
  for (double v : {1.0 / 3, 2.5e-12, 123456.789, -0.1}) {
    double back = 0;
    ASSERT_TRUE(absl::SimpleAtod(shortest_number_text(v), &back));
    EXPECT_EQ(back, v);
  }
}

// A float's own shortest text: what a float-held value (a response's echoed temperature) shows, where the
// double it widens to would show eight digits of float rounding (and %g's six digits can miss the float).
TEST(ShortestNumberText, FloatsReadBackAsTheSameFloat) {
  EXPECT_EQ(shortest_float_text(0.8f), "0.8");
  EXPECT_EQ(shortest_number_text(0.8f), "0.800000011920929");
  EXPECT_EQ(shortest_float_text(0.1234567f), "0.1234567");
  EXPECT_EQ(shortest_float_text(1.0f), "1");
  EXPECT_EQ(shortest_float_text(std::numeric_limits<float>::infinity()), "inf");
  for (float v : {1.0f / 3, 2.5e-12f, 123456.79f, -0.1f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min()}) {
    float back = 0;
    ASSERT_TRUE(absl::SimpleAtof(shortest_float_text(v), &back));
    EXPECT_EQ(back, v);
  }
}

TEST(ConfigFields, KeyValueSetsEveryKind) {
  Demo d;
  ASSERT_TRUE(config_table()
                  .set_all(d, {"max_running=8", "seed=9", "ratio=0.25", "name=y", "probe=none", "mode=slow",
                               "cache_bytes=2KiB", "inner.depth=3", "inner.on=TRUE"})
                  .ok());
  EXPECT_EQ(d.max_running, 8);
  EXPECT_EQ(d.seed, 9u);
  EXPECT_EQ(d.ratio, 0.25);
  EXPECT_EQ(d.name, "y");
  EXPECT_EQ(d.probe, "none");
  EXPECT_EQ(d.mode, Mode::kSlow);
  EXPECT_EQ(d.cache_bytes, 2048);
  EXPECT_EQ(d.inner.depth, 3);
  EXPECT_TRUE(d.inner.on);
}

TEST(ConfigFields, ConfigStyleMessagesNameTheKeyAndTheValue) {
  Demo d;
  const auto& t = config_table();
  EXPECT_EQ(message(t.set(d, "max_running", "0")), "demo config: max_running must be in [1, 4096], got 0");
  EXPECT_EQ(message(t.set(d, "max_running", "abc")),
            "demo config: max_running must be an integer, got 'abc'");
  EXPECT_EQ(message(t.set(d, "seed", "-1")), "demo config: seed must be an unsigned integer, got '-1'");
  EXPECT_EQ(message(t.set(d, "ratio", "nan")), "demo config: ratio must be a finite number, got 'nan'");
  EXPECT_EQ(message(t.set(d, "probe", "lasso")), "demo config: probe must be 'ridge' or 'none', got 'lasso'");
  EXPECT_EQ(message(t.set(d, "mode", "warp")), "demo config: mode must be 'fast' or 'slow', got 'warp'");
  EXPECT_EQ(message(t.set(d, "name", "")), "demo config: name must not be empty, got ''");
  EXPECT_EQ(message(t.set(d, "inner.depth", "9")), "demo config: inner.depth must be in [0, 8], got 9");
  EXPECT_EQ(message(t.set(d, "cache_bytes", "2GiB")),
            "demo config: cache_bytes must be in [0, 1048576] bytes, got 2147483648");
  EXPECT_EQ(message(t.set_all(d, {"novalue"})), "demo config: 'novalue' is not key=value");
  EXPECT_EQ(d.max_running, 32);  // nothing refused was written
}

TEST(ConfigFields, UnknownKeysListTheKnownOnesAndSuggestTheClosest) {
  Demo d;
  EXPECT_EQ(message(config_table().set(d, "max_runing", "2")),
            "demo config: unknown key 'max_runing' (known: max_running, seed, ratio, name, probe, mode, "
            "cache_bytes, inner.depth, inner.on); did you mean 'max_running'?");
  EXPECT_EQ(message(config_table().set(d, "zzzzzz", "2")).find("did you mean"), std::string::npos);
  EXPECT_EQ(closest_key("lisen", {"listen", "metrics_listen"}), "listen");
  EXPECT_EQ(closest_key("k", {"method", "num_tokens"}), "");
}

TEST(ConfigFields, PathStyleMessagesAreTheServerConfigs) {
  Demo d;
  const auto& t = path_table();
  EXPECT_EQ(message(t.set(d, "max_running", "0")), "engine.max_running: must be in [1, 4096], got 0");
  FieldInput quoted = FieldInput::of("4", FieldInput::Form::kString);
  quoted.shown = "\"4\"";
  EXPECT_EQ(message(t.apply(d, "max_running", quoted)), "engine.max_running: expected an integer, got \"4\"");
  FieldInput seq = FieldInput::of("", FieldInput::Form::kOther);
  seq.shown = "a sequence";
  EXPECT_EQ(message(t.apply(d, "mode", seq)), "engine.mode: expected one of fast|slow, got a sequence");
  EXPECT_EQ(message(t.set(d, "mode", "warp")), "engine.mode: unknown value \"warp\" (expected fast|slow)");
  EXPECT_EQ(message(t.apply(d, "inner.on", seq)), "engine.inner.on: expected true or false, got a sequence");
  EXPECT_EQ(t.children(""), (std::vector<std::string>{"max_running", "seed", "ratio", "name", "probe", "mode",
                                                      "cache_bytes", "inner"}));
  EXPECT_EQ(t.children("inner"), (std::vector<std::string>{"depth", "on"}));
  EXPECT_TRUE(t.is_group("inner"));
  EXPECT_FALSE(t.is_group("max_running"));
  EXPECT_EQ(message(t.unknown_key("inner.dept", t.children("inner"))),
            "unknown key 'engine.inner.dept' (expected one of depth|on); did you mean 'depth'?");
}

TEST(ConfigFields, CheckReportsTheFirstFieldOutOfRange) {
  Demo d;
  EXPECT_TRUE(path_table().check(d).ok());
  d.inner.depth = 11;
  EXPECT_EQ(message(path_table().check(d)), "engine.inner.depth: must be in [0, 8], got 11");
  d.max_running = 0;
  EXPECT_EQ(message(path_table().check(d)), "engine.max_running: must be in [1, 4096], got 0");
  EXPECT_EQ(message(config_table().check(d)), "demo config: max_running must be in [1, 4096], got 0");
  Demo e;
  e.mode = Mode::kUnnamed;
  EXPECT_EQ(message(path_table().check(e)), "engine.mode: must be one of fast|slow");
  e = Demo();
  e.probe = "lasso";
  EXPECT_EQ(message(path_table().check(e)), "engine.probe: unknown value \"lasso\" (expected ridge|none)");
}

TEST(ConfigFields, JsonDumpNestsGroupsAndReadsBack) {
  Demo d;
  d.inner.depth = 5;
  d.mode = Mode::kSlow;
  const nlohmann::ordered_json j = config_table().to_json(d);
  EXPECT_EQ(j.dump(), R"({"max_running":32,"seed":7,"ratio":0.5,"name":"x","probe":"ridge","mode":"slow",)"
                      R"("cache_bytes":1024,"inner":{"depth":5,"on":false}})");
  Demo back;
  ASSERT_TRUE(config_table().set_json(back, nlohmann::json::parse(j.dump())).ok());
  EXPECT_EQ(config_table().to_json(back), j);
  // Dotted keys work too; a wrong type is named.
  ASSERT_TRUE(config_table().set_json(back, nlohmann::json{{"inner.depth", 1}}).ok());
  EXPECT_EQ(back.inner.depth, 1);
  EXPECT_EQ(message(config_table().set_json(back, nlohmann::json{{"seed", nlohmann::json::array()}})),
            "demo config: seed has an unsupported JSON type: []");
}

TEST(ConfigFields, HelpComesFromTheDeclaration) {
  const std::vector<FieldHelp> help = config_table().help_entries();
  ASSERT_EQ(help.size(), 9u);
  EXPECT_EQ(help[0].name, "max_running");
  EXPECT_EQ(help[0].value_name, "N");
  EXPECT_EQ(help[0].text, "sequences in one step (must be in [1, 4096]; default 32)");
  EXPECT_EQ(help[4].value_name, "ridge|none");
  EXPECT_EQ(help[4].text, "default 'ridge'");
  EXPECT_EQ(help[8].name, "inner.on");
  EXPECT_EQ(help[8].text, "default false");
}

// A struct with optional members (a job spec's shape): unset is left out of the dump, read back typed.
struct Spec {
  std::optional<std::string> path;
  std::optional<int64_t> windows;
  std::optional<double> fraction;
  bool activate = false;
};

const ConfigTable<Spec>& spec_table() {
  using S = Spec;
  static const ConfigTable<S> t(
      "",
      {optional_field<S>(&S::path, string_field<std::string>("path", self()).doc("where")),
       optional_field<S>(&S::windows, int_field<int64_t>("windows", self(), ConfigRange::in(1, 100))),
       optional_field<S>(&S::fraction, number_field<double>("fraction", self())),
       bool_field<S>("activate", &S::activate)},
      FieldStyle::kPath);
  return t;
}

JsonRead typed(std::vector<std::string> by_hand = {}) {
  JsonRead how;
  how.typed = true;
  how.by_hand = std::move(by_hand);
  return how;
}

TEST(ConfigFields, OptionalFieldsAreLeftOutUntilSet) {
  Spec s;
  EXPECT_EQ(spec_table().to_json<nlohmann::json>(s).dump(), R"({"activate":false})");
  EXPECT_TRUE(spec_table().check(s).ok());
  s.windows = 0;
  EXPECT_EQ(message(spec_table().check(s)), "windows: must be in [1, 100], got 0");
  s.windows = 8;
  s.fraction = 0.25;
  EXPECT_EQ(spec_table().to_json<nlohmann::json>(s).dump(),
            R"({"activate":false,"fraction":0.25,"windows":8})");
  const std::vector<FieldHelp> help = spec_table().help_entries();
  EXPECT_EQ(help[0].text, "where (default unset)");
}

TEST(ConfigFields, TypedJsonTakesEachTypeOnlyWhereTheFieldHasIt) {
  Spec s;
  ASSERT_TRUE(
      spec_table()
          .set_json(s,
                    nlohmann::json::parse(R"({"path":"/d","windows":8,"fraction":1e-300,"activate":true})"),
                    typed())
          .ok());
  EXPECT_EQ(s.path, "/d");
  EXPECT_EQ(s.windows, 8);
  EXPECT_EQ(s.fraction, 1e-300);
  EXPECT_TRUE(s.activate);
  auto refused = [](const char* json, const std::vector<std::string>& by_hand = {}) {
    Spec t;
    return message(spec_table().set_json(t, nlohmann::json::parse(json), typed(by_hand)));
  };
  EXPECT_EQ(refused(R"({"path":7})"), "path: expected a string, got 7");
  EXPECT_EQ(refused(R"({"windows":"8"})"), "windows: expected an integer, got \"8\"");
  EXPECT_EQ(refused(R"({"windows":1.5})"), "windows: expected an integer, got 1.5");
  EXPECT_EQ(refused(R"({"windows":500})"), "windows: must be in [1, 100], got 500");
  EXPECT_EQ(refused(R"({"activate":"true"})"), "activate: expected true or false, got \"true\"");
  EXPECT_EQ(refused(R"({"activate":null})"), "activate: expected true or false, got null");
  EXPECT_EQ(refused(R"({"path":{"a":"0123456789012345678901234567890123456789012345678901234567890"}})"),
            "path: expected a string, got {\"a\":\"012345678901234567890123456789012345678901234567890...");
  EXPECT_EQ(refused(R"({"pth":"/d"})", {"rows"}),
            "unknown key 'pth' (expected one of path|windows|fraction|activate|rows); did you mean 'path'?");
  // Keys read by hand are skipped; null unsets an optional field.
  Spec u;
  u.windows = 3;
  ASSERT_TRUE(spec_table()
                  .set_json(u, nlohmann::json::parse(R"({"rows":[1],"windows":null})"), typed({"rows"}))
                  .ok());
  EXPECT_FALSE(u.windows.has_value());
  // Untyped (the default), "8" and 8 both set an integer, as key=value does.
  ASSERT_TRUE(spec_table().set_json(u, nlohmann::json::parse(R"({"windows":"8"})")).ok());
  EXPECT_EQ(u.windows, 8);
  // ignore_unknown skips what the table does not know (a later version's field).
  JsonRead lenient = typed();
  lenient.ignore_unknown = true;
  EXPECT_TRUE(spec_table().set_json(u, nlohmann::json::parse(R"({"signed_by":"ops"})"), lenient).ok());
}

}  // namespace
}  // namespace frost
