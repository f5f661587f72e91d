// ChatTemplate against jinja2: every fixture in tests/data/chat_templates/ rendered byte-equal to
// expected.json (written by tests/reference/render_chat_templates.py in transformers' environment), plus the
// parser's errors, Jinja semantics the fixtures do not reach, the work bounds, and load_chat_template_source.
#include "core/model/chat_template.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace frost {
namespace {

std::string data_dir() { return std::string(FROST_SOURCE_DIR) + "/tests/data/chat_templates"; }

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Renders `source` for one user message "hi" (or `messages`), failing the test on a parse error.
absl::StatusOr<std::string> render(const std::string& source, std::vector<ChatMessage> messages = {{"user", "hi"}},
                                   ChatTemplate::Context ctx = {"<s>", "</s>", true, std::nullopt}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(source);
  if (!t.ok()) return t.status();
  return t->render(messages, ctx);
}

std::string render_ok(const std::string& source, std::vector<ChatMessage> messages = {{"user", "hi"}}) {
  absl::StatusOr<std::string> out = render(source, std::move(messages));
  EXPECT_TRUE(out.ok()) << source << "\n → " << out.status();
  return out.ok() ? *out : "<error>";
}

TEST(ChatTemplateTest, MatchesJinja2OnEveryFixture) {
  std::ifstream f(data_dir() + "/expected.json");
  ASSERT_TRUE(f.good()) << "missing " << data_dir() << "/expected.json";
  nlohmann::json expected = nlohmann::json::parse(f);
  std::map<std::string, ChatTemplate> templates;
  int n_cases = 0;
  for (const auto& c : expected["cases"]) {
    const std::string name = c["template"];
    const std::string label = name + "/" + c["conversation"].get<std::string>();
    if (!templates.count(name)) {
      absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(read_text(data_dir() + "/" + name + ".jinja"));
      ASSERT_TRUE(t.ok()) << name << ": " << t.status();
      templates.emplace(name, *std::move(t));
    }
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    ChatTemplate::Context ctx{c["bos_token"], c["eos_token"], c["add_generation_prompt"], std::nullopt};
    absl::StatusOr<std::string> out = templates.at(name).render(messages, ctx);
    if (c.contains("output")) {
      ASSERT_TRUE(out.ok()) << label << ": " << out.status();
      EXPECT_EQ(*out, c["output"].get<std::string>()) << label;
    } else {
      ASSERT_FALSE(out.ok()) << label << " rendered " << *out << " but jinja2 raised " << c["error"];
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << label;
      if (c["error_kind"] == "raise_exception") {
        EXPECT_EQ(out.status().message(), c["error"].get<std::string>()) << label;
      }
    }
    ++n_cases;
  }
  EXPECT_GE(templates.size(), 11u);
  EXPECT_GE(n_cases, 100);
}

TEST(ChatTemplateTest, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    std::string source, message;
  };
  const Case cases[] = {
      {"hello\n  {% if x %}never closed", "'if' block is never closed (expected 'endif') at line 2, column 3"},
      {"{{ 1 + }}", "unexpected end of expression at line 1, column 8"},
      {"a\nb {% macro m() %}{% endmacro %}", "unsupported tag 'macro' at line 2, column 3"},
      {"{{ x | bogus }}", "unsupported filter 'bogus' at line 1, column 8"},
      {"{{ x is bogus }}", "unsupported test 'bogus' at line 1, column 9"},
      {"{{ 'unterminated }}", "unterminated string literal at line 1, column 4"},
      {"{% for x in xs %}{% endif %}", "unsupported tag 'endif' at line 1, column 18"},
      {"{% break %}", "'break' outside a for loop at line 1, column 1"},
      {"{# no end", "unterminated comment at line 1, column 1"},
      {"{% set x %}y{% endset %}", "block set ({% set x %}...{% endset %}) is not supported at line 1, column 10"},
      {"{{ x ! y }}", "unexpected character '!' at line 1, column 6"},
      {"{% for x in xs recursive %}{% endfor %}", "recursive loops are not supported at line 1, column 16"},
      {"{{ a }", "unexpected '}' at line 1, column 6"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(c.source);
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message(), "chat_template: " + c.message) << c.source;
  }
}

TEST(ChatTemplateTest, UndefinedValuesRenderEmptyAndAreFalsy) {
  EXPECT_EQ(render_ok("[{{ nope }}]{% if nope %}yes{% else %}no{% endif %}{{ nope|length }}{% for x in nope %}x{% endfor %}"),
            "[]no0");
  EXPECT_EQ(render_ok("{{ messages[0].missing }}|{{ messages[5] is defined }}|{{ nope ~ 'a' }}|{{ nope == nope }}"),
            "|False|a|True");
  // Using an undefined value (attribute, arithmetic, call) is an error naming it.
  for (const char* src : {"{{ nope.attr }}", "{{ nope + 1 }}", "{{ nope() }}", "{{ nope.strip() }}", "{{ nope|tojson }}"}) {
    absl::StatusOr<std::string> out = render(src);
    ASSERT_FALSE(out.ok()) << src;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << src;
    EXPECT_NE(out.status().message().find("chat_template: "), std::string::npos) << out.status();
  }
  EXPECT_EQ(render("{{ nope.attr }}").status().message(), "chat_template: 'nope' is undefined (line 1)");
}

TEST(ChatTemplateTest, Filters) {
  EXPECT_EQ(render_ok("{{ '  a b  '|trim }}|{{ 'aBc'|upper }}|{{ 'aBc'|lower }}|{{ 'hello world'|capitalize }}"),
            "a b|ABC|abc|Hello world");
  EXPECT_EQ(render_ok("{{ [1, 2, 3]|length }}{{ 'héllo'|length }}{{ {'a': 1}|length }}|{{ [4, 5]|first }}{{ [4, 5]|last }}"),
            "351|45");
  EXPECT_EQ(render_ok("{{ x|default('d') }}|{{ 0|default('d') }}|{{ 0|default('d', true) }}|{{ 5|string ~ 'x' }}"),
            "d|0|d|5x");
  EXPECT_EQ(render_ok("{{ ['a', 'b']|join(', ') }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'a-b-c'|replace('-', '', 1) }}"),
            "a, b|a+b+c|ab-c");
  EXPECT_EQ(render_ok("{{ {'k': [1, 'é', none, true, 1.5]}|tojson }}"), "{\"k\": [1, \"é\", null, true, 1.5]}");
  EXPECT_EQ(render_ok("{{ {'k': 1}|tojson(indent=2) }}"), "{\n  \"k\": 1\n}");
  // Case mapping beyond ASCII (jinja2 gives the same; Greek final sigma is the documented gap).
  EXPECT_EQ(render_ok("{{ 'ß straße'|upper }} {{ 'ÀÉÎ ПРИВЕТ'|lower }} {{ 'élan vital'.title() }}"),
            "SS STRASSE àéî привет Élan Vital");
  EXPECT_EQ(render_ok("{{ messages|map(attribute='role')|join }}|{{ messages|selectattr('role', 'eq', 'user')|list|length }}"),
            "user|1");
}

TEST(ChatTemplateTest, MethodsAndOperators) {
  EXPECT_EQ(render_ok("{{ ' x '.strip() }}|{{ 'xa'.lstrip('x') }}|{{ 'ax '.rstrip() }}|{{ 'abc'.startswith('a') }}"
                      "{{ 'abc'.endswith('bc') }}|{{ 'a b'.split() }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}|{{ 'a b'.title() }}"),
            "x|a|ax|TrueTrue|['a', 'b']|ABab|A B");
  EXPECT_EQ(render_ok("{% set d = {'a': 1, 'b': 2} %}{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.get('a') }}{{ d.get('z', 9) }}"),
            "[('a', 1), ('b', 2)]|['a', 'b']|19");
  EXPECT_EQ(render_ok("{{ 7 % 3 }}{{ 2 - 3 }}{{ 2 * 3 }}{{ 7 / 2 }}{{ 'a' ~ 1 }}{{ 1 < 2 and not 2 <= 1 }}{{ 'b' in 'abc' }}"
                      "{{ 1 not in [2] }}{{ 'x' if false else 'y' }}"),
            "1-163.5a1TrueTrueTruey");
  EXPECT_EQ(render_ok("{{ messages[1:]|length }}{{ 'abcdef'[1:4] }}{{ [1, 2, 3][-1] }}{{ [1, 2, 3][::-1] }}"),
            "0bcd3[3, 2, 1]");
  EXPECT_EQ(render_ok("{{ range(3)|list }}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}"), "[0, 1, 2]135");
  absl::StatusOr<std::string> bad = render("{{ 'a' + 1 }}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "chat_template: can only concatenate str (not \"int\") to str (line 1)");
  EXPECT_FALSE(render("{{ 1 / 0 }}").ok());
  EXPECT_FALSE(render("{{ 'a' < 1 }}").ok());
  EXPECT_FALSE(render("{% for x in 5 %}{% endfor %}").ok());
}

TEST(ChatTemplateTest, LoopVariablesAndScoping) {
  std::vector<ChatMessage> three = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};
  EXPECT_EQ(render_ok("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.length }}"
                      "{{ loop.first|int }}{{ loop.last|int }}{{ m.content }};{% endfor %}",
                      three),
            "10310a;21300b;32301c;");
  EXPECT_EQ(render_ok("{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}{{ m.content }} {% endfor %}",
                      three),
            "1/2a 2/2c ");
  // {% set %} inside a loop stays in the iteration; namespace() carries state out.
  EXPECT_EQ(render_ok("{% set x = 0 %}{% set ns = namespace(n=0) %}{% for m in messages %}{% set x = x + 1 %}"
                      "{% set ns.n = ns.n + 1 %}{% endfor %}{{ x }} {{ ns.n }}",
                      three),
            "0 3");
  EXPECT_EQ(render_ok("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}"
                      "{{ i }}{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}"),
            "0134empty");
}

TEST(ChatTemplateTest, WhitespaceControlIsTransformers) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one goes.
  EXPECT_EQ(render_ok("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render_ok("x  {%- if true -%}  y  {%- endif -%}  z"), "xyz");
  EXPECT_EQ(render_ok("x  {{- 'y' -}}  z"), "xyz");
  EXPECT_EQ(render_ok("x  {{ 'y' }}\nz"), "x  y\nz");  // expressions keep their newline
  EXPECT_EQ(render_ok("  {# c #}\nx"), "x");
  EXPECT_EQ(render_ok("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render_ok("a\n"), "a");  // keep_trailing_newline=False drops one
  EXPECT_EQ(render_ok("a\n\n"), "a\n");
  EXPECT_EQ(render_ok("a\r\nb"), "a\nb");
}

TEST(ChatTemplateTest, RaiseExceptionMessageIsTheStatus) {
  absl::StatusOr<std::string> out =
      render("{% if messages[0].role != 'system' %}{{ raise_exception('Conversation roles must alternate "
             "user/assistant/user/assistant/...') }}{% endif %}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

// transformers' strftime_now(format): the render's instant (Context::now, local time) with English names.
TEST(ChatTemplateTest, StrftimeNowFormatsTheRenderInstant) {
  const char* old_tz = std::getenv("TZ");
  std::string saved = old_tz ? old_tz : "";
  setenv("TZ", "UTC", 1);
  tzset();
  ChatTemplate::Context ctx{"<s>", "</s>", true, int64_t{1741509000}};  // 2025-03-09T08:30:00Z, a Sunday
  const std::string src =
      "{% if strftime_now is defined %}{{ strftime_now('%d %b %Y|%B %e %y|%a %A %j|%H:%M:%S %I%p|%m %%|%Q') }}"
      "{% endif %}";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(src);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out = t->render({{"user", "hi"}}, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "09 Mar 2025|March  9 25|Sun Sunday 068|08:30:00 08AM|03 %|%Q");
  // Without a pinned instant it is the clock's: today's date, not the templates' "26 Jul 2024" fallback.
  auto today = [] {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%d %b %Y", &tm);  // the C locale: a test process never calls setlocale
    return std::string(buf);
  };
  const std::string before = today();
  ctx.now = std::nullopt;
  absl::StatusOr<ChatTemplate> clock = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(clock.ok()) << clock.status();
  out = clock->render({{"user", "hi"}}, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(*out == before || *out == today()) << *out;
  EXPECT_EQ(render_ok("{{ range is defined }} {{ namespace is defined }} {{ raise_exception is defined }}"),
            "True True True");
  if (old_tz) setenv("TZ", saved.c_str(), 1);
  else unsetenv("TZ");
  tzset();
}

// render_json: any render variables (tools, tool_calls, kwargs), JSON member order kept, tools/documents none.
TEST(ChatTemplateTest, RenderJsonTakesToolsToolCallsAndKwargs) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}"
      "{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments|tojson }}{% endfor %}"
      "{% else %}{{ m.content }}{% endif %}|{% endfor %}{% if tools %}{{ tools|tojson }}{% endif %}"
      "{{ tools is none }} {{ documents is none }} {{ enable_thinking }} {{ eos_token is defined }}");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out = t->render_json(R"({"messages": [{"role": "user", "content": "Wetter?"},
      {"role": "assistant", "tool_calls": [{"function": {"name": "w", "arguments": {"z": 1, "a": [true, null, 2.5]}}}]},
      {"role": "tool", "content": {"b": 1, "a": "x"}}], "bos_token": "<s>", "enable_thinking": false})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s>user:Wetter?|assistant:w{\"z\": 1, \"a\": [true, null, 2.5]}|tool:{'b': 1, 'a': 'x'}|"
            "True True False False");
  out = t->render_json(R"({"messages": [], "tools": [{"name": "t", "n": 18446744073709551615}]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[{\"name\": \"t\", \"n\": 1.8446744073709552e+19}]False True  False");
  EXPECT_EQ(t->render_json("[1]").status().message(),
            "chat_template: render variables: expected a JSON object, got list");
  EXPECT_EQ(t->render_json("{\"messages\": ").status().message(), "chat_template: render variables: not valid JSON");
  EXPECT_EQ(t->render_json(std::string(100, '[') + std::string(100, ']')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, HugeLoopFailsInsteadOfHanging) {
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> out =
      render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));

  EXPECT_EQ(render("{% for i in range(1000000000) %}{% endfor %}").status().code(), absl::StatusCode::kResourceExhausted);
  // Doubling a string or a list hits the size bound.
  EXPECT_FALSE(render("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}{{ ns.s|length }}")
                   .ok());
  EXPECT_FALSE(render("{{ 'x' * 100000000000 }}").ok());
  EXPECT_FALSE(render("{{ 2 ** 100 }}").ok());  // int64 overflow is an error, not a wrong number
  // Nesting values in a loop is bounded (repr/json/== recurse on them); a namespace cycle renders and is freed.
  absl::StatusOr<std::string> deep =
      render("{% set ns = namespace(x=0) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("value nests deeper than"), std::string::npos) << deep.status();
  EXPECT_EQ(render_ok("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "True");
}

TEST(ChatTemplateTest, DeepNestingIsRefusedByTheParser) {
  std::string parens = "{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(parens);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nesting deeper than"), std::string::npos) << t.status();

  std::string ifs;
  for (int k = 0; k < 5000; ++k) ifs += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(ifs).ok());

  std::string nots = "{{ " + [] { std::string s; for (int k = 0; k < 5000; ++k) s += "not "; return s; }() + "x }}";
  EXPECT_FALSE(ChatTemplate::parse(nots).ok());

  std::string chain = "{{ 1";
  for (int k = 0; k < 100000; ++k) chain += " + 1";
  t = ChatTemplate::parse(chain + " }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("expression nests deeper than"), std::string::npos) << t.status();
}

// ---- load_chat_template_source ----

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/frost_chat_template_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string path_;
};

TEST(LoadChatTemplateSourceTest, StringListJinjaNoneAndMalformed) {
  {
    TempDir d;
    d.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}x"})");
    auto src = load_chat_template_source(d.path());
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_TRUE(src->has_value());
    EXPECT_EQ(**src, "{{ bos_token }}x");
  }
  {
    TempDir d;
    d.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
    auto src = load_chat_template_source(d.path());
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->value_or(""), "D");
  }
  {
    TempDir d;  // the standalone file wins over the JSON field, as in transformers
    d.write("tokenizer_config.json", R"({"chat_template": "json"})");
    d.write("chat_template.jinja", "{{ messages[0].content }}\n");
    auto src = load_chat_template_source(d.path());
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->value_or(""), "{{ messages[0].content }}\n");
  }
  {
    TempDir d;  // no template anywhere
    auto src = load_chat_template_source(d.path());
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_FALSE(src->has_value());
    d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
    src = load_chat_template_source(d.path());
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_FALSE(src->has_value());
  }
  {
    TempDir d;
    d.write("tokenizer_config.json", R"({"chat_template": "x",)");
    auto src = load_chat_template_source(d.path());
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(src.status().message().find(d.path() + "/tokenizer_config.json"), std::string::npos) << src.status();
  }
  {
    TempDir d;
    d.write("tokenizer_config.json", R"({"chat_template": 5})");
    auto src = load_chat_template_source(d.path());
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("chat_template must be a string"), std::string::npos) << src.status();
    d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
    src = load_chat_template_source(d.path());
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("\"default\""), std::string::npos) << src.status();
  }
}

TEST(LoadChatTemplateSourceTest, LoadedFixtureParsesAndRenders) {
  TempDir d;
  nlohmann::json cfg = {{"chat_template", read_text(data_dir() + "/llama3_instruct.jinja")}};
  d.write("tokenizer_config.json", cfg.dump());
  auto src = load_chat_template_source(d.path());
  ASSERT_TRUE(src.ok() && src->has_value());
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(**src);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), **src);
  absl::StatusOr<std::string> out = t->render({{"user", "Hi"}}, {"<|begin_of_text|>", "<|eot_id|>", true, std::nullopt});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace
}  // namespace frost
