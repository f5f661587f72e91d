#pragma once
// EngineOptions: the engine's sizing knobs, with no LibTorch in sight, so that frostd's configuration
// (server/server_config.h: the `engine:` section is an EngineOptions, its YAML table writes straight into
// these members) and EngineConfig (engine.h, which derives from it) name each value once — the server hands
// the section over whole instead of copying it field by field.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/common/config_fields.h"
#include "core/generate/spec_options.h"

namespace frost {

struct EngineOptions {
  int32_t max_running = 32;   // sequences in one step
  int32_t max_waiting = 128;  // bounded admission queue
  // Tokens in one step, decode rows and prompt chunks together (>= max_running): a long prompt is prefilled
  // in chunks of what decoding sequences leave, so it cannot stall their inter-token latency.
  int64_t max_batch_tokens = 128;
  // KV block size: positions per block at fp32 on host pages (compact codecs fit proportionally more in the
  // same bytes); on a device, positions per block in its KV format.
  int64_t kv_block_tokens = 16;
  // KV pool size in bytes; 0 = the executor's default_kv_pool_bytes() for this model and max_running.
  int64_t kv_cache_bytes = 0;
  // Host pages: commit the pool's memory at start (HostKvStorage::create): no page faults inside decode
  // steps, and a memory limit that cannot hold the pool fails at start. false: address space only, resident
  // as blocks are written.
  bool kv_cache_prefault = true;
  // Reuse the KV blocks of prompts that share a prefix (chain-hashed full blocks, LRU eviction).
  bool prefix_caching = true;
  // Structured output (core/generate/constraint_compiler.h): constraints compile on this many threads of
  // their own, at most constraint_compile_queue wait (more: RESOURCE_EXHAUSTED), each within
  // constraint_compile_timeout_ms of running and as long of waiting; compiled constraints (and refusals)
  // are cached up to constraint_cache_bytes.
  int32_t constraint_compile_threads = 1;
  int32_t constraint_compile_queue = 64;
  int64_t constraint_compile_timeout_ms = 1000;
  int64_t constraint_cache_bytes = int64_t{64} << 20;
  // Speculative decoding without a second model (spec_options.h): the default method, draft length, policy.
  SpeculativeOptions speculative;
};

// EngineOptions' fields, each declared once (core/common/config_fields.h; engine_options.cc): names, ranges
// and docs. frostd's `engine:` YAML section reads through them (server/server_config.cc) and the ranges are
// checked by check_engine_options() alone.
std::vector<ConfigField<EngineOptions>> engine_option_fields();

// Every EngineOptions range and rule, with the config's paths: "engine.max_running: must be in [1, 65536],
// got 0". The one check: the server's config validation (server/server_config.cc) and Engine::create call it.
absl::Status check_engine_options(const EngineOptions& o);

}  // namespace frost
