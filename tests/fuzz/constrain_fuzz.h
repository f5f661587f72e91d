#pragma once
// Shared by the constraint fuzz targets (json_schema_fuzz, regex_fuzz, gbnf_fuzz): compile the input under
// small limits and a CompileControl deadline, check the refusal contract, and when it compiles run
// the recogniser and a Matcher over a small vocabulary and check what they promise (core/constrain/).
//
// Promises checked:
//   - compile_constraint refuses with INVALID_ARGUMENT and a message starting "<kind>: ", never another
//     code, never a crash or a runaway (a CompileControl deadline of 10 s — reaching it is a finding; deep
//     inputs never recurse: the fuzzer runs on a 1 MiB thread stack);
//   - a compiled grammar's start state is neither dead nor over a limit (the probe refused those);
//   - a random walk over next_bytes() never dies (every live parse can finish), steps either advance or
//     report kOverLimit (never a silent drop), accepting() agrees with min_bytes_to_accept() == 0, and a
//     steered walk reaches an accepting state;
//   - the Matcher's mask equals the brute-force mask while health() is OK; EOS is allowed exactly when the
//     output is complete; health() is OK, INVALID_ARGUMENT or FAILED_PRECONDITION; an allowed token is
//     accepted; memory_bytes() covers the flat grammar.
#include <pthread.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/constrain/constraint.h"
#include "tests/fuzz/fuzz_util.h"

namespace frost::fuzz {

inline constrain::CompileLimits small_limits() {
  constrain::CompileLimits l;
  l.max_text_bytes = 64 << 10;
  l.max_rules = 4000;
  l.max_elements = 100000;
  l.max_repeat = 2000;
  l.max_nesting = 64;
  l.max_stacks = 64;
  l.max_stack_depth = 512;
  l.max_probe_states = 2000;
  l.mask_cache_entries = 64;
  return l;
}

// A few dozen tokens: every printable ASCII byte, some pairs and JSON pieces, a multi-byte character and
// its fragments, and EOS.
inline const std::shared_ptr<const constrain::TokenVocab>& fuzz_vocab(int32_t* eos) {
  static int32_t eos_id = 0;
  static const std::shared_ptr<const constrain::TokenVocab> vocab = [] {
    std::vector<std::string> toks;
    for (int c = 0x20; c < 0x7F; ++c) toks.push_back(std::string(1, static_cast<char>(c)));
    for (const char* t : {"\n", "\t", "{\"", "\":", "\",", "\"}", "ab", "true", "null", "12", "é", "\xC3", "\xA9", "€",
                          "\xE2\x82", "  ", "\\n", "\\u00"}) {
      toks.push_back(t);
    }
    eos_id = static_cast<int32_t>(toks.size());
    toks.push_back("</s>");
    std::vector<bool> special(toks.size(), false);
    special[eos_id] = true;
    return *constrain::TokenVocab::create(toks, special, {eos_id});
  }();
  *eos = eos_id;
  return vocab;
}

// Runs `fn` on a thread with a 1 MiB stack (an eighth of the default): recursion the input controls would
// overflow it. (The Release unit tests check 256 KiB; ASan frames are several times larger.)
inline void on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1024 * 1024);
  pthread_t thread;
  auto* task = new std::function<void()>(fn);
  if (pthread_create(
          &thread, &attr,
          [](void* p) -> void* {
            auto* f = static_cast<std::function<void()>*>(p);
            (*f)();
            delete f;
            return nullptr;
          },
          task) != 0) {
    std::abort();
  }
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

inline void exercise_recognizer(const std::shared_ptr<const constrain::Grammar>& g, uint64_t seed) {
  using constrain::Recognizer;
  Recognizer r(g);
  FROST_FUZZ_CHECK(!r.dead() && !r.limit_hit(), "the probe let a dead or over-limit start state through");
  std::mt19937_64 rng(seed);
  std::string out;
  Recognizer::StackSet next;
  for (int step = 0; step < 300 && !r.must_end(); ++step) {
    const uint64_t to_end = r.min_bytes_to_accept(r.state());
    FROST_FUZZ_CHECK(to_end != UINT64_MAX, "a live state cannot finish after '" + out + "'");
    FROST_FUZZ_CHECK((to_end == 0) == r.accepting(), "min_bytes_to_accept disagrees with accepting()");
    if (r.accepting() && rng() % 8 == 0) return;
    const constrain::ByteSet allowed = r.next_bytes();
    FROST_FUZZ_CHECK(allowed.any(), "no byte can follow an incomplete output '" + out + "'");
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (allowed.test(b)) bytes.push_back(b);
    }
    int pick = bytes[rng() % bytes.size()];
    if (step > 150) {  // steer to the end
      uint64_t best = UINT64_MAX;
      for (int b : bytes) {
        if (r.advance_from(r.state(), static_cast<uint8_t>(b), &next) != Recognizer::Advance::kOk) continue;
        const uint64_t d = r.min_bytes_to_accept(next);
        if (d < best) best = d, pick = b;
      }
    }
    const Recognizer::Advance st = r.advance_from(r.state(), static_cast<uint8_t>(pick), &next);
    FROST_FUZZ_CHECK(st != Recognizer::Advance::kDead,
                     "a byte of next_bytes() killed every parse after '" + out + "'");
    if (st == Recognizer::Advance::kOverLimit) {
      FROST_FUZZ_CHECK(r.limit_hit() && r.last_limit() != Recognizer::Limit::kNone, "kOverLimit without a limit");
      return;
    }
    r.set_state(next);
    out += static_cast<char>(pick);
    if (step % 64 == 63) r.compact();
  }
}

inline void exercise_matcher(const constrain::CompiledConstraint& c, uint64_t seed) {
  int32_t eos = 0;
  const auto& vocab = fuzz_vocab(&eos);
  auto m = c.matcher(vocab);
  std::mt19937_64 rng(seed);
  for (int step = 0; step < 24 && !m->must_end() && !m->finished(); ++step) {
    const constrain::TokenBitmask& mask = m->allowed();
    const absl::Status health = m->health();
    FROST_FUZZ_CHECK(health.ok() || health.code() == absl::StatusCode::kInvalidArgument ||
                         health.code() == absl::StatusCode::kFailedPrecondition,
                     health.ToString());
    if (!health.ok()) return;  // an over-limit mask may lack tokens: only exact masks are compared
    FROST_FUZZ_CHECK(mask.words == m->allowed_brute_force().words, "trie mask != brute-force mask");
    FROST_FUZZ_CHECK(mask.test(eos) == m->accepting(), "EOS allowed != output complete");
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab->n_tokens(); ++id) {
      if (mask.test(id)) ids.push_back(id);
    }
    FROST_FUZZ_CHECK(!ids.empty(), "health() OK with an empty mask");
    const int32_t pick = ids[rng() % ids.size()];
    const absl::Status st = m->accept_token(pick);
    FROST_FUZZ_CHECK(st.ok(), "an allowed token was refused: " + st.ToString());
  }
}

// Compiles `text` as `kind` and exercises what compiles. Deterministic per input (the seed is its hash).
inline void fuzz_constraint(constrain::ConstraintSpec::Kind kind, std::string_view text) {
  on_small_stack([&] {
    // Under the small limits every compile takes milliseconds: reaching the deadline is a finding.
    constrain::CompileControl control;
    control.deadline = absl::Now() + absl::Seconds(10);
    auto c = constrain::compile_constraint({kind, std::string(text)}, small_limits(), control);
    if (!c.ok()) {
      FROST_FUZZ_CHECK(c.status().code() != absl::StatusCode::kDeadlineExceeded,
                       "a compile ran past 10 s: " + c.status().ToString());
      check_rejection(c.status());
      FROST_FUZZ_CHECK(absl::StartsWith(c.status().message(), absl::StrCat(constrain::kind_name(kind), ": ")),
                       c.status().ToString());
      return;
    }
    const constrain::Grammar& g = (*c)->grammar();
    FROST_FUZZ_CHECK((*c)->memory_bytes() >= g.flat.size() * sizeof(constrain::Grammar::Element), "memory_bytes");
    const uint64_t seed = std::hash<std::string_view>{}(text);
    exercise_recognizer((*c)->grammar_ptr(), seed);
    exercise_matcher(**c, seed);
  });
}

}  // namespace frost::fuzz
