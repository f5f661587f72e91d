// serving::Serving (core/serving/serving.h): the model and its engine assembled without a server — started
// on the repository's stories260K, greedy text through its engine equal to the Generator's, bad options
// refused naming the config field, and a drain that ends new submissions.
#include "core/serving/serving.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/generate/generator.h"
#include "tests/testing/recording_sink.h"
#include "tests/testing/test_util.h"

namespace frost::serving {
namespace {

ServingOptions stories_options() {
  ServingOptions o;
  o.model_path = testing::source_path("models/stories260K");
  o.threads = std::nullopt;  // leave the test process's threads as they are
  o.log_name = "serving_test";
  o.engine.max_running = 2;
  o.engine.max_waiting = 2;
  o.engine.max_batch_tokens = 128;
  return o;
}

TEST(ServingTest, StartsGeneratesGreedyTextAndDrains) {
  absl::StatusOr<std::unique_ptr<Serving>> s = Serving::start(stories_options());
  ASSERT_TRUE(s.ok()) << s.status();
  Serving& serving = **s;
  ASSERT_NE(serving.model(), nullptr);
  ASSERT_NE(serving.engine(), nullptr);
  EXPECT_GT(serving.ready_s(), 0);
  EXPECT_GT(serving.weight_bytes(), 0);

  GenerationRequest req;
  req.prompt = "Once upon a time";
  req.params.temperature = 0;
  req.params.max_new_tokens = 16;
  req.params.ignore_eos = true;
  auto sink = std::make_shared<testing::RecordingSink>();
  ASSERT_TRUE(serving.engine()->submit(req, sink, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(sink->wait(60));
  ASSERT_TRUE(sink->result.ok()) << sink->result.status();
  EXPECT_EQ(sink->ids.size(), 16u);
  EXPECT_FALSE(sink->text.empty());

  // The same greedy continuation as the Generator on the same model (no engine, no executor).
  Generator gen(*serving.model(), GeneratorConfig{});
  CancelToken cancel;
  std::string text;
  absl::StatusOr<GenerationResult> ref = gen.generate(
      req, [&](const TokenEvent& ev) { text += ev.text; }, cancel);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(sink->text, text);

  EXPECT_TRUE(serving.drain(10));
  EXPECT_TRUE(serving.drain(10));  // idempotent
  auto late = std::make_shared<testing::RecordingSink>();
  const absl::Status refused = serving.engine()->submit(req, late, std::make_shared<CancelToken>());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
}

TEST(ServingTest, AMissingModelPathNamesTheField) {
  ServingOptions o = stories_options();
  o.model_path = testing::source_path("models/no-such-model");
  absl::StatusOr<std::unique_ptr<Serving>> s = Serving::start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StartsWith(s.status().message(), "model.path \"" + o.model_path + "\": ")) << s.status();
}

TEST(ServingTest, AnUnknownKernelsIsaNamesTheField) {
  ServingOptions o = stories_options();
  o.kernels = "avx1024";
  absl::StatusOr<std::unique_ptr<Serving>> s = Serving::start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  // The same text as the server's config check (server/server_config.cc).
  EXPECT_EQ(s.status().message(),
            "model.kernels: unknown value \"avx1024\" (expected auto|avx512|avx2|scalar)");
}

TEST(ServingTest, AnUnknownDeviceNamesTheField) {
  ServingOptions o = stories_options();
  o.device = "tpu";
  absl::StatusOr<std::unique_ptr<Serving>> s = Serving::start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StartsWith(s.status().message(), "model.device: ")) << s.status();
}

}  // namespace
}  // namespace frost::serving
