// frost-constrain-bench: the hot path of constrained decoding on a 31k-token vocabulary (the setup of
// tests/unit/constrain/token_mask_test.cc): uncached and cached masks in six JSON states, accept_token,
// and whole JSON-schema generation walks (greedy longest token, and seeded random tokens), each without a
// mask cache so every step computes its mask. Prints one line per figure: the median and the minimum of
// --reps runs, in microseconds. Uses only the public API of core/constrain, so the same file builds
// against older revisions for before/after comparisons:
//   c++ -O3 -DNDEBUG -march=x86-64-v3 -std=c++17 -I<tree> bench/constrain_bench.cc <tree>/core/constrain/*.cc
//       <tree>/core/common/utf8.cc $(pkg-config --libs absl_statusor absl_strings absl_str_format
//       absl_synchronization absl_flat_hash_map absl_time)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/constrain/constraint.h"
#include "core/constrain/token_mask.h"

namespace {

using frost::constrain::CompiledConstraint;
using frost::constrain::ConstraintSpec;
using frost::constrain::Matcher;
using frost::constrain::TokenBitmask;
using frost::constrain::TokenVocab;
using Clock = std::chrono::steady_clock;

struct BigVocab {
  std::shared_ptr<const TokenVocab> vocab;
  int32_t eos = 0;
  int32_t byte_token[256] = {};
};

BigVocab big_vocab() {
  const std::string alphabet = "{}[]\":, 0123456789abcdefnrtuls-.";
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

const char* const kWalkSchema = R"({"type":"object","properties":{
  "id":{"type":"integer"},
  "title":{"type":"string","minLength":1,"maxLength":40},
  "body":{"type":"string"},
  "tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":4},
  "meta":{"type":"object","properties":{"a":{"type":"number"},"b":{"enum":["x","y",null]}}},
  "ok":{"type":"boolean"}},
  "required":["id","title","body","tags","ok"]})";

struct Stats {
  double median, min;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front()};
}
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void print(const char* what, Stats s) { std::printf("%-34s median %10.2f us   min %10.2f us\n", what, s.median, s.min); }

// One generation walk without a mask cache: every step computes its mask. Random walks pick uniformly
// among allowed tokens for `free_steps` steps, then steer to the end with the token that leaves the fewest
// bytes; greedy walks always take the longest allowed token. Returns the output.
std::string walk(const CompiledConstraint& c, const BigVocab& v, uint64_t seed, bool greedy, double* mask_us,
                 double* accept_us, int* n_steps) {
  Matcher m(c.grammar_ptr(), v.vocab, nullptr);
  std::mt19937_64 rng(seed);
  std::string out;
  std::vector<int32_t> ids;
  for (int step = 0; step < 2000 && !m.must_end(); ++step) {
    auto t0 = Clock::now();
    const TokenBitmask& mask = m.allowed();
    *mask_us += us_since(t0);
    ids.clear();
    for (int32_t id = 0; id < v.vocab->n_tokens(); ++id) {
      if (mask.test(id) && id != v.eos) ids.push_back(id);
    }
    if (ids.empty()) break;
    int32_t pick = ids[0];
    if (greedy) {
      for (int32_t id : ids) pick = v.vocab->bytes(id).size() > v.vocab->bytes(pick).size() ? id : pick;
    } else if (step < 60) {
      pick = ids[rng() % ids.size()];
    } else {
      uint64_t best = UINT64_MAX;
      frost::constrain::Recognizer r = m.recognizer();
      frost::constrain::Recognizer::StackSet cur, next;
      for (int32_t id : ids) {
        cur = r.state();
        bool ok = true;
        for (char ch : v.vocab->bytes(id)) {
          ok = r.advance_from(cur, static_cast<uint8_t>(ch), &next) ==
               frost::constrain::Recognizer::Advance::kOk;
          if (!ok) break;
          std::swap(cur, next);
        }
        const uint64_t d = ok ? r.min_bytes_to_accept(cur) : UINT64_MAX;
        if (d < best) best = d, pick = id;
      }
    }
    t0 = Clock::now();
    if (!m.accept_token(pick).ok()) std::abort();
    *accept_us += us_since(t0);
    out += v.vocab->bytes(pick);
    ++*n_steps;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
  }
  const BigVocab v = big_vocab();
  auto big = frost::constrain::compile_constraint({ConstraintSpec::Kind::kJsonSchema, kBigSchema});
  auto walk_schema = frost::constrain::compile_constraint({ConstraintSpec::Kind::kJsonSchema, kWalkSchema});
  if (!big.ok() || !walk_schema.ok()) {
    std::fprintf(stderr, "compile failed\n");
    return 1;
  }
  // 1. Uncached masks in six states (each rep a fresh matcher: nothing memoised).
  const std::vector<std::pair<std::string, std::string>> states = {
      {"start", ""},
      {"after {\"", "{\""},
      {"in string", "{\"name\":\"ab"},
      {"integer", "{\"name\":\"ab\",\"age\":"},
      {"in array", "{\"name\":\"ab\",\"age\":3,\"tags\":[\"red\","},
      {"number", "{\"name\":\"ab\",\"age\":3,\"tags\":[],\"active\":true,\"score\":1"},
  };
  for (const auto& [label, prefix] : states) {
    std::vector<double> t;
    for (int rep = 0; rep < reps; ++rep) {
      Matcher m((*big)->grammar_ptr(), v.vocab, nullptr);
      for (unsigned char b : prefix) {
        if (!m.accept_token(v.byte_token[b]).ok()) std::abort();
      }
      const auto t0 = Clock::now();
      const int32_t n = m.allowed().count();
      t.push_back(us_since(t0));
      if (n <= 0) std::abort();
    }
    print(("mask uncached: " + label).c_str(), stats(t));
    // The same state from the constraint's mask cache (what most steps of a request cost): a warm-up
    // computes it once, then each rep is a fresh matcher whose allowed() is a canonical key and a lookup.
    std::vector<double> cached;
    for (int rep = 0; rep <= reps; ++rep) {
      auto m = (*big)->matcher(v.vocab);
      for (unsigned char b : prefix) {
        if (!m->accept_token(v.byte_token[b]).ok()) std::abort();
      }
      const auto t0 = Clock::now();
      m->allowed();
      if (rep > 0) cached.push_back(us_since(t0));
    }
    print(("mask cached: " + label).c_str(), stats(cached));
  }
  // 2. accept_token of one-byte tokens through a whole document (masks not computed).
  {
    const std::string doc = R"({"name":"abcdefghijkl","age":120,"tags":["red","green","blue"],"active":false,"score":-12.5e3})";
    std::vector<double> t;
    for (int rep = 0; rep < reps; ++rep) {
      Matcher m((*big)->grammar_ptr(), v.vocab, nullptr);
      const auto t0 = Clock::now();
      for (unsigned char b : doc) {
        if (!m.accept_token(v.byte_token[b]).ok()) std::abort();
      }
      t.push_back(us_since(t0) / static_cast<double>(doc.size()));
      if (!m.must_end()) std::abort();
    }
    print("accept_token (1-byte, per token)", stats(t));
  }
  // 3. Whole generation walks without a cache: greedy on kBigSchema, seeded random on kWalkSchema.
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<double> total, mask, accept;
    int steps = 0;
    for (int rep = 0; rep < reps; ++rep) {
      double mask_us = 0, accept_us = 0;
      int n = 0;
      const auto t0 = Clock::now();
      for (uint64_t seed = 1; seed <= (kind == 0 ? 1 : 8); ++seed) {
        walk(kind == 0 ? **big : **walk_schema, v, seed, kind == 0, &mask_us, &accept_us, &n);
      }
      total.push_back(us_since(t0));
      mask.push_back(mask_us);
      accept.push_back(accept_us);
      steps = n;
    }
    const char* name = kind == 0 ? "greedy walk" : "random walks x8";
    std::printf("%s: %d steps\n", name, steps);
    print((std::string(name) + ": allowed() total").c_str(), stats(mask));
    print((std::string(name) + ": accept_token total").c_str(), stats(accept));
    print((std::string(name) + ": whole walk").c_str(), stats(total));
  }
  // 4. Compile time of the two schemas.
  for (const char* schema : {kBigSchema, kWalkSchema}) {
    std::vector<double> t;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      auto c = frost::constrain::compile_constraint({ConstraintSpec::Kind::kJsonSchema, schema});
      t.push_back(us_since(t0));
      if (!c.ok()) std::abort();
    }
    print(schema == kBigSchema ? "compile kBigSchema" : "compile kWalkSchema", stats(t));
  }
  return 0;
}
