// Metrics: what frostd's /metrics exposes — names, units, label values, and the engine gauges
// read at scrape time.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace frost::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(MetricsTest, CountersAndHistogramsReflectWhatWasRecorded) {
  Metrics m;
  m.record_request("Generate", grpc::StatusCode::OK, 0.5);
  m.record_request("Generate", grpc::StatusCode::OK, 0.25);
  m.record_request("Generate", grpc::StatusCode::INVALID_ARGUMENT, 0.001);
  m.record_rejected(RejectReason::kInvalidArgument);
  m.record_rejected(RejectReason::kQueueFull);
  m.record_rejected(RejectReason::kFailedPrecondition);
  m.record_write_stall();
  m.record_generation(5, 16, 0.01, 0.5, "length");
  m.record_generation(3, 2, 0.02, 0.25, "stop");
  m.record_time_to_first_token(0.004);
  m.record_inter_token_latency(0.002);
  const std::string text = m.render();
  EXPECT_TRUE(has_line(text, "frost_requests_total{code=\"OK\",protocol=\"grpc\",rpc=\"Generate\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "frost_requests_total{code=\"INVALID_ARGUMENT\",protocol=\"grpc\",rpc=\"Generate\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_requests_rejected_total{reason=\"invalid_argument\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_requests_rejected_total{reason=\"queue_full\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_requests_rejected_total{reason=\"failed_precondition\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_generate_write_stalls_total 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_prompt_tokens_total 8")) << text;
  EXPECT_TRUE(has_line(text, "frost_generation_tokens_total 18")) << text;
  EXPECT_TRUE(has_line(text, "frost_e2e_request_latency_seconds_count 2")) << text;
  EXPECT_TRUE(has_line(text, "frost_e2e_request_latency_seconds_sum 0.75")) << text;
  EXPECT_TRUE(has_line(text, "frost_time_to_first_token_seconds_count 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_inter_token_latency_seconds_count 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_request_duration_seconds_count{protocol=\"grpc\",rpc=\"Generate\"} 3")) << text;
  // Every frost family is typed, and nothing frost exports carries a request-specific label.
  EXPECT_NE(text.find("# TYPE frost_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_EQ(text.find("request_id"), std::string::npos);
}

TEST(MetricsTest, EngineGaugesAreReadAtScrapeTime) {
  Metrics m;
  std::string text = m.render();
  EXPECT_TRUE(has_line(text, "frost_kv_cache_bytes_in_use 0")) << text;
  EXPECT_TRUE(has_line(text, "frost_ready 0")) << text;
  EngineStats stats;
  stats.n_running = 3;
  stats.n_waiting = 2;
  stats.kv_bytes_in_use = 123456;
  stats.kv_bytes_per_token = 512;
  m.set_stats_source([&stats] { return stats; });
  m.set_ready(true);
  text = m.render();
  EXPECT_TRUE(has_line(text, "frost_requests_running 3")) << text;
  EXPECT_TRUE(has_line(text, "frost_requests_waiting 2")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_cache_bytes_in_use 123456")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_cache_bytes_per_token 512")) << text;
  EXPECT_TRUE(has_line(text, "frost_ready 1")) << text;
  stats.kv_bytes_in_use = 0;  // the next scrape sees the new value, no push needed
  EXPECT_TRUE(has_line(m.render(), "frost_kv_cache_bytes_in_use 0"));
}

// What the inference gateway's endpoint picker reads (deploy/k8s/overlays/gateway/config/picker.yaml): KV
// usage as the fraction of the pool's blocks held, and the block size and count as integer labels of an info
// gauge.
TEST(MetricsTest, EndpointPickerGauges) {
  Metrics m;
  EngineStats stats;
  stats.kv_blocks_total = 200;
  stats.kv_blocks_used = 50;
  stats.kv_block_tokens = 16;
  stats.kv_block_positions = 32;  // a compact codec: more positions than engine.kv_block_tokens
  m.set_stats_source([&stats] { return stats; });
  const std::string text = m.render();
  EXPECT_TRUE(has_line(text, "frost_kv_cache_usage_ratio 0.25")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_cache_config_info{block_size=\"32\",num_blocks=\"200\"} 1")) << text;
  EXPECT_NE(text.find("# TYPE frost_kv_cache_config_info gauge"), std::string::npos) << text;
}

TEST(MetricsTest, KvRepairAndKvSpliceFamilies) {
  Metrics m;
  EngineStats stats;
  m.set_stats_source([&stats] { return stats; });
  std::string text = m.render();
  EXPECT_EQ(text.find("frost_kv_splice_active{"), std::string::npos) << text;  // absent = none
  EXPECT_TRUE(has_line(text, "frost_kv_splice_sequences_total 0")) << text;
  stats.kv_splice_active = "kvsplice/2";
  stats.kv_splice_rank = "8";
  stats.n_spliced = 3;
  stats.finished_by_codec["kvsplice"] = 3;
  stats.kv_repair_active = "kv_repair/1";
  stats.kv_repair_codec = "int4";
  text = m.render();
  EXPECT_TRUE(has_line(text, "frost_kv_splice_active{artifact=\"kvsplice/2\",rank=\"8\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_splice_sequences_total 3")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_sequences_total{codec=\"kvsplice\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "frost_kv_repair_active{artifact=\"kv_repair/1\",codec=\"int4\"} 1")) << text;
  EXPECT_NE(text.find("# TYPE frost_kv_splice_active gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE frost_kv_splice_sequences_total counter"), std::string::npos) << text;
}

// vLLM's spec_decode counters with frost's prefix, read from EngineStats at scrape time. A synthetic
// snapshot: 3 drafts of 4 tokens; their first tokens accepted 3 times, second 2, third 1, fourth never: 6
// accepted.
TEST(MetricsTest, SpecDecodeCountersAddUp) {
  Metrics m;
  EngineStats stats;
  m.set_stats_source([&stats] { return stats; });
  std::string text = m.render();
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_drafts_total 0")) << text;  // present while unused
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_accepted_tokens_total 0")) << text;
  EXPECT_EQ(text.find("frost_spec_decode_num_accepted_tokens_per_pos_total{"), std::string::npos) << text;
  stats.spec_drafts = 3;
  stats.spec_draft_tokens = 12;
  stats.spec_accepted_tokens = 6;
  stats.spec_forced_tokens = 2;
  stats.spec_accepted_per_pos = {3, 2, 1, 0};
  text = m.render();
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_drafts_total 3")) << text;
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_draft_tokens_total 12")) << text;
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_accepted_tokens_total 6")) << text;
  EXPECT_TRUE(has_line(text, "frost_spec_decode_num_forced_tokens_total 2")) << text;
  uint64_t sum = 0;
  for (size_t i = 0; i < stats.spec_accepted_per_pos.size(); ++i) {
    const uint64_t v = stats.spec_accepted_per_pos[i];
    EXPECT_TRUE(has_line(text, "frost_spec_decode_num_accepted_tokens_per_pos_total{position=\"" +
                                   std::to_string(i) + "\"} " + std::to_string(v)))
        << text;
    EXPECT_LE(v, stats.spec_drafts);
    sum += v;
  }
  EXPECT_EQ(sum, stats.spec_accepted_tokens);  // the per-position series add up to the accepted tokens
  for (const char* family :
       {"frost_spec_decode_num_drafts_total", "frost_spec_decode_num_draft_tokens_total",
        "frost_spec_decode_num_accepted_tokens_total", "frost_spec_decode_num_accepted_tokens_per_pos_total",
        "frost_spec_decode_num_forced_tokens_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " counter"), std::string::npos) << family;
    EXPECT_NE(text.find(std::string("# HELP ") + family + " "), std::string::npos) << family;
  }
}

TEST(MetricsTest, ServeRejectsAMalformedAddressNamingIt) {
  Metrics m;
  absl::StatusOr<int> port = m.serve("no-port-here");
  ASSERT_FALSE(port.ok());
  EXPECT_NE(std::string(port.status().message()).find("no-port-here"), std::string::npos) << port.status();
}

}  // namespace
}  // namespace frost::server
