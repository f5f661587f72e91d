// GBNF and regex front ends over the byte recogniser: each grammar accepts exactly its strings, fed byte
// by byte; errors say where; limits and unsatisfiable constraints are refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/constrain/constraint.h"
#include "core/constrain/gbnf.h"
#include "core/constrain/grammar.h"
#include "core/constrain/regex.h"

namespace frost::constrain {
namespace {

// Feeds `s` byte by byte: true when every byte is taken and the end is accepting.
bool full_match(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Recognizer r(g);
  return r.advance_bytes(s) && r.accepting();
}

std::shared_ptr<const Grammar> gbnf(const std::string& text) {
  auto g = parse_gbnf(text, CompileLimits{});
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

std::shared_ptr<const Grammar> regex(const std::string& pattern) {
  auto g = compile_regex(pattern, CompileLimits{});
  EXPECT_TRUE(g.ok()) << g.status() << " for " << pattern;
  return g.ok() ? *g : nullptr;
}

void expect_language(const std::shared_ptr<const Grammar>& g, const std::vector<std::string>& accepted,
                     const std::vector<std::string>& rejected, const std::string& what) {
  ASSERT_NE(g, nullptr) << what;
  for (const auto& s : accepted) EXPECT_TRUE(full_match(g, s)) << what << " should accept '" << s << "'";
  for (const auto& s : rejected) EXPECT_FALSE(full_match(g, s)) << what << " should reject '" << s << "'";
}

std::string error_of(const absl::StatusOr<std::shared_ptr<const Grammar>>& g) {
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

TEST(GbnfTest, ArithmeticGrammarAcceptsExactlyItsStrings) {
  auto g = gbnf(R"g(
    # expressions over integers
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= num | "(" expr ")"
    num  ::= [0-9]+
  )g");
  expect_language(g, {"1", "1+2", "(1+2)-30", "((7))"}, {"", "1+", "+1", "()", "1++2", "(1", "1 + 2"}, "arith");
}

TEST(GbnfTest, PrefixesStayAliveAndDeadBytesKill) {
  auto g = gbnf("root ::= \"ab\" [cd]");
  Recognizer r(g);
  EXPECT_TRUE(r.advance('a'));
  EXPECT_FALSE(r.accepting());
  EXPECT_TRUE(r.advance('b'));
  EXPECT_FALSE(r.dead());
  EXPECT_TRUE(r.advance('d'));
  EXPECT_TRUE(r.accepting());
  EXPECT_TRUE(r.must_end());
  EXPECT_FALSE(r.advance('d'));
  EXPECT_TRUE(r.dead());
}

TEST(GbnfTest, LiteralEscapesAndUtf8) {
  auto g = gbnf(R"(root ::= "a\n\t\"\\\x41\u00e9" "€")");
  expect_language(g, {"a\n\t\"\\Aé€"}, {"a\n\t\"\\A\xC3\xA9", "a"}, "escapes");
}

TEST(GbnfTest, CharClassesNegationAndAnyChar) {
  expect_language(gbnf("root ::= [^a-z]+"), {"ABC", "é", "9!"}, {"a", "Ab", ""}, "negated");
  expect_language(gbnf("root ::= . ."), {"ab", "é€", "😀x"}, {"a", "abc", "\xC3"}, "dot");
  expect_language(gbnf("root ::= [α-ω_]+"), {"αβγ", "ω_"}, {"Α", "a"}, "greek");
  expect_language(gbnf("root ::= [\\]\\-a]"), {"]", "-", "a"}, {"b", "\\"}, "escaped class");
}

TEST(GbnfTest, RepetitionBounds) {
  auto g = gbnf("root ::= \"a\"{2,3} \"b\"{2,} \"c\"? (\"d\" \"e\"){1}");
  expect_language(g, {"aabbde", "aaabbbbcde"}, {"abbde", "aaaabbde", "aabde", "aabbd", "aabbccde"}, "bounds");
  expect_language(gbnf("root ::= [0-9]{3}"), {"123"}, {"12", "1234"}, "exact");
}

TEST(GbnfTest, RulesMaySpanLinesAndReferenceForward) {
  auto g = gbnf("root ::=\n  item\n  | \"[\" item (\",\" item)* \"]\"\nitem ::= \"x\" # trailing comment\n");
  expect_language(g, {"x", "[x]", "[x,x,x]"}, {"[]", "[x,]", "xx"}, "multi-line");
}

TEST(GbnfTest, ErrorsCarryLineAndColumn) {
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"a\"\nfoo ::= [a-", {})),
            "grammar: unterminated character class at line 2, column 9");
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"abc", {})), "grammar: unterminated literal at line 1, column 10");
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"a\" )", {})), "grammar: expected a rule name at line 1, column 14");
  EXPECT_EQ(error_of(parse_gbnf("root = \"a\"", {})), "grammar: expected '::=' after rule name at line 1, column 6");
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"a\"{3,1}", {})),
            "grammar: repetition {m,n} with n < m at line 1, column 13");
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"\\q\"", {})), "grammar: unknown escape '\\q' at line 1, column 11");
}

TEST(GbnfTest, UndefinedRuleMissingRootAndDuplicatesAreNamed) {
  EXPECT_EQ(error_of(parse_gbnf("root ::= item\n  other", {})), "grammar: undefined rule 'item' at line 1, column 10");
  EXPECT_EQ(error_of(parse_gbnf("start ::= \"a\"", {})), "grammar: missing rule 'root'");
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"a\"\nroot ::= \"b\"", {})),
            "grammar: rule 'root' defined twice at line 2, column 1");
}

TEST(GbnfTest, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_EQ(error_of(parse_gbnf("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", {})),
            "grammar: rule 'expr' is left-recursive");
  // Hidden behind a rule that can match nothing.
  const std::string msg = error_of(parse_gbnf("root ::= opt root \"a\" | \"b\"\nopt ::= \"\" | \"c\"", {}));
  EXPECT_NE(msg.find("left-recursive"), std::string::npos) << msg;
  // Right recursion is fine.
  expect_language(gbnf("root ::= \"a\" root | \"b\""), {"b", "aaab"}, {"a", ""}, "right recursion");
}

TEST(GbnfTest, UnsatisfiableGrammarIsRefused) {
  EXPECT_EQ(error_of(parse_gbnf("root ::= a\na ::= \"x\" a", {})),
            "grammar: unsatisfiable: rule 'root' matches no finite string");
  // An unproductive alternative is pruned, the rest stays usable.
  expect_language(gbnf("root ::= \"y\" | a\na ::= \"x\" a"), {"y"}, {"x"}, "pruned");
}

TEST(GbnfTest, LimitsAreRefusedByName) {
  CompileLimits small;
  small.max_repeat = 10;
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"a\"{0,11}", small)),
            "grammar: repetition bound 11 exceeds max_repeat 10 at line 1, column 10");
  small = CompileLimits{};
  small.max_rules = 3;
  EXPECT_NE(error_of(parse_gbnf("root ::= a b c d\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"\nd ::= \"d\"", small))
                .find("constraint too large: more than 3 rules (max_rules)"),
            std::string::npos);
  small = CompileLimits{};
  small.max_elements = 10;
  EXPECT_NE(error_of(parse_gbnf("root ::= \"abcdefghijkl\"", small)).find("more than 10 elements (max_elements)"),
            std::string::npos);
  small = CompileLimits{};
  small.max_text_bytes = 8;
  EXPECT_EQ(error_of(parse_gbnf("root ::= \"abc\"", small)), "grammar: text of 14 bytes exceeds max_text_bytes 8");
}

TEST(RecognizerTest, AmbiguityPastMaxStacksKillsTheStateVisibly) {
  // After n x's the optional closers can close any number of levels: n + 1 live stacks.
  CompileLimits limits;
  limits.max_stacks = 64;
  limits.max_probe_states = 0;  // the run-time behaviour (the probe would refuse this grammar)
  auto g = parse_gbnf("root ::= \"x\" root \"y\"? | \"\"", limits);
  ASSERT_TRUE(g.ok()) << g.status();
  Recognizer r(*g);
  int fed = 0;
  while (fed < 200 && r.advance('x')) ++fed;
  EXPECT_LT(fed, 200);
  EXPECT_TRUE(r.dead());
  EXPECT_TRUE(r.limit_hit());
}

TEST(RecognizerTest, NestingPastMaxStackDepthIsDropped) {
  CompileLimits limits;
  limits.max_stack_depth = 50;
  limits.max_probe_states = 0;
  auto g = parse_gbnf("root ::= \"(\" root \")\" | \"a\"", limits);
  ASSERT_TRUE(g.ok()) << g.status();
  Recognizer r(*g);
  EXPECT_TRUE(r.advance_bytes(std::string(20, '(') + "a" + std::string(20, ')')));
  EXPECT_TRUE(r.accepting());
  r.reset();
  EXPECT_FALSE(r.advance_bytes(std::string(100, '(')));
  EXPECT_TRUE(r.limit_hit());
}

TEST(RecognizerTest, MinBytesToAcceptAndCompaction) {
  auto g = gbnf("root ::= \"ab\" [0-9]{2,4}");
  Recognizer r(g);
  EXPECT_EQ(r.min_bytes_to_accept(r.state()), 4u);
  ASSERT_TRUE(r.advance_bytes("ab1"));
  EXPECT_EQ(r.min_bytes_to_accept(r.state()), 1u);
  const std::string key = r.canonical_key(r.state());
  r.compact();
  EXPECT_EQ(r.canonical_key(r.state()), key);
  EXPECT_TRUE(r.advance_bytes("234"));
  EXPECT_TRUE(r.must_end());
}

struct RegexCase {
  std::string pattern;
  std::vector<std::string> accepted, rejected;
};

TEST(RegexTest, AcceptRejectTablePerConstruct) {
  const std::vector<RegexCase> cases = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"a|bc", {"a", "bc"}, {"b", "abc"}},
      {"a*b+c?", {"b", "aab", "abbbc"}, {"", "ac", "abcc"}},
      {"\\d{3}-\\d{2,4}", {"123-45", "123-4567"}, {"12-45", "123-45678", "abc-12"}},
      {"[a-c]{2,}", {"ab", "abcabc"}, {"a", "abd"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{,2}", {"", "a", "aa"}, {"aaa"}},
      {"(a|b){1,3}c", {"ac", "babc"}, {"c", "ababc"}},
      {"[^0-9]+", {"abc", "é", "\n"}, {"a1", ""}},
      {"[α-ω]+", {"αβγ", "ω"}, {"a", "Α"}},
      {"(?:ab)+", {"ab", "abab"}, {"aba", ""}},
      {"(?<year>\\d\\d)x", {"19x"}, {"1x"}},
      {"^\\w+\\s\\W$", {"ab_1 !", "Z\t."}, {"ab_1 a", "ab"}},
      {".", {"a", "é", "€", "😀"}, {"\n", "ab", ""}},
      {"\\.\\\\\\n\\t", {".\\\n\t"}, {"a\\\n\t"}},
      {"\\u00e9\\x41", {"éA"}, {"eA"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"\\D\\S", {"a!"}, {"1!", "a "}},
      {"[\\d.]+", {"1.5"}, {"1,5"}},
      {"[\\s\\w]", {" ", "_", "\xC2\xA0"}, {"-"}},
      {"a{x", {"a{x"}, {"ax"}},
      {"a+?b", {"aab"}, {"b"}},
      {"[]", {}, {"", "a"}},
      {"(|a)b", {"b", "ab"}, {"aab"}},
  };
  for (const auto& c : cases) {
    if (c.accepted.empty()) {
      EXPECT_FALSE(compile_regex(c.pattern, {}).ok()) << c.pattern;  // nothing matches: unsatisfiable
      continue;
    }
    expect_language(regex(c.pattern), c.accepted, c.rejected, "regex " + c.pattern);
  }
}

TEST(RegexTest, TokenMayEndInsideAMultiByteCharacter) {
  auto g = regex("[α-ω]+");
  Recognizer r(g);
  EXPECT_TRUE(r.advance(0xCE));  // first byte of α (CE B1)
  EXPECT_FALSE(r.accepting());
  EXPECT_TRUE(r.advance(0xB1));
  EXPECT_TRUE(r.accepting());
  EXPECT_FALSE(r.advance(0x80));  // not a lead byte
}

TEST(RegexTest, UnsupportedConstructsAreNamedWithPosition) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "regex: unsupported backreference at position 3"},
      {"(?=a)b", "regex: unsupported lookahead at position 0"},
      {"b(?<!a)", "regex: unsupported lookbehind at position 1"},
      {"a\\b", "regex: unsupported word boundary '\\b' at position 1"},
      {"a^b", "regex: unsupported anchor '^' (only allowed at the start) at position 1"},
      {"a$b", "regex: unsupported anchor '$' (only allowed at the end) at position 1"},
      {"(?i)a", "regex: unsupported group syntax '(?' at position 0"},
      {"a++", "regex: unsupported possessive quantifier at position 2"},
      {"\\p{L}", "regex: unsupported escape '\\p' at position 0"},
      {"(a", "regex: missing ')' at position 0"},
      {"a)", "regex: unmatched ')' at position 1"},
      {"*a", "regex: nothing to repeat at position 0"},
      {"a**", "regex: nothing to repeat at position 2"},
      {"[a", "regex: missing ']' at position 0"},
      {"a{3,1}", "regex: quantifier {n,m} with m < n at position 1"},
  };
  for (const auto& [pattern, message] : cases) {
    auto g = compile_regex(pattern, {});
    ASSERT_FALSE(g.ok()) << pattern;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(g.status().message(), message) << pattern;
  }
  CompileLimits small;
  small.max_repeat = 100;
  EXPECT_EQ(error_of(compile_regex("a{101}", small)), "regex: repetition bound 101 exceeds max_repeat 100 at position 0");
}

TEST(ConstraintTest, CompileDispatchesByKindAndRefusesNone) {
  auto re = compile_constraint({ConstraintSpec::Kind::kRegex, "[0-9]+"});
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_EQ((*re)->kind(), ConstraintSpec::Kind::kRegex);
  auto gr = compile_constraint({ConstraintSpec::Kind::kGrammar, "root ::= \"x\""});
  ASSERT_TRUE(gr.ok()) << gr.status();
  auto none = compile_constraint({ConstraintSpec::Kind::kNone, ""});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(), "constraint kind 'none' has nothing to compile");
}

}  // namespace
}  // namespace frost::constrain
