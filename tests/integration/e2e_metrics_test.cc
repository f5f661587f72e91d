// End-to-end test of frostd's /metrics (harness: tests/testing/e2e_harness.h): the counters match what the
// client saw, and the exposition passes `promtool check metrics` when promtool is on PATH.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

class GrpcE2eMetrics : public E2eTest {};

TEST_F(GrpcE2eMetrics, CountersMatchWhatTheClientSaw) {
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));

  int completion = 0, prompt = 0;
  const std::vector<std::string> prompts = {"a", "hello", "Once upon a time"};
  const std::vector<int> lengths = {3, 5, 9};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const StreamOutcome o = RunGenerate(f->stub(), LongRequest(lengths[i], i + 1, prompts[i]));
    ASSERT_TRUE(CompletedWithLength(o, lengths[i]));
    EXPECT_EQ(o.final.prompt_tokens(), static_cast<int32_t>(prompts[i].size()) + 1);  // BOS + bytes
    completion += static_cast<int>(o.ids.size());
    prompt += o.final.prompt_tokens();
  }
  v1::GenerateRequest bad = LongRequest(0);
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), bad), StatusCode::INVALID_ARGUMENT, {"max_new_tokens"}));
  {
    v1::TokenizeResponse resp;
    ASSERT_TRUE(f->Tokenize("hello", &resp).ok());
    EXPECT_EQ(resp.token_ids_size(), 6);
  }

  // Requests are counted when the server finishes them, which may be just after the client got its status.
  const Scrape m = f->WaitMetrics([](const Scrape& s) {
    return s.Sum("frost_requests_total", {{"rpc", "Generate"}}) == 4 &&
           s.Sum("frost_requests_total", {{"rpc", "Tokenize"}}) == 1;
  });
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}), 3) << m.text();
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}}), 4);
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Tokenize"}, {"code", "OK"}}), 1);
  EXPECT_EQ(m.Sum("frost_request_duration_seconds_count", {{"rpc", "Generate"}}), 4);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "invalid_argument"}}), 1);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "queue_full"}}), 0);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "unavailable"}}), 0);
  EXPECT_EQ(m.Sum("frost_generations_total", {{"finish_reason", "length"}}), 3);
  EXPECT_EQ(m.Sum("frost_generations_total"), 3);
  EXPECT_EQ(m.Sum("frost_generation_tokens_total"), completion);
  EXPECT_EQ(m.Sum("frost_prompt_tokens_total"), prompt);
  EXPECT_EQ(m.Sum("frost_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(m.Sum("frost_e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(m.Sum("frost_request_queue_time_seconds_count"), 3);
  // One inter-token gap per token after each stream's first.
  EXPECT_EQ(m.Sum("frost_inter_token_latency_seconds_count"), completion - 3);
  EXPECT_EQ(m.Sum("frost_time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_GT(m.Sum("frost_time_to_first_token_seconds_sum"), 0);
  EXPECT_EQ(m.Sum("frost_ready"), 1);
  EXPECT_TRUE(m.Idle()) << m.Gauges();
  EXPECT_GT(m.Sum("frost_kv_cache_bytes_per_token"), 0);
  // The batching engine's books: nothing held when idle, the pool's blocks add up, every step counted.
  const double blocks = m.Sum("frost_kv_cache_blocks");
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_blocks", {{"state", "used"}}), 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_blocks", {{"state", "cached"}}) +
                m.Sum("frost_kv_cache_blocks", {{"state", "free"}}),
            blocks);
  EXPECT_EQ(m.Sum("frost_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_pool_bytes"), blocks * m.Sum("frost_kv_cache_block_bytes"));
  // The capacity the running / waiting gauges are measured against (engine.* defaults: 32 + 128).
  EXPECT_EQ(m.Sum("frost_engine_max_running"), 32);
  EXPECT_EQ(m.Sum("frost_engine_max_waiting"), 128);
  EXPECT_EQ(m.Sum("frost_preemptions_total"), 0);
  // Every admission looked its prompt up in the prefix cache (the warm-up's 2-token prompt included).
  EXPECT_EQ(m.Sum("frost_prefix_cache_queries_tokens_total"), prompt + 1);
  EXPECT_GE(m.Sum("frost_prefix_cache_hits_tokens_total"), 0);
  const double steps = m.Sum("frost_engine_steps_total");
  EXPECT_GE(steps, completion);  // one step per generated token at least (streams ran one at a time)
  EXPECT_EQ(m.Sum("frost_batch_size_count"), steps);
  EXPECT_EQ(m.Sum("frost_batch_tokens_count"), steps);
  EXPECT_EQ(m.Sum("frost_batch_tokens_sum"),
            prompt + completion - 3 + 1 + 1);  // + warm-up: 1 prompt row, 1 decode
  EXPECT_GT(m.Sum("frost_engine_step_seconds_total", {{"phase", "forward"}}), 0);

  // The exposition is valid Prometheus text (promtool from the Debian prometheus package).
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    std::cerr << "[  NOTE    ] promtool not on PATH: `promtool check metrics` part skipped\n";
  } else {
    testing::TempDir dir("frost_e2e_promtool");
    testing::write_text_file(dir.file("metrics.txt"), m.text());
    const std::string cmd =
        "promtool check metrics < " + dir.file("metrics.txt") + " > " + dir.file("promtool.out") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "promtool check metrics failed:\n"
                                                       << ReadFileOrEmpty(dir.file("promtool.out"));
  }
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost::e2e
