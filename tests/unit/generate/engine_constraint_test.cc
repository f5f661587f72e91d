// Structured output in the engine (core/generate/engine.h + core/constrain/), on the real stories260K:
//  - JSON-Schema, regex and grammar constrained requests batched with unconstrained ones all finish with
//    outputs that parse and validate, and the unconstrained ones are exactly what they are alone;
//  - a constrained request gives the same tokens batched as alone (seeded);
//  - masks filled on the mask thread while the step runs, and masked rows sampled over their allowed ids,
//    give the outputs of masks computed lazily and sampled dense;
//  - the masked sampler is the unmasked one restricted to the allowed tokens;
//  - a constraint that does not compile is refused, naming "constraint" and the position: off the caller's
//  thread
//    the first time (on_finish with the error, never on_admitted), at submit from the compile cache after
//    that;
//  - a constraint nobody can follow exactly ends the request with an error, never a silent "stop";
//  - EngineConstraints (engine_constraints.h): the vocabulary is built once and shared, control tokens are
//    never text, EOS is the model's; its knobs are checked naming the field.
#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/generate/engine.h"
#include "core/generate/engine_constraints.h"
#include "core/generate/sampler.h"
#include "core/model/model_loader.h"
#include "nlohmann/json.hpp"
#include "tests/testing/recording_sink.h"

namespace frost {
namespace {

using json = nlohmann::json;

using Sink = testing::RecordingSink;

constexpr char kSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "mood":{"enum":["happy","sad","sleepy"]},
  "friends":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
  "required":["name","age","mood"]})";

// The schema's checks, written out independently of the compiler.
void expect_valid(const std::string& text) {
  json j;
  ASSERT_NO_THROW(j = json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  const std::string name = j["name"];
  EXPECT_GE(name.size(), 1u) << text;  // bytes >= code points >= 1
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(j["age"].get<int64_t>(), 120) << text;
  ASSERT_TRUE(j.contains("mood")) << text;
  const std::string mood = j["mood"];
  EXPECT_TRUE(mood == "happy" || mood == "sad" || mood == "sleepy") << text;
  if (j.contains("friends")) {
    ASSERT_TRUE(j["friends"].is_array()) << text;
    EXPECT_LE(j["friends"].size(), 3u) << text;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "mood" || it.key() == "friends") << text;
  }
}

class EngineConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("models/stories260K");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(m).value());
  }
  static void TearDownTestSuite() { model_.reset(); }
  // fast false: the naive twin of constrained decoding's fast paths — masks computed lazily after the step
  // (overlap_masks off) and masked rows sampled dense (sparse_masks off).
  static std::unique_ptr<Engine> make(int32_t running, bool fast = true) {
    EngineConfig c;
    c.overlap_masks = fast;
    c.sparse_masks = fast;
    c.max_running = running;
    c.max_waiting = 1024;
    c.max_batch_tokens = std::max(running, 64);
    c.audit_kv = true;
    auto e = Engine::create(model_, c);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }
  static std::vector<std::shared_ptr<Sink>> run(Engine& e, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<Sink>> sinks;
    for (const auto& r : reqs) {
      auto s = std::make_shared<Sink>();
      absl::Status st = e.submit(r, s, std::make_shared<CancelToken>());
      EXPECT_TRUE(st.ok()) << st;
      sinks.push_back(s);
    }
    for (auto& s : sinks) EXPECT_TRUE(s->wait(120));
    return sinks;
  }
  static GenerationRequest req(const std::string& prompt, uint64_t seed, constrain::ConstraintSpec::Kind kind,
                               const std::string& text, int32_t max_new = 300) {
    GenerationRequest r;
    r.prompt = prompt;
    r.params.temperature = 0.9f;
    r.params.seed = seed;
    r.params.max_new_tokens = max_new;
    r.constraint = {kind, text};
    return r;
  }
  static std::shared_ptr<const LoadedModel> model_;
};
std::shared_ptr<const LoadedModel> EngineConstraintTest::model_;

TEST_F(EngineConstraintTest, ConstrainedAndFreeRequestsShareStepsAndEveryOutputValidates) {
  using K = constrain::ConstraintSpec::Kind;
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 1; s <= 6; ++s) reqs.push_back(req("Lily and Tom", s, K::kJsonSchema, kSchema));
  for (uint64_t s = 1; s <= 3; ++s) reqs.push_back(req("The dog", s, K::kRegex, "(yes|no), [a-z]{2,6}!"));
  reqs.push_back(req("Once", 5, K::kGrammar, "root ::= \"The \" animal \" is \" (\"big\" | \"small\") \".\"\n"
                                              "animal ::= \"cat\" | \"dog\" | \"bird\""));
  for (uint64_t s = 1; s <= 3; ++s) reqs.push_back(req("Once upon a time", s, K::kNone, "", 40));
  auto engine = make(16);
  auto out = run(*engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(out[i]->result.ok()) << out[i]->result.status();
    const GenerationResult& r = *out[i]->result;
    if (reqs[i].constraint.kind == K::kNone) continue;
    EXPECT_EQ(r.finish_reason, FinishReason::kStop) << i << ": " << out[i]->text;
    if (reqs[i].constraint.kind == K::kJsonSchema) expect_valid(out[i]->text);
    if (reqs[i].constraint.kind == K::kRegex)
      EXPECT_TRUE(std::regex_match(out[i]->text, std::regex("(yes|no), [a-z]{2,6}!"))) << out[i]->text;
    if (reqs[i].constraint.kind == K::kGrammar)
      EXPECT_TRUE(std::regex_match(out[i]->text, std::regex("The (cat|dog|bird) is (big|small)\\."))) << out[i]->text;
  }
  // The unconstrained requests are exactly what they are alone; so is a constrained one (seeded).
  auto alone = make(1);
  for (size_t i : {size_t{0}, reqs.size() - 1, reqs.size() - 2}) {
    auto one = run(*alone, {reqs[i]});
    EXPECT_EQ(one[0]->ids, out[i]->ids) << "request " << i;
  }
  EXPECT_TRUE(engine->wait_idle(10));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineConstraintTest, GreedyConstrainedOutputIsTheBestAllowedTokenEachStep) {
  GenerationRequest r = req("Once upon a time", 1, constrain::ConstraintSpec::Kind::kRegex, "[a-z ]{1,40}\\.", 60);
  r.params.temperature = 0;
  auto engine = make(4);
  auto out = run(*engine, {r, r});
  ASSERT_TRUE(out[0]->result.ok());
  EXPECT_EQ(out[0]->ids, out[1]->ids);
  EXPECT_TRUE(std::regex_match(out[0]->text, std::regex("[a-z ]{1,40}\\."))) << out[0]->text;
}

// Masks off the critical path (core/generate/engine_masks.h) and masked rows sampled over their allowed ids
// (core/generate/sampler.cc sample_sparse): the constrained rows' masks filled on the mask thread while the
// step runs, and sampled sparse, give exactly the outputs of the naive twin, which computes each mask lazily
// when it samples and samples the whole masked row — greedy and seeded, constrained requests batched with
// free ones, several rounds of batches.
TEST_F(EngineConstraintTest, MasksFilledWhileTheStepRunsGiveTheLazyMasksOutputs) {
  using K = constrain::ConstraintSpec::Kind;
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 1; s <= 8; ++s) reqs.push_back(req("Lily and Tom", s, K::kJsonSchema, kSchema));
  for (uint64_t s = 1; s <= 4; ++s) reqs.push_back(req("The dog", s, K::kRegex, "(yes|no), [a-z]{2,6}!"));
  reqs.push_back(req("Once upon a time", 1, K::kRegex, "[a-z ]{1,40}\\.", 60));
  reqs.back().params.temperature = 0;  // greedy
  reqs.push_back(req("Lily and Tom", 9, K::kJsonSchema, kSchema));
  reqs.back().params.temperature = 0;
  for (uint64_t s = 1; s <= 4; ++s) reqs.push_back(req("Once upon a time", s, K::kNone, "", 40));
  reqs.back().params.temperature = 0;
  auto overlapped = make(8, true);  // 18 requests on 8 slots: admissions and finishes mid-batch
  auto lazy = make(8, false);       // lazy masks, dense masked sampling
  const auto got = run(*overlapped, reqs);
  const auto want = run(*lazy, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(want[i]->result.ok()) << i << ": " << want[i]->result.status();
    ASSERT_TRUE(got[i]->result.ok()) << i << ": " << got[i]->result.status();
    EXPECT_EQ(got[i]->ids, want[i]->ids) << "request " << i;
    EXPECT_EQ(got[i]->text, want[i]->text) << "request " << i;
    if (reqs[i].constraint.kind == K::kJsonSchema) expect_valid(got[i]->text);
  }
  EXPECT_TRUE(overlapped->wait_idle(10));
  EXPECT_EQ(overlapped->stats().kv_blocks_used, 0);
}

TEST_F(EngineConstraintTest, AConstraintThatDoesNotCompileIsRefusedAtSubmit) {
  auto engine = make(2);
  struct Case {
    constrain::ConstraintSpec::Kind kind;
    const char* text;
    const char* says;
  } cases[] = {
      {constrain::ConstraintSpec::Kind::kJsonSchema, R"({"type":"strng"})", "/type"},
      {constrain::ConstraintSpec::Kind::kJsonSchema, R"({"type":"array","minItems":3,"maxItems":1})", "unsatisfiable"},
      {constrain::ConstraintSpec::Kind::kJsonSchema, "{not json", "json_schema"},
      {constrain::ConstraintSpec::Kind::kRegex, "(ab", "position"},
      {constrain::ConstraintSpec::Kind::kGrammar, "root ::= foo", "foo"},
  };
  for (const Case& c : cases) {
    GenerationRequest r = req("x", 1, c.kind, c.text);
    // First: accepted, compiled on the compiler's thread, refused through on_finish without on_admitted.
    auto sink = std::make_shared<Sink>();
    ASSERT_TRUE(engine->submit(r, sink, std::make_shared<CancelToken>()).ok()) << c.text;
    ASSERT_TRUE(sink->wait(30)) << c.text;
    EXPECT_FALSE(sink->admitted) << c.text;
    EXPECT_TRUE(sink->ids.empty()) << c.text;
    absl::Status st = sink->result.status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.text << ": " << st;
    EXPECT_EQ(st.message().substr(0, 12), "constraint: ") << st;
    EXPECT_NE(st.message().find(c.says), absl::string_view::npos) << st;
    // Again: the refusal is cached, so submit itself refuses it.
    st = engine->submit(r, std::make_shared<Sink>(), std::make_shared<CancelToken>());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.text << ": " << st;
    EXPECT_EQ(st.message().substr(0, 12), "constraint: ") << st;
    EXPECT_NE(st.message().find(c.says), absl::string_view::npos) << st;
  }
  EXPECT_TRUE(engine->wait_idle(10));
  EXPECT_EQ(engine->stats().n_running + engine->stats().n_waiting, 0);
  EXPECT_EQ(engine->stats().n_finished, 0u);  // refused requests are not finished sequences
  EXPECT_EQ(engine->stats().constraints.refused, 5u);
}

TEST_F(EngineConstraintTest, ACompiledConstraintIsAdmittedAndCachedAcrossRequests) {
  auto engine = make(2);
  GenerationRequest r = req("Once", 3, constrain::ConstraintSpec::Kind::kRegex, "[a-z ]{1,20}\\.", 40);
  auto first = run(*engine, {r});
  ASSERT_TRUE(first[0]->result.ok()) << first[0]->result.status();
  EXPECT_TRUE(first[0]->admitted);
  auto second = std::make_shared<Sink>();
  ASSERT_TRUE(engine->submit(r, second, std::make_shared<CancelToken>()).ok());
  EXPECT_TRUE(second->admitted) << "a cached constraint is admitted inside submit()";
  ASSERT_TRUE(second->wait(120));
  EXPECT_EQ(second->ids, first[0]->ids);
  const ConstraintCompilerStats cs = engine->stats().constraints;
  EXPECT_EQ(cs.compiles, 1u);
  EXPECT_GE(cs.cache_hits, 1u);
  EXPECT_GT(cs.cache_bytes, 0);
}

TEST_F(EngineConstraintTest, AConstraintTheVocabularyCannotSpellEndsInAnErrorNotASilentStop) {
  // stories260K's 512 tokens cannot spell U+4E16 ('\xe4\xb8\x96') except byte by byte, if at all: either the
  // output is exactly the character, or the request ends with an error naming the constraint — never "stop"
  // with an output the constraint does not admit.
  auto engine = make(2);
  GenerationRequest r = req("Once", 5, constrain::ConstraintSpec::Kind::kRegex, "\u4e16\u4e16", 16);
  r.params.temperature = 0;
  auto out = run(*engine, {r});
  if (out[0]->result.ok()) {
    EXPECT_EQ(out[0]->text, "\xe4\xb8\x96\xe4\xb8\x96");
    EXPECT_EQ(out[0]->result->finish_reason, FinishReason::kStop);
  } else {
    EXPECT_NE(out[0]->result.status().message().find("constraint"), absl::string_view::npos)
        << out[0]->result.status();
  }
}

TEST_F(EngineConstraintTest, TheVocabularyIsBuiltOnceAndItsControlTokensAreNeverText) {
  EngineConstraints c(model_, EngineOptions{});
  absl::StatusOr<EngineConstraints::Lookup> a = c.lookup({constrain::ConstraintSpec::Kind::kJsonObject, ""});
  absl::StatusOr<EngineConstraints::Lookup> b = c.lookup({constrain::ConstraintSpec::Kind::kRegex, "a+"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->vocab, b->vocab) << "one vocabulary per model, shared by every constrained request";
  EXPECT_EQ(a->compiled, nullptr) << "nothing compiled yet: the cache is empty";
  const constrain::TokenVocab& v = *a->vocab;
  const Tokenizer& tok = *model_->tokenizer;
  EXPECT_EQ(v.n_tokens(), model_->config.n_vocab);
  if (tok.bos_id() >= 0) {
    EXPECT_TRUE(v.is_special(tok.bos_id()));
  }
  ASSERT_FALSE(v.eos_ids().empty());
  for (int32_t e : v.eos_ids()) EXPECT_TRUE(v.is_special(e) && v.is_eos(e));
  for (int32_t i = 0; i < v.n_tokens(); ++i) {
    if (!v.is_special(i)) {
      EXPECT_EQ(v.bytes(i), tok.token_bytes(i)) << "token " << i;
    }
  }
  c.shutdown();
}

// The constraint knobs are checked by the engine's one check (core/generate/engine_options.h), with the text
// frostd's config gives.
TEST(EngineConstraints, KnobsAreCheckedNamingTheField) {
  EXPECT_TRUE(check_engine_options(EngineOptions{}).ok());
  EngineOptions o;
  o.constraint_compile_threads = 0;
  EXPECT_EQ(check_engine_options(o).message(),
            "engine.constraint_compile_threads: must be in [1, 64], got 0");
  o = {};
  o.constraint_compile_timeout_ms = 0;
  EXPECT_EQ(check_engine_options(o).message(),
            "engine.constraint_compile_timeout_ms: must be in [1, 600000], got 0");
  o = {};
  o.constraint_cache_bytes = -1;
  EXPECT_EQ(check_engine_options(o).message(),
            "engine.constraint_cache_bytes: must be in [0, 1099511627776] bytes, got -1");
  o = {};
  o.speculative.method = SpecMethod::kServer;  // a request's word, never the engine's default
  EXPECT_EQ(check_engine_options(o).message(), "engine.speculative.method: must be one of off|ngram|suffix");
  o = {};
  o.max_batch_tokens = 16;
  EXPECT_EQ(
      check_engine_options(o).message(),
      "engine.max_batch_tokens: must be >= engine.max_running (32: every running sequence decodes one token "
      "per step), got 16");
}

TEST(SamplerMask, TheMaskedSamplerIsTheSamplerOverTheAllowedTokens) {
  const int32_t V = 100;
  std::vector<float> logits(V);
  for (int32_t i = 0; i < V; ++i) logits[i] = static_cast<float>((i * 37) % 17) * 0.3f;
  std::vector<uint32_t> all((V + 31) / 32, 0xFFFFFFFFu), some((V + 31) / 32, 0u);
  for (int32_t i = 0; i < V; i += 7) some[i / 32] |= 1u << (i % 32);
  for (float t : {0.0f, 0.7f, 1.3f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 11;
    p.top_k = t > 1 ? 20 : 0;
    Sampler a(p, V), b(p, V), c(p, V);
    for (int step = 0; step < 50; ++step) {
      EXPECT_EQ(a.sample(logits.data()).id, b.sample(logits.data(), all.data()).id);  // all allowed: no change
      const int32_t id = c.sample(logits.data(), some.data()).id;
      EXPECT_EQ(id % 7, 0) << "token " << id << " is not allowed";
    }
  }
  // Greedy over the allowed tokens is their argmax.
  SamplingParams g;
  g.temperature = 0;
  Sampler s(g, V);
  int32_t best = 0;
  for (int32_t i = 0; i < V; i += 7)
    if (logits[i] > logits[best]) best = i;
  EXPECT_EQ(s.sample(logits.data(), some.data()).id, best);
}

}  // namespace
}  // namespace frost
