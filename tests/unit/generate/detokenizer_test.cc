#include "core/generate/detokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/common/utf8.h"

namespace frost {
namespace {

// The layout of the built-in byte tokenizer (0 <unk>, 1 <s>, 2 </s>, 3..258 single bytes)
// plus a few multi-byte pieces at 259.. — enough to drive the detokenizer without depending
// on a real tokenizer implementation.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> extra) : extra_(std::move(extra)) {}

  static int32_t byte(uint8_t b) { return 3 + b; }

  absl::StatusOr<std::vector<int32_t>> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(byte(static_cast<uint8_t>(c)));
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    if (id >= 3 && id < 259) return std::string(1, static_cast<char>(id - 3));
    if (id >= 259 && id < vocab_size()) return extra_[id - 259];
    return "";  // specials and out of range
  }
  std::string decode(absl::Span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id);
    return sanitize_utf8(s);
  }
  std::string id_to_piece(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return 259 + static_cast<int32_t>(extra_.size()); }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool is_special(int32_t id) const override { return id >= 0 && id < 3; }
  std::string kind() const override { return "byte"; }

 private:
  std::vector<std::string> extra_;
};

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

int32_t b(uint8_t x) { return FakeTokenizer::byte(x); }

TEST(DetokenizerTest, AsciiPassesThrough) {
  FakeTokenizer tok({" world"});
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(b('H')), "H");
  EXPECT_EQ(d.push(b('i')), "i");
  EXPECT_EQ(d.push(259), " world");
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(d.text(), "Hi world");
}

TEST(DetokenizerTest, TwoByteCharEmittedOnlyWhenComplete) {
  FakeTokenizer tok({});
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(b('a')), "a");
  EXPECT_EQ(d.push(b(0xC3)), "");  // first byte of "é"
  EXPECT_EQ(d.n_pending(), 1u);
  EXPECT_EQ(d.push(b(0xA9)), "é");
  EXPECT_EQ(d.n_pending(), 0u);
  EXPECT_EQ(d.text(), "aé");
}

TEST(DetokenizerTest, FourByteEmojiAcrossTokens) {
  // U+1F600 = F0 9F 98 80, once byte by byte and once as two 2-byte pieces.
  FakeTokenizer tok({"\xF0\x9F", "\x98\x80", "ok \xF0"});
  {
    IncrementalDetokenizer d(tok);
    EXPECT_EQ(d.push(b(0xF0)), "");
    EXPECT_EQ(d.push(b(0x9F)), "");
    EXPECT_EQ(d.push(b(0x98)), "");
    EXPECT_EQ(d.push(b(0x80)), "😀");
  }
  {
    IncrementalDetokenizer d(tok);
    EXPECT_EQ(d.push(259), "");
    EXPECT_EQ(d.push(260), "😀");
  }
  {
    // A piece with complete text then the start of a character: the text goes out now.
    IncrementalDetokenizer d(tok);
    EXPECT_EQ(d.push(261), "ok ");
    EXPECT_EQ(d.push(b(0x9F)), "");
    EXPECT_EQ(d.push(260), "😀");
    EXPECT_EQ(d.text(), "ok 😀");
  }
}

TEST(DetokenizerTest, InvalidBytesBecomeReplacementCharacter) {
  FakeTokenizer tok({});
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(b(0xFF)), kReplacement);  // never valid: not held back
  EXPECT_EQ(d.push(b(0x80)), kReplacement);  // stray continuation byte
  EXPECT_EQ(d.push(b(0xC3)), "");            // could still become valid
  EXPECT_EQ(d.push(b('A')), kReplacement + "A");
  EXPECT_EQ(d.push(b(0xED)), "");
  EXPECT_EQ(d.push(b(0xA0)), kReplacement + kReplacement);  // surrogate: never valid
  EXPECT_TRUE(is_valid_utf8(d.text()));
  EXPECT_EQ(d.text(),
            kReplacement + kReplacement + kReplacement + "A" + kReplacement + kReplacement);
}

TEST(DetokenizerTest, FlushReplacesTruncatedSequence) {
  FakeTokenizer tok({});
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(b('x')), "x");
  EXPECT_EQ(d.push(b(0xE2)), "");  // "€" = E2 82 AC, cut short
  EXPECT_EQ(d.push(b(0x82)), "");
  EXPECT_EQ(d.flush(), kReplacement);
  EXPECT_EQ(d.flush(), "");  // idempotent
  EXPECT_EQ(d.text(), "x" + kReplacement);
}

TEST(DetokenizerTest, SpecialTokensAddNothing) {
  FakeTokenizer tok({});
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(b(0xC3)), "");
  EXPECT_EQ(d.push(2), "");  // </s> between the bytes of one character
  EXPECT_EQ(d.push(b(0xA9)), "é");
  EXPECT_EQ(d.push(999), "");  // out of range
  EXPECT_EQ(d.text(), "é");
}

TEST(DetokenizerTest, ByteTokenizerOfBuiltinModels) {
  // The real built-in tokenizer: 3..258 are bytes, 259.. printable filler.
  const auto tok = make_byte_tokenizer(259 + 95);
  const std::string text = "naïve 😀 €";
  const auto ids = tok->encode(text, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer d(*tok);
  std::vector<std::string> pieces;
  for (int32_t id : *ids) pieces.push_back(d.push(id));
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(d.text(), text);
  // <s>, then one piece per byte: a multi-byte character appears whole at its last byte.
  ASSERT_EQ(pieces.size(), 1 + text.size());
  EXPECT_EQ(pieces[0], "");  // <s>
  EXPECT_EQ(pieces[3], "");  // first byte of "ï"
  EXPECT_EQ(pieces[4], "ï");
  EXPECT_EQ(pieces[8], "");  // F0 of the emoji
  EXPECT_EQ(pieces[11], "😀");
  EXPECT_EQ(d.push(259), " ");  // filler
  EXPECT_EQ(d.push(259 + 33), "A");
}

TEST(DetokenizerTest, StreamMatchesFullDecode) {
  FakeTokenizer tok({"\xE2\x82", "\xAC\xE2", "\x82\xAC and \xF0\x9F", "\x98\x80"});
  const std::vector<int32_t> ids = {b('A'), 259, 260, 261, 262, b(0xFF), b(0xC3)};
  IncrementalDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    EXPECT_TRUE(is_valid_utf8(piece));
    streamed += piece;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, d.text());
  EXPECT_EQ(streamed, tok.decode(ids));
  EXPECT_EQ(streamed, "A€€ and 😀" + kReplacement + kReplacement);
}

}  // namespace
}  // namespace frost
