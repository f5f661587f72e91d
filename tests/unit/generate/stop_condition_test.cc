#include "core/generate/stop_condition.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/common/utf8.h"

namespace frost {
namespace {

SamplingParams with_stops(std::vector<std::string> stop) {
  SamplingParams p;
  p.stop = std::move(stop);
  return p;
}

// Feeds `deltas` one by one; returns everything emitted (plus flush when no stop) and the
// match ("" when none).
std::pair<std::string, std::string> run(StopChecker& c, const std::vector<std::string>& deltas) {
  std::string out;
  for (const std::string& d : deltas) {
    StopResult r = c.on_text(d);
    EXPECT_TRUE(is_valid_utf8(r.emit)) << r.emit;
    out += r.emit;
    if (r.stopped) return {out, r.matched};
  }
  return {out + c.flush(), ""};
}

TEST(StopCheckerTest, NoStopStringsPassThrough) {
  StopChecker c(SamplingParams(), {});
  EXPECT_EQ(c.on_text("Hello").emit, "Hello");
  EXPECT_EQ(c.on_text(" world").emit, " world");
  EXPECT_EQ(c.flush(), "");
  EXPECT_FALSE(c.stopped());
}

TEST(StopCheckerTest, StopStringAcrossTokenBoundaries) {
  StopChecker c(with_stops({"END"}), {});
  StopResult r = c.on_text("Hello E");
  EXPECT_EQ(r.emit, "Hello ");  // "E" held back
  EXPECT_FALSE(r.stopped);
  r = c.on_text("N");
  EXPECT_EQ(r.emit, "");
  EXPECT_FALSE(r.stopped);
  r = c.on_text("D and more");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "END");
  EXPECT_TRUE(c.stopped());
  // Nothing after a stop.
  r = c.on_text("more");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(c.flush(), "");
}

TEST(StopCheckerTest, TextBeforeStopInSameDeltaIsEmitted) {
  StopChecker c(with_stops({"\n\n"}), {});
  const auto [text, matched] = run(c, {"line one\n", "\nline two"});
  EXPECT_EQ(text, "line one");
  EXPECT_EQ(matched, "\n\n");
}

TEST(StopCheckerTest, PartialPrefixThenMismatchReleasesHeldText) {
  StopChecker c(with_stops({"END"}), {});
  EXPECT_EQ(c.on_text("abcE").emit, "abc");
  EXPECT_EQ(c.on_text("N").emit, "");
  const StopResult r = c.on_text("x");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "ENx");
  // A new partial match can start inside the released text.
  EXPECT_EQ(c.on_text("EEN").emit, "E");
  EXPECT_EQ(c.flush(), "EN");  // end without a stop: held text is returned
}

TEST(StopCheckerTest, OverlappingPrefixIsFoundAfterFalseStart) {
  // "aab" inside "aaab": the first "aa" is a false start, the match starts one byte later.
  StopChecker c(with_stops({"aab"}), {});
  const auto [text, matched] = run(c, {"x", "a", "a", "a", "b", "y"});
  EXPECT_EQ(text, "xa");
  EXPECT_EQ(matched, "aab");
}

TEST(StopCheckerTest, EarliestMatchWins) {
  {
    StopChecker c(with_stops({"world", "lo"}), {});
    const auto [text, matched] = run(c, {"hello world"});
    EXPECT_EQ(text, "hel");
    EXPECT_EQ(matched, "lo");
  }
  {
    // List order does not matter.
    StopChecker c(with_stops({"lo", "world"}), {});
    const auto [text, matched] = run(c, {"hel", "lo world"});
    EXPECT_EQ(text, "hel");
    EXPECT_EQ(matched, "lo");
  }
}

TEST(StopCheckerTest, ResultDoesNotDependOnChunking) {
  // "b" completes before "abc" can, whether the text comes at once or byte by byte.
  for (const std::vector<std::string>& deltas :
       {std::vector<std::string>{"xabcd"}, std::vector<std::string>{"x", "a", "b", "c", "d"},
        std::vector<std::string>{"xa", "bcd"}}) {
    StopChecker c(with_stops({"abc", "b"}), {});
    const auto [text, matched] = run(c, deltas);
    EXPECT_EQ(text, "xa");
    EXPECT_EQ(matched, "b");
  }
  // Same end: the longer (earlier-starting) one wins.
  StopChecker c(with_stops({"c", "abc"}), {});
  const auto [text, matched] = run(c, {"xab", "cd"});
  EXPECT_EQ(text, "x");
  EXPECT_EQ(matched, "abc");
}

TEST(StopCheckerTest, StopAtVeryStart) {
  StopChecker c(with_stops({"###"}), {});
  const StopResult r = c.on_text("### rest");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

TEST(StopCheckerTest, Utf8StopStrings) {
  {
    StopChecker c(with_stops({"café"}), {});
    const StopResult r = c.on_text("un caf");
    EXPECT_EQ(r.emit, "un ");
    const auto [text, matched] = run(c, {"é!"});
    EXPECT_EQ(text, "");
    EXPECT_EQ(matched, "café");
  }
  {
    // "é" (2 bytes) is held as a whole and released as a whole when the stop fails.
    StopChecker c(with_stops({"éx"}), {});
    EXPECT_EQ(c.on_text("aé").emit, "a");
    EXPECT_EQ(c.on_text("y").emit, "éy");
  }
  {
    // A stop string whose first bytes are shared with other characters: "€" = E2 82 AC and
    // "₂" = E2 82 82. Holding back never splits a character.
    StopChecker c(with_stops({"€!"}), {});
    EXPECT_EQ(c.on_text("₂€").emit, "₂");
    const auto [text, matched] = run(c, {"!"});
    EXPECT_EQ(text, "");
    EXPECT_EQ(matched, "€!");
  }
  {
    StopChecker c(with_stops({"😀"}), {});
    const auto [text, matched] = run(c, {"ok ", "😀", " more"});
    EXPECT_EQ(text, "ok ");
    EXPECT_EQ(matched, "😀");
  }
}

TEST(StopCheckerTest, HoldBackKeepsWholeCharactersEvenForUnvalidatedStops) {
  // "\xA9x" is not valid UTF-8 (validation rejects it); its first byte is the second byte
  // of "é". The held-back tail is widened to the whole character instead of splitting it.
  StopChecker c(with_stops({"\xA9x"}), {});
  const StopResult r = c.on_text("é");
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(c.flush(), "é");
}

TEST(StopCheckerTest, StopTokenIdsAndEos) {
  SamplingParams p;
  p.stop_token_ids = {7, 5};
  {
    StopChecker c(p, {2});
    EXPECT_TRUE(c.is_stop_token(2));
    EXPECT_TRUE(c.is_stop_token(5));
    EXPECT_TRUE(c.is_stop_token(7));
    EXPECT_FALSE(c.is_stop_token(3));
    EXPECT_FALSE(c.is_stop_token(-1));
  }
  {
    StopChecker c(p, {2, 9});  // several eos ids (e.g. LLaMA-3 <|eot_id|> and <|end_of_text|>)
    EXPECT_TRUE(c.is_stop_token(9));
  }
  p.ignore_eos = true;
  {
    StopChecker c(p, {2});
    EXPECT_FALSE(c.is_stop_token(2));
    EXPECT_TRUE(c.is_stop_token(5));  // explicit stop ids still stop
  }
  {
    StopChecker c(SamplingParams(), {});
    EXPECT_FALSE(c.is_stop_token(0));
  }
}

}  // namespace
}  // namespace frost
