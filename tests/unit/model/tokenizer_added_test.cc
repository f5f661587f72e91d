// tokenizer.json features of the model families people run (issue 50): the NFC/NFKC normalizers
// (Qwen2/Qwen3), added tokens with their special / lstrip / rstrip / normalized / single_word
// flags, and the special-token policy of encode() vs encode_with_specials() (tokenizer.h).
// Real tokenizer files are compared with Hugging Face's own implementation by
// tests/tokenizers/hf_agreement_test.py; these are hand-worked small cases.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// GPT-2's byte → char map (printable Latin-1 bytes are themselves, the rest U+0100.. in order).
std::string gpt2_char(int b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level vocabulary without merges: the id of a byte is its value, so ids spell the
// bytes BPE saw. Added tokens from 300 on.
json byte_level_json(const json& added, const json& normalizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_char(b)] = b;
  json j;
  j["added_tokens"] = added;
  j["normalizer"] = normalizer;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}};
  return j;
}

json added(int id, const std::string& content, bool special, json extra = json::object()) {
  json t = {{"id", id}, {"content", content}, {"special", special}};
  for (auto& [k, v] : extra.items()) t[k] = v;
  return t;
}

std::unique_ptr<Tokenizer> load(const json& j) {
  testing::TempDir dir;
  testing::write_text_file(dir.file("tokenizer.json"), j.dump());
  auto tok = load_tokenizer(dir.path(), TokenizerPreference::kHfJson);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

Ids bytes(const std::string& s) {
  Ids ids;
  for (const char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Ids enc(const Tokenizer& tok, const std::string& text) { return *tok.encode(text, false); }
Ids enc_sp(const Tokenizer& tok, const std::string& text) { return *tok.encode_with_specials(text, false); }

TEST(TokenizerUnicodeTest, NfcComposesAndNfkcFoldsCompatibilityChars) {
  const std::string e_acute_decomposed = "e\xCC\x81";  // e + U+0301
  const std::string e_acute = "\xC3\xA9";              // U+00E9
  const std::string fi_ligature = "\xEF\xAC\x81";       // U+FB01
  auto nfc = load(byte_level_json(json::array(), {{"type", "NFC"}}));
  ASSERT_NE(nfc, nullptr);
  EXPECT_EQ(enc(*nfc, "caf" + e_acute_decomposed), bytes("caf" + e_acute));
  EXPECT_EQ(enc(*nfc, fi_ligature), bytes(fi_ligature));  // compatibility chars stay under NFC
  // Hangul: conjoining jamo compose algorithmically (U+1100 U+1161 → U+AC00).
  EXPECT_EQ(enc(*nfc, "\xE1\x84\x80\xE1\x85\xA1"), bytes("\xEA\xB0\x80"));
  // Canonical reordering: the two marks come out in combining-class order under NFD.
  auto nfd = load(byte_level_json(json::array(), {{"type", "NFD"}}));
  ASSERT_NE(nfd, nullptr);
  EXPECT_EQ(enc(*nfd, e_acute), bytes(e_acute_decomposed));
  EXPECT_EQ(enc(*nfd, "a\xCC\x81\xCC\xA3"), bytes("a\xCC\xA3\xCC\x81"));  // ccc 230, 220 → 220, 230
  auto nfkc = load(byte_level_json(
      json::array(), {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFKC"}}})}}));
  ASSERT_NE(nfkc, nullptr);
  EXPECT_EQ(enc(*nfkc, fi_ligature + "\xEF\xBC\xA1"), bytes("fiA"));  // U+FB01, fullwidth A
  EXPECT_EQ(nfkc->decode(enc(*nfkc, "x" + e_acute_decomposed)), "x" + e_acute);
}

TEST(TokenizerAddedTest, NonSpecialTokensAreMatchedSpecialOnesOnlyWhenAsked) {
  auto tok = load(byte_level_json(json::array({added(300, "<think>", false), added(301, "<|im_end|>", true)}),
                                  nullptr));
  ASSERT_NE(tok, nullptr);
  // encode(): <think> is vocabulary, <|im_end|> stays text (the policy of tokenizer.h).
  EXPECT_EQ(enc(*tok, "a<think>b<|im_end|>"), cat({bytes("a"), {300}, bytes("b<|im_end|>")}));
  // encode_with_specials(): HF's default, both become their tokens.
  EXPECT_EQ(enc_sp(*tok, "a<think>b<|im_end|>"), cat({bytes("a"), {300}, bytes("b"), {301}}));
  EXPECT_EQ(enc_sp(*tok, "<|im_end|><|im_end|>"), (Ids{301, 301}));
  EXPECT_TRUE(tok->is_special(301));
  EXPECT_FALSE(tok->is_special(300));
  // decode skips special tokens and keeps the others' text.
  EXPECT_EQ(tok->decode(enc_sp(*tok, "x<think>y<|im_end|>")), "x<think>y");
}

TEST(TokenizerAddedTest, LeftmostLongestMatch) {
  // Gemma 3 style whitespace tokens: the longest at the leftmost place wins.
  auto tok = load(byte_level_json(
      json::array({added(300, "\n", false), added(301, "\n\n", false), added(302, "\n\n\n", false),
                   added(303, "ab", false), added(304, "abc", false), added(305, "bcd", false)}),
      nullptr));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "x\n\n\n\n\ny"), cat({bytes("x"), {302, 301}, bytes("y")}));
  EXPECT_EQ(enc(*tok, "abcd"), cat({{304}, bytes("d")}));  // not ab + bcd
  EXPECT_EQ(enc(*tok, "xbcd"), cat({bytes("x"), {305}}));
}

TEST(TokenizerAddedTest, LstripRstripTakeTheWhitespaceAround) {
  auto tok = load(byte_level_json(
      json::array({added(300, "<mask>", true, {{"lstrip", true}}), added(301, "<sep>", true, {{"rstrip", true}})}),
      nullptr));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc_sp(*tok, "a  <mask> b"), cat({bytes("a"), {300}, bytes(" b")}));
  EXPECT_EQ(enc_sp(*tok, "a <sep> \t b"), cat({bytes("a "), {301}, bytes("b")}));
  // Whitespace an earlier match took is not taken again.
  EXPECT_EQ(enc_sp(*tok, "<sep>  <mask>"), (Ids{301, 300}));
  // As text (encode), the flags change nothing.
  EXPECT_EQ(enc(*tok, "a <mask>"), bytes("a <mask>"));
}

TEST(TokenizerAddedTest, SingleWordNeedsNoWordCharAround) {
  auto tok = load(byte_level_json(json::array({added(300, "ok", false, {{"single_word", true}})}), nullptr));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "ok, ok"), cat({{300}, bytes(", "), {300}}));
  EXPECT_EQ(enc(*tok, "okay took"), bytes("okay took"));
}

TEST(TokenizerAddedTest, NormalizedTokensMatchTheNormalizedText) {
  const std::string fi_ligature = "\xEF\xAC\x81";
  const json nfkc = {{"type", "NFKC"}};
  // normalized: the token's content is normalized too, and matched after the normalizer: the
  // ligature in the text meets "fi" in the token.
  auto tok = load(byte_level_json(json::array({added(300, fi_ligature + "x", false, {{"normalized", true}}),
                                               added(301, fi_ligature + "y", false, {{"normalized", false}})}),
                                  nfkc));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "fix"), (Ids{300}));
  EXPECT_EQ(enc(*tok, fi_ligature + "x"), (Ids{300}));
  // Not normalized: matched in the raw text only, byte for byte.
  EXPECT_EQ(enc(*tok, fi_ligature + "y"), (Ids{301}));
  EXPECT_EQ(enc(*tok, "fiy"), bytes("fiy"));
  // Special tokens default to normalized: false, others to true.
  auto def = load(byte_level_json(json::array({added(300, "\xEF\xBC\xA1", false)}), nfkc));  // fullwidth A
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(enc(*def, "A"), (Ids{300}));
}

TEST(TokenizerAddedTest, MetaspaceFirstOnlyAtTheStartOfTheInput) {
  // LLaMA-2 / Mistral style: Metaspace prepend_scheme "first": the span after an added token
  // does not begin the input, so it gets no "▁".
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\xE2\x96\x81", 2}, {"a", 3}, {"b", 4}};
  json j;
  j["added_tokens"] = json::array({added(1, "<s>", true), added(5, "<x>", false)});
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
  j["model"] = {{"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", json::array()}};
  auto tok = load(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "a<x>b"), (Ids{2, 3, 5, 4}));
  EXPECT_EQ(enc(*tok, "<x>a"), (Ids{5, 3}));
  EXPECT_EQ(enc_sp(*tok, "<s>a"), (Ids{1, 3}));
}

TEST(TokenizerAddedTest, DefaultEncodeWithSpecialsSplitsOnSpecialPieces) {
  // The byte tokenizer has no override: the Tokenizer default splits on <s> / </s> / <unk>.
  auto tok = make_byte_tokenizer(300);
  EXPECT_EQ(*tok->encode_with_specials("a</s>b", false), (Ids{3 + 'a', 2, 3 + 'b'}));
  EXPECT_EQ(*tok->encode_with_specials("<s>", true), (Ids{1, 1}));
  EXPECT_EQ(*tok->encode("a</s>", false), (Ids{3 + 'a', 3 + '<', 3 + '/', 3 + 's', 3 + '>'}));
}

}  // namespace
}  // namespace frost
