#pragma once
// ServerConfig: frostd's configuration as plain structs with defaults, parsed from one YAML
// file (configs/default.yaml documents every field). YAML stays in server/ (docs/conventions.md,
// "Layers"). Where a section maps onto one core options struct it *is* that struct (limits: SamplingLimits,
// jobs: jobs::SchedulerOptions), so the YAML table in server_config.cc writes each value once, into the
// member the core reads, and frostd passes the section on instead of copying it field by field.
//
// Every error is INVALID_ARGUMENT (NOT_FOUND for a missing file) and names the full field
// path and the offending value, e.g.
//   unknown key 'server.lisen'
//   engine.kv_codec: unknown value "int3" (expected fp32|fp16|bf16|int8|int4|kvsplice)
//   server.listen: expected HOST:PORT, got "abc"
// Nothing here throws.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/log.h"
#include "core/generate/engine_options.h"
#include "core/generate/sampling_params.h"
#include "core/jobs/scheduler.h"
#include "core/kv/kv_spec.h"
#include "core/model/model_config.h"

namespace frost::server {

// `server.tls:` — TLS / mTLS for gRPC (server/tls.h).
struct TlsSection {
  std::string cert_file;             // PEM certificate chain; "" = plaintext
  std::string key_file;              // PEM private key of the certificate
  std::string client_ca_file;        // PEM CA bundle client certificates are verified against; "" = none asked
  bool require_client_cert = false;  // mTLS: a client without a certificate from client_ca_file is refused
  int32_t reload_interval_s = 60;    // the files are re-read this often (and at once on SIGHUP)
  // Serve /metrics over HTTPS too, with this certificate (and client CA / mTLS), on server.metrics_listen.
  // Not through prometheus-cpp's civetweb, whose Debian 12 build crashes on TLS: server/metrics_https.h.
  bool metrics = false;
};

// `server.http:` — the OpenAI-compatible HTTP API (server/http_server.h): /v1/completions,
// /v1/chat/completions, /v1/models. Same tokens, TLS (server.tls: HTTPS then), limits, metrics and drain as
// gRPC. Served by frostd's own HTTP/1.1 front (server/http_front.h), which enforces these before it reads
// what they bound; every refusal is answered with OpenAI's error object (or the connection cut, for the
// timeouts and caps) and counted in frost_http_refused_total{reason}.
struct HttpSection {
  // HOST:PORT to listen on (port 0 picks a free one); "" = off.
  std::string listen;
  // Connections at once, all clients (each streaming response holds one). A new connection over it displaces
  // one that is not being answered (reading its request, or idle between keep-alive requests) of the address
  // holding the most: one lingering after a refusal first, else the one that has read nothing for longest;
  // when every connection is being answered, the new one gets 503 naming this key. Above the engine's
  // max_running + max_waiting by default, so that a full engine answers 429 before the front refuses.
  int32_t max_connections = 256;
  // Connections at once from one client IP address (IPv4-mapped IPv6 counts as IPv4), with the same
  // displacement among that address's connections: a client whose neighbours trickle requests still gets in.
  // A gateway or load balancer sends everything from a few addresses: keep it well above their concurrency.
  int32_t max_connections_per_address = 128;
  // Largest request body: a declared Content-Length over it gets 413 before a byte is read (also instead of
  // 100 Continue); a chunked body is refused as soon as it passes it; gzip / deflate bodies as soon as their
  // inflated size passes it.
  int32_t max_body_bytes = 1 << 20;
  // Largest request head (request line + header fields; chunked trailers count too): 431 beyond. The request
  // line alone is limited to 8 KiB (414) and the fields to 100 (431).
  int32_t max_header_bytes = 16384;
  // The whole request head must arrive within this (from accept for a connection's first request, TLS
  // handshake included; from its first byte for the next ones); a slower head is cut. Trickling bytes does
  // not extend it.
  int32_t head_timeout_s = 10;
  // The whole request body must arrive within this (408 then), and each response write (a whole response, or
  // one streamed event) must complete within it (the connection is cut then).
  int32_t read_timeout_s = 30;
  // A keep-alive connection idle this long between requests is closed.
  int32_t keep_alive_timeout_s = 5;
};

// `server.kv_events:` — the prefix cache's block events over ZeroMQ in vLLM's KVEventBatch format, for
// llm-d's KV-cache indexer (server/kv_events_publisher.h has the wire format; docs/kv-events.md).
struct KvEventsSection {
  bool enabled = false;
  // The PUB socket: bound when it has a wildcard ("tcp://*:5557", vLLM's default) or is ipc:// / inproc://,
  // else connected to (a centralised indexer that binds).
  std::string endpoint = "tcp://*:5557";
  // The first frame of every message (vLLM's default ""; llm-d reads "kv@<pod>@<model>").
  std::string topic;
  // The replay ROUTER socket (always bound); "" = none.
  std::string replay_endpoint;
  // Batches kept for replay (vLLM's default).
  int32_t buffer_steps = 10000;
  // Batches waiting for the publisher's thread before new ones are dropped (and a snapshot follows).
  int32_t queue_batches = 10000;
};

// `server:` — the gRPC and metrics endpoints.
struct ServerSection {
  // gRPC listen address HOST:PORT (IPv6 hosts in brackets); port 0 picks a free port.
  std::string listen = "0.0.0.0:50051";
  // Prometheus /metrics listen address HOST:PORT; port 0 picks a free port.
  std::string metrics_listen = "0.0.0.0:9090";
  // Register gRPC server reflection.
  bool reflection = true;
  // Largest gRPC message the server accepts / sends, in bytes.
  int32_t max_receive_message_bytes = 4 * 1024 * 1024;
  int32_t max_send_message_bytes = 4 * 1024 * 1024;
  // After SIGTERM/SIGINT, in-flight streams get this long to finish before they are cancelled.
  double drain_timeout_s = 30;
  // Transport limits (HTTP/2, per connection). What each one mitigates: README "Transport security".
  int32_t max_concurrent_streams = 256;        // streams open at once on one connection
  int32_t max_header_list_bytes = 16384;       // request metadata (headers) per call
  int32_t keepalive_time_s = 300;              // the server pings a connection idle this long...
  int32_t keepalive_timeout_s = 20;            // ...and closes it when the ping is not answered in this
  int32_t keepalive_min_ping_interval_s = 10;  // client pings closer together than this are strikes...
  int32_t keepalive_max_ping_strikes = 2;      // ...and after this many the connection gets GOAWAY
  int32_t max_connection_idle_s = 1800;        // close connections without calls this long (0 = never)
  int32_t max_connection_age_s = 0;            // GOAWAY connections this old (0 = never; spreads load)
  int32_t max_connection_age_grace_s = 60;     // calls in flight at max age get this long to finish
  // A Generate stream whose next message has waited this long for the client to read (its flow-control window
  // closed) is cut (RST_STREAM CANCELLED): a client that stops reading without a deadline cannot hold its
  // buffered tokens for ever. Like nginx's send_timeout. 0 = never.
  int32_t write_stall_timeout_s = 60;
  TlsSection tls;
  HttpSection http;
  KvEventsSection kv_events;
};

// `model:` — what to serve.
struct ModelSection {
  // Hugging Face checkpoint directory, or "builtin:<name>" (e.g. "builtin:tiny").
  std::string path = "models/stories260K";  // relative to the working directory (the repository, the image)
  // Weights are converted (bf16, fp16) or quantized (int8, int4: core/model/quantize.h) to this at load. fp16
  // is a device format: refused with model.device cpu.
  WeightDtype dtype = WeightDtype::kF32;
  // Intra-op CPU threads; 0 = all cores.
  int32_t threads = 0;
  // CPU kernels: "auto" (the widest the CPU runs) or narrowed to "avx512", "avx2", "scalar"
  // (kernels/cpu/isa.h); asking for more than the CPU has is refused at start.
  std::string kernels = "auto";
  // Where the engine's steps run (core/exec/make_executor.h): "cpu", "cuda" / "cuda:N" (the CUDA decoder, a
  // FROST_CUDA build), or "reference" (the host reference device: the CUDA decoder's layout and functions on
  // the CPU, slow; for tests). A device serves fp32, bf16, fp16 or int8 weights and one KV format
  // (engine.kv_codec).
  std::string device = "cpu";
  // The CUDA decoder replays captured steps (bounded buckets of shapes); false: direct launches.
  bool cuda_graphs = true;
  // A Jinja chat template file for /v1/chat/completions; "" = the model's own (tokenizer_config.json
  // "chat_template" or chat_template.jinja). A model with neither answers chat requests with a 400.
  std::string chat_template;
};

// `engine:` — scheduling and KV cache (core/generate/engine.h).
// `engine:` — the section is the engine's EngineOptions (core/generate/engine_options.h: max_running,
// max_waiting, max_batch_tokens (>= max_running), kv_block_tokens, kv_cache_bytes (YAML: an integer, optionally
// with KiB/MiB/GiB; 0 = derived from the model, max_running and physical memory), kv_cache_prefault,
// prefix_caching; the YAML table writes into those members, FrostServer hands them over whole), plus what the
// server resolves itself:
struct EngineSection : EngineOptions {
  // Tokens per sequence (prompt + completion); 0 = the model's maximum.
  int32_t max_context = 0;
  // Default KV storage codec. kvsplice needs an active KVSplice (a kvsplice artifact or kv_splice below):
  // while none is active, requests that use the default fail FAILED_PRECONDITION and
  // frost_kv_cache_bytes_per_token reads 0.
  KvCodecKind kv_codec = KvCodecKind::kF32;
  // A KV repair operator file (repair.safetensors, as frost-bench kv-repair --artifact or a kv_repair
  // artifact writes it) served from start when no kv_repair artifact is active; "" = none. Relative
  // paths are against the working directory.
  std::string kv_repair;
  // A KVSplice file (kvsplice.safetensors, as a kvsplice artifact writes it) served from start for
  // kv.codec = "kvsplice" when no kvsplice artifact is active; "" = none. Relative paths are against the
  // working directory.
  std::string kv_splice;
};

// `limits:` — per-request caps checked before any model work. The section is the engine's SamplingLimits
// (max_new_tokens, max_stop_strings, max_stop_bytes, max_logprobs: the YAML table writes into those members,
// and frostd hands the section to the engine as it is) plus the caps only the server checks.
struct LimitsSection : SamplingLimits {
  int32_t max_prompt_bytes = 65536;  // text prompt size, bytes
  int32_t max_prompt_tokens = 0;     // prompt length after tokenization; 0 = the context
  int32_t max_stop_token_ids = 64;   // stop token ids per request
  int32_t max_predict_texts = 64;    // texts per Predict request
};

// `prediction:` — where Predict runs: its own worker threads (never a gRPC thread) behind a bounded queue.
struct PredictionSection {
  int32_t threads = 1;      // worker threads running Predict's backbone forward, model.threads intra-op each
  int32_t max_queued = 64;  // Predict requests waiting for a worker; beyond it RESOURCE_EXHAUSTED
};

// `jobs:` — training jobs, the journal and the artifact store. The section is the scheduler's options
// (state_dir, max_queued, concurrency, threads, nice, checkpoint_every, max_attempts: the YAML table writes
// into those members and frostd hands the section to jobs::Scheduler::create as it is) plus what the server
// and the job kinds read:
//   state_dir         journal (jobs.db), checkpoints and artifacts; locked by one frostd at a time
//   max_queued        QUEUED jobs; beyond it SubmitJob is RESOURCE_EXHAUSTED
//   concurrency       jobs running at once
//   threads           intra-op threads of a running job
//   nice              niceness added to job threads (lower CPU priority than serving)
//   checkpoint_every  optimiser steps between checkpoints
//   max_attempts      starts after which a job killed with the server is INTERRUPTED
struct JobsSection : jobs::SchedulerOptions {
  JobsSection() { state_dir = "frost-state"; }  // the YAML default; the scheduler's own has none
  // Run the scheduler and serve Training/Admin (they still need an admin token).
  bool enabled = true;
  // Training data paths (train_path, test_path) must resolve inside this directory.
  std::string data_root = ".";
  // With state_dir unusable at start (a full, read-only or unwritable volume) frostd serves without jobs and
  // tries the directory again every state_retry_s seconds; jobs come back without a restart.
  int32_t state_retry_s = 10;
  int32_t max_inline_rows = 20000;
  int32_t max_inline_bytes = 16 << 20;
};

// `artifacts:` — where served artifacts come from when this frostd trains nothing itself.
struct ArtifactsSection {
  // An inference replica beside one trainer: read another frostd's artifact store (<dir>/artifacts)
  // read-only and serve what its ACTIVE markers name, re-read every follow_interval_ms. "" = off.
  // Needs jobs.enabled: false (the trainer's state directory is single-writer).
  std::string follow_state_dir;
  int32_t follow_interval_ms = 2000;
};

// `auth:` — bearer tokens. Tokens are read from files or environment variables, never from this
// config. Training and Admin need the admin token; with require_for_inference, Generation and
// Prediction need the user or the admin token. Health is always open.
struct AuthSection {
  std::string admin_token_file;  // "" = use admin_token_env
  std::string admin_token_env = "FROST_ADMIN_TOKEN";
  std::string user_token_file;
  std::string user_token_env = "FROST_USER_TOKEN";
  bool require_for_inference = false;
  // POST /v1/completions/render and /v1/chat/completions/render answer without a token even under
  // require_for_inference: for a router that tokenizes through them and sends none (the inference gateway's
  // endpoint picker, deploy/k8s/overlays/gateway). They return token ids only, no generation.
  bool open_render = false;
  // Refuse to start without server.tls, and refuse any call that did not arrive over TLS: tokens are never
  // accepted in plaintext.
  bool require_tls = false;
};

// `log:`
struct LogSection {
  LogLevel level = LogLevel::kInfo;  // messages below this level are dropped
};

struct ServerConfig {
  ServerSection server;
  ModelSection model;
  EngineSection engine;
  LimitsSection limits;
  PredictionSection prediction;
  JobsSection jobs;
  ArtifactsSection artifacts;
  AuthSection auth;
  LogSection log;
};

// Parses YAML text. Unset fields keep their defaults; an empty document is the default
// config. Unknown keys, wrong types, out-of-range or unknown enum values, duplicate keys and
// YAML syntax errors (with line and column) are INVALID_ARGUMENT. Ends with
// validate_server_config().
absl::StatusOr<ServerConfig> parse_server_config(const std::string& yaml_text);

// Reads and parses a file; parse errors are prefixed with the path. NOT_FOUND when the file
// cannot be read.
absl::StatusOr<ServerConfig> load_server_config(const std::string& path);

// Checks what the YAML types cannot: listen addresses, non-empty model path and the
// cross-field rules. frostd calls it again after applying command-line overrides.
absl::Status validate_server_config(const ServerConfig& cfg);

// Checks every configured path for its kind on the filesystem (validate_server_config stays pure): model.path
// a directory (unless builtin:), model.chat_template, server.tls.*_file, auth.*_token_file, engine.kv_repair
// and engine.kv_splice regular files; jobs.state_dir (with jobs.enabled), jobs.data_root and
// artifacts.follow_state_dir a directory or absent (created, or a volume not there yet). INVALID_ARGUMENT /
// NOT_FOUND naming the field, the path and what it is instead ("jobs.state_dir: \"x\" is a regular file, not a
// directory"). FrostServer::start calls it first.
absl::Status check_config_paths(const ServerConfig& cfg);

// OK when `value` is HOST:PORT (hostname, IPv4, or [IPv6]) with a port in [0, 65535];
// otherwise INVALID_ARGUMENT "<field>: expected HOST:PORT, got "<value>"" (or naming the
// bad port).
absl::Status validate_host_port(const std::string& field, const std::string& value);
// The host (IPv6 without its brackets) and the port of a HOST:PORT that validate_host_port accepted.
struct HostPort {
  std::string host, port;
};
HostPort split_host_port(const std::string& value);

// The config as YAML with every field set, in schema order; parse_server_config() of the
// result gives back `cfg`. frostd logs it at start.
std::string format_server_config(const ServerConfig& cfg);

}  // namespace frost::server
