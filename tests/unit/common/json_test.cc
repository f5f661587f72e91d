// core/common/json.h: untrusted JSON with bounded nesting (refused before anything recursive sees it, in time
// linear in the text however wide or deep), and a member's exact text without a second parse.
#include "core/common/json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace frost {
namespace {

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(ParseJsonBounded, RefusesOneLevelPastTheLimitAndAcceptsTheLimit) {
  nlohmann::json j;
  EXPECT_FALSE(parse_json_bounded(nested(300), 300, &j).has_value());
  std::optional<std::string> err = parse_json_bounded(nested(301), 300, &j);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(*err, "JSON nests deeper than 300 levels");
  EXPECT_TRUE(parse_json_bounded("{\"a\":" + nested(300) + "}", 300, &j).has_value());
}

TEST(ParseJsonBounded, BracketsInsideStringsDoNotCount) {
  nlohmann::json j;
  const std::string text = "{\"s\":\"" + std::string(1000, '[') + "\\\"{{{\",\"t\":[[\"]]]]\"]]}";
  EXPECT_FALSE(parse_json_bounded(text, 3, &j).has_value()) << text;
  EXPECT_EQ(j["s"].get<std::string>(), std::string(1000, '[') + "\"{{{");
}

TEST(ParseJsonBounded, AMillionLevelsAreRefusedAtOnceAndInvalidTextIsNamed) {
  nlohmann::json j;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(parse_json_bounded(std::string(1 << 20, '['), 300, &j).has_value());
  EXPECT_TRUE(parse_json_bounded(std::string(1 << 20, '{'), 300, &j).has_value());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  std::optional<std::string> err = parse_json_bounded("{\"a\":", 300, &j);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->rfind("not valid JSON: ", 0), 0u) << *err;
}

TEST(ParseJsonBounded, AWideObjectParsesInLinearTime) {
  // nlohmann's callback parser rescans a container at each child's end: 20,000 members took 2.4 s there.
  std::string text = "{";
  for (int i = 0; i < 100000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{\"type\":\"string\"}";
  text += "}";
  nlohmann::json o;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_FALSE(parse_json_bounded(text, 300, &o).has_value());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.size(), 100000u);
  EXPECT_LT(s, 2.0);  // a bound on the complexity, not a benchmark: linear is ~0.1 s here
}

TEST(JsonValueSpan, FindsAMembersExactTextAlongAPath) {
  const std::string body =
      R"( { "model" : "m", "response_format": {"type":"json_schema", "json_schema": {"name":"x",)"
      R"( "schema" : {"properties":{"z":{"type":"string"},"a":{"enum":["}",{"q":1}]}}} } }, "n": 2 } )";
  std::optional<std::string_view> s = json_value_span(body, {"response_format", "json_schema", "schema"});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, R"({"properties":{"z":{"type":"string"},"a":{"enum":["}",{"q":1}]}}})");
  EXPECT_EQ(*json_value_span(body, {"model"}), "\"m\"");
  EXPECT_EQ(*json_value_span(body, {"n"}), "2");
  EXPECT_EQ(*json_value_span(body, {}), body.substr(1, body.size() - 2));
  EXPECT_FALSE(json_value_span(body, {"missing"}).has_value());
  EXPECT_FALSE(json_value_span(body, {"model", "x"}).has_value());  // a string has no members
  EXPECT_FALSE(json_value_span("[1,2]", {"a"}).has_value());
}

TEST(JsonValueSpan, TheLastDuplicateWinsAsInTheParserAndEscapedKeysMatch) {
  const std::string body = R"({"guided_json":{"a":1},"guided\u005fjson":{"b":2},"x":0})";
  nlohmann::json parsed = nlohmann::json::parse(body);
  std::optional<std::string_view> s = json_value_span(body, {"guided_json"});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, R"({"b":2})");
  EXPECT_EQ(nlohmann::json::parse(*s), parsed["guided_json"]);
}

}  // namespace
}  // namespace frost
