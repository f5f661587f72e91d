// JSON Schema → grammar: documents a schema admits are accepted (in the allowed whitespace style), others
// die or stay incomplete; random walks through the grammar always produce JSON that a small independent
// checker validates against the schema; unsupported and unsatisfiable schemas are refused by pointer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/constrain/constraint.h"
#include "core/constrain/json_schema.h"

namespace frost::constrain {
namespace {

using nlohmann::json;

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  auto g = compile_json_schema(schema, CompileLimits{});
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << schema;
  return g.ok() ? *g : nullptr;
}

bool full_match(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Recognizer r(g);
  return r.advance_bytes(s) && r.accepting();
}

void expect_documents(const std::string& schema, const std::vector<std::string>& valid,
                      const std::vector<std::string>& invalid) {
  auto g = schema_grammar(schema);
  ASSERT_NE(g, nullptr);
  for (const auto& d : valid) EXPECT_TRUE(full_match(g, d)) << schema << "\nshould accept: " << d;
  for (const auto& d : invalid) EXPECT_FALSE(full_match(g, d)) << schema << "\nshould reject: " << d;
}

std::string schema_error(const std::string& schema, CompileLimits limits = {}) {
  auto g = compile_json_schema(schema, limits);
  EXPECT_FALSE(g.ok()) << schema;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

const char* const kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":10},
  "age":{"type":"integer","minimum":0},
  "email":{"type":"string"},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},
  "required":["name","age"],"title":"ignored","description":"ignored","examples":[{}]})";

TEST(JsonSchemaTest, ObjectWithRequiredAndOptionalProperties) {
  expect_documents(kPerson,
                   {R"({"name":"Al","age":3})", R"({"name": "Al", "age": 30, "tags": ["a", "c"]})",
                    R"({"name":"Al","age":0,"email":"x@y","tags":[]})", "{\n  \"name\": \"Zoë\",\n  \"age\": 7\n}",
                    R"({"name":"a\"b\u00e9\n","age":1})"},
                   {R"({"name":"Al"})", R"({"age":3})", R"({"name":"Al","age":3,"x":1})", R"({"name":1,"age":3})",
                    R"({"name":"Al","age":-3})", R"({"name":"Al","age":3.5})", R"({"name":"","age":3})",
                    R"({"name":"abcdefghijk","age":3})", R"({"name":"Al","age":3,"tags":["a","b","c","a"]})",
                    R"({"name":"Al","age":3,"tags":["d"]})", R"( {"name":"Al","age":3})",
                    R"({"name":"Al",  "age":3})", R"({"name":"Al","age":03})", R"({"name":"A\x","age":3})",
                    R"({"name":"\ud800","age":3})", "{\"name\":\"a\tb\",\"age\":3}"});
}

TEST(JsonSchemaTest, OptionalPropertiesKeepSchemaOrder) {
  expect_documents(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
          "required":["b"]})",
      {R"({"b":1})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
      {"{}", R"({"a":1})", R"({"a":1,"c":3})", R"({"b":1,})", R"({,"b":1})", R"({"c":3,"b":2})"});
}

TEST(JsonSchemaTest, AdditionalPropertiesDefaultAndExplicit) {
  expect_documents(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
                   {"{}", R"({"a":1})", R"({"a":1,"x":"y","z":"w"})", R"({"x":"y"})"}, {R"({"x":1})"});
  expect_documents(R"({"type":"object"})", {"{}", R"({"k":[1,{"z":null}],"n":-2.5e3})"}, {"[]", R"("x")"});
  expect_documents(R"({"properties":{"a":{"type":"null"}}})", {"{}", R"({"a":null})"}, {R"({"b":null})"});
}

TEST(JsonSchemaTest, ArraysWithBoundsAndPrefixItems) {
  expect_documents(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
                   {"[1,2]", "[1, 2, 3]", "[\n  1,\n  2\n]"}, {"[1]", "[1,2,3,4]", "[]", R"([1,"a"])", "[1,2,]"});
  expect_documents(R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"null"}],"items":false})",
                   {"[]", "[true]", "[true,null]"}, {"[null]", "[true,null,1]"});
  expect_documents(R"({"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"string"},"minItems":2})",
                   {R"([true,"a"])", R"([false,"a","b"])"}, {"[true]", "[true,1]"});
  expect_documents(R"({"type":"array","items":[{"type":"integer"}],"additionalItems":false})", {"[]", "[1]"},
                   {"[1,2]"});
}

TEST(JsonSchemaTest, EnumConstAnyOfAndTypeArrays) {
  expect_documents(R"({"enum":["red","green",1,null,{"a":[1]}]})",
                   {R"("red")", "1", "null", R"({"a":[1]})"}, {R"("blue")", "2", R"({"a":[2]})"});
  expect_documents(R"({"const":"x"})", {R"("x")"}, {R"("y")"});
  expect_documents(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", {"12", R"("ab")"},
                   {R"("abc")", "true", "1.5"});
  expect_documents(R"({"oneOf":[{"type":"boolean"}],"$comment":"one branch"})", {"true"}, {"null"});
  expect_documents(R"({"allOf":[{"type":"null"}]})", {"null"}, {"1"});
  expect_documents(R"({"type":["boolean","null"]})", {"true", "null"}, {"0"});
  // Siblings of anyOf apply to every branch.
  expect_documents(R"({"type":"object","required":["k"],"anyOf":[{"properties":{"k":{"const":1}}},
                       {"properties":{"k":{"const":2}}}]})",
                   {R"({"k":1})", R"({"k":2})"}, {"{}", R"({"k":3})"});
}

TEST(JsonSchemaTest, RefsIncludingRecursion) {
  expect_documents(
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})",
      {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"}, {R"({"v":1,"kids":[{}]})", R"({"kids":[]})"});
  expect_documents(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})", {"[1,[2,[]]]", "[]"},
                   {R"([1,["a"]])"});
  expect_documents(R"({"definitions":{"d":{"type":"string","maxLength":1}},"properties":{"x":{"$ref":"#/definitions/d"}}})",
                   {"{}", R"({"x":"a"})"}, {R"({"x":"ab"})"});
}

TEST(JsonSchemaTest, StringLengthPatternAndFormats) {
  expect_documents(R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("αβγ")", R"("a\n")"},
                   {R"("a")", R"("abcd")"});
  expect_documents(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"}, {R"("AB-12")", R"("ab-123")"});
  expect_documents(R"({"type":"string","pattern":"a\"b[\\\\x]"})", {R"("a\"b\\")", R"("a\"bx")"}, {R"("a"b\\")"});
  expect_documents(R"({"type":"string","format":"date-time"})", {R"("2024-01-31T12:00:00Z")", R"("2024-01-31T12:00:00.5+02:00")"},
                   {R"("2024-13-01T00:00:00Z")", R"("2024-01-31")"});
  expect_documents(R"({"type":"string","format":"date"})", {R"("1999-12-31")"}, {R"("1999-12-32")"});
  expect_documents(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
                   {R"("123e4567e89b12d3a456426614174000")"});
  expect_documents(R"({"type":"string","format":"email"})", {R"("anything")"}, {"1"});  // unknown: ignored
}

TEST(JsonSchemaTest, IntegerVersusNumberAndBounds) {
  expect_documents(R"({"type":"number"})", {"1", "-1.5", "2e10", "0.5E-3", "0"}, {"01", "1.", ".5", "+1", "1e", "NaN"});
  expect_documents(R"({"type":"integer"})", {"-7", "0", "123"}, {"1.0", "1e3", "-", "00"});
  expect_documents(R"({"type":"integer","minimum":-5,"maximum":20})", {"-5", "0", "9", "20"}, {"-6", "21", "100", "-0"});
  expect_documents(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":3})", {"1", "2"}, {"0", "3"});
  expect_documents(R"({"type":"integer","minimum":1})", {"1", "123"}, {"0", "-1"});
  expect_documents(R"({"type":"integer","maximum":-1})", {"-1", "-50"}, {"0", "1"});
  expect_documents(R"({"type":"number","minimum":0})", {"0.5", "3e2"}, {"-0.5"});
  expect_documents(R"({"type":"boolean"})", {"true", "false"}, {"True", "1"});
}

TEST(JsonSchemaTest, AnyJsonObjectConstraint) {
  auto g = compile_json_object(CompileLimits{});
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* d : {"{}", R"({"a":{"b":[true,false,null,1.5e3,"s"]}})", "{\"a\": [1, 2]}"}) EXPECT_TRUE(full_match(*g, d)) << d;
  for (const char* d : {"[1]", "1", R"("x")", "{", R"({"a"})"}) EXPECT_FALSE(full_match(*g, d)) << d;
}

TEST(JsonSchemaTest, WhitespaceIsBoundedSoItCannotLoop) {
  auto g = schema_grammar(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  Recognizer r(g);
  ASSERT_TRUE(r.advance('{'));
  EXPECT_TRUE(r.advance_bytes("\n" + std::string(16, ' ')));
  EXPECT_FALSE(r.advance(' '));  // 17th space of indentation: no
  r.reset();
  ASSERT_TRUE(r.advance_bytes("{ "));
  EXPECT_FALSE(r.advance(' '));
}

// ---- random walks validated by an independent checker ----

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A deliberately small validator for the keywords the walk schemas use.
bool valid(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) return valid(v, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
  if (s.contains("anyOf")) {
    for (const json& b : s["anyOf"]) {
      json merged = s;
      merged.erase("anyOf");
      merged.update(b);
      if (valid(v, merged, root)) return true;
    }
    return false;
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const json& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
           (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && utf8_length(str) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && utf8_length(str) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern")) {
      std::string p = s["pattern"];
      if (!p.empty() && p.front() == '^') p.erase(0, 1);
      if (!p.empty() && p.back() == '$') p.pop_back();
      if (!std::regex_match(str, std::regex(p))) return false;
    }
  }
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>()) return false;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const json& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    const json extra = s.contains("additionalProperties") ? s["additionalProperties"] : json(!s.contains("properties"));
    for (const auto& [k, item] : v.items()) {
      if (props.contains(k) ? !valid(item, props[k], root) : !valid(item, extra, root)) return false;
    }
  }
  if (v.is_array()) {
    const json prefix = s.value("prefixItems", json::array());
    const json rest = s.contains("items") ? s["items"] : json(true);
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!valid(v[i], i < prefix.size() ? prefix[i] : rest, root)) return false;
    }
  }
  return true;
}

// Picks random allowed bytes (mostly ASCII) until the walk may stop; past `budget` bytes it steers to the
// nearest end by always taking a byte that shortens the fewest-bytes-to-accept distance.
std::string random_walk(const std::shared_ptr<const Grammar>& g, uint64_t seed, size_t budget) {
  Recognizer r(g);
  std::mt19937_64 rng(seed);
  std::string out;
  Recognizer::StackSet next;
  while (!r.must_end() && out.size() < 20 * budget) {
    if (r.accepting() && (out.size() > budget || rng() % 6 == 0)) break;
    const ByteSet allowed = r.next_bytes();
    std::vector<int> all, ascii;
    for (int b = 0; b < 256; ++b) {
      if (!allowed.test(b)) continue;
      all.push_back(b);
      if (b < 0x80) ascii.push_back(b);
    }
    if (all.empty()) break;
    int pick = -1;
    if (out.size() > budget) {
      uint64_t best = UINT64_MAX;
      for (int b : all) {
        if (r.advance_from(r.state(), static_cast<uint8_t>(b), &next) != Recognizer::Advance::kOk) continue;
        const uint64_t d = r.min_bytes_to_accept(next);
        if (d < best) best = d, pick = b;
      }
    } else {
      const auto& from = (!ascii.empty() && rng() % 4 != 0) ? ascii : all;
      pick = from[rng() % from.size()];
    }
    EXPECT_TRUE(r.advance(static_cast<uint8_t>(pick))) << "byte " << pick << " after " << out;
    out += static_cast<char>(pick);
  }
  EXPECT_TRUE(r.accepting()) << out;
  return out;
}

TEST(JsonSchemaTest, RandomWalksProduceDocumentsTheSchemaAdmits) {
  const std::vector<std::string> schemas = {
      kPerson,
      R"({"type":"object","properties":{"x":{"type":"number"},"n":{"type":"integer","minimum":-5,"maximum":20},
          "b":{"type":"boolean"},"z":{"type":"null"}},"required":["x","n","b","z"]})",
      R"({"anyOf":[{"type":"string","maxLength":3},{"type":"integer","minimum":0},{"const":{"k":[1,2]}}]})",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/node"})",
      R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"string","pattern":"^[a-z]{2}\\d$"}],
          "items":{"type":"number"},"minItems":2,"maxItems":4})",
      R"({"type":"object","properties":{"when":{"type":"string","pattern":"^\\d{4}-\\d\\d$"},
          "maybe":{"type":["string","null"]},"any":{}},"required":["when","any"]})",
      R"({"type":"object"})",
  };
  for (const auto& text : schemas) {
    auto g = schema_grammar(text);
    ASSERT_NE(g, nullptr);
    const json schema = json::parse(text);
    for (uint64_t seed = 1; seed <= 60; ++seed) {
      const std::string doc = random_walk(g, seed, 120);
      json parsed;
      try {
        parsed = json::parse(doc);
      } catch (const json::exception& e) {
        ADD_FAILURE() << "not JSON (" << e.what() << "): " << doc << "\nschema: " << text;
        continue;
      }
      EXPECT_TRUE(valid(parsed, schema, schema)) << "seed " << seed << ": " << doc << "\nschema: " << text;
    }
  }
}

// ---- refusals ----

TEST(JsonSchemaTest, ErrorsNameTheJsonPointer) {
  EXPECT_EQ(schema_error(R"({"properties":{"name":{"type":"strng"}}})"),
            "json_schema: unknown type 'strng' at /properties/name/type");
  EXPECT_EQ(schema_error(R"({"not":{"type":"null"}})"), "json_schema: unsupported keyword 'not' at /not");
  EXPECT_EQ(schema_error(R"({"properties":{"x":{"if":{},"then":{}}}})"),
            "json_schema: unsupported keyword 'if' at /properties/x/if");
  EXPECT_EQ(schema_error(R"({"type":"object","patternProperties":{"^a":{}}})"),
            "json_schema: unsupported keyword 'patternProperties' at /patternProperties");
  EXPECT_EQ(schema_error(R"({"type":"array","uniqueItems":true})"),
            "json_schema: unsupported keyword 'uniqueItems' at /uniqueItems");
  EXPECT_EQ(schema_error(R"({"allOf":[{},{}]})"), "json_schema: allOf with 2 schemas is unsupported (only one) at /allOf");
  EXPECT_EQ(schema_error(R"({"$ref":"http://x/y.json"})"), "json_schema: unsupported remote $ref 'http://x/y.json' at /$ref");
  EXPECT_EQ(schema_error(R"({"items":{"$ref":"#/$defs/missing"}})"),
            "json_schema: $ref '#/$defs/missing' does not resolve at /items/$ref");
  EXPECT_EQ(schema_error(R"({"type":"string","minLength":-1})"),
            "json_schema: minLength must be a non-negative integer at /minLength");
  EXPECT_EQ(schema_error("[1]"), "json_schema: schema must be an object or a boolean at /");
  EXPECT_EQ(schema_error("{\"type\":").rfind("json_schema: not valid JSON: ", 0), 0u);
}

TEST(JsonSchemaTest, UnsatisfiableSchemasAreRefused) {
  auto contains = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_NE(msg.find("unsatisfiable"), std::string::npos) << msg;
  };
  contains(schema_error(R"({"enum":[]})"), "enum [] at /enum");
  contains(schema_error(R"({"type":"array","minItems":3,"maxItems":1})"), "minItems 3 > maxItems 1 at /");
  contains(schema_error(R"({"anyOf":[]})"), "anyOf [] at /anyOf");
  contains(schema_error(R"({"properties":{"a":{"enum":[]}},"required":["a"]})"), "at /properties/a/enum");
  contains(schema_error("false"), "schema false");
  // Unsatisfiable but optional: the member is simply never written.
  expect_documents(R"({"properties":{"a":{"enum":[]},"b":{"type":"null"}}})", {"{}", R"({"b":null})"}, {R"({"a":1})"});
}

TEST(JsonSchemaTest, LimitsAreRefusedByName) {
  EXPECT_EQ(schema_error(R"({"type":"string","maxLength":70000})"),
            "json_schema: maxLength 70000 exceeds max_repeat 65536 at /maxLength");
  CompileLimits small;
  small.max_text_bytes = 10;
  EXPECT_EQ(schema_error(R"({"type":"string"})", small), "json_schema: schema of 17 bytes exceeds max_text_bytes 10");
  small = CompileLimits{};
  small.max_rules = 50;
  EXPECT_NE(schema_error(kPerson, small).find("json_schema: constraint too large: more than 50 rules (max_rules)"),
            std::string::npos);
  auto c = compile_constraint({ConstraintSpec::Kind::kJsonSchema, R"({"type":"strng"})"});
  EXPECT_EQ(c.status().message(), "json_schema: unknown type 'strng' at /type");
}

}  // namespace
}  // namespace frost::constrain
