// Token masks: the trie walk equals a brute-force check of every token; EOS only when complete; special
// and empty tokens never; cached masks are the same masks; a 32k vocabulary generates schema-valid JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/constrain/constraint.h"
#include "core/constrain/token_mask.h"

namespace frost::constrain {
namespace {

const char* const kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":6},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "ok":{"type":"boolean"},
  "tags":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}},
  "required":["name","age"]})";

struct ToyVocab {
  std::shared_ptr<const TokenVocab> vocab;
  int32_t eos = 0, special = 0, empty = 0;
};

ToyVocab toy_vocab() {
  std::vector<std::string> toks = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "b", "e", "g", "m", "n", "o",
                                   "k", "l", "r", "s", "t", "u", "f", "0", "1", "2", "5", "9", "-", ".", "\\",
                                   "{\"", "\":", "\":\"", "\",", "\"}", "\",\"", "true", "fal", "se", "null", "12",
                                   "é", "\xC3", "\xA9", "α", "\xCE", "  ", "\n  ", "name", "age", "\"name\"", "ok",
                                   "tags", "\":[\"", "\"]", "\"]}", "\\\"", "\\u00e9", "{\"name\":\"", "\"a"};
  ToyVocab t;
  t.empty = static_cast<int32_t>(toks.size());
  toks.push_back("");
  t.special = static_cast<int32_t>(toks.size());
  toks.push_back("<|special|>");
  t.eos = static_cast<int32_t>(toks.size());
  toks.push_back("</s>");
  std::vector<bool> special(toks.size(), false);
  special[t.special] = special[t.eos] = true;
  auto v = TokenVocab::create(toks, special, {t.eos});
  EXPECT_TRUE(v.ok()) << v.status();
  t.vocab = *v;
  return t;
}

std::shared_ptr<const CompiledConstraint> compile(ConstraintSpec::Kind kind, const std::string& text) {
  auto c = compile_constraint({kind, text});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

TEST(TokenMaskTest, TrieMaskEqualsBruteForceAlongRandomWalks) {
  const ToyVocab t = toy_vocab();
  auto c = compile(ConstraintSpec::Kind::kJsonSchema, kSchema);
  ASSERT_NE(c, nullptr);
  int n_complete = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    auto m = c->matcher(t.vocab);
    std::string out;
    for (int step = 0; step < 200; ++step) {
      const TokenBitmask& mask = m->allowed();
      const TokenBitmask brute = m->allowed_brute_force();
      ASSERT_EQ(mask.words, brute.words) << "seed " << seed << " after '" << out << "'";
      EXPECT_EQ(mask.test(t.eos), m->accepting()) << out;
      EXPECT_FALSE(mask.test(t.special));
      EXPECT_FALSE(mask.test(t.empty));
      if (m->must_end()) break;
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < t.vocab->n_tokens(); ++id) {
        if (mask.test(id) && id != t.eos) ids.push_back(id);
      }
      if (m->accepting() && (ids.empty() || rng() % 4 == 0)) {
        ASSERT_TRUE(m->accept_token(t.eos).ok());
        EXPECT_EQ(m->allowed().count(), 0);
        break;
      }
      ASSERT_FALSE(ids.empty()) << "stuck after '" << out << "'";
      int32_t pick = ids[rng() % ids.size()];
      if (step > 40) {
        // Steer to an end: the token leaving the fewest bytes to complete.
        uint64_t best = UINT64_MAX;
        for (int32_t id : ids) {
          Recognizer r = m->recognizer();
          if (!r.advance_bytes(t.vocab->bytes(id))) continue;
          if (r.min_bytes_to_accept(r.state()) < best) best = r.min_bytes_to_accept(r.state()), pick = id;
        }
      }
      ASSERT_TRUE(m->accept_token(pick).ok());
      out += t.vocab->bytes(pick);
    }
    if (m->finished() || m->must_end()) {
      ++n_complete;
      const auto doc = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(doc.is_discarded()) << out;
      EXPECT_TRUE(doc.contains("name") && doc.contains("age")) << out;
    }
  }
  EXPECT_EQ(n_complete, 40);
}

TEST(TokenMaskTest, TokensSpanningBoundariesAndUtf8Fragments) {
  const ToyVocab t = toy_vocab();
  const TokenVocab& v = *t.vocab;
  auto id = [&](const std::string& s) {
    for (int32_t i = 0; i < v.n_tokens(); ++i) {
      if (v.bytes(i) == s && !v.is_special(i)) return i;
    }
    ADD_FAILURE() << "no token " << s;
    return 0;
  };
  auto c = compile(ConstraintSpec::Kind::kJsonSchema, kSchema);
  auto m = c->matcher(t.vocab);
  EXPECT_TRUE(m->allowed().test(id("{\"")));
  EXPECT_TRUE(m->allowed().test(id("{\"name\":\"")));
  EXPECT_FALSE(m->allowed().test(id("\":")));
  ASSERT_TRUE(m->accept_token(id("{\"")).ok());
  EXPECT_TRUE(m->allowed().test(id("name")));
  EXPECT_FALSE(m->allowed().test(id("age")));  // name is required and comes first
  EXPECT_FALSE(m->allowed().test(id("é")));
  ASSERT_TRUE(m->accept_token(id("name")).ok());
  EXPECT_TRUE(m->allowed().test(id("\":\"")));
  ASSERT_TRUE(m->accept_token(id("\":\"")).ok());
  // Inside the string: a lead byte alone is fine, a lone continuation byte is not.
  EXPECT_TRUE(m->allowed().test(id("\xC3")));
  EXPECT_FALSE(m->allowed().test(id("\xA9")));
  EXPECT_TRUE(m->allowed().test(id("\\u00e9")));
  ASSERT_TRUE(m->accept_token(id("\xC3")).ok());
  EXPECT_TRUE(m->allowed().test(id("\xA9")));
  EXPECT_FALSE(m->allowed().test(id("a")));
  const absl::Status bad = m->accept_token(id("a"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition) << bad;
  ASSERT_TRUE(m->accept_token(id("\xA9")).ok());  // state unchanged by the refusal
  ASSERT_TRUE(m->accept_token(id("\",")).ok());
  EXPECT_TRUE(m->allowed().test(id("\"")));
  EXPECT_FALSE(m->allowed().test(t.eos));
}

TEST(TokenMaskTest, EosMustEndAndAcceptErrors) {
  const ToyVocab t = toy_vocab();
  auto digits = compile(ConstraintSpec::Kind::kRegex, "[0-9]+");
  auto m = digits->matcher(t.vocab);
  EXPECT_FALSE(m->allowed().test(t.eos));
  EXPECT_EQ(m->accept_token(t.eos).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->accept_token(t.special).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->accept_token(t.empty).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->accept_token(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->accept_token(t.vocab->n_tokens()).code(), absl::StatusCode::kInvalidArgument);
  int32_t twelve = -1;
  for (int32_t i = 0; i < t.vocab->n_tokens(); ++i) twelve = t.vocab->bytes(i) == "12" ? i : twelve;
  ASSERT_TRUE(m->accept_token(twelve).ok());
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->must_end());  // more digits may follow
  EXPECT_TRUE(m->allowed().test(t.eos));
  EXPECT_TRUE(m->allowed().test(twelve));
  ASSERT_TRUE(m->accept_token(t.eos).ok());
  EXPECT_TRUE(m->finished());
  EXPECT_EQ(m->accept_token(twelve).code(), absl::StatusCode::kFailedPrecondition);

  auto fixed = compile(ConstraintSpec::Kind::kGrammar, "root ::= \"12\"");
  auto f = fixed->matcher(t.vocab);
  ASSERT_TRUE(f->accept_token(twelve).ok());
  EXPECT_TRUE(f->must_end());
  EXPECT_EQ(f->allowed().count(), 1);  // EOS only
}

TEST(TokenMaskTest, CachedMasksAreSharedAcrossMatchers) {
  const ToyVocab t = toy_vocab();
  auto c = compile(ConstraintSpec::Kind::kJsonSchema, kSchema);
  auto a = c->matcher(t.vocab);
  auto b = c->matcher(t.vocab);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 12 && !a->must_end(); ++step) {
    const TokenBitmask& ma = a->allowed();
    const TokenBitmask& mb = b->allowed();
    EXPECT_EQ(&ma, &mb);  // the very same cached mask
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < t.vocab->n_tokens(); ++id) {
      if (ma.test(id) && id != t.eos) ids.push_back(id);
    }
    ASSERT_FALSE(ids.empty());
    const int32_t pick = ids[rng() % ids.size()];
    ASSERT_TRUE(a->accept_token(pick).ok());
    ASSERT_TRUE(b->accept_token(pick).ok());
  }
  EXPECT_EQ(b->n_masks_computed(), 0);
  const MaskCache::Stats stats = c->mask_cache(t.vocab)->stats();
  EXPECT_GT(stats.hits, 0);
  EXPECT_EQ(stats.entries, a->n_masks_computed());
  // Another vocabulary gets its own cache.
  EXPECT_NE(c->mask_cache(toy_vocab().vocab), c->mask_cache(t.vocab));
}

TEST(TokenMaskTest, MaskCacheEvictsLeastRecentlyUsed) {
  MaskCache cache(2);
  auto mask = std::make_shared<const StateMask>(8);
  cache.insert("a", mask);
  cache.insert("b", mask);
  EXPECT_NE(cache.find("a"), nullptr);  // a is now the most recent
  cache.insert("c", mask);
  EXPECT_EQ(cache.find("b"), nullptr);
  EXPECT_NE(cache.find("a"), nullptr);
  EXPECT_NE(cache.find("c"), nullptr);
  EXPECT_EQ(cache.stats().entries, 2);
}

TEST(TokenMaskTest, VocabularyIsValidated) {
  EXPECT_EQ(TokenVocab::create({"a", "b"}, {true}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenVocab::create({"a", "b"}, {}, {2}).status().message(), "eos id 2 out of range [0, 2)");
}

// ---- a 32k-token vocabulary ----

struct BigVocab {
  std::shared_ptr<const TokenVocab> vocab;
  int32_t eos = 0;
  int32_t byte_token[256] = {};
};

BigVocab big_vocab() {
  const std::string alphabet = "{}[]\":, 0123456789abcdefnrtuls-.";  // 31 characters (+ the 256 bytes)
  std::vector<std::string> toks;
  for (char a : alphabet) toks.push_back(std::string(1, a));
  for (char a : alphabet) for (char b : alphabet) toks.push_back(std::string{a, b});
  for (char a : alphabet) for (char b : alphabet) for (char c : alphabet) toks.push_back(std::string{a, b, c});
  BigVocab v;
  for (int b = 0; b < 256; ++b) {
    v.byte_token[b] = static_cast<int32_t>(toks.size());
    toks.push_back(std::string(1, static_cast<char>(b)));
  }
  v.eos = static_cast<int32_t>(toks.size());
  toks.push_back("</s>");
  std::vector<bool> special(toks.size(), false);
  special[v.eos] = true;
  v.vocab = *TokenVocab::create(toks, special, {v.eos});
  return v;
}

const char* const kBigSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3},
  "active":{"type":"boolean"},
  "score":{"type":"number"}},
  "required":["name","age","tags","active","score"]})";

TEST(TokenMaskTest, BigVocabularyGreedyLongestTokenGeneratesValidJson) {
  const BigVocab v = big_vocab();
  EXPECT_GT(v.vocab->n_tokens(), 31000);
  auto c = compile(ConstraintSpec::Kind::kJsonSchema, kBigSchema);
  ASSERT_NE(c, nullptr);
  auto m = c->matcher(v.vocab);
  std::string out;
  for (int step = 0; step < 400 && !m->must_end(); ++step) {
    const TokenBitmask& mask = m->allowed();
    if (step < 12) {
      ASSERT_EQ(mask.words, m->allowed_brute_force().words) << out;
    }
    int32_t pick = -1;
    for (int32_t id = 0; id < v.vocab->n_tokens(); ++id) {
      if (mask.test(id) && id != v.eos && (pick < 0 || v.vocab->bytes(id).size() > v.vocab->bytes(pick).size())) pick = id;
    }
    ASSERT_GE(pick, 0) << out;
    ASSERT_TRUE(m->accept_token(pick).ok());
    out += v.vocab->bytes(pick);
  }
  ASSERT_TRUE(m->must_end()) << out;
  std::printf("[ greedy 32k ] %s (%lld masks computed)\n", out.c_str(), static_cast<long long>(m->n_masks_computed()));
  const auto doc = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << out;
  EXPECT_TRUE(doc["name"].is_string() && doc["name"].get<std::string>().size() <= 12) << out;
  EXPECT_TRUE(doc["age"].is_number_integer() && doc["age"] >= 0 && doc["age"] <= 120) << out;
  EXPECT_TRUE(doc["tags"].is_array() && doc["tags"].size() <= 3) << out;
  for (const auto& tag : doc["tags"]) EXPECT_TRUE(tag == "red" || tag == "green" || tag == "blue") << out;
  EXPECT_TRUE(doc["active"].is_boolean()) << out;
  EXPECT_TRUE(doc["score"].is_number()) << out;
}

// Prints mask costs on the 32k vocabulary (no assertion on time: machines differ).
TEST(TokenMaskTest, BigVocabularyMaskTimingsUncachedVersusCached) {
  const BigVocab v = big_vocab();
  auto c = compile(ConstraintSpec::Kind::kJsonSchema, kBigSchema);
  ASSERT_NE(c, nullptr);
  const std::vector<std::pair<std::string, std::string>> states = {
      {"start", ""},
      {"after {\"", "{\""},
      {"in string", "{\"name\":\"ab"},
      {"integer", "{\"name\":\"ab\",\"age\":"},
      {"in array", "{\"name\":\"ab\",\"age\":3,\"tags\":[\"red\","},
      {"number", "{\"name\":\"ab\",\"age\":3,\"tags\":[],\"active\":true,\"score\":1"},
  };
  using Clock = std::chrono::steady_clock;
  for (const auto& [label, prefix] : states) {
    auto feed = [&](Matcher& m) {
      for (unsigned char b : prefix) ASSERT_TRUE(m.accept_token(v.byte_token[b]).ok()) << label;
    };
    constexpr int kReps = 5;
    // The fastest of kReps runs: the test machine is shared, the minimum is the least disturbed figure.
    double uncached_ms = 1e9;
    int32_t allowed = 0;
    for (int rep = 0; rep < kReps; ++rep) {
      Matcher m(c->grammar_ptr(), v.vocab, nullptr);
      feed(m);
      const auto t0 = Clock::now();
      allowed = m.allowed().count();
      uncached_ms = std::min(uncached_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    auto warm = c->matcher(v.vocab);
    feed(*warm);
    warm->allowed();
    double cached_ms = 1e9;
    for (int rep = 0; rep < kReps; ++rep) {
      auto m = c->matcher(v.vocab);
      feed(*m);
      const auto t0 = Clock::now();
      EXPECT_EQ(m->allowed().count(), allowed);
      cached_ms = std::min(cached_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      EXPECT_EQ(m->n_masks_computed(), 0);
    }
    std::printf("[ mask 32k ] %-10s allowed %5d  uncached %8.3f ms  cached %7.4f ms\n", label.c_str(), allowed,
                uncached_ms, cached_ms);
  }
}

}  // namespace
}  // namespace frost::constrain
