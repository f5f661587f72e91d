// Speculative decoding in the serving engine (core/generate/speculation.h, engine_spec.cc, spec_verify.h), on
// the real stories260K (models/) and on builtin:tiny with a sliding window:
//  - over 240 prompts, batched 32 at a time, greedy and seeded-sampled outputs (ids, text, logprobs) are
//    identical with speculation off, ngram and suffix — and drafts really were accepted and rejected;
//  - the same with every KV codec (fp32, fp16, bf16, int8, int4 with a repair operator, kvsplice), with a
//  pool
//    small enough to preempt drafting sequences, and on a sliding-window model: the books are audited after
//    every step (EngineConfig::audit_kv) and end with every block free or cached;
//  - jump-forward under a JSON schema: the same output as without, grammar-forced tokens counted;
//  - the counters add up (accepted ≤ drafted, per-position counts sum to accepted and never grow with the
//    position), and each result reports its own drafted and accepted tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/generate/engine.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "core/model/transformer.h"
#include "tests/testing/kv_slots.h"
#include "tests/testing/recording_sink.h"

namespace frost {
namespace {

using Sink = testing::RecordingSink;

// 240 story prompts: half repeat a sentence (reuse a drafter can find), half do not.
std::vector<std::string> corpus() {
  const char* who[] = {"Lily", "Tom", "a little dog", "the old man", "Sue", "a big bear"};
  const char* did[] = {"found a red ball", "went to the park", "wanted to play", "saw a bird",
                       "had a toy car",    "liked to sing",    "was very sad",   "made a cake"};
  const char* then[] = {"One day,", "Then", "The next day,", "After that,", "Once upon a time,"};
  std::vector<std::string> out;
  for (int i = 0; static_cast<int>(out.size()) < 240; ++i) {
    const std::string s = std::string(who[i % 6]) + " " + did[(i / 6) % 8] + ".";
    if (i % 2) {
      out.push_back(std::string(then[i % 5]) + " " + s + " " + s + " " + who[i % 6]);
    } else {
      out.push_back(std::string(then[(i / 3) % 5]) + " " + s);
    }
  }
  return out;
}

GenerationRequest request(const std::string& prompt, int i, int32_t max_new) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.max_new_tokens = max_new;
  if (i % 3 == 2) {  // seeded sampling: identical per seed, with or without speculation (spec_verify.h)
    r.params.temperature = 0.8f;
    r.params.top_p = 0.95f;
    r.params.seed = 1000 + static_cast<uint64_t>(i);
  } else {
    r.params.temperature = 0;
  }
  if (i % 7 == 0) r.params.logprobs = 2;
  if (i % 11 == 0) r.params.stop = {"."};
  if (i % 13 == 0) r.params.repetition_penalty = 1.2f;
  return r;
}

class EngineSpecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("models/stories260K");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(m).value());
  }
  static void TearDownTestSuite() { model_.reset(); }

  static EngineConfig config(SpecMethod method, int32_t running = 32) {
    EngineConfig c;
    c.max_running = running;
    c.max_waiting = 4096;
    c.max_batch_tokens = 192;
    c.audit_kv = true;  // the block books are checked after every step (FROST_CHECK)
    c.speculative.method = method;
    c.speculative.num_tokens = 5;
    c.speculative.max_batch = 64;  // draft at every batch size here: drafts share steps with everyone
    c.speculative.adaptive = false;  // always draft k: exactness is tested on as many drafts as possible
    return c;
  }
  static std::vector<std::shared_ptr<Sink>> run(const std::shared_ptr<const LoadedModel>& model,
                                                const EngineConfig& c,
                                                const std::vector<GenerationRequest>& reqs,
                                                EngineStats* stats = nullptr) {
    auto e = Engine::create(model, c);
    EXPECT_TRUE(e.ok()) << e.status();
    std::vector<std::shared_ptr<Sink>> sinks;
    for (const auto& r : reqs) {
      auto s = std::make_shared<Sink>();
      const absl::Status st = (*e)->submit(r, s, std::make_shared<CancelToken>());
      EXPECT_TRUE(st.ok()) << st;
      sinks.push_back(s);
    }
    for (auto& s : sinks) EXPECT_TRUE(s->wait(120));
    EXPECT_TRUE((*e)->wait_idle(10));
    const EngineStats s = (*e)->stats();
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
    if (stats) *stats = s;
    return sinks;
  }
  static void expect_same(const std::vector<std::shared_ptr<Sink>>& got,
                          const std::vector<std::shared_ptr<Sink>>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i]->result.ok()) << what << " " << i << ": " << got[i]->result.status();
      ASSERT_TRUE(want[i]->result.ok()) << what << " " << i << ": " << want[i]->result.status();
      EXPECT_EQ(got[i]->ids, want[i]->ids) << what << " request " << i;
      EXPECT_EQ(got[i]->text, want[i]->text) << what << " request " << i;
      EXPECT_EQ(got[i]->logprobs, want[i]->logprobs) << what << " request " << i;
      EXPECT_EQ(got[i]->result->finish_reason, want[i]->result->finish_reason) << what << " request " << i;
      EXPECT_EQ(got[i]->result->stop_reason, want[i]->result->stop_reason) << what << " request " << i;
    }
  }
  // The spec_decode counters add up, and the results' own counts sum to them.
  static void expect_counters(const EngineStats& s, const std::vector<std::shared_ptr<Sink>>& sinks) {
    EXPECT_LE(s.spec_accepted_tokens, s.spec_draft_tokens);
    EXPECT_LE(s.spec_forced_tokens, s.spec_draft_tokens);
    uint64_t sum = 0, prev = s.spec_drafts;
    for (uint64_t n : s.spec_accepted_per_pos) {
      EXPECT_LE(n, prev) << "accepted at position i + 1 implies accepted at i";
      prev = n;
      sum += n;
    }
    EXPECT_EQ(sum, s.spec_accepted_tokens);
    uint64_t drafted = 0, accepted = 0;
    for (const auto& k : sinks) {
      drafted += static_cast<uint64_t>(k->result->n_draft_tokens);
      accepted += static_cast<uint64_t>(k->result->n_accepted_tokens);
    }
    EXPECT_EQ(drafted, s.spec_draft_tokens);
    EXPECT_EQ(accepted, s.spec_accepted_tokens);
  }
  static std::shared_ptr<const LoadedModel> model_;
};
std::shared_ptr<const LoadedModel> EngineSpecTest::model_;

TEST_F(EngineSpecTest, OutputsAreIdenticalWithAndWithoutSpeculationOver240Prompts) {
  std::vector<GenerationRequest> reqs;
  const std::vector<std::string> prompts = corpus();
  for (size_t i = 0; i < prompts.size(); ++i) reqs.push_back(request(prompts[i], static_cast<int>(i), 40));
  const auto want = run(model_, config(SpecMethod::kOff), reqs);
  for (SpecMethod m : {SpecMethod::kNgram, SpecMethod::kSuffix}) {
    EngineStats s;
    const auto got = run(model_, config(m), reqs, &s);
    int64_t steps_off = 0, steps_on = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      steps_off += want[i]->result->n_decode_steps;
      steps_on += got[i]->result->n_decode_steps;
    }
    EXPECT_LT(steps_on, steps_off) << spec_method_name(m);
    expect_same(got, want, spec_method_name(m));
    expect_counters(s, got);
    EXPECT_GT(s.spec_accepted_tokens, s.spec_draft_tokens / 10)
        << spec_method_name(m) << ": drafts were accepted";
    EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens) << spec_method_name(m) << ": and rejected";
    EXPECT_GT(s.spec_drafts, 500u);
    std::printf(
        "[ spec ] %s: %llu drafts, %llu draft tokens, %llu accepted (%.2f per draft), %lld decode steps "
        "(%lld without)\n",
        spec_method_name(m), static_cast<unsigned long long>(s.spec_drafts),
        static_cast<unsigned long long>(s.spec_draft_tokens),
        static_cast<unsigned long long>(s.spec_accepted_tokens),
        static_cast<double>(s.spec_accepted_tokens) / static_cast<double>(s.spec_drafts),
        static_cast<long long>(steps_on), static_cast<long long>(steps_off));
  }
}

TEST_F(EngineSpecTest, EveryKvCodecRepairKvSpliceAndPreemptionGiveTheSameOutput) {
  // A repair operator for int4 and a KVSplice set, both active.
  const std::unique_ptr<testing::KvSlots> slots = testing::make_kv_slots(model_->config);
  ASSERT_NE(slots, nullptr);
  RepairSlot& repair = slots->repair;
  KvSpliceSlot& splice = slots->splice;
  const KvCodecKind codecs[] = {KvCodecKind::kF32,  KvCodecKind::kF16,  KvCodecKind::kBF16,
                                KvCodecKind::kInt8, KvCodecKind::kInt4, KvCodecKind::kKvSplice};
  std::vector<GenerationRequest> reqs;
  const std::vector<std::string> prompts = corpus();
  for (int i = 0; i < 48; ++i) {
    GenerationRequest r = request(prompts[static_cast<size_t>(i * 5 % 240)], i, 48);
    r.kv_codec = codecs[i % 6];
    reqs.push_back(r);
  }
  for (const bool small_pool : {false, true}) {
    EngineConfig off = config(SpecMethod::kOff, 16), on = config(SpecMethod::kNgram, 16);
    for (EngineConfig* c : {&off, &on}) {
      c->kv_repair = &repair;
      c->kv_splice = &splice;
      c->max_batch_tokens = 64;
      c->kv_block_tokens = 8;
      // Small: a few sequences' worth of blocks, so drafting sequences are preempted and recomputed.
      if (small_pool)
        c->kv_cache_bytes = 40 * kv_pool_block_bytes(model_->model->kv_spec(512, KvCodecKind::kF32), 8);
    }
    const auto want = run(model_, off, reqs);
    EngineStats s;
    const auto got = run(model_, on, reqs, &s);
    expect_same(got, want, small_pool ? "small pool" : "codecs");
    expect_counters(s, got);
    EXPECT_GT(s.spec_accepted_tokens, 0u);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i]->result->kv_repair, *reqs[i].kv_codec == KvCodecKind::kInt4 ? "kv_repair/1" : "") << i;
    if (small_pool) EXPECT_GT(s.n_preemptions, 0u) << "the pool was small enough to preempt";
  }
}

TEST_F(EngineSpecTest, SlidingWindowModelGivesTheSameOutput) {
  auto m = load_model("builtin:tiny");
  ASSERT_TRUE(m.ok()) << m.status();
  std::unique_ptr<LoadedModel> lm = std::move(m).value();
  ModelConfig cfg = lm->config;
  cfg.window.assign(static_cast<size_t>(cfg.n_layer), 24);  // every layer slides
  ASSERT_TRUE(validate_model_config(cfg).ok());
  lm->model = std::make_unique<Transformer>(cfg, lm->model->weights());
  std::shared_ptr<const LoadedModel> model(std::move(lm));
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r;
    for (int j = 0; j < 20 + 3 * i; ++j)
      r.prompt_ids.push_back(3 + (j % (4 + i)) * 7);  // periodic: lookups hit
    r.params.max_new_tokens = 80;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  EngineConfig off = config(SpecMethod::kOff, 8), on = config(SpecMethod::kNgram, 8);
  for (EngineConfig* c : {&off, &on}) c->kv_block_tokens = 8;
  const auto want = run(model, off, reqs);
  EngineStats s;
  const auto got = run(model, on, reqs, &s);
  expect_same(got, want, "sliding window");
  expect_counters(s, got);
  EXPECT_GT(s.spec_accepted_tokens, 0u);
  EXPECT_GT(s.n_steps, 0u);
}

TEST_F(EngineSpecTest, JumpForwardUnderASchemaGivesTheSameOutputInFewerSteps) {
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":1,"maximum":99},
      "mood":{"enum":["happy","sad","sleepy"]}},"required":["name","age","mood"],"additionalProperties":false})";
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r;
    r.prompt = i % 2 ? "Lily and Tom" : "The dog";
    r.params.max_new_tokens = 120;
    r.params.temperature = i % 2 ? 0.0f : 0.9f;
    r.params.seed = 7 + static_cast<uint64_t>(i);
    r.constraint = {constrain::ConstraintSpec::Kind::kJsonSchema, schema};
    reqs.push_back(r);
  }
  EngineConfig off = config(SpecMethod::kOff, 8);
  off.speculative.jump_forward = false;
  EngineConfig jump = config(SpecMethod::kOff, 8);  // jump-forward alone (the server's method is off)
  EngineStats s_off, s_jump;
  const auto want = run(model_, off, reqs, &s_off);
  const auto got = run(model_, jump, reqs, &s_jump);
  expect_same(got, want, "jump-forward");
  expect_counters(s_jump, got);
  EXPECT_EQ(s_off.spec_draft_tokens, 0u);
  EXPECT_GT(s_jump.spec_forced_tokens, 0u);
  EXPECT_EQ(s_jump.spec_forced_tokens, s_jump.spec_draft_tokens) << "no drafter ran: every draft was forced";
  EXPECT_GT(s_jump.spec_accepted_tokens, s_jump.spec_draft_tokens / 2) << "the model writes forced text so";
  int64_t steps_off = 0, steps_jump = 0;  // forward passes per request (the engine's rounds are shared)
  for (size_t i = 0; i < reqs.size(); ++i) {
    steps_off += want[i]->result->n_decode_steps;
    steps_jump += got[i]->result->n_decode_steps;
  }
  EXPECT_LT(steps_jump, steps_off);
  std::printf("[ spec ] jump-forward: %llu forced tokens, %lld decode steps (%lld without)\n",
              static_cast<unsigned long long>(s_jump.spec_forced_tokens), static_cast<long long>(steps_jump),
              static_cast<long long>(steps_off));
  // A request that turns speculation off does not jump forward either.
  std::vector<GenerationRequest> plain = reqs;
  for (auto& r : plain) r.spec_method = SpecMethod::kOff;
  EngineStats s_plain;
  expect_same(run(model_, jump, plain, &s_plain), want, "request off");
  EXPECT_EQ(s_plain.spec_draft_tokens, 0u);
}

// The adaptive rule (speculation.h) on stories260K, where a verification row costs nearly what a step costs: on
// text the drafter predicts poorly it drafts far less than a fixed k, and the outputs stay the same.
TEST_F(EngineSpecTest, TheAdaptiveRuleDraftsLessWhereRowsDoNotPay) {
  std::vector<GenerationRequest> reqs;
  const std::vector<std::string> prompts = corpus();
  for (int i = 0; i < 16; ++i) {
    GenerationRequest r = request(prompts[static_cast<size_t>(2 * i)], 3 * i + 2, 48);  // seeded, no repeat
    reqs.push_back(r);
  }
  EngineConfig fixed = config(SpecMethod::kNgram, 4), adaptive = fixed;
  adaptive.speculative.adaptive = true;
  EngineStats s_fixed, s_adaptive;
  const auto want = run(model_, fixed, reqs, &s_fixed);
  const auto got = run(model_, adaptive, reqs, &s_adaptive);
  expect_same(got, want, "adaptive");
  expect_counters(s_adaptive, got);
  EXPECT_LT(s_adaptive.spec_draft_tokens, s_fixed.spec_draft_tokens / 2)
      << "fixed k drafted " << s_fixed.spec_draft_tokens << " tokens";
}

TEST_F(EngineSpecTest, RequestKnobsChooseTheMethodAndAreChecked) {
  GenerationRequest r = request("Lily had a ball. Lily had a ball. Lily", 0, 24);
  EngineConfig c = config(SpecMethod::kOff, 4);
  auto e = Engine::create(model_, c);
  ASSERT_TRUE(e.ok()) << e.status();
  r.spec_num_tokens = -1;
  const absl::Status bad = (*e)->submit(r, std::make_shared<Sink>(), std::make_shared<CancelToken>());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("speculative.num_tokens"), std::string::npos) << bad;
  r.spec_num_tokens = 2;
  r.spec_method = SpecMethod::kNgram;  // on a server whose default is off
  auto s = std::make_shared<Sink>();
  ASSERT_TRUE((*e)->submit(r, s, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(s->wait(60));
  ASSERT_TRUE(s->result.ok()) << s->result.status();
  EXPECT_GT(s->result->n_draft_tokens, 0);
  EXPECT_LE(s->result->n_draft_tokens, 2 * s->result->n_decode_steps) << "at most 2 drafted tokens per step";
  EXPECT_EQ(s->result->n_decode_tokens, static_cast<int32_t>(s->ids.size()) - 1);
  c.speculative.num_tokens = 0;
  EXPECT_EQ(Engine::create(model_, c).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frost
