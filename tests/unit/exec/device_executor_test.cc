// The engine on a device executor (core/exec/device_executor.h) over the host reference device — the wiring a
// GPU uses (device KV pages in the device's layout, block tables and slots per step, sampling on the device
// with the host sampler for the rows that need it), run through the real engine and scheduler:
//  - greedy output equals the CPU engine's, and the stories260K golden;
//  - batched, chunked and preempted requests equal each request alone, with the books audited every step;
//  - the prefix cache adopts device blocks and changes nothing; cancellation frees them;
//  - mixed sampling parameters share a step: device-sampled rows (greedy, temperature, top-k, top-p, min-p,
//    seeds) and host-sampled ones (penalties, logprobs) each equal themselves alone; a row sampled on the
//    device equals the same row sampled by the host sampler; seeds reproduce;
//  - constrained rows sample on the device with their token mask, inside it, as the host sampler does;
//  - what the device does not run is refused at start or submit naming the field;
//  - a sticky device error fails every request with UNAVAILABLE, refuses new ones and reports it once; a
//    non-sticky one fails only its step.
#include "core/exec/device_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <regex>

#include "absl/synchronization/notification.h"
#include "core/exec/make_executor.h"
#include "core/exec/reference_decoder.h"
#include "core/generate/engine.h"
#include "tests/testing/recording_sink.h"
#include "tests/testing/stories260k.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

using Sink = testing::RecordingSink;

std::vector<int32_t> ids_of(int64_t n, int64_t salt, int64_t vocab = 512) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(3 + (i * 31 + salt * 97) % (vocab - 3)));
  return v;
}

GenerationRequest request(std::vector<int32_t> prompt, int32_t n, float temperature = 0, uint64_t seed = 1) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.params.max_new_tokens = n;
  r.params.temperature = temperature;
  r.params.seed = seed;
  r.params.ignore_eos = true;
  return r;
}

class DeviceExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(m).value());
  }
  static void TearDownTestSuite() { model_.reset(); }

  static EngineConfig config(int32_t running, int64_t blocks = 0, bool prefix = true, int64_t batch_tokens = 48) {
    EngineConfig c;
    c.max_running = running;
    c.max_waiting = 4096;
    c.max_batch_tokens = std::max<int64_t>(running, batch_tokens);
    c.kv_cache_bytes = blocks * block_bytes();
    c.prefix_caching = prefix;
    c.audit_kv = true;
    return c;
  }
  // One block of builtin:tiny on the device: 16 positions × 2 layers × 2 kv heads × 16 dims × K, V × fp32.
  static int64_t block_bytes() { return 16 * 2 * 2 * 16 * 2 * 4; }
  // An engine on the reference device; *decoder (optional) is the device, for fault injection.
  static std::unique_ptr<Engine> make(const EngineConfig& c, ReferenceDecoder** decoder = nullptr,
                                      std::shared_ptr<const LoadedModel> model = nullptr) {
    if (!model) model = model_;
    DeviceOptions o;
    auto w = ReferenceWeights::create(model->config, model->model->weights());
    EXPECT_TRUE(w.ok()) << w.status();
    auto d = std::make_unique<ReferenceDecoder>(*w, o);
    if (decoder) *decoder = d.get();
    auto ex = DeviceExecutor::create(model, std::move(d), "reference", c.gen.kv_codec);
    EXPECT_TRUE(ex.ok()) << ex.status();
    auto e = Engine::create(model, c, std::move(ex).value());
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static std::vector<std::shared_ptr<Sink>> run_all(Engine& engine, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<Sink>> sinks;
    for (const auto& r : reqs) {
      auto s = std::make_shared<Sink>();
      const absl::Status st = engine.submit(r, s, std::make_shared<CancelToken>());
      EXPECT_TRUE(st.ok()) << st;
      sinks.push_back(s);
    }
    for (auto& s : sinks) EXPECT_TRUE(s->wait(120));
    EXPECT_TRUE(engine.wait_idle(30));
    return sinks;
  }
  static std::vector<std::vector<int32_t>> run_alone(const std::vector<GenerationRequest>& reqs) {
    auto engine = make(config(1, 0, false));
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : reqs) out.push_back(run_all(*engine, {r})[0]->ids);
    return out;
  }
  static void expect_idle_books(const Engine& e) {
    const EngineStats s = e.stats();
    EXPECT_EQ(s.n_running, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
  }
  static std::shared_ptr<const LoadedModel> model_;
};
std::shared_ptr<const LoadedModel> DeviceExecutorTest::model_;

TEST_F(DeviceExecutorTest, GreedyOutputEqualsTheCpuEngine) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(request(ids_of(5 + 9 * i, i), 24));
  auto device = make(config(4));
  auto cpu = Engine::create(model_, config(4));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const auto got = run_all(*device, reqs);
  const auto want = run_all(**cpu, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
    EXPECT_EQ(got[i]->ids, want[i]->ids) << i;
  }
  const EngineStats s = device->stats();
  EXPECT_EQ(s.executor.device, "reference");
  EXPECT_EQ(device->device(), "reference");
  EXPECT_GT(s.executor.kv_pool_bytes, 0);
  EXPECT_GT(s.executor.weight_bytes, 0);
  EXPECT_TRUE(s.executor.healthy);
  EXPECT_EQ(s.executor.rows_sampled_on_host, 0u);  // greedy rows are sampled on the device
  EXPECT_GT(s.executor.rows_sampled_on_device, 0u);
  expect_idle_books(*device);
}

TEST_F(DeviceExecutorTest, Stories260KThroughTheEngineGivesTheGoldensGreedyTokens) {
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  std::shared_ptr<const LoadedModel> m = testing::load_stories260k();
  ASSERT_TRUE(m);
  EngineConfig c = config(4);
  c.kv_cache_bytes = 0;
  auto engine = make(c, nullptr, m);
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const testing::GoldenCase& cs : testing::golden_cases(refp)) {
    want.push_back(cs.greedy_new_ids);
    reqs.push_back(request(cs.input_ids, static_cast<int32_t>(want.back().size())));
  }
  const auto got = run_all(*engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i]->ids, want[i]) << i;
}

// fp16 weights (a device format) through the real engine on the reference device: stories260K's golden
// prompts, batched, give the fp32 weights' greedy tokens — the golden's — token for token (their logits stay
// within 2e-3, tests/unit/exec/reference_decoder_test.cc); and the engine reports the format it serves.
TEST_F(DeviceExecutorTest, Stories260KWithFp16WeightsGivesTheFp32GreedyTokens) {
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  LoadOptions f16;
  f16.dtype = WeightDtype::kF16;
  std::shared_ptr<const LoadedModel> m = testing::load_stories260k(f16);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->model->weight_format(), WeightDtype::kF16);
  EngineConfig c = config(4);
  c.kv_cache_bytes = 0;
  auto engine = make(c, nullptr, m);
  ASSERT_TRUE(engine);
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const testing::GoldenCase& cs : testing::golden_cases(refp)) {
    want.push_back(cs.greedy_new_ids);
    reqs.push_back(request(cs.input_ids, static_cast<int32_t>(want.back().size())));
  }
  const auto got = run_all(*engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
    EXPECT_EQ(got[i]->ids, want[i]) << i;
  }
  expect_idle_books(*engine);
}

// int8 weights (weight-only) through the real engine on the reference device against the CPU engine serving
// the same int8 model: greedy tokens equal, token for token, on stories260K's golden prompts (batched) and on
// builtin:tiny. The two compute the same function — the CPU int8 model's int8 matrices and scales, fp32
// activations — with fp32 sums there (the packed int8 GEMM) and double ones here: logits ~1e-6 apart (the
// prefill logits are held to the CPU forward within 1e-4, reference_decoder_test.cc), far below the gaps
// between these prompts' top-2 logits, so the argmax agrees (a near-tie could differ; none occurs here).
TEST_F(DeviceExecutorTest, Int8WeightsGiveTheCpuInt8EnginesGreedyTokens) {
  LoadOptions i8;
  i8.dtype = WeightDtype::kInt8;
  auto check = [&](std::shared_ptr<const LoadedModel> m, const std::vector<GenerationRequest>& reqs) {
    EngineConfig c = config(4);
    c.kv_cache_bytes = 0;
    auto device = make(c, nullptr, m);
    ASSERT_TRUE(device);
    auto cpu = Engine::create(m, c);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const auto got = run_all(*device, reqs);
    const auto want = run_all(**cpu, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
      ASSERT_TRUE(want[i]->result.ok()) << want[i]->result.status();
      EXPECT_EQ(got[i]->ids, want[i]->ids) << m->name << " request " << i;
    }
    expect_idle_books(*device);
  };
  auto tiny = load_model("builtin:tiny", i8);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(request(ids_of(5 + 9 * i, i), 24));
  check(std::shared_ptr<const LoadedModel>(std::move(tiny).value()), reqs);
  FROST_REQUIRE_SHARED(refp, "models/stories260K/reference.json");
  std::shared_ptr<const LoadedModel> stories = testing::load_stories260k(i8);
  ASSERT_TRUE(stories);
  reqs.clear();
  for (const testing::GoldenCase& cs : testing::golden_cases(refp))
    reqs.push_back(request(cs.input_ids, static_cast<int32_t>(cs.greedy_new_ids.size())));
  check(stories, reqs);
}

TEST_F(DeviceExecutorTest, BatchedChunkedAndPreemptedRequestsEqualEachAlone) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = request(ids_of(20 + 7 * i, i), 40, i % 2 ? 0.8f : 0.f, 100 + static_cast<uint64_t>(i));
    if (i == 3) r.params.top_k = 20;
    if (i == 5) r.params.top_p = 0.7f;
    reqs.push_back(r);
  }
  auto small = make(config(6, 12, true, 16));  // 12 blocks for 6 × ~4: preemptions; 16 tokens a step: chunks
  const auto got = run_all(*small, reqs);
  const auto want = run_alone(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
    EXPECT_EQ(got[i]->ids, want[i]) << i;
  }
  EXPECT_GT(small->stats().n_preemptions, 0u);
  expect_idle_books(*small);
}

TEST_F(DeviceExecutorTest, ThePrefixCacheAdoptsDeviceBlocksAndChangesNothing) {
  const std::vector<int32_t> system = ids_of(40, 77);
  auto with_suffix = [&](int64_t salt, int64_t n) {
    std::vector<int32_t> p = system;
    for (int32_t t : ids_of(n, salt)) p.push_back(t);
    return p;
  };
  const std::vector<GenerationRequest> reqs = {request(with_suffix(1, 5), 12), request(with_suffix(2, 30), 12),
                                               request(with_suffix(3, 1), 12)};
  auto engine = make(config(4));
  const auto first = run_all(*engine, {reqs[0]});
  const auto rest = run_all(*engine, {reqs[1], reqs[2]});
  EXPECT_EQ(engine->stats().prefix_hits_tokens, 64u);  // 2 requests × 2 shared blocks × 16
  const auto cold = run_alone(reqs);
  EXPECT_EQ(first[0]->ids, cold[0]);
  EXPECT_EQ(rest[0]->ids, cold[1]);
  EXPECT_EQ(rest[1]->ids, cold[2]);
  expect_idle_books(*engine);
}

TEST_F(DeviceExecutorTest, CancellationFreesTheDeviceBlocks) {
  auto engine = make(config(2));
  auto cancel = std::make_shared<CancelToken>();
  auto sink = std::make_shared<Sink>(cancel, 3);
  ASSERT_TRUE(engine->submit(request(ids_of(30, 2), 200), sink, cancel).ok());
  const auto other = std::make_shared<Sink>();
  ASSERT_TRUE(engine->submit(request(ids_of(10, 3), 10), other, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(sink->wait(120));
  ASSERT_TRUE(other->wait(120));
  ASSERT_TRUE(sink->result.ok());
  EXPECT_EQ(sink->result->finish_reason, FinishReason::kCancelled);
  EXPECT_LE(sink->ids.size(), 5u);
  EXPECT_EQ(other->ids.size(), 10u);
  ASSERT_TRUE(engine->wait_idle(10));
  expect_idle_books(*engine);
}

TEST_F(DeviceExecutorTest, MixedSamplingSharesAStepAndEachRowEqualsItselfAlone) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(request(ids_of(6 + 3 * i, 10 + i), 20, 0.9f, 500 + static_cast<uint64_t>(i)));
  reqs[0].params.temperature = 0;                 // greedy (device)
  reqs[1].params.top_k = 8;                       // top-k (device)
  reqs[2].params.top_p = 0.6f;                    // top-p (device)
  reqs[3].params.min_p = 0.1f;                    // min-p (device)
  reqs[4].params.top_k = 40, reqs[4].params.top_p = 0.8f, reqs[4].params.min_p = 0.05f;  // all three (device)
  reqs[5].params.repetition_penalty = 1.3f;       // penalties: the host sampler
  reqs[6].params.logprobs = 2;                    // logprobs: the host sampler
  reqs[7].params.frequency_penalty = 0.5f;        // the host sampler
  auto engine = make(config(8));
  const auto got = run_all(*engine, reqs);
  const auto want = run_alone(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
    EXPECT_EQ(got[i]->ids, want[i]) << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.executor.rows_sampled_on_device, 0u);
  EXPECT_GT(s.executor.rows_sampled_on_host, 0u);
  // A row the device samples equals the same row left to the host sampler (logprobs force the host): the
  // device sampler is the host sampler, and the draws come from the same seeded generator.
  for (int i = 1; i <= 4; ++i) {
    GenerationRequest host = reqs[static_cast<size_t>(i)];
    host.params.logprobs = 0;
    EXPECT_EQ(run_all(*engine, {host})[0]->ids, got[static_cast<size_t>(i)]->ids) << i;
  }
  // Seeds reproduce.
  EXPECT_EQ(run_all(*engine, {reqs[2]})[0]->ids, got[2]->ids);
  expect_idle_books(*engine);
}

// Constrained decoding sampled on the device (issue 54): a constrained row whose request allows device
// sampling is sampled there with its token mask (DeviceDecoder::set_masks) — greedy, temperature, top-k,
// top-p, seeded — and gives exactly the tokens the host sampler gives it (logprobs force the host); every
// drawn token is inside its mask (Sequence::accept ends the request with an error for one outside it), and
// the outputs match their constraints.
TEST_F(DeviceExecutorTest, ConstrainedRowsSampleOnTheDeviceWithTheirMaskAndEqualTheHostSampler) {
  auto loaded = load_model(testing::source_path("models/stories260K"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const LoadedModel> m(std::move(loaded).value());
  using K = constrain::ConstraintSpec::Kind;
  auto constrained = [](const char* prompt, K kind, const char* text, float temperature, uint64_t seed) {
    GenerationRequest r;
    r.prompt = prompt;
    r.params.max_new_tokens = 80;
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.constraint = {kind, text};
    r.spec_method = SpecMethod::kOff;  // no jump-forward drafts: their rows are verified on the host
    return r;
  };
  const char* schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},
    "age":{"type":"integer","minimum":0,"maximum":99}},"required":["name","age"]})";
  std::vector<GenerationRequest> reqs;
  for (uint64_t s = 1; s <= 3; ++s)
    reqs.push_back(constrained("Lily and Tom", K::kJsonSchema, schema, 0.9f, s));
  reqs.push_back(constrained("The dog", K::kRegex, "(yes|no), [a-z]{2,6}!", 0.9f, 4));
  reqs.back().params.top_k = 8;
  reqs.push_back(constrained("The dog", K::kRegex, "(yes|no), [a-z]{2,6}!", 1.0f, 5));
  reqs.back().params.top_p = 0.7f, reqs.back().params.min_p = 0.05f;
  reqs.push_back(constrained("Once upon a time", K::kRegex, "[a-z ]{1,40}\\.", 0, 6));  // greedy
  auto engine = make(config(8, 0), nullptr, m);
  const auto got = run_all(*engine, reqs);
  const EngineStats s = engine->stats();
  EXPECT_GT(s.executor.rows_sampled_on_device, 0u);
  EXPECT_EQ(s.executor.rows_sampled_on_host, 0u);  // every constrained row was sampled on the device
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i]->result.ok()) << i << ": " << got[i]->result.status();  // no token outside a mask
    EXPECT_EQ(got[i]->result->finish_reason, FinishReason::kStop) << i << ": " << got[i]->text;
    if (reqs[i].constraint.kind == K::kJsonSchema) {
      const nlohmann::json j = nlohmann::json::parse(got[i]->text);
      EXPECT_TRUE(j.at("name").is_string() && j.at("age").is_number_integer()) << got[i]->text;
    } else {
      EXPECT_TRUE(std::regex_match(got[i]->text, std::regex(reqs[i].constraint.text))) << got[i]->text;
    }
  }
  // The same requests on the host sampler (logprobs), alone and batched: the same tokens.
  std::vector<GenerationRequest> host = reqs;
  for (auto& r : host) r.params.logprobs = 0;
  const auto on_host = run_all(*engine, host);
  EXPECT_EQ(engine->stats().executor.rows_sampled_on_device, s.executor.rows_sampled_on_device);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(on_host[i]->ids, got[i]->ids) << i;
  expect_idle_books(*engine);
}

// Speculative decoding on the device executor (issue 52): the draft rows are extra query rows of the device step,
// their logits come back to the host for verification, rejected rows are truncated from the device's block
// table — and the outputs (greedy and seeded, device-sampled and host-sampled rows mixed) equal speculation off.
// Preemption and chunking too (a small pool, 16 tokens a step), and drafts bounded by the device's logits rows
// (max_running = 4: at most 4 logits rows a step).
TEST_F(DeviceExecutorTest, SpeculativeDraftsRunAsDeviceRowsAndChangeNothing) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 18 + 5 * i; ++j) prompt.push_back(3 + (j % (3 + i)) * 11);  // periodic: lookups hit
    GenerationRequest r = request(prompt, 40, i % 2 ? 0.8f : 0.f, 300 + static_cast<uint64_t>(i));
    if (i == 3) r.params.logprobs = 1;
    reqs.push_back(r);
  }
  for (const int64_t blocks : {int64_t{0}, int64_t{14}}) {
    EngineConfig off = config(4, blocks, true, 16), on = off;
    on.speculative.method = SpecMethod::kNgram;
    on.speculative.num_tokens = 4;
    on.speculative.adaptive = false;  // always draft: the device rows are what is tested
    auto plain = make(off);
    auto spec = make(on);
    const auto want = run_all(*plain, reqs);
    const auto got = run_all(*spec, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i]->result.ok()) << got[i]->result.status();
      EXPECT_EQ(got[i]->ids, want[i]->ids) << "blocks " << blocks << " request " << i;
      EXPECT_EQ(got[i]->logprobs, want[i]->logprobs) << i;
    }
    const EngineStats s = spec->stats();
    EXPECT_GT(s.spec_accepted_tokens, 0u);
    EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
    int64_t steps_on = 0, steps_off = 0;  // forward passes per request
    for (size_t i = 0; i < reqs.size(); ++i) {
      steps_on += got[i]->result->n_decode_steps;
      steps_off += want[i]->result->n_decode_steps;
    }
    EXPECT_LT(steps_on, steps_off);
    if (blocks > 0) EXPECT_GT(s.n_preemptions, 0u);
    expect_idle_books(*spec);
  }
}

TEST_F(DeviceExecutorTest, RefusesWhatTheDeviceDoesNotRunNamingTheField) {
  auto engine = make(config(2));
  auto sink = std::make_shared<Sink>();
  GenerationRequest r = request(ids_of(5, 1), 4);
  r.kv_codec = KvCodecKind::kInt8;
  absl::Status st = engine->submit(r, sink, std::make_shared<CancelToken>());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_MSG_HAS(st, "kv.codec: int8 is not served on reference");
  r.kv_codec = KvCodecKind::kKvSplice;
  EXPECT_EQ(engine->submit(r, sink, std::make_shared<CancelToken>()).code(), absl::StatusCode::kInvalidArgument);
  r.kv_codec.reset();
  r.kv_repair = GenerationRequest::KvRepair::kOn;
  st = engine->submit(r, sink, std::make_shared<CancelToken>());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_MSG_HAS(st, "kv.repair: ON but KV repair operators run only on model.device cpu");
  // The engine's own default codec must be one the device stores: a kvsplice default is refused at start.
  ExecutorOptions o;
  o.device.kind = DeviceKind::kReference;
  o.kv_codec = KvCodecKind::kKvSplice;
  auto ex = make_executor(model_, o);
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument) << ex.status();
  EXPECT_MSG_HAS(ex.status(), "engine.kv_codec: kvsplice runs only on model.device cpu");
  // A model the device decoder cannot run: int4 weights (int8 ones it runs).
  LoadOptions lo;
  lo.dtype = WeightDtype::kInt4;
  auto q = load_model("builtin:tiny", lo);
  ASSERT_TRUE(q.ok());
  o.kv_codec = KvCodecKind::kF32;
  auto refused = make_executor(std::shared_ptr<const LoadedModel>(std::move(q).value()), o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_MSG_HAS(refused.status(), "model.device reference");
  EXPECT_MSG_HAS(refused.status(), "model.dtype int4");
  lo.dtype = WeightDtype::kInt8;
  auto q8 = load_model("builtin:tiny", lo);
  ASSERT_TRUE(q8.ok());
  EXPECT_TRUE(make_executor(std::shared_ptr<const LoadedModel>(std::move(q8).value()), o).ok());
  // fp16 weights: a device format. The reference device runs them; the CPU refuses them naming the field.
  LoadOptions h;
  h.dtype = WeightDtype::kF16;
  auto half = load_model("builtin:tiny", h);
  ASSERT_TRUE(half.ok()) << half.status();
  std::shared_ptr<const LoadedModel> half_model(std::move(half).value());
  EXPECT_TRUE(make_executor(half_model, o).ok());
  auto on_cpu = make_executor(half_model, ExecutorOptions{});
  EXPECT_INVALID(on_cpu.status(),
                 "model.dtype fp16: fp16 is a device weight format (model.device cuda or reference)");
  // Devices by name.
  EXPECT_EQ(parse_device("cuda:1")->index, 1);
  EXPECT_EQ(parse_device("cuda")->kind, DeviceKind::kCuda);
  EXPECT_EQ(parse_device("reference")->kind, DeviceKind::kReference);
  EXPECT_INVALID(parse_device("gpu0").status(), "model.device: unknown value \"gpu0\"");
  EXPECT_INVALID(parse_device("cuda:-1").status(), "cuda:-1");
  EXPECT_INVALID(parse_device("cuda:01").status(), "cuda:01");
  if (!cuda_executor_built()) {
    o.device = *parse_device("cuda:0");
    EXPECT_MSG_HAS(make_executor(model_, o).status(), "built without the CUDA decoder");
  }
}

TEST_F(DeviceExecutorTest, AStickyDeviceErrorFailsEveryRequestAndRefusesNewOnes) {
  ReferenceDecoder* device = nullptr;
  EngineConfig c = config(4);
  std::atomic<int> failures{0};
  absl::Notification reported;
  c.on_device_failure = [&](const absl::Status&) {
    if (failures.fetch_add(1) == 0) reported.Notify();
  };
  auto engine = make(c, &device);
  // Warm: one request completes.
  EXPECT_EQ(run_all(*engine, {request(ids_of(5, 1), 4)})[0]->ids.size(), 4u);
  // Two long requests in flight, then the device breaks for good.
  auto a = std::make_shared<Sink>(), b = std::make_shared<Sink>();
  ASSERT_TRUE(engine->submit(request(ids_of(8, 2), 400), a, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(engine->submit(request(ids_of(9, 3), 400), b, std::make_shared<CancelToken>()).ok());
  device->inject_fault(true);
  ASSERT_TRUE(a->wait(120));
  ASSERT_TRUE(b->wait(120));
  for (const auto& s : {a, b}) {
    EXPECT_EQ(s->result.status().code(), absl::StatusCode::kUnavailable) << s->result.status();
    EXPECT_MSG_HAS(s->result.status(), "device reference failed");
  }
  ASSERT_TRUE(reported.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(failures.load(), 1);
  const absl::Status st = engine->submit(request(ids_of(5, 4), 4), std::make_shared<Sink>(), std::make_shared<CancelToken>());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_MSG_HAS(st, "the engine's device failed");
  EXPECT_FALSE(engine->stats().executor.healthy);
  ASSERT_TRUE(engine->wait_idle(10));
  expect_idle_books(*engine);
}

TEST_F(DeviceExecutorTest, ANonStickyStepErrorFailsOnlyThatStep) {
  ReferenceDecoder* device = nullptr;
  auto engine = make(config(4), &device);
  device->inject_fault(false);
  const auto failed = run_all(*engine, {request(ids_of(5, 1), 4)});
  EXPECT_EQ(failed[0]->result.status().code(), absl::StatusCode::kInternal) << failed[0]->result.status();
  const auto ok = run_all(*engine, {request(ids_of(5, 1), 4)});
  ASSERT_TRUE(ok[0]->result.ok()) << ok[0]->result.status();
  EXPECT_EQ(ok[0]->ids.size(), 4u);
  EXPECT_TRUE(engine->stats().executor.healthy);
  expect_idle_books(*engine);
}

}  // namespace
}  // namespace frost
