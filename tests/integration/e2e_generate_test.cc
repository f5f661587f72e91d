// End-to-end tests of frostd's Generate path (harness: tests/testing/e2e_harness.h): golden streams of
// stories260K against its reference, client cancels and deadlines on long builtin:15m streams, and the
// admission limits under overload.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

// --------------------------------------------------------------------------------------------------- golden

// stories260K, temperature 0: every case of reference.json streamed through gRPC, token for token.
class GrpcE2eStories : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options(const std::string& dir) {
    FrostdOptions o;
    o.model = dir;
    o.yaml = kBaseYaml;
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eStories::shared_;

TEST_F(GrpcE2eStories, GreedyStreamMatchesReference) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  ASSERT_EQ(ref["cases"].size(), 3u);
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    SCOPED_TRACE("prompt: " + prompt);
    const auto input_ids = c["input_ids"].get<std::vector<int32_t>>();
    const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
    // The reference decodes greedily with no stop token; its ids hold no EOS, so the engine's EOS stop
    // cannot trigger and ignore_eos is left at its default.
    ASSERT_EQ(std::count(want_ids.begin(), want_ids.end(), 2), 0);

    v1::GenerateRequest req;
    req.set_text(prompt);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    const StreamOutcome o = RunGenerate(f->stub(), req);
    ASSERT_TRUE(o.status.ok()) << Describe(o);
    EXPECT_EQ(o.ids, want_ids);
    // greedy_new_text is DecodeIds(new ids), which drops the leading space of the first piece; the stream
    // continues the prompt and keeps it. prompt_plus_greedy_text pins the exact streamed text.
    EXPECT_EQ(prompt + o.text, c["prompt_plus_greedy_text"].get<std::string>());
    const std::string want_text = c["greedy_new_text"].get<std::string>();
    EXPECT_TRUE(o.text == want_text || o.text == " " + want_text) << "streamed \"" << o.text << "\"";
    ASSERT_TRUE(o.has_final) << Describe(o);
    EXPECT_EQ(o.after_final, 0);
    EXPECT_EQ(o.final.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(o.final.prompt_tokens(), static_cast<int32_t>(input_ids.size()));
    EXPECT_EQ(o.final.completion_tokens(), static_cast<int32_t>(want_ids.size()));
    EXPECT_TRUE(o.final.stop_reason().empty()) << o.final.stop_reason();

    // The same prompt given as token ids (no BOS added) gives the same tokens.
    v1::GenerateRequest by_ids = req;
    by_ids.mutable_token_ids()->mutable_ids()->Assign(input_ids.begin(), input_ids.end());
    const StreamOutcome o2 = RunGenerate(f->stub(), by_ids);
    ASSERT_TRUE(o2.status.ok()) << Describe(o2);
    EXPECT_EQ(o2.ids, want_ids);
    EXPECT_EQ(o2.final.prompt_tokens(), static_cast<int32_t>(input_ids.size()));
  }
}

// Every KV codec over gRPC (per-request kv.codec): the stream completes, and the codecs that keep
// enough precision give the reference's greedy tokens. int4 (7 levels per token and head) is only
// required to agree on a prefix: it is the codec the repair operators exist for.
TEST_F(GrpcE2eStories, GenerateWithEveryKvCodec) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  const nlohmann::json& c = ref["cases"][0];
  const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
  for (const char* codec : {"fp32", "fp16", "bf16", "int8", "int4"}) {
    SCOPED_TRACE(codec);
    v1::GenerateRequest req;
    req.set_text(c["prompt"].get<std::string>());
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    req.mutable_kv()->set_codec(codec);
    const StreamOutcome o = RunGenerate(f->stub(), req);
    ASSERT_TRUE(o.status.ok()) << Describe(o);
    ASSERT_TRUE(o.has_final) << Describe(o);
    EXPECT_EQ(o.final.completion_tokens(), static_cast<int32_t>(want_ids.size()));
    if (std::string(codec) == "int4") {
      ASSERT_GE(o.ids.size(), 4u);
      EXPECT_TRUE(std::equal(o.ids.begin(), o.ids.begin() + 4, want_ids.begin()));
    } else {
      EXPECT_EQ(o.ids, want_ids);
    }
    EXPECT_EQ(o.final.kv_codec(), codec);
    EXPECT_EQ(o.final.kv_splice(), "");
  }
  // kvsplice needs an active KVSplice (a kvsplice artifact or engine.kv_splice): refused before any model
  // work.
  v1::GenerateRequest req;
  req.set_text(c["prompt"].get<std::string>());
  req.mutable_kv()->set_codec("kvsplice");
  const StreamOutcome o = RunGenerate(f->stub(), req);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(o);
  EXPECT_NE(o.status.error_message().find("kv.codec: kvsplice but no KVSplice is active"), std::string::npos)
      << Describe(o);
  EXPECT_EQ(o.chunks, 0);
}

// Structured output over gRPC: the SamplingParams oneof forces the completion into a schema / regex, and a
// constraint that does not compile is INVALID_ARGUMENT naming the proto field and the position.
TEST_F(GrpcE2eStories, ConstraintOneofForcesTheOutputAndNamesTheFieldWhenBad) {
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  v1::GenerateRequest req;
  req.set_text("Lily");
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(3);
  req.mutable_sampling()->set_max_new_tokens(200);
  req.mutable_sampling()->set_json_schema(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer"}},)"
      R"("required":["name","age"]})");
  const StreamOutcome out = RunGenerate(f->stub(), req);
  ASSERT_TRUE(out.status.ok()) << Describe(out);
  ASSERT_EQ(out.final.finish_reason(), v1::FINISH_REASON_STOP) << out.text;
  const nlohmann::json j = nlohmann::json::parse(out.text);
  EXPECT_TRUE(j.at("name").is_string() && j.at("age").is_number_integer()) << out.text;
  EXPECT_EQ(j.size(), 2u) << out.text;

  v1::GenerateRequest rx = req;
  rx.mutable_sampling()->set_regex("[0-9]{3}-[a-z]{2,4}");
  const StreamOutcome r = RunGenerate(f->stub(), rx);
  ASSERT_TRUE(r.status.ok()) << Describe(r);
  EXPECT_TRUE(std::regex_match(r.text, std::regex("[0-9]{3}-[a-z]{2,4}"))) << r.text;

  v1::GenerateRequest bad = req;
  bad.mutable_sampling()->set_json_schema(R"({"type":"object","properties":{"a":{"type":"strng"}}})");
  const StreamOutcome b = RunGenerate(f->stub(), bad);
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(b);
  EXPECT_NE(b.status.error_message().find("sampling.json_schema: "), std::string::npos) << Describe(b);
  EXPECT_NE(b.status.error_message().find("/properties/a/type"), std::string::npos) << Describe(b);
  v1::GenerateRequest badg = req;
  badg.mutable_sampling()->set_grammar("root ::= (");
  const StreamOutcome g = RunGenerate(f->stub(), badg);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(g);
  EXPECT_NE(g.status.error_message().find("sampling.grammar: "), std::string::npos) << Describe(g);
}

TEST_F(GrpcE2eStories, TokenizeAndModelInfo) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  ASSERT_FALSE(ref["cases"].empty());
  for (const nlohmann::json& c : ref["cases"]) {
    v1::TokenizeResponse resp;
    const grpc::Status st = f->Tokenize(c["prompt"].get<std::string>(), &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()),
              c["input_ids"].get<std::vector<int32_t>>())
        << c["prompt"];
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ModelInfo info;
  const grpc::Status st = f->stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(info.name(), "stories260K");
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.context_length(), 512);
  EXPECT_GT(info.n_params(), 200000);
  EXPECT_LT(info.n_params(), 400000);
  EXPECT_EQ(info.weight_dtype(), "fp32");
  EXPECT_EQ(info.kv_codec(), "fp32");
  // The KV block pool and the scheduling limits (the defaults of configs/default.yaml).
  EXPECT_GT(info.kv_blocks(), 0);
  EXPECT_EQ(info.kv_block_tokens(), 16);
  EXPECT_EQ(info.kv_cache_bytes(), info.kv_blocks() * info.kv_block_bytes());
  EXPECT_EQ(info.max_running(), 32);
  EXPECT_EQ(info.max_batch_tokens(), 128);
  EXPECT_TRUE(info.prefix_caching());
}

// frostd on a device executor (model.device: reference — the CUDA decoder's wiring and functions on the
// host): the golden's greedy streams over gRPC, sampling on the device, ModelInfo and /metrics saying where it
// runs, and what the device does not run refused naming the field.
TEST_F(E2eTest, ReferenceDeviceServesTheGoldenOverGrpc) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  Frostd f;
  FrostdOptions o;
  o.model = testing::shared_path("models/stories260K");
  o.yaml = std::string(kBaseYaml) + "  device: reference\n";  // inside kBaseYaml's model: section
  ASSERT_TRUE(f.Start(o));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  for (const nlohmann::json& c : ref["cases"]) {
    const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
    v1::GenerateRequest req;
    req.set_text(c["prompt"].get<std::string>());
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    const StreamOutcome out = RunGenerate(f.stub(), req);
    ASSERT_TRUE(out.status.ok()) << Describe(out);
    EXPECT_EQ(out.ids, want_ids) << c["prompt"];
  }
  // A seeded sample drawn on the device reproduces, and equals the host sampler's draw (logprobs force it).
  v1::GenerateRequest s;
  s.set_text("Once upon a time");
  s.mutable_sampling()->set_temperature(0.9f);
  s.mutable_sampling()->set_top_p(0.9f);
  s.mutable_sampling()->set_seed(11);
  s.mutable_sampling()->set_max_new_tokens(24);
  const StreamOutcome a = RunGenerate(f.stub(), s), b = RunGenerate(f.stub(), s);
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << Describe(a);
  EXPECT_EQ(a.ids, b.ids);
  v1::GenerateRequest h = s;
  h.mutable_sampling()->set_logprobs(0);
  const StreamOutcome hc = RunGenerate(f.stub(), h);
  ASSERT_TRUE(hc.status.ok()) << Describe(hc);
  EXPECT_EQ(hc.ids, a.ids);
  // Refusals name the field.
  v1::GenerateRequest bad = s;
  bad.mutable_kv()->set_codec("int8");
  const StreamOutcome r1 = RunGenerate(f.stub(), bad);
  EXPECT_EQ(r1.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(r1);
  EXPECT_NE(r1.status.error_message().find("kv.codec: int8 is not served on reference"), std::string::npos)
      << Describe(r1);
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(f.stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.device(), "reference");
  EXPECT_EQ(info.device_name(), "host CPU");
  EXPECT_GT(info.device_bytes(), info.weight_bytes());
  const Scrape m = f.Metrics();
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.Sum("frost_device_healthy", {{"device", "reference"}}), 1.0) << m.text();
  EXPECT_GT(m.Sum("frost_device_sampled_rows_total", {{"where", "device"}}), 0);
  EXPECT_GT(m.Sum("frost_device_sampled_rows_total", {{"where", "host"}}), 0);
  EXPECT_EQ(m.Sum("frost_device_memory_bytes", {{"kind", "weights"}}), static_cast<double>(info.weight_bytes()));
  EXPECT_EQ(m.Sum("frost_device_memory_bytes", {{"kind", "kv_pool"}}), static_cast<double>(info.kv_cache_bytes()));
}

// int8 / int4 weights served over gRPC (model.dtype): the model says what it serves (ModelInfo and
// frost_model_info), holds fewer weight bytes, and its greedy story agrees with fp32's on a prefix (int8 is
// close enough to give the reference's first tokens; the exact figures are docs/quantization.md's).
TEST_F(GrpcE2eStories, QuantizedWeightsServeAndSayWhatTheyAre) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  const nlohmann::json& c = ref["cases"][0];
  const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
  int64_t fp32_bytes = 0;
  {
    FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(f->stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info).ok());
    fp32_bytes = info.weight_bytes();
    EXPECT_GT(fp32_bytes, 0);
  }
  for (const char* dtype : {"int8", "int4"}) {
    SCOPED_TRACE(dtype);
    Frostd f;
    FrostdOptions o = Options(testing::shared_path("models/stories260K"));
    o.yaml = std::string(kBaseYaml) + "  dtype: " + dtype + "\n";  // inside kBaseYaml's model: section
    ASSERT_TRUE(f.Start(o));
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(f.stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.weight_dtype(), dtype);
    EXPECT_LT(info.weight_bytes(), fp32_bytes);
    EXPECT_TRUE(info.kernels() == "avx512" || info.kernels() == "avx2" || info.kernels() == "scalar") << info.kernels();
    const Scrape m = f.Metrics();
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_EQ(m.Sum("frost_model_info", {{"weights", dtype}, {"kernels", info.kernels()}}), 1.0) << m.text();
    EXPECT_EQ(m.Sum("frost_model_weight_bytes"), static_cast<double>(info.weight_bytes()));

    v1::GenerateRequest req;
    req.set_text(c["prompt"].get<std::string>());
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    const StreamOutcome out = RunGenerate(f.stub(), req);
    ASSERT_TRUE(out.status.ok()) << Describe(out);
    ASSERT_EQ(out.ids.size(), want_ids.size());
    const size_t prefix = std::string(dtype) == "int8" ? 8 : 3;
    EXPECT_EQ(std::vector<int32_t>(out.ids.begin(), out.ids.begin() + prefix),
              std::vector<int32_t>(want_ids.begin(), want_ids.begin() + prefix));
  }
}

// --------------------------------------------------------------------------------------------------- cancel

class GrpcE2eLong : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options() {
    FrostdOptions o;
    o.model = "builtin:15m";
    o.yaml = kBaseYaml;
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eLong::shared_;

TEST_F(GrpcE2eLong, ClientCancelEndsStreamAndFreesKv) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.Idle()) << before.Gauges();
  Clock::time_point t_cancel;
  StreamHooks hooks;
  hooks.on_chunk = [&](int n, grpc::ClientContext& ctx) {
    if (n == 3) {
      t_cancel = Clock::now();
      ctx.TryCancel();
    }
  };
  const StreamOutcome o = RunGenerate(f->stub(), LongRequest(kLongTokens), std::nullopt, hooks);
  ASSERT_GE(o.chunks, 3) << Describe(o);
  const double cancel_to_end = SecondsSince(t_cancel);
  EXPECT_EQ(o.status.error_code(), StatusCode::CANCELLED) << Describe(o);
  EXPECT_FALSE(o.has_final) << Describe(o);
  EXPECT_LT(static_cast<int>(o.ids.size()), kLongTokens);
  EXPECT_LT(cancel_to_end, 2.0) << "Finish() came " << cancel_to_end << " s after TryCancel()";

  // The server saw the cancel and stopped generating: the generation ended "cancelled" well short of
  // max_new_tokens, the KV cache is released and nothing runs.
  const std::map<std::string, std::string> cancelled = {{"finish_reason", "cancelled"}};
  const std::map<std::string, std::string> cancelled_rpc = {{"rpc", "Generate"}, {"code", "CANCELLED"}};
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return s.Count("frost_generations_total", cancelled) -
                   before.Count("frost_generations_total", cancelled) ==
               1 &&
           s.Count("frost_requests_total", cancelled_rpc) -
                   before.Count("frost_requests_total", cancelled_rpc) ==
               1 &&
           s.Idle();
  });
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  EXPECT_EQ(
      after.Count("frost_generations_total", cancelled) - before.Count("frost_generations_total", cancelled),
      1);
  EXPECT_EQ(after.Count("frost_requests_total", cancelled_rpc) -
                before.Count("frost_requests_total", cancelled_rpc),
            1);
  const double generated =
      after.Sum("frost_generation_tokens_total") - before.Sum("frost_generation_tokens_total");
  EXPECT_GE(generated, static_cast<double>(o.ids.size()));
  EXPECT_LT(generated, kLongTokens) << "the engine kept generating after the cancel";
}

TEST_F(GrpcE2eLong, DeadlineEndsStreamAndFreesKv) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.Idle()) << before.Gauges();
  constexpr double kDeadline = 0.3;
  const StreamOutcome o = RunGenerate(f->stub(), LongRequest(kLongTokens), std::chrono::milliseconds(300));
  EXPECT_EQ(o.status.error_code(), StatusCode::DEADLINE_EXCEEDED) << Describe(o);
  EXPECT_FALSE(o.has_final) << Describe(o);
  EXPECT_LT(static_cast<int>(o.ids.size()), kLongTokens);
  EXPECT_LT(o.seconds, kDeadline + 1.5) << Describe(o);
  EXPECT_GE(o.seconds, kDeadline - 0.05) << Describe(o);

  // Whether the engine saw its own copy of the deadline first ("deadline") or gRPC's cancellation
  // ("cancelled") is a race; either way exactly one generation ended early and everything is released.
  auto early = [](const Scrape& s) {
    return s.Count("frost_generations_total", {{"finish_reason", "deadline"}}) +
           s.Count("frost_generations_total", {{"finish_reason", "cancelled"}});
  };
  const Scrape after =
      f->WaitMetrics([&](const Scrape& s) { return early(s) - early(before) == 1 && s.Idle(); });
  EXPECT_EQ(early(after) - early(before), 1);
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  const double generated =
      after.Sum("frost_generation_tokens_total") - before.Sum("frost_generation_tokens_total");
  EXPECT_GE(generated, static_cast<double>(o.ids.size()));
  EXPECT_LT(generated, kLongTokens) << "the engine kept generating after the deadline";
}

// ------------------------------------------------------------------------------------------------- overload

class GrpcE2eOverload : public E2eTest {};

TEST_F(GrpcE2eOverload, RejectsExactlyTheRequestsBeyondRunningPlusWaiting) {
  constexpr int kRunning = 2, kWaiting = 3, kExtra = 4, kCalls = kRunning + kWaiting + kExtra;
  // 320 tokens of builtin:15m: the first streams run for about a second, far longer than it takes the
  // nine calls to arrive, and the whole test stays at a few seconds.
  constexpr int kTokens = 320;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.model = "builtin:15m";
  opts.yaml = std::string(kBaseYaml) + "engine:\n  max_running: " + std::to_string(kRunning) +
              "\n  max_waiting: " + std::to_string(kWaiting) + "\n";
  ASSERT_TRUE(f->Start(opts));

  std::vector<StreamOutcome> out(kCalls);
  std::vector<double> ended_at(kCalls);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  Clock::time_point t_go;
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      out[i] = RunGenerate(f->stub(), LongRequest(kTokens, static_cast<uint64_t>(i + 1)));
      ended_at[i] = SecondsSince(t_go);
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    t_go = Clock::now();
    go = true;
  }
  cv.notify_all();
  // While the accepted calls run, the engine holds exactly max_running + max_waiting of them.
  const Scrape full = f->WaitMetrics([&](const Scrape& s) {
    return s.Sum("frost_requests_running") == kRunning && s.Sum("frost_requests_waiting") == kWaiting;
  });
  EXPECT_EQ(full.Sum("frost_requests_running"), kRunning) << full.Gauges();
  EXPECT_EQ(full.Sum("frost_requests_waiting"), kWaiting) << full.Gauges();
  for (std::thread& t : threads) t.join();

  int rejected = 0, completed = 0;
  double first_ok_end = 1e9, last_reject_end = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (out[i].status.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      ++rejected;
      EXPECT_TRUE(Refused(out[i], StatusCode::RESOURCE_EXHAUSTED, {"server busy", "limits 2 + 3"}));
      last_reject_end = std::max(last_reject_end, ended_at[i]);
    } else {
      EXPECT_TRUE(CompletedWithLength(out[i], kTokens)) << "call " << i;
      ++completed;
      first_ok_end = std::min(first_ok_end, ended_at[i]);
    }
  }
  // No race margin is needed: every call arrives within milliseconds, the first accepted one needs ~1 s.
  EXPECT_EQ(rejected, kExtra);
  EXPECT_EQ(completed, kRunning + kWaiting);
  // Rejections are immediate: all of them arrived before the first accepted stream finished.
  EXPECT_LT(last_reject_end, first_ok_end);
  EXPECT_LT(last_reject_end, 5.0);

  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return s.Sum("frost_requests_total", {{"rpc", "Generate"}}) == kCalls && s.Idle();
  });
  EXPECT_EQ(after.Sum("frost_requests_rejected_total", {{"reason", "queue_full"}}), rejected);
  EXPECT_EQ(after.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "RESOURCE_EXHAUSTED"}}),
            rejected);
  EXPECT_EQ(after.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}), completed);
  EXPECT_EQ(after.Sum("frost_generations_total", {{"finish_reason", "length"}}), completed);
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost::e2e
