// Tokenizer unit tests: the byte tokenizer, our tokenizer.json BPE on small vocabularies the
// tests write themselves (GPT-2 byte-level and LLaMA metaspace styles), malformed files and
// load_tokenizer's file choice. Expected ids and splits were worked out by hand from the
// merge lists below (comments show the derivations).
#include "core/model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/model/tokenizer_bpe.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// --------------------------------------------------------------------------------------
// Helpers
// --------------------------------------------------------------------------------------

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte → char map, written independently of the implementation: printable Latin-1
// bytes stand for themselves, the rest get U+0100, U+0101, ... in byte order.
std::string gpt2_char(int b) {
  auto printable = [](int x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
  };
  if (printable(b)) return utf8(static_cast<char32_t>(b));
  int n = 0;
  for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
  return utf8(static_cast<char32_t>(256 + n));
}

std::string to_gpt2(const std::string& s) {
  std::string out;
  for (const char c : s) out += gpt2_char(static_cast<uint8_t>(c));
  return out;
}

std::unique_ptr<Tokenizer> load_json(const testing::TempDir& dir, const json& j) {
  testing::write_text_file(dir.file("tokenizer.json"), j.dump());
  auto tok = load_tokenizer(dir.path(), TokenizerPreference::kHfJson);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

Ids encode(const Tokenizer& tok, const std::string& text, bool add_bos = false) {
  auto ids = tok.encode(text, add_bos);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

std::string concat_token_bytes(const Tokenizer& tok, const Ids& ids) {
  std::string s;
  for (const int32_t id : ids) s += tok.token_bytes(id);
  return s;
}

// Random strings over `alphabet` (each element one "char", possibly multi-byte).
std::vector<std::string> random_strings(const std::vector<std::string>& alphabet, int n,
                                        uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(rng() % 24);
    std::string s;
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

// --------------------------------------------------------------------------------------
// Byte tokenizer
// --------------------------------------------------------------------------------------

TEST(ByteTokenizerTest, RoundTripsArbitraryBytes) {
  auto tok = make_byte_tokenizer(300);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const Ids ids = encode(*tok, all, /*add_bos=*/true);
  ASSERT_EQ(ids.size(), 257u);
  EXPECT_EQ(ids[0], 1);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b) + 1], b + 3);
  EXPECT_EQ(concat_token_bytes(*tok, ids), all);  // every byte survives, invalid UTF-8 too
  EXPECT_EQ(tok->decode(encode(*tok, "héllo 你好 🙂\n")), "héllo 你好 🙂\n");
  EXPECT_EQ(tok->decode(encode(*tok,
                               "a\xFF"
                               "b")),
            "a\xEF\xBF\xBD"
            "b");  // U+FFFD
}

TEST(ByteTokenizerTest, SpecialIdsAndFillers) {
  auto tok = make_byte_tokenizer(400);
  EXPECT_EQ(tok->kind(), "byte");
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  for (int32_t id : {0, 1, 2}) {
    EXPECT_TRUE(tok->is_special(id));
    EXPECT_EQ(tok->token_bytes(id), "");
  }
  EXPECT_FALSE(tok->is_special(3));
  EXPECT_EQ(tok->id_to_piece(1), "<s>");
  EXPECT_EQ(tok->id_to_piece(3 + 0x0A), "<0x0A>");
  EXPECT_EQ(tok->token_bytes(259), " ");
  EXPECT_EQ(tok->token_bytes(259 + 94), "~");
  EXPECT_EQ(tok->token_bytes(259 + 95), " ");  // wraps around the 95 printable chars
  EXPECT_EQ(tok->token_bytes(400), "");
  EXPECT_EQ(tok->token_bytes(-1), "");
  EXPECT_EQ(tok->decode({1, 3 + 'h', 3 + 'i', 2, 259 + 1}), "hi!");
  EXPECT_EQ(make_byte_tokenizer(10)->vocab_size(), 259);  // raised to hold the byte ids
}

// --------------------------------------------------------------------------------------
// GPT-2 style byte-level BPE
// --------------------------------------------------------------------------------------

// Vocabulary: id b = the char of byte b (so a lone byte's id is its value), then merges
//   256 Ġt  257 he  258 Ġthe  259 ll  260 llo  261 ĠĠ  262 's  263 12  264 ĊĊ
// in that rank order, and the added special token <|endoftext|> = 265.
json gpt2_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"ll", "o"},
      {"Ġ", "Ġ"}, {"'", "s"}, {"1", "2"},   {"Ċ", "Ċ"}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(json::array({a, b}));  // the newer ["a", "b"] form
  }
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array({{{"id", 265}, {"content", "<|endoftext|>"}, {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},       {"dropout", nullptr},     {"unk_token", nullptr},
                {"fuse_unk", false},   {"byte_fallback", false}, {"vocab", vocab},
                {"merges", merge_list}};
  return j;
}

TEST(TokenizerBpeTest, Gpt2PreTokenizationSplits) {
  testing::TempDir dir;
  auto tok = load_json(dir, gpt2_json());
  ASSERT_NE(tok, nullptr);
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok.get());
  ASSERT_NE(bpe, nullptr);
  const std::string nbsp = "\xC2\xA0";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Hello world", {"Hello", " world"}},
      {"I'm don't you'll they've we're she'd it's",
       {"I", "'m", " don", "'t", " you", "'ll", " they", "'ve", " we", "'re", " she", "'d", " it",
        "'s"}},
      {"They'RE", {"They", "'", "RE"}},  // contractions are case-sensitive in GPT-2
      // \s+(?!\S): a space run before a word leaves its last space to the word.
      {"a  b", {"a", " ", " b"}},
      {"a   b", {"a", "  ", " b"}},
      {"trailing  ", {"trailing", "  "}},  // at the end the whole run matches
      {"end ", {"end", " "}},
      {"x \n y", {"x", " \n", " y"}},
      {"line1\nline2", {"line", "1", "\n", "line", "2"}},
      {"\t\tx", {"\t", "\t", "x"}},  // only ' ' joins a word, a tab stands alone
      {"abc 12345 6", {"abc", " 12345", " 6"}},
      {"你好 🙂!", {"你好", " 🙂!"}},
      {"!!! ok?", {"!!!", " ok", "?"}},
      // NBSP is whitespace for Oniguruma's \s (RE2's \s is ASCII): same rule as spaces.
      {"a" + nbsp + nbsp + "b", {"a", nbsp, nbsp, "b"}},
      {"", {}},
  };
  for (const auto& [text, words] : cases) {
    std::vector<std::string> expected;
    for (const std::string& w : words) expected.push_back(to_gpt2(w));
    EXPECT_EQ(bpe->pre_tokenize(text), expected) << "text: \"" << text << "\"";
  }
}

TEST(TokenizerBpeTest, Gpt2HandVerifiedIds) {
  testing::TempDir dir;
  auto tok = load_json(dir, gpt2_json());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "bpe-bytelevel");
  EXPECT_EQ(tok->vocab_size(), 266);
  // "Hello": (l,l) rank 3 → ll, then (ll,o) rank 4 → llo; (H,e) is no merge (case).
  // " world": no merges apply, one id per byte (Ġ = byte 32).
  EXPECT_EQ(encode(*tok, "Hello world"), (Ids{72, 101, 260, 32, 119, 111, 114, 108, 100}));
  // " " then " the": (Ġ,t) rank 0, (h,e) rank 1, then (Ġt,he) rank 2 → Ġthe.
  EXPECT_EQ(encode(*tok, "  the"), (Ids{32, 258}));
  EXPECT_EQ(encode(*tok, "the"), (Ids{116, 257}));  // no leading space: t + he
  EXPECT_EQ(encode(*tok, "it's"), (Ids{105, 116, 262}));
  EXPECT_EQ(encode(*tok, "a  b"), (Ids{97, 32, 32, 98}));  // split before ĠĠ could merge
  // "   " at the end is one word: the leftmost (Ġ,Ġ) merges first, leaving ĠĠ + Ġ.
  EXPECT_EQ(encode(*tok, "x   "), (Ids{120, 261, 32}));
  EXPECT_EQ(encode(*tok, "hi\n\n"), (Ids{104, 105, 264}));
  EXPECT_EQ(encode(*tok, "\n\nhi"), (Ids{10, 10, 104, 105}));
  EXPECT_EQ(encode(*tok, "112"), (Ids{49, 263}));
  EXPECT_EQ(encode(*tok, "你好🙂"),
            (Ids{0xE4, 0xBD, 0xA0, 0xE5, 0xA5, 0xBD, 0xF0, 0x9F, 0x99, 0x82}));
  // Invalid UTF-8 is replaced with U+FFFD (EF BF BD) before tokenizing.
  EXPECT_EQ(encode(*tok, "a\xFF"), (Ids{97, 0xEF, 0xBF, 0xBD}));
}

TEST(TokenizerBpeTest, Gpt2SpecialTokens) {
  testing::TempDir dir;
  auto tok = load_json(dir, gpt2_json());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), -1);  // GPT-2: no template, HF adds nothing
  EXPECT_EQ(tok->eos_id(), 265);
  EXPECT_TRUE(tok->is_special(265));
  EXPECT_FALSE(tok->is_special(260));
  EXPECT_EQ(tok->id_to_piece(265), "<|endoftext|>");
  EXPECT_EQ(tok->id_to_piece(258), "Ġthe");
  EXPECT_EQ(tok->id_to_piece(266), "");
  EXPECT_EQ(tok->token_bytes(265), "");
  EXPECT_EQ(tok->token_bytes(258), " the");
  EXPECT_EQ(tok->token_bytes(0xE4), "\xE4");  // a lone byte of a multi-byte char
  EXPECT_EQ(encode(*tok, "x", /*add_bos=*/true), (Ids{120}));
  // Special-token text is not parsed: it is spelled with ordinary tokens.
  const Ids ids = encode(*tok, "<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 265), 0);
  EXPECT_EQ(tok->decode(ids), "<|endoftext|>");
  EXPECT_EQ(tok->decode({258, 265, 32}), " the ");       // special skipped
  EXPECT_EQ(tok->decode({0xE4, 0xBD}), "\xEF\xBF\xBD");  // truncated char → one U+FFFD
}

TEST(TokenizerBpeTest, Gpt2RoundTripsManyStrings) {
  testing::TempDir dir;
  auto tok = load_json(dir, gpt2_json());
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> texts = {"",
                                    " ",
                                    "  ",
                                    "\n",
                                    "Hello world",
                                    " leading",
                                    "trailing ",
                                    "a  b   c    d",
                                    "tab\there",
                                    "crlf\r\nline",
                                    "it's 'quoted'",
                                    "Ġ literal Ġ",
                                    "1234567890",
                                    "你好，世界！",
                                    "emoji 🙂🙃 ok",
                                    "mixed é ü ß ñ",
                                    "\xE3\x80\x80ideographic space"};
  const std::vector<std::string> alphabet = {"a",
                                             "Z",
                                             "t",
                                             "h",
                                             "e",
                                             "l",
                                             "o",
                                             "0",
                                             "1",
                                             "2",
                                             " ",
                                             " ",
                                             " ",
                                             "\n",
                                             "\t",
                                             "'",
                                             "s",
                                             "!",
                                             "é",
                                             "你",
                                             "🙂",
                                             "\xC2\xA0",
                                             "\xE3\x80\x80",
                                             "Ġ",
                                             "\r"};
  for (const std::string& s : random_strings(alphabet, 500, 7)) texts.push_back(s);
  for (const std::string& text : texts) {
    const Ids ids = encode(*tok, text);
    EXPECT_EQ(tok->decode(ids), text);
    EXPECT_EQ(concat_token_bytes(*tok, ids), text);
  }
}

// Llama-3 style: Split(regex, Isolated) then ByteLevel without its own regex.
TEST(TokenizerBpeTest, SplitRegexPreTokenizer) {
  json j = gpt2_json();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  testing::TempDir dir;
  auto tok = load_json(dir, j);
  ASSERT_NE(tok, nullptr);
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok.get());
  ASSERT_NE(bpe, nullptr);
  // "'VE" matches case-insensitively; digits go in groups of 3; "\n\n" is taken whole by
  // \s*[\r\n]+; of "  ok" the first space is left by \s+(?!\S).
  std::vector<std::string> expected;
  for (const char* w : {"I", "'VE", " ", "123", "45", " apples", "\n\n", " ", " ok"}) {
    expected.push_back(to_gpt2(w));
  }
  EXPECT_EQ(bpe->pre_tokenize("I'VE 12345 apples\n\n  ok"), expected);
  EXPECT_EQ(tok->decode(encode(*tok, "I'VE 12345 apples\n\n  ok")), "I'VE 12345 apples\n\n  ok");
}

// The examples of HF's SplitDelimiterBehavior documentation ("the-final--countdown").
TEST(TokenizerBpeTest, SplitBehaviorsMatchHfDocs) {
  using Words = std::vector<std::string>;
  const std::vector<std::pair<std::string, Words>> cases = {
      {"Removed", {"the", "final", "countdown"}},
      {"Isolated", {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", {"the", "-final", "-", "-countdown"}},
      {"Contiguous", {"the", "-", "final", "--", "countdown"}},
  };
  for (const auto& [behavior, words] : cases) {
    json j = gpt2_json();
    j["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", "-"}}},
                          {"behavior", behavior},
                          {"invert", false}};
    auto tok = BpeTokenizer::parse(j.dump(), "split.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->pre_tokenize("the-final--countdown"), words) << behavior;
  }
  // invert: the matches are the content, the gaps the delimiters.
  json j = gpt2_json();
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "[a-z]+"}}},
                        {"behavior", "Removed"},
                        {"invert", true}};
  auto tok = BpeTokenizer::parse(j.dump(), "split.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pre_tokenize("the-final--countdown"), (Words{"the", "final", "countdown"}));
}

TEST(TokenizerBpeTest, DigitsPreTokenizerAndStripNormalizer) {
  json j = gpt2_json();
  j["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto tok = BpeTokenizer::parse(j.dump(), "digits.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // Strip removes Unicode whitespace (here U+3000 and a tab); ² is \p{N} too.
  EXPECT_EQ((*tok)->pre_tokenize("\xE3\x80\x80 a12b²\t"),
            (std::vector<std::string>{"a", "1", "2", "b", to_gpt2("²")}));
  j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  tok = BpeTokenizer::parse(j.dump(), "digits.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pre_tokenize("a123b"), (std::vector<std::string>{"a", "123", "b"}));
}

TEST(TokenizerBpeTest, ByteLevelAddPrefixSpace) {
  json j = gpt2_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  testing::TempDir dir;
  auto tok = load_json(dir, j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(encode(*tok, "the"), (Ids{258}));   // " the" → Ġthe
  EXPECT_EQ(encode(*tok, " the"), (Ids{258}));  // already starts with a space
}

TEST(TokenizerBpeTest, ConcurrentEncodesAgreeAndAreFast) {
  testing::TempDir dir;
  auto tok = load_json(dir, gpt2_json());
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> alphabet = {
      "the", " the", " hello", " world", "'s", " 12", "!", " ", "\n", "é", "你好", " apples", "x"};
  std::mt19937 rng(3);
  std::vector<std::string> sentences;
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (int k = 0; k < 20; ++k) s += alphabet[rng() % alphabet.size()];
    sentences.push_back(s);
  }
  std::vector<Ids> expected;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& s : sentences) expected.push_back(encode(*tok, s));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0) << "encoding 2000 sentences took " << secs << " s";

  // The word cache is shared: hammer it from several threads, each with a fresh order.
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < sentences.size(); ++i) {
        const size_t k = (i * 7 + static_cast<size_t>(t) * 131) % sentences.size();
        auto ids = tok->encode(sentences[k], false);
        if (!ids.ok() || *ids != expected[k]) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// --------------------------------------------------------------------------------------
// LLaMA / sentencepiece style: metaspace + byte fallback
// --------------------------------------------------------------------------------------

// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, 259 ▁, 260 a, 261 b, 262 ▁a, 263 ab, 264 ▁ab,
// 265 c; merges (rank order) "▁ a", "a b", "▁a b". The normalizer is what
// stories260K's tokenizer.json uses (sentencepiece's whitespace collapsing).
json llama_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::vector<std::string> pieces = {"▁", "a", "b", "▁a", "ab", "▁ab", "c"};
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + static_cast<int>(i);
  auto added = [](int id, const char* s) {
    return json{{"id", id},        {"content", s},        {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  auto replace = [](const char* kind, const char* pattern, const char* content) {
    return json{{"type", "Replace"}, {"pattern", {{kind, pattern}}}, {"content", content}};
  };
  json j;
  j["added_tokens"] = json::array({added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {replace("Regex", "^ +| +$", ""),
                       replace("Regex", " {2,}", " "),
                       {{"type", "Prepend"}, {"prepend", "▁"}},
                       replace("String", " ", "▁")}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {replace("String", "▁", " "),
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"vocab", vocab},
                {"merges", {"▁ a", "a b", "▁a b"}}};  // the older "a b" string form
  return j;
}

TEST(TokenizerBpeTest, MetaspaceNormalizerHandVerifiedIds) {
  testing::TempDir dir;
  auto tok = load_json(dir, llama_json());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "bpe-metaspace");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // "▁ab▁abc": both (▁,a) merge first (rank 0), the (a,b) candidates are then stale, and
  // (▁a,b) rank 2 gives ▁ab twice; c stays.
  EXPECT_EQ(encode(*tok, "ab abc", true), (Ids{1, 264, 264, 265}));
  EXPECT_EQ(encode(*tok, "  ab   abc  ", true), (Ids{1, 264, 264, 265}));  // spaces collapse
  // "▁aab": (▁,a) rank 0 before (a,b) rank 1, and ▁a + ab has no merge.
  EXPECT_EQ(encode(*tok, "aab"), (Ids{262, 263}));
  EXPECT_EQ(encode(*tok, "ba"), (Ids{259, 261, 260}));
  // é is not in the vocabulary: byte fallback to <0xC3> <0xA9>.
  EXPECT_EQ(encode(*tok, "é"), (Ids{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(encode(*tok, "", true), (Ids{1}));
  EXPECT_EQ(encode(*tok, "   "), Ids{});

  EXPECT_EQ(tok->decode({1, 264, 264, 265}), "ab abc");
  EXPECT_EQ(tok->decode({259, 3 + 0xC3, 3 + 0xA9}), "é");
  EXPECT_EQ(tok->decode({3 + 0xC3}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({3 + 0xC3, 260}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok->decode({0, 260, 2}), "a");  // unk and eos are special: skipped
}

TEST(TokenizerBpeTest, TokenBytesOfByteFallbackPieces) {
  testing::TempDir dir;
  auto tok = load_json(dir, llama_json());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->token_bytes(3 + 0xC3), "\xC3");
  EXPECT_EQ(tok->token_bytes(3 + 0x0A), "\n");
  EXPECT_EQ(tok->token_bytes(3 + 0x00), std::string(1, '\0'));
  EXPECT_EQ(tok->token_bytes(259), " ");
  EXPECT_EQ(tok->token_bytes(264), " ab");  // the stream keeps the space Strip would drop
  EXPECT_EQ(tok->token_bytes(260), "a");
  for (int32_t id : {0, 1, 2}) {
    EXPECT_TRUE(tok->is_special(id));
    EXPECT_EQ(tok->token_bytes(id), "");
  }
  EXPECT_FALSE(tok->is_special(3));
  EXPECT_EQ(tok->id_to_piece(3 + 0x0A), "<0x0A>");
  EXPECT_EQ(tok->id_to_piece(264), "▁ab");
  EXPECT_EQ(tok->token_bytes(266), "");
  EXPECT_EQ(concat_token_bytes(*tok, encode(*tok, "é ab")), " é ab");
}

TEST(TokenizerBpeTest, MetaspaceRoundTrip) {
  testing::TempDir dir;
  auto tok = load_json(dir, llama_json());
  ASSERT_NE(tok, nullptr);
  // The normalizer collapses and trims spaces, so only texts it leaves alone round-trip.
  const std::vector<std::string> alphabet = {"a", "b", "c", "ab", "é", "你", "🙂", "\n", "x"};
  std::mt19937 rng(11);
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int len = static_cast<int>(rng() % 16);
    for (int k = 0; k < len; ++k) {
      if (k > 0 && rng() % 3 == 0) text += ' ';  // single inner spaces only
      text += alphabet[rng() % alphabet.size()];
    }
    EXPECT_EQ(tok->decode(encode(*tok, text, true)), text);
  }
}

TEST(TokenizerBpeTest, MetaspacePreTokenizer) {
  json j = llama_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  {
    testing::TempDir dir;
    auto tok = load_json(dir, j);
    ASSERT_NE(tok, nullptr);
    auto* bpe = dynamic_cast<BpeTokenizer*>(tok.get());
    // "ab▁▁ab" → "▁ab▁▁ab" → pieces merged with the next: ▁ab | ▁ | ▁ab.
    EXPECT_EQ(bpe->pre_tokenize("ab  ab"), (std::vector<std::string>{"▁ab", "▁", "▁ab"}));
    EXPECT_EQ(encode(*tok, "ab  ab"), (Ids{264, 259, 264}));
    EXPECT_EQ(tok->decode({264, 259, 264}), "ab  ab");
    EXPECT_EQ(tok->token_bytes(264), " ab");
  }
  {
    j["pre_tokenizer"]["prepend_scheme"] = "never";
    j["decoder"]["prepend_scheme"] = "never";
    testing::TempDir dir;
    auto tok = load_json(dir, j);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(encode(*tok, "ab ab"), (Ids{263, 264}));
    EXPECT_EQ(tok->decode({263, 264}), "ab ab");
  }
  {
    j["pre_tokenizer"]["prepend_scheme"] = "always";
    j["pre_tokenizer"]["split"] = false;  // one word: ▁ab▁ab
    testing::TempDir dir;
    auto tok = load_json(dir, j);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(encode(*tok, "ab ab"), (Ids{264, 264}));
  }
}

TEST(TokenizerBpeTest, UnknownCharsWithoutByteFallback) {
  json j = llama_json();
  j["model"]["byte_fallback"] = false;
  {
    testing::TempDir dir;
    auto tok = load_json(dir, j);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(encode(*tok, "aéé"), (Ids{262, 0}));  // fuse_unk: one <unk> for the run
    EXPECT_EQ(encode(*tok, "éaé"), (Ids{259, 0, 260, 0}));
  }
  {
    j["model"]["fuse_unk"] = false;
    testing::TempDir dir;
    auto tok = load_json(dir, j);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(encode(*tok, "aéé"), (Ids{262, 0, 0}));
  }
}

// --------------------------------------------------------------------------------------
// Malformed or unsupported tokenizer.json
// --------------------------------------------------------------------------------------

TEST(TokenizerBpeTest, MalformedFilesGiveClearErrors) {
  struct Case {
    std::string name;
    std::string text;       // file contents
    std::string expect_in;  // substring of the error message
  };
  auto with = [](const std::function<void(json&)>& edit) {
    json j = llama_json();
    edit(j);
    return j.dump();
  };
  const std::string valid = llama_json().dump();
  const std::vector<Case> cases = {
      {"not json", "{\"model\": ", "malformed JSON"},
      {"truncated", valid.substr(0, valid.size() / 2), "malformed JSON"},
      {"root array", "[1, 2]", "expected a JSON object"},
      {"no model", "{}", "model: expected an object"},
      {"wordpiece", with([](json& j) { j["model"]["type"] = "WordPiece"; }), "model.type"},
      {"unigram", with([](json& j) { j["model"]["type"] = "Unigram"; }), "Unigram"},
      {"dropout", with([](json& j) { j["model"]["dropout"] = 0.1; }), "model.dropout"},
      {"subword prefix", with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }),
       "model.continuing_subword_prefix"},
      {"vocab array", with([](json& j) { j["model"]["vocab"] = json::array(); }), "model.vocab"},
      {"negative id", with([](json& j) { j["model"]["vocab"]["a"] = -5; }), "model.vocab[\"a\"]"},
      {"string id", with([](json& j) { j["model"]["vocab"]["a"] = "x"; }), "model.vocab[\"a\"]"},
      // Dense per-id tables: ids may span at most twice the listed tokens + 1024 (a one-token file with id
      // 16777215 allocated over a gigabyte; tests/fuzz).
      {"sparse id", with([](json& j) { j["model"]["vocab"]["a"] = (1 << 24) - 1; }),
       "model.vocab[\"a\"]: expected a token id in [0, "},
      {"sparse added id", with([](json& j) { j["added_tokens"][0]["id"] = 1 << 20; }),
       "added_tokens[0].id: expected a token id in [0, "},
      {"merge unknown token", with([](json& j) { j["model"]["merges"][1] = "a zz"; }),
       "model.merges[1]: token \"zz\" is not in model.vocab"},
      {"merge result unknown", with([](json& j) { j["model"]["merges"][1] = "b a"; }),
       "token \"ba\""},
      {"merge no space", with([](json& j) { j["model"]["merges"][0] = "abc"; }), "model.merges[0]"},
      {"merge bad type", with([](json& j) { j["model"]["merges"][0] = 7; }), "model.merges[0]"},
      {"unk not in vocab", with([](json& j) { j["model"]["unk_token"] = "<nope>"; }),
       "model.unk_token"},
      {"lowercase", with([](json& j) {
         j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}};
       }),
       "normalizer.normalizers[0].type: unsupported normalizer \"Lowercase\""},
      {"replace without pattern",
       with([](json& j) { j["normalizer"]["normalizers"][0].erase("pattern"); }),
       "normalizer.normalizers[0].pattern"},
      {"bad regex",
       with([](json& j) { j["normalizer"]["normalizers"][0]["pattern"]["Regex"] = "(a"; }),
       "normalizer.normalizers[0].pattern.Regex: regex rejected by RE2"},
      {"lookbehind",
       with([](json& j) { j["normalizer"]["normalizers"][0]["pattern"]["Regex"] = "(?<=a)b"; }),
       "lookaround"},
      {"whitespace pretok", with([](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       }),
       "pre_tokenizer.type: unsupported pre_tokenizer \"Whitespace\""},
      {"pretok no type", with([](json& j) {
         j["pre_tokenizer"] = {{"x", 1}};
       }),
       "pre_tokenizer.type: missing"},
      {"metaspace bad scheme", with([](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
       }),
       "pre_tokenizer.prepend_scheme"},
      {"wordpiece decoder", with([](json& j) {
         j["decoder"]["decoders"][1] = {{"type", "WordPiece"}};
       }),
       "decoder.decoders[1].type: unsupported decoder \"WordPiece\""},
      {"strip bool", with([](json& j) { j["decoder"]["decoders"][3]["start"] = true; }),
       "decoder.decoders[3].start"},
      {"unknown post processor", with([](json& j) {
         j["post_processor"] = {{"type", "Nope"}};
       }),
       "post_processor.type"},
      {"added token without id", with([](json& j) { j["added_tokens"][0].erase("id"); }),
       "added_tokens[0].id"},
  };
  testing::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  for (const Case& c : cases) {
    testing::write_text_file(path, c.text);
    auto tok = BpeTokenizer::load(path);
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    const std::string msg(tok.status().message());
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect_in), std::string::npos) << c.name << ": " << msg;
  }
  // The unchanged file loads: the cases above fail for their edit alone.
  testing::write_text_file(path, valid);
  EXPECT_TRUE(BpeTokenizer::load(path).ok());
}

// --------------------------------------------------------------------------------------
// load_tokenizer
// --------------------------------------------------------------------------------------

TEST(LoadTokenizerTest, PicksTheFileAndNamesMissingOnes) {
  testing::TempDir dir;
  auto none = load_tokenizer(dir.path(), TokenizerPreference::kAuto);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(load_tokenizer(dir.file("absent"), TokenizerPreference::kAuto).status().code(),
            absl::StatusCode::kNotFound);

  testing::write_text_file(dir.file("tokenizer.json"), llama_json().dump());
  auto json_tok = load_tokenizer(dir.path(), TokenizerPreference::kAuto);
  ASSERT_TRUE(json_tok.ok()) << json_tok.status();
  EXPECT_EQ((*json_tok)->kind(), "bpe-metaspace");

  auto spm = load_tokenizer(dir.path(), TokenizerPreference::kSentencePiece);
  EXPECT_EQ(spm.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spm.status().message().find("tokenizer.model"), absl::string_view::npos);

  // A present tokenizer.model wins under kAuto, and a broken one is reported, not skipped.
  // (ASan builds cannot load sentencepiece at all: see core/model/spm_backend.h.)
  testing::write_text_file(dir.file("tokenizer.model"), "not a protobuf");
  auto bad = load_tokenizer(dir.path(), TokenizerPreference::kAuto);
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnimplemented) << bad.status();
#else
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tokenizer.model"), absl::string_view::npos);
#endif
  EXPECT_TRUE(load_tokenizer(dir.path(), TokenizerPreference::kHfJson).ok());

  testing::TempDir empty;
  auto no_json = load_tokenizer(empty.path(), TokenizerPreference::kHfJson);
  EXPECT_EQ(no_json.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(no_json.status().message().find("tokenizer.json"), absl::string_view::npos);
}

}  // namespace
}  // namespace frost
