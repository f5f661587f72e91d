#include "server/server_config.h"

#include <gtest/gtest.h>

#include <string>

#include "server/config_overrides.h"
#include "tests/testing/test_util.h"

namespace frost::server {
namespace {

using ::frost::testing::read_text_file;
using ::frost::testing::source_path;
using ::frost::testing::TempDir;
using ::frost::testing::write_text_file;

absl::Status parse_status(const std::string& yaml) { return parse_server_config(yaml).status(); }

ServerConfig parse_ok(const std::string& yaml) {
  absl::StatusOr<ServerConfig> cfg = parse_server_config(yaml);
  EXPECT_TRUE(cfg.ok()) << cfg.status() << "\n--- yaml ---\n" << yaml;
  return cfg.ok() ? *cfg : ServerConfig();
}

TEST(ServerConfigTest, DefaultsAreTheDocumentedOnes) {
  const ServerConfig c;
  EXPECT_EQ(c.server.listen, "0.0.0.0:50051");
  EXPECT_EQ(c.server.metrics_listen, "0.0.0.0:9090");
  EXPECT_TRUE(c.server.reflection);
  EXPECT_EQ(c.server.max_receive_message_bytes, 4 * 1024 * 1024);
  EXPECT_EQ(c.server.max_send_message_bytes, 4 * 1024 * 1024);
  EXPECT_EQ(c.server.drain_timeout_s, 30.0);
  EXPECT_EQ(c.model.path, "models/stories260K");
  EXPECT_EQ(c.model.dtype, WeightDtype::kF32);
  EXPECT_EQ(c.model.kernels, "auto");
  EXPECT_EQ(c.model.threads, 0);
  EXPECT_EQ(c.model.device, "cpu");
  EXPECT_TRUE(c.model.cuda_graphs);
  EXPECT_EQ(c.engine.max_running, 32);
  EXPECT_EQ(c.engine.max_waiting, 128);
  EXPECT_EQ(c.engine.max_batch_tokens, 128);
  EXPECT_EQ(c.engine.kv_block_tokens, 16);
  EXPECT_EQ(c.engine.kv_cache_bytes, 0);
  EXPECT_TRUE(c.engine.kv_cache_prefault);
  EXPECT_TRUE(c.engine.prefix_caching);
  EXPECT_EQ(c.engine.max_context, 0);
  EXPECT_EQ(c.engine.kv_codec, KvCodecKind::kF32);
  EXPECT_EQ(c.limits.max_prompt_bytes, 65536);
  EXPECT_EQ(c.limits.max_prompt_tokens, 0);
  EXPECT_EQ(c.limits.max_new_tokens, 4096);
  EXPECT_EQ(c.limits.max_stop_strings, 16);
  EXPECT_EQ(c.limits.max_stop_bytes, 256);
  EXPECT_EQ(c.limits.max_stop_token_ids, 64);
  EXPECT_EQ(c.limits.max_logprobs, 20);
  EXPECT_EQ(c.log.level, LogLevel::kInfo);
  EXPECT_TRUE(validate_server_config(c).ok());
}

TEST(ServerConfigTest, DefaultYamlFileIsExactlyTheDefaults) {
  const std::string path = source_path("configs/default.yaml");
  absl::StatusOr<ServerConfig> cfg = load_server_config(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(format_server_config(*cfg), format_server_config(ServerConfig()));
}

TEST(ServerConfigTest, DefaultYamlFileListsEveryField) {
  // Every key that format_server_config() writes appears in the documented file.
  const std::string text = read_text_file(source_path("configs/default.yaml"));
  const std::string formatted = format_server_config(ServerConfig());
  size_t start = 0;
  while (start < formatted.size()) {
    const size_t end = formatted.find('\n', start);
    const std::string line = formatted.substr(start, end - start);
    const std::string key = line.substr(0, line.find(':') + 1);  // "server:" or "  listen:"
    EXPECT_NE(text.find("\n" + key), std::string::npos) << "configs/default.yaml lacks " << key;
    start = end + 1;
  }
}

TEST(ServerConfigTest, EmptyCommentOnlyAndNullSectionsKeepDefaults) {
  const std::string defaults = format_server_config(ServerConfig());
  EXPECT_EQ(format_server_config(parse_ok("")), defaults);
  EXPECT_EQ(format_server_config(parse_ok("# nothing set\n")), defaults);
  EXPECT_EQ(format_server_config(parse_ok("server:\n  # listen: x\nlog:\n")), defaults);
  EXPECT_EQ(format_server_config(parse_ok("{}")), defaults);
}

TEST(ServerConfigTest, ParsesEveryField) {
  const ServerConfig c = parse_ok(R"(
server:
  listen: "[::1]:0"
  metrics_listen: localhost:0
  reflection: false
  max_receive_message_bytes: 1024
  max_send_message_bytes: 2048
  drain_timeout_s: 2.5
model:
  path: ../shared/models/stories260K
  dtype: int8
  kernels: scalar
  threads: 8
engine:
  max_running: 2
  max_waiting: 0
  max_batch_tokens: 64
  kv_block_tokens: 32
  kv_cache_bytes: 3MiB
  kv_cache_prefault: false
  prefix_caching: false
  max_context: 512
  kv_codec: bf16
limits:
  max_prompt_bytes: 100
  max_prompt_tokens: 500
  max_new_tokens: 64
  max_stop_strings: 0
  max_stop_bytes: 8
  max_stop_token_ids: 3
  max_logprobs: 0
log:
  level: debug
)");
  EXPECT_EQ(c.server.listen, "[::1]:0");
  EXPECT_EQ(c.server.metrics_listen, "localhost:0");
  EXPECT_FALSE(c.server.reflection);
  EXPECT_EQ(c.server.max_receive_message_bytes, 1024);
  EXPECT_EQ(c.server.max_send_message_bytes, 2048);
  EXPECT_EQ(c.server.drain_timeout_s, 2.5);
  EXPECT_EQ(c.model.path, "../shared/models/stories260K");
  EXPECT_EQ(c.model.dtype, WeightDtype::kInt8);
  EXPECT_EQ(c.model.kernels, "scalar");
  EXPECT_EQ(c.model.threads, 8);
  EXPECT_EQ(c.engine.max_running, 2);
  EXPECT_EQ(c.engine.max_waiting, 0);
  EXPECT_EQ(c.engine.max_batch_tokens, 64);
  EXPECT_EQ(c.engine.kv_block_tokens, 32);
  EXPECT_EQ(c.engine.kv_cache_bytes, 3 << 20);
  EXPECT_FALSE(c.engine.kv_cache_prefault);
  EXPECT_FALSE(c.engine.prefix_caching);
  EXPECT_EQ(c.engine.max_context, 512);
  EXPECT_EQ(c.engine.kv_codec, KvCodecKind::kBF16);
  EXPECT_EQ(c.limits.max_prompt_bytes, 100);
  EXPECT_EQ(c.limits.max_prompt_tokens, 500);
  EXPECT_EQ(c.limits.max_new_tokens, 64);
  EXPECT_EQ(c.limits.max_stop_strings, 0);
  EXPECT_EQ(c.limits.max_stop_bytes, 8);
  EXPECT_EQ(c.limits.max_stop_token_ids, 3);
  EXPECT_EQ(c.limits.max_logprobs, 0);
  EXPECT_EQ(c.log.level, LogLevel::kDebug);
}

// model.device: cpu, cuda, cuda:N or reference; on a device, what it does not run is refused at load, naming
// the field that asks for it.
TEST(ServerConfigTest, ModelDeviceAndWhatADeviceRefuses) {
  EXPECT_EQ(parse_ok("model:\n  device: cuda:1\n  cuda_graphs: false\n").model.device, "cuda:1");
  EXPECT_FALSE(parse_ok("model:\n  device: reference\n  cuda_graphs: false\n").model.cuda_graphs);
  auto refused = [](const std::string& yaml, const std::string& what) {
    absl::StatusOr<ServerConfig> c = parse_server_config(yaml);
    absl::Status st = c.ok() ? validate_server_config(*c) : c.status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  };
  refused("model:\n  device: gpu0\n", "model.device: unknown value \"gpu0\" (expected cpu, cuda, cuda:N or reference)");
  refused("model:\n  device: cuda:x\n", "model.device: unknown value \"cuda:x\"");
  refused("model:\n  device: cuda:0\n  dtype: int4\n",
          "model.dtype: int4 weights: a device serves fp32, bf16, fp16 or int8");
  refused("model:\n  device: reference\n  dtype: w8a8\n", "model.dtype: w8a8 weights: a device serves");
  EXPECT_TRUE(validate_server_config(parse_ok("model:\n  device: cuda:0\n  dtype: int8\n")).ok());
  // fp16 is a device format: on the CPU it is refused naming the field, the value and where it runs.
  refused(
      "model:\n  dtype: fp16\n",
      "model.dtype: fp16 weights: fp16 is a device format (model.device cuda or reference; model.device is "
      "\"cpu\"); the CPU serves fp32, bf16, int8, int4 or w8a8");
  refused("model:\n  device: reference\nengine:\n  kv_codec: kvsplice\n",
          "engine.kv_codec: kvsplice runs only on model.device cpu");
  refused("model:\n  device: cuda\nengine:\n  kv_repair: r.safetensors\n",
          "engine.kv_repair: a KV repair operator runs only on model.device cpu");
  refused("model:\n  device: cuda\nengine:\n  kv_splice: k.safetensors\n", "engine.kv_splice: a KVSplice set");
  // The same settings are fine on the CPU, and a device with a compact KV format is fine.
  EXPECT_TRUE(validate_server_config(parse_ok("model:\n  dtype: int8\nengine:\n  kv_repair: r.safetensors\n")).ok());
  EXPECT_TRUE(validate_server_config(parse_ok("model:\n  device: cuda:0\n  dtype: bf16\nengine:\n  kv_codec: int8\n")).ok());
  for (const char* device : {"cuda:0", "reference"}) {
    const ServerConfig c = parse_ok(std::string("model:\n  device: ") + device + "\n  dtype: fp16\n");
    EXPECT_EQ(c.model.dtype, WeightDtype::kF16);
    EXPECT_TRUE(validate_server_config(c).ok()) << device;
  }
}

// The limits and jobs sections are the core's option structs: what the YAML sets is what the engine's
// SamplingLimits and the jobs scheduler's options read, with no copy in between to fall out of step.
TEST(ServerConfigTest, SectionsAreTheCoreOptionStructs) {
  const ServerConfig c = parse_ok(
      "limits: {max_new_tokens: 77, max_stop_strings: 3, max_stop_bytes: 9, max_logprobs: 4}\n"
      "jobs: {state_dir: /tmp/s, max_queued: 5, concurrency: 2, threads: 3, nice: 4, checkpoint_every: 6, "
      "max_attempts: 7}\n"
      "engine: {max_running: 8, max_waiting: 9, max_batch_tokens: 64, kv_block_tokens: 32, kv_cache_bytes: 1MiB, "
      "kv_cache_prefault: false, prefix_caching: false}\n");
  const EngineOptions& eo = c.engine;
  EXPECT_EQ(eo.max_running, 8);
  EXPECT_EQ(eo.max_waiting, 9);
  EXPECT_EQ(eo.max_batch_tokens, 64);
  EXPECT_EQ(eo.kv_block_tokens, 32);
  EXPECT_EQ(eo.kv_cache_bytes, 1 << 20);
  EXPECT_FALSE(eo.kv_cache_prefault);
  EXPECT_FALSE(eo.prefix_caching);
  const SamplingLimits& sl = c.limits;
  EXPECT_EQ(sl.max_new_tokens, 77);
  EXPECT_EQ(sl.max_stop_strings, 3);
  EXPECT_EQ(sl.max_stop_bytes, 9);
  EXPECT_EQ(sl.max_logprobs, 4);
  const jobs::SchedulerOptions& so = c.jobs;
  EXPECT_EQ(so.state_dir, "/tmp/s");
  EXPECT_EQ(so.max_queued, 5);
  EXPECT_EQ(so.concurrency, 2);
  EXPECT_EQ(so.threads, 3);
  EXPECT_EQ(so.nice, 4);
  EXPECT_EQ(so.checkpoint_every, 6);
  EXPECT_EQ(so.max_attempts, 7);
  // the defaults stay the YAML's, not the core structs' own
  EXPECT_EQ(ServerConfig().jobs.state_dir, "frost-state");
}

TEST(ServerConfigTest, PartialSectionKeepsOtherDefaults) {
  const ServerConfig c = parse_ok("engine:\n  kv_codec: fp16\nlog: {level: warn}\n");
  EXPECT_EQ(c.engine.kv_codec, KvCodecKind::kF16);
  EXPECT_EQ(c.engine.max_running, 32);
  EXPECT_EQ(c.log.level, LogLevel::kWarn);
  EXPECT_EQ(c.server.listen, "0.0.0.0:50051");
}

// auth.open_render: off by default (the render endpoints keep the inference rule), on only where a config
// says so (deploy/k8s/overlays/gateway, for the endpoint picker's tokenizer), and a boolean.
TEST(ServerConfigTest, AuthOpenRender) {
  EXPECT_FALSE(ServerConfig().auth.open_render);
  const ServerConfig c = parse_ok("auth:\n  require_for_inference: true\n  open_render: true\n");
  EXPECT_TRUE(c.auth.open_render);
  EXPECT_TRUE(c.auth.require_for_inference);
  EXPECT_FALSE(parse_server_config("auth:\n  open_render: sometimes\n").ok());
}

TEST(ServerConfigTest, KvSpliceCodecAndFile) {
  EXPECT_EQ(ServerConfig().engine.kv_splice, "");
  const ServerConfig c = parse_ok(
      "engine:\n  kv_codec: kvsplice\n  kv_splice: art/kvsplice.safetensors\n  kv_repair: r.safetensors\n");
  EXPECT_EQ(c.engine.kv_codec, KvCodecKind::kKvSplice);
  EXPECT_EQ(c.engine.kv_splice, "art/kvsplice.safetensors");
  EXPECT_EQ(c.engine.kv_repair, "r.safetensors");
  const std::string text = format_server_config(c);
  EXPECT_NE(text.find("kv_codec: kvsplice"), std::string::npos) << text;
  const ServerConfig back = parse_ok(text);
  EXPECT_EQ(back.engine.kv_splice, c.engine.kv_splice);
  EXPECT_EQ(back.engine.kv_codec, KvCodecKind::kKvSplice);
  EXPECT_INVALID(parse_status("engine:\n  kv_splice: [a, b]\n"), "engine.kv_splice: expected a string");
}

// engine.speculative is a nested map that writes straight into EngineOptions::speculative (the engine reads
// it as it is); its errors name the full path and the value.
TEST(ServerConfigTest, SpeculativeSection) {
  const SpeculativeOptions d = ServerConfig().engine.speculative;
  EXPECT_EQ(d.method, SpecMethod::kOff);
  EXPECT_EQ(d.num_tokens, 4);
  const ServerConfig c = parse_ok(
      "engine:\n  speculative:\n    method: suffix\n    num_tokens: 7\n    max_batch: 0\n"
      "    jump_forward: false\n    jump_forward_tokens: 256\n    suffix_cache_tokens: 1073741824\n");
  const SpeculativeOptions& so = static_cast<const EngineOptions&>(c.engine).speculative;
  EXPECT_EQ(so.method, SpecMethod::kSuffix);
  EXPECT_EQ(so.num_tokens, 7);
  EXPECT_EQ(so.max_batch, 0);
  EXPECT_FALSE(so.jump_forward);
  EXPECT_EQ(so.jump_forward_tokens, 256);
  EXPECT_EQ(so.suffix_cache_tokens, int64_t{1} << 30);
  EXPECT_EQ(c.engine.max_running, 32);  // the rest of the section keeps its defaults
  // Flow style, a partial map, and the format round trip.
  EXPECT_EQ(parse_ok("engine: {speculative: {method: ngram}}\n").engine.speculative.method,
            SpecMethod::kNgram);
  EXPECT_EQ(parse_ok("engine: {speculative: {method: ngram}}\n").engine.speculative.num_tokens, 4);
  EXPECT_EQ(parse_ok("engine:\n  speculative:\n").engine.speculative.method, SpecMethod::kOff);
  const std::string text = format_server_config(c);
  EXPECT_NE(text.find("  speculative: \n    method: suffix\n    num_tokens: 7\n"), std::string::npos) << text;
  EXPECT_EQ(format_server_config(parse_ok(text)), text);

  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    method: eagle\n"),
                 "engine.speculative.method: unknown value \"eagle\" (expected off|ngram|suffix)");
  // "server" is a request's way of saying "the default"; the default itself must be a method.
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    method: server\n"),
                 "engine.speculative.method: unknown value \"server\"");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    num_tokens: 0\n"),
                 "engine.speculative.num_tokens: must be in [1, 32], got 0");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    num_tokens: 33\n"),
                 "engine.speculative.num_tokens: must be in [1, 32], got 33");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    max_batch: -1\n"),
                 "engine.speculative.max_batch: must be in [0, 65536], got -1");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    jump_forward: yes\n"),
                 "engine.speculative.jump_forward: expected true or false, got \"yes\"");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    jump_forward_tokens: 257\n"),
                 "engine.speculative.jump_forward_tokens: must be in [0, 256], got 257");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    suffix_cache_tokens: 1073741825\n"),
                 "engine.speculative.suffix_cache_tokens: must be in [0, 1073741824], got 1073741825");
  EXPECT_INVALID(parse_status("engine:\n  speculative:\n    k: 4\n"),
                 "unknown key 'engine.speculative.k' (expected one of "
                 "method|num_tokens|max_batch|adaptive|jump_forward|jump_forward_tokens|suffix_cache_tokens)");
  EXPECT_INVALID(parse_status("engine:\n  speculative: ngram\n"),
                 "engine.speculative: expected a mapping, got \"ngram\"");
}

TEST(ServerConfigTest, FormatRoundTrips) {
  ServerConfig c;
  c.server.listen = "127.0.0.1:0";
  c.server.metrics_listen = "[::]:0";
  c.server.reflection = false;
  c.server.drain_timeout_s = 0.1;
  c.model.path = "/models/a \"quoted\" caf\xC3\xA9";
  c.model.dtype = WeightDtype::kBF16;
  c.engine.kv_codec = KvCodecKind::kF16;
  c.limits.max_logprobs = 5;
  c.log.level = LogLevel::kError;
  const std::string text = format_server_config(c);
  const ServerConfig back = parse_ok(text);
  EXPECT_EQ(format_server_config(back), text);
  EXPECT_EQ(back.model.path, c.model.path);
  EXPECT_EQ(back.server.drain_timeout_s, 0.1);
}

TEST(ServerConfigTest, RejectsUnknownKeysAtEveryLevel) {
  EXPECT_INVALID(parse_status("sever:\n  listen: 0.0.0.0:1\n"), "unknown key 'sever'");
  EXPECT_INVALID(parse_status("server:\n  lisen: 0.0.0.0:1\n"), "unknown key 'server.lisen'");
  EXPECT_INVALID(parse_status("model:\n  paths: x\n"), "unknown key 'model.paths'");
  EXPECT_INVALID(parse_status("engine:\n  max_runing: 2\n"), "unknown key 'engine.max_runing'");
  EXPECT_INVALID(parse_status("limits:\n  max_tokens: 2\n"), "unknown key 'limits.max_tokens'");
  EXPECT_INVALID(parse_status("log:\n  lvl: info\n"), "unknown key 'log.lvl'");
  // Keys are case-sensitive; YAML merge keys are not supported.
  EXPECT_INVALID(parse_status("Server: {}\n"), "unknown key 'Server'");
  EXPECT_INVALID(parse_status("base: &b {level: info}\nlog:\n  <<: *b\n"), "unknown key 'base'");
}

// An unknown key suggests the closest known one of its level (core/common/config_fields.h).
TEST(ServerConfigTest, UnknownKeysSuggestTheClosest) {
  EXPECT_INVALID(parse_status("engine:\n  max_runing: 2\n"), "; did you mean 'max_running'?");
  EXPECT_INVALID(parse_status("sever:\n  listen: 0.0.0.0:1\n"), "did you mean 'server'?");
}

// frostd's --set and one-field flags (server/config_overrides.h): the YAML's table, checks and messages.
TEST(ServerConfigTest, OverridesReadThroughTheSameTable) {
  ServerConfig c;
  ASSERT_TRUE(set_server_config_field(&c, "engine.max_running", "8").ok());
  ASSERT_TRUE(set_server_config_field(&c, "engine.speculative.method", "ngram").ok());
  ASSERT_TRUE(set_server_config_field(&c, "engine.kv_cache_bytes", "2MiB").ok());
  ASSERT_TRUE(set_server_config_field(&c, "server.http.listen", "").ok());
  ASSERT_TRUE(set_server_config_field(&c, "log.level", "debug").ok());
  EXPECT_EQ(c.engine.max_running, 8);
  EXPECT_EQ(c.engine.speculative.method, SpecMethod::kNgram);
  EXPECT_EQ(c.engine.kv_cache_bytes, 2 << 20);
  EXPECT_EQ(c.log.level, LogLevel::kDebug);
  EXPECT_EQ(set_server_config_field(&c, "engine.max_running", "0").message(),
            "engine.max_running: must be in [1, 65536], got 0");
  EXPECT_EQ(set_server_config_field(&c, "log.level", "loud").message(),
            "log.level: unknown value \"loud\" (expected debug|info|warn|error)");
  EXPECT_INVALID(set_server_config_field(&c, "engine.max_runing", "2"),
                 "unknown key 'engine.max_runing' (expected one of max_running|");
  EXPECT_INVALID(set_server_config_field(&c, "engine.max_runing", "2"), "did you mean 'max_running'?");
  EXPECT_INVALID(set_server_config_field(&c, "engine.speculative", "2"),
                 "engine.speculative: a mapping: set one of its keys (method|num_tokens|");
  EXPECT_EQ(c.engine.max_running, 8);
}

TEST(ServerConfigTest, RejectsDuplicateKeys) {
  EXPECT_INVALID(parse_status("engine:\n  max_running: 1\n  max_running: 2\n"),
                 "duplicate key 'engine.max_running'");
  EXPECT_INVALID(parse_status("log: {}\nlog: {}\n"), "duplicate key 'log'");
}

TEST(ServerConfigTest, RejectsWrongTypes) {
  EXPECT_INVALID(parse_status("- server\n"), "config: expected a mapping, got a sequence");
  EXPECT_INVALID(parse_status("just text\n"), "config: expected a mapping, got \"just text\"");
  EXPECT_INVALID(parse_status("server: 5\n"), "server: expected a mapping, got \"5\"");
  EXPECT_INVALID(parse_status("limits: [1, 2]\n"), "limits: expected a mapping, got a sequence");
  EXPECT_INVALID(parse_status("engine:\n  max_running: four\n"),
                 "engine.max_running: expected an integer, got \"four\"");
  EXPECT_INVALID(parse_status("engine:\n  max_running: 2.5\n"),
                 "engine.max_running: expected an integer, got \"2.5\"");
  EXPECT_INVALID(parse_status("engine:\n  max_running: \"4\"\n"),
                 "engine.max_running: expected an integer, got \"4\"");
  EXPECT_INVALID(parse_status("engine:\n  max_running: [4]\n"),
                 "engine.max_running: expected an integer, got a sequence");
  EXPECT_INVALID(parse_status("engine:\n  max_running:\n"),
                 "engine.max_running: expected an integer, got null");
  EXPECT_INVALID(parse_status("server:\n  reflection: maybe\n"),
                 "server.reflection: expected true or false, got \"maybe\"");
  EXPECT_INVALID(parse_status("server:\n  reflection: 'true'\n"),
                 "server.reflection: expected true or false, got \"true\"");
  EXPECT_INVALID(parse_status("server:\n  drain_timeout_s: soon\n"),
                 "server.drain_timeout_s: expected a finite number, got \"soon\"");
  EXPECT_INVALID(parse_status("server:\n  drain_timeout_s: .inf\n"),
                 "server.drain_timeout_s: expected a finite number, got \".inf\"");
  EXPECT_INVALID(parse_status("server:\n  drain_timeout_s: nan\n"),
                 "server.drain_timeout_s: expected a finite number, got \"nan\"");
  EXPECT_INVALID(parse_status("server:\n  listen: {host: x}\n"),
                 "server.listen: expected a string, got a mapping");
  EXPECT_INVALID(parse_status("model:\n  path: [a, b]\n"), "model.path: expected a string, got a sequence");
  EXPECT_INVALID(parse_status("model:\n  path: ~\n"), "model.path: expected a string, got null");
  EXPECT_INVALID(parse_status("log:\n  level: [info]\n"),
                 "log.level: expected one of debug|info|warn|error, got a sequence");
}

TEST(ServerConfigTest, RejectsOutOfRangeValues) {
  EXPECT_INVALID(parse_status("engine:\n  max_running: 0\n"), "engine.max_running: must be in [1, 65536], got 0");
  EXPECT_INVALID(parse_status("engine:\n  kv_block_tokens: 0\n"),
                 "engine.kv_block_tokens: must be in [1, 4096], got 0");
  EXPECT_INVALID(parse_status("engine:\n  kv_cache_bytes: -1\n"),
                 "engine.kv_cache_bytes: expected a byte size (an integer, optionally with KiB, MiB, GiB or TiB), "
                 "got \"-1\"");
  EXPECT_INVALID(parse_status("engine:\n  kv_cache_bytes: 4GB\n"), "engine.kv_cache_bytes: expected a byte size");
  EXPECT_INVALID(parse_status("engine:\n  kv_cache_bytes: \"4096\"\n"), "engine.kv_cache_bytes: expected a byte size");
  EXPECT_INVALID(parse_status("engine:\n  prefix_caching: yes\n"),
                 "engine.prefix_caching: expected true or false, got \"yes\"");
  EXPECT_INVALID(parse_status("engine:\n  max_waiting: -1\n"),
                 "engine.max_waiting: must be in [0, 2147483647], got -1");
  EXPECT_INVALID(parse_status("engine:\n  max_context: 2147483648\n"),
                 "engine.max_context: must be in [0, 2147483647], got 2147483648");
  EXPECT_INVALID(parse_status("engine:\n  max_context: 99999999999999999999999\n"),
                 "engine.max_context: expected an integer, got \"99999999999999999999999\"");
  EXPECT_INVALID(parse_status("model:\n  threads: 5000\n"), "model.threads: must be in [0, 1024], got 5000");
  EXPECT_INVALID(parse_status("server:\n  max_receive_message_bytes: 0\n"),
                 "server.max_receive_message_bytes: must be in [1, 2147483647], got 0");
  EXPECT_INVALID(parse_status("server:\n  max_send_message_bytes: -5\n"),
                 "server.max_send_message_bytes: must be in [1, 2147483647], got -5");
  EXPECT_INVALID(parse_status("server:\n  drain_timeout_s: -0.5\n"),
                 "server.drain_timeout_s: must be in [0, 86400], got -0.5");
  EXPECT_INVALID(parse_status("server:\n  drain_timeout_s: 1e6\n"),
                 "server.drain_timeout_s: must be in [0, 86400], got 1e6");
  EXPECT_INVALID(parse_status("limits:\n  max_prompt_bytes: 0\n"),
                 "limits.max_prompt_bytes: must be in [1, 2147483647], got 0");
  EXPECT_INVALID(parse_status("limits:\n  max_prompt_tokens: -1\n"),
                 "limits.max_prompt_tokens: must be in [0, 2147483647], got -1");
  EXPECT_INVALID(parse_status("limits:\n  max_new_tokens: 0\n"),
                 "limits.max_new_tokens: must be in [1, 2147483647], got 0");
  EXPECT_INVALID(parse_status("limits:\n  max_stop_strings: -1\n"),
                 "limits.max_stop_strings: must be in [0, 2147483647], got -1");
  EXPECT_INVALID(parse_status("limits:\n  max_stop_bytes: 0\n"),
                 "limits.max_stop_bytes: must be in [1, 2147483647], got 0");
  EXPECT_INVALID(parse_status("limits:\n  max_stop_token_ids: 100001\n"),
                 "limits.max_stop_token_ids: must be in [0, 100000], got 100001");
  EXPECT_INVALID(parse_status("limits:\n  max_logprobs: -1\n"),
                 "limits.max_logprobs: must be in [0, 2147483647], got -1");
}

// server.http: the HTTP front's limits (server/http_front.h), each named with its range.
TEST(ServerConfigTest, HttpLimits) {
  const ServerConfig c = parse_ok(R"(
server:
  http:
    listen: 127.0.0.1:0
    max_connections: 8
    max_connections_per_address: 2
    max_body_bytes: 4096
    max_header_bytes: 2048
    head_timeout_s: 3
    read_timeout_s: 7
    keep_alive_timeout_s: 9
)");
  EXPECT_EQ(c.server.http.max_connections, 8);
  EXPECT_EQ(c.server.http.max_connections_per_address, 2);
  EXPECT_EQ(c.server.http.max_body_bytes, 4096);
  EXPECT_EQ(c.server.http.max_header_bytes, 2048);
  EXPECT_EQ(c.server.http.head_timeout_s, 3);
  EXPECT_EQ(c.server.http.read_timeout_s, 7);
  EXPECT_EQ(c.server.http.keep_alive_timeout_s, 9);
  EXPECT_INVALID(parse_status("server:\n  http:\n    max_connections_per_address: 0\n"),
                 "server.http.max_connections_per_address: must be in [1, 4096], got 0");
  EXPECT_INVALID(parse_status("server:\n  http:\n    max_header_bytes: 512\n"),
                 "server.http.max_header_bytes: must be in [1024, 1048576], got 512");
  EXPECT_INVALID(parse_status("server:\n  http:\n    head_timeout_s: 0\n"),
                 "server.http.head_timeout_s: must be in [1, 3600], got 0");
  EXPECT_INVALID(parse_status("server:\n  http:\n    keep_alive_timeout_s: 3601\n"),
                 "server.http.keep_alive_timeout_s: must be in [1, 3600], got 3601");
  EXPECT_INVALID(parse_status("server:\n  http:\n    max_header_byte: 2048\n"),
                 "unknown key 'server.http.max_header_byte'");
}

TEST(ServerConfigTest, KvEvents) {
  const ServerConfig d;
  EXPECT_FALSE(d.server.kv_events.enabled);
  EXPECT_EQ(d.server.kv_events.endpoint, "tcp://*:5557");  // vLLM's defaults (vllm/config/kv_events.py)
  EXPECT_EQ(d.server.kv_events.topic, "");
  EXPECT_EQ(d.server.kv_events.buffer_steps, 10000);
  const ServerConfig c = parse_ok(R"(
server:
  kv_events:
    enabled: true
    endpoint: tcp://indexer:5557
    topic: kv@pod-1@stories260K
    replay_endpoint: "tcp://*:5558"
    buffer_steps: 50
    queue_batches: 7
)");
  EXPECT_TRUE(c.server.kv_events.enabled);
  EXPECT_EQ(c.server.kv_events.endpoint, "tcp://indexer:5557");
  EXPECT_EQ(c.server.kv_events.topic, "kv@pod-1@stories260K");
  EXPECT_EQ(c.server.kv_events.replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(c.server.kv_events.buffer_steps, 50);
  EXPECT_EQ(c.server.kv_events.queue_batches, 7);
  EXPECT_INVALID(parse_status("server:\n  kv_events:\n    enabled: true\n    endpoint: localhost:5557\n"),
                 "server.kv_events.endpoint: expected a ZeroMQ endpoint tcp://HOST:PORT, ipc://PATH or "
                 "inproc://NAME, got \"localhost:5557\"");
  EXPECT_INVALID(parse_status("server:\n  kv_events:\n    enabled: true\n    replay_endpoint: udp://x:1\n"),
                 "server.kv_events.replay_endpoint: expected \"\" (off) or a ZeroMQ endpoint");
  EXPECT_INVALID(parse_status("server:\n  kv_events:\n    enabled: true\nengine:\n  prefix_caching: false\n"),
                 "server.kv_events.enabled: true needs engine.prefix_caching: true");
  EXPECT_INVALID(parse_status("server:\n  kv_events:\n    buffer_steps: 0\n"),
                 "server.kv_events.buffer_steps: must be in [1, 10000000], got 0");
  // Off, the endpoints are not checked.
  EXPECT_TRUE(parse_server_config("server:\n  kv_events:\n    endpoint: nonsense\n").ok());
}

TEST(ServerConfigTest, RejectsUnknownEnumValues) {
  EXPECT_INVALID(parse_status("engine:\n  kv_codec: int3\n"),
                 "engine.kv_codec: unknown value \"int3\" (expected fp32|fp16|bf16|int8|int4|kvsplice)");
  EXPECT_INVALID(parse_status("engine:\n  kv_codec: FP16\n"),
                 "engine.kv_codec: unknown value \"FP16\" (expected fp32|fp16|bf16|int8|int4|kvsplice)");
  EXPECT_INVALID(parse_status("model:\n  dtype: fp8\n"),
                 "model.dtype: unknown value \"fp8\" (expected fp32|bf16|fp16|int8|int4|w8a8)");
  EXPECT_INVALID(parse_status("model:\n  kernels: avx1024\n"),
                 "model.kernels: unknown value \"avx1024\" (expected auto|avx512|avx2|scalar)");
  EXPECT_INVALID(parse_status("log:\n  level: verbose\n"),
                 "log.level: unknown value \"verbose\" (expected debug|info|warn|error)");
}

TEST(ServerConfigTest, ListenAddresses) {
  for (const char* ok : {"0.0.0.0:50051", "localhost:0", "[::]:50051", "[::1]:65535",
                         "my-host.example.com:8080", "[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(validate_host_port("server.listen", ok).ok()) << ok;
  }
  EXPECT_INVALID(parse_status("server:\n  listen: abc\n"), "server.listen: expected HOST:PORT, got \"abc\"");
  for (const char* bad : {"abc", "abc:", ":50051", "host:port", "host:-1", "::1:50051", "[::1:50051", "[]:1",
                          "a b:1", "host:12:34x", ""}) {
    EXPECT_INVALID(validate_host_port("server.listen", bad),
                   "server.listen: expected HOST:PORT, got \"" + std::string(bad) + "\"");
  }
  EXPECT_INVALID(parse_status("server:\n  listen: host:70000\n"),
                 "server.listen: port must be in [0, 65535], got \"host:70000\"");
  EXPECT_INVALID(validate_host_port("server.listen", "host:123456789012345678901"),
                 "server.listen: port must be in [0, 65535], got \"host:123456789012345678901\"");
  EXPECT_INVALID(parse_status("server:\n  metrics_listen: 9090\n"),
                 "server.metrics_listen: expected HOST:PORT, got \"9090\"");
}

TEST(ServerConfigTest, CrossFieldRules) {
  EXPECT_INVALID(parse_status("server:\n  listen: 0.0.0.0:9090\n"),
                 "server.metrics_listen: port 9090 is also server.listen's port");
  // Port 0 on both sides picks two distinct free ports.
  parse_ok("server:\n  listen: 0.0.0.0:0\n  metrics_listen: 0.0.0.0:0\n");
  EXPECT_INVALID(parse_status("model:\n  path: ''\n"), "model.path: must not be empty");
  EXPECT_INVALID(parse_status("engine:\n  max_context: 128\nlimits:\n  max_prompt_tokens: 129\n"),
                 "limits.max_prompt_tokens: must be <= engine.max_context (128), got 129");
  parse_ok("engine:\n  max_context: 128\nlimits:\n  max_prompt_tokens: 128\n");
  EXPECT_INVALID(parse_status("engine:\n  max_running: 64\n  max_batch_tokens: 32\n"),
                 "engine.max_batch_tokens: must be >= engine.max_running (64: every running sequence decodes one "
                 "token per step), got 32");
  EXPECT_EQ(parse_ok("engine:\n  kv_cache_bytes: 2GiB\n").engine.kv_cache_bytes, int64_t{2} << 30);
  // A follower reads another frostd's store; one that trains owns its own.
  EXPECT_INVALID(parse_status("artifacts:\n  follow_state_dir: /var/lib/frost\n"),
                 "artifacts.follow_state_dir: needs jobs.enabled: false");
  const ServerConfig f = parse_ok(
      "jobs:\n  enabled: false\nartifacts:\n  follow_state_dir: /var/lib/frost\n  follow_interval_ms: 500\n");
  EXPECT_EQ(f.artifacts.follow_state_dir, "/var/lib/frost");
  EXPECT_EQ(f.artifacts.follow_interval_ms, 500);
  EXPECT_INVALID(parse_status("artifacts:\n  follow_interval_ms: 5\n"),
                 "artifacts.follow_interval_ms: must be in [100, 3600000], got 5");
  // TLS for /metrics needs the certificate of server.tls.
  EXPECT_INVALID(parse_status("server:\n  tls:\n    metrics: true\n"),
                 "server.tls.metrics: needs server.tls.cert_file and key_file");
  const ServerConfig t = parse_ok("server:\n  tls:\n    cert_file: c.pem\n    key_file: c.key\n    metrics: true\n");
  EXPECT_TRUE(t.server.tls.metrics);
}

TEST(ServerConfigTest, YamlSyntaxErrorsNameLineAndColumn) {
  // yaml-cpp's marks are 0-based; the message is 1-based like editors.
  EXPECT_INVALID(parse_status("server:\n  listen: [1, 2\n"),
                 "config: YAML syntax error at line 3, column 1: end of sequence flow not found");
  EXPECT_INVALID(parse_status("log: {level: info\n"),
                 "config: YAML syntax error at line 2, column 1: end of map flow not found");
  EXPECT_INVALID(parse_status("engine:\n  max_running: 1\n   bad indent: 2\n"),
                 "config: YAML syntax error at line 3, column 14: illegal map value");
  EXPECT_INVALID(parse_status("server:\n  listen: 'x' y\n"),
                 "config: YAML syntax error at line 2, column 15");
  EXPECT_INVALID(parse_status("model:\n\t- b\n"), "config: YAML syntax error at line 2, column 2");
  EXPECT_INVALID(parse_status("server: {}\n---\nlog: {}\n"), "config: expected one YAML document, got 2");
}

// yaml-cpp's LoadAll() loops for ever (collecting empty documents until memory runs out) on a document
// that starts with a stray ','; found by tests/fuzz/server_config_fuzz.cc.
TEST(ServerConfigTest, StrayFlowEntryIsASyntaxErrorNotALoop) {
  EXPECT_INVALID(parse_status(","), "config: YAML syntax error at line 1, column 1: a document cannot start here");
  EXPECT_INVALID(parse_status("server: {}\n---\n  ,x\n"), "config: YAML syntax error at line 3, column 3");
  EXPECT_INVALID(parse_status(std::string("\0,Y", 3)), "config: YAML syntax error");
}

TEST(ServerConfigTest, LoadFromFile) {
  TempDir dir;
  const std::string good = dir.file("good.yaml");
  write_text_file(good, "engine:\n  max_running: 7\n");
  absl::StatusOr<ServerConfig> cfg = load_server_config(good);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->engine.max_running, 7);

  const std::string bad = dir.file("bad.yaml");
  write_text_file(bad, "engine:\n  kv_codec: int3\n");
  EXPECT_INVALID(load_server_config(bad).status(), bad + ": engine.kv_codec: unknown value \"int3\"");

  const absl::Status missing = load_server_config(dir.file("absent.yaml")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_MSG_HAS(missing, "absent.yaml");
}

}  // namespace
}  // namespace frost::server
