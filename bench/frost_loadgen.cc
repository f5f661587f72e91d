// frost-loadgen: serving load benchmark against a running frostd, printing one JSON object.
//
//   `frost-loadgen --help` lists the flags (bench/loadgen_options.cc: one table parses them and prints the
//   help).
//
// N lanes, each with its own channel (its own HTTP/2 connection, like N independent users), driven by one
// thread through gRPC's completion queue, run frost.v1.Generation/Generate calls back to back until M
// measured requests are done, after K warm-up requests that are not measured. Every request sets
// sampling.ignore_eos so it generates exactly T tokens, and the stream is checked for that. Per request, on
// the client: time to first token (first chunk carrying a token id), inter-token latency, end-to-end latency,
// tokens received and the final status code. Non-OK statuses are counted by code name; exit status 1 when
// any request failed or returned a wrong stream, 2 on a usage error, 0 otherwise.
//
// --connections C (1..N, default N): the lanes share C channels, lane i on channel i mod C — N users each on
// their own connection (the default), or an application server's gRPC channel / a proxy multiplexing many
// users' calls onto one HTTP/2 connection (C = 1).
//
// --prompt-ids N: prompts are N synthetic token ids (distinct per request) instead of --prompt text;
// --shared-prefix P puts the same P ids in front of every one of them (a system prompt: what prefix
// caching reuses). --background-prompt B: one extra client sends B-token prompts (max_new_tokens 1) back
// to back for the whole measured phase — the measured streams decode while a long prompt is being
// prefilled; its requests are reported apart ("background"). --metrics-addr: frostd's /metrics is scraped
// every 50 ms during the measured phase and the peaks of the KV pool and the counter deltas are reported
// ("server_metrics": peak KV bytes in use and, at that moment, the bytes the held positions need).
//
// --http HOST:PORT: the warm-up and measured requests go through frostd's OpenAI API instead (streamed
// POST /v1/completions, the same prompts, max_tokens, ignore_eos, temperature and seeds; --addr still names
// the gRPC port for readiness and the model's vocabulary), so the two protocols are compared on the same
// load.
//
// --spec-method off|ngram|suffix, --spec-tokens K: speculative decoding for every request (unset: the
// server's engine.speculative); the report's "speculative" sums Final.draft_tokens / accepted_tokens.
// --seed S: request i (warm-up included) is sent with seed S + i, so streams differ but a run
// repeats exactly. --wait-ready S: first retry a one-token Generate until it succeeds (UNAVAILABLE
// while frostd loads its model), up to S seconds. JSON is the only output format; --json is
// accepted for symmetry with frost-bench.
//
// The program is split along its seams: loadgen_options (flags), loadgen_client (the gRPC and HTTP drivers),
// loadgen_metrics (the /metrics scraper); this file runs the phases and writes the report.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/bench_util.h"
#include "bench/loadgen_client.h"
#include "bench/loadgen_metrics.h"
#include "bench/loadgen_options.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::loadgen {
namespace {

using frost::bench::percentile;
using nlohmann::ordered_json;

// Distinct error messages kept in the JSON, each with its count (status_counts covers every request).
constexpr size_t kMaxErrorMessages = 10;

ordered_json summary(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return {{"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)},
          {"mean", v.empty() ? 0 : sum / static_cast<double>(v.size())},
          {"min", percentile(v, 0)},
          {"max", percentile(v, 100)},
          {"n", v.size()}};
}

// Retries a one-token Generate until it succeeds. Only "not ready yet" codes are retried; any other
// error (a bad prompt, say) would never go away. True when the server answered OK in time.
bool wait_ready(const Options& o, frost::v1::Generation::Stub* stub, std::string* error) {
  const Clock::time_point t0 = Clock::now();
  Options probe = o;
  probe.timeout_s = 5;
  for (int attempt = 0;; ++attempt) {
    RequestResult r = run_one(stub, make_request(o, "loadgen-ready-", attempt, 1), probe);
    if (r.code == grpc::StatusCode::OK) return true;
    *error = r.error;
    const bool retry =
        r.code == grpc::StatusCode::UNAVAILABLE || r.code == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!retry || seconds(Clock::now() - t0) > o.wait_ready_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ordered_json status_counts(const std::vector<RequestResult>& results) {
  std::map<std::string, int> counts;
  for (const RequestResult& r : results) ++counts[code_name(r.code)];
  ordered_json j = ordered_json::object();
  for (const auto& [name, n] : counts) j[name] = n;
  return j;
}

}  // namespace
}  // namespace frost::loadgen

int main(int argc, char** argv) {
  using namespace frost::loadgen;
  // Abseil's debug-build lock-order detection (Debian builds Abseil without NDEBUG) off, as in frostd: gRPC's
  // own locks are absl::Mutex, and the detector's hash lookups were ~3% of the client's CPU per message,
  // taken from the two cores the server under test shares with it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const Options o = parse_loadgen_flags(argc, argv);

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<frost::v1::Generation::Stub>> stubs;
  for (int t = 0; t < o.connections; ++t) channels.push_back(make_channel(o.addr));
  for (int t = 0; t < o.concurrency; ++t)
    stubs.push_back(frost::v1::Generation::NewStub(channels[static_cast<size_t>(t % o.connections)]));

  if (o.wait_ready_s > 0) {
    std::string error;
    if (!wait_ready(o, stubs[0].get(), &error)) {
      std::fprintf(stderr, "frost-loadgen: %s not ready after %.0f s: %s\n", o.addr.c_str(), o.wait_ready_s,
                   error.c_str());
      return 1;
    }
  }
  // Connect every channel before measuring, so no measured TTFT includes a TCP/HTTP2 handshake.
  for (const auto& ch : channels) {
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "frost-loadgen: cannot connect to %s\n", o.addr.c_str());
      return 1;
    }
  }
  frost::v1::ModelInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status st = stubs[0]->GetModelInfo(&ctx, frost::v1::ModelInfoRequest(), &info);
    if (!st.ok()) {
      std::fprintf(stderr, "frost-loadgen: GetModelInfo: %s: %s\n", code_name(st.error_code()).c_str(),
                   st.error_message().c_str());
      return 1;
    }
  }

  g_vocab = info.vocab_size() > 0 ? info.vocab_size() : 32000;

  double warmup_wall_s = 0, wall_s = 0;
  std::string model;
  if (!o.http_addr.empty() && (model = http_model(o.http_addr)).empty()) {
    std::fprintf(stderr, "frost-loadgen: --http %s: GET /v1/models failed\n", o.http_addr.c_str());
    return 1;
  }
  auto phase = [&](int first, int count, double* wall) {
    return o.http_addr.empty() ? run_phase(o, first, count, stubs, wall)
                               : run_phase_http(o, first, count, model, wall);
  };
  std::vector<RequestResult> warm;
  if (o.warmup > 0) warm = phase(0, o.warmup, &warmup_wall_s);
  // The background client: long prompts, one after another, while the measured phase runs.
  std::atomic<bool> bg_stop{false};
  std::vector<RequestResult> bg;
  std::thread bg_thread;
  std::unique_ptr<frost::v1::Generation::Stub> bg_stub;
  if (o.background_prompt > 0) {
    bg_stub = frost::v1::Generation::NewStub(make_channel(o.addr));
    bg_thread = std::thread([&] {
      Options bo = o;
      bo.prompt_ids = o.background_prompt;
      bo.shared_prefix = 0;
      for (int i = 0; !bg_stop.load(); ++i) {
        bg.push_back(run_one(bg_stub.get(), make_request(bo, "loadgen-bg-", 500000 + i, 1), bo));
        if (!bg.back().valid) break;  // a refused long prompt (context too short?) would otherwise spin here
      }
    });
  }
  Scraper scraper;
  if (!o.metrics_addr.empty()) scraper.start(o.metrics_addr);
  const std::vector<RequestResult> results = phase(o.warmup, o.requests, &wall_s);
  scraper.finish();
  bg_stop = true;
  if (bg_thread.joinable()) bg_thread.join();

  std::vector<double> ttft, itl, e2e, tpot, stream_tps, queue, server_ttft, server_tps;
  int64_t tokens = 0, chunks = 0, n_valid = 0, n_failed = 0, drafted = 0, accepted = 0;
  std::map<std::string, int> errors;  // message -> requests
  std::string first_error;
  const auto note_error = [&](const std::string& msg) {
    if (first_error.empty()) first_error = msg;
    if (errors.size() < kMaxErrorMessages || errors.count(msg)) ++errors[msg];
  };
  for (const RequestResult& r : results) {
    tokens += r.tokens;
    chunks += r.chunks;
    drafted += r.draft_tokens;
    accepted += r.accepted_tokens;
    if (!r.valid) {
      ++n_failed;
      note_error(r.error);
      continue;
    }
    ++n_valid;
    ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    queue.push_back(r.server_queue_s);
    server_ttft.push_back(r.server_ttft_s);
    server_tps.push_back(r.server_decode_tps);
    if (r.tokens > 1 && r.decode_s > 0) {
      // Time per output token after the first, and its inverse, the decode rate one user sees.
      tpot.push_back(r.decode_s / static_cast<double>(r.tokens - 1));
      stream_tps.push_back(static_cast<double>(r.tokens - 1) / r.decode_s);
    }
  }
  int64_t warm_failed = 0;
  for (const RequestResult& r : warm) {
    if (r.valid) continue;
    ++warm_failed;
    note_error("warm-up: " + r.error);
  }

  const ordered_json spec_method =
      o.spec_method.empty() ? ordered_json(nullptr) : ordered_json(o.spec_method);
  ordered_json out;
  out["bench"] = "serve";
  out["settings"] = {{"addr", o.addr},
                     {"concurrency", o.concurrency},
                     {"connections", o.connections},
                     {"requests", o.requests},
                     {"warmup", o.warmup},
                     {"max_tokens", o.max_tokens},
                     {"prompt", o.prompt_ids > 0 ? ordered_json(nullptr) : ordered_json(o.prompt)},
                     {"prompt_ids", o.prompt_ids},
                     {"shared_prefix", o.shared_prefix},
                     {"background_prompt", o.background_prompt},
                     {"temperature", o.temperature.has_value() ? ordered_json(*o.temperature) : nullptr},
                     {"seed", o.seed.has_value() ? ordered_json(*o.seed) : nullptr},
                     {"ignore_eos", true},
                     {"spec_method", spec_method},
                     {"spec_tokens", o.spec_tokens},
                     {"timeout_s", o.timeout_s}};
  out["server"] = {{"model", info.name()},        {"architecture", info.architecture()},
                   {"n_params", info.n_params()}, {"weight_dtype", info.weight_dtype()},
                   {"kv_codec", info.kv_codec()}, {"context_length", info.context_length()}};
  out["machine"] = frost::bench::machine_json();
  out["wall_s"] = wall_s;
  out["requests_ok"] = n_valid;
  out["requests_failed"] = n_failed;
  out["status_counts"] = status_counts(results);
  out["requests_per_s"] = wall_s > 0 ? static_cast<double>(n_valid) / wall_s : 0;
  out["output_tokens"] = tokens;
  out["output_tokens_per_s"] = wall_s > 0 ? static_cast<double>(tokens) / wall_s : 0;
  out["prompt_tokens"] = results.empty() ? 0 : results.front().prompt_tokens;
  out["ttft_s"] = summary(ttft);
  out["itl_s"] = summary(itl);
  out["tpot_s"] = summary(tpot);
  out["e2e_s"] = summary(e2e);
  out["stream_decode_tokens_per_s"] = summary(stream_tps);
  out["tokens_per_chunk"] = chunks > 0 ? static_cast<double>(tokens) / static_cast<double>(chunks) : 0;
  // The server's own view (Final.timings): engine queue wait, TTFT after the queue, and the decode
  // rate of each sequence measured in the engine (no transport), to tell engine time from gRPC time.
  out["server_queue_s"] = summary(queue);
  out["server_ttft_s"] = summary(server_ttft);
  out["server_decode_tokens_per_s"] = summary(server_tps);
  // Speculative decoding, over the measured requests (Final.draft_tokens / accepted_tokens): each accepted
  // token is an engine step saved, so tokens / (tokens - accepted) is the mean tokens a sequence got per
  // step.
  out["speculative"] = {
      {"draft_tokens", drafted},
      {"accepted_tokens", accepted},
      {"acceptance_rate", drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0},
      {"tokens_per_step",
       tokens > accepted ? static_cast<double>(tokens) / static_cast<double>(tokens - accepted) : 0}};
  out["warmup"] = {{"requests", o.warmup},
                   {"failed", warm_failed},
                   {"wall_s", warmup_wall_s},
                   {"status_counts", status_counts(warm)}};
  int64_t bg_failed = 0;
  if (o.background_prompt > 0) {
    std::vector<double> bg_ttft;
    for (const RequestResult& r : bg) {
      if (r.valid) {
        bg_ttft.push_back(r.ttft_s);
      } else {
        ++bg_failed;
        note_error("background: " + r.error);
      }
    }
    out["background"] = {{"prompt_tokens", o.background_prompt},
                         {"requests", bg.size()},
                         {"failed", bg_failed},
                         {"ttft_s", summary(bg_ttft)}};
  }
  if (!o.metrics_addr.empty()) {
    out["server_metrics"] = {{"samples", scraper.samples},
                             {"kv_bytes_in_use_peak", scraper.peak_bytes},
                             {"kv_bytes_needed_at_peak", scraper.needed_at_peak},
                             {"kv_bytes_ratio_at_peak",
                              scraper.needed_at_peak > 0 ? scraper.peak_bytes / scraper.needed_at_peak : 0},
                             {"kv_usage_ratio_peak", scraper.peak_usage},
                             {"preemptions", scraper.preempt1 - scraper.preempt0},
                             {"prefix_queries_tokens", scraper.queries1 - scraper.queries0},
                             {"prefix_hits_tokens", scraper.hits1 - scraper.hits0}};
  }
  out["errors"] = ordered_json::object();
  for (const auto& [msg, n] : errors) out["errors"][msg] = n;
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  if (n_failed > 0 || warm_failed > 0 || bg_failed > 0) {
    std::fprintf(stderr, "frost-loadgen: %lld of %d requests failed (%lld of %d warm-up); first: %s\n",
                 static_cast<long long>(n_failed), o.requests, static_cast<long long>(warm_failed), o.warmup,
                 first_error.c_str());
    return 1;
  }
  return 0;
}
