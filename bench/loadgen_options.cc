// frost-loadgen's flag table (see loadgen_options.h).
#include "bench/loadgen_options.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/flags/flags.h"

namespace frost::loadgen {

Options parse_loadgen_flags(int argc, char** argv) {
  using frost::cli::Flag;
  Options o;
  // A value the flag refuses although it parses: bad_value() with what it expects.
  auto check = [](const std::string& flag, bool ok, const char* expected, const std::string& value) {
    return ok ? absl::OkStatus() : frost::cli::bad_value(flag, expected, value);
  };
  frost::cli::Command command;
  command.name = "frost-loadgen";
  command.synopsis = "[flags]";
  command.description =
      "Serving load benchmark against a running frostd, printing one JSON object. N lanes (--concurrency), "
      "each with its own channel, run frost.v1.Generation/Generate calls back to back until M measured "
      "requests (--requests) are done, after K warm-up requests (--warmup). Every request sets "
      "sampling.ignore_eos so it generates exactly T tokens (--max-tokens); the stream is checked for that.";
  command.flag_groups = {
      {"flags",
       {frost::cli::string_flag("--addr", [&](const std::string& v) { o.addr = v; })
            .doc("HOST:PORT", "frostd's gRPC address (default localhost:50051)"),
        frost::cli::int32_flag("--concurrency", 1, [&](int32_t v) { o.concurrency = v; })
            .doc("N", "lanes: requests in flight at once (default 1)"),
        frost::cli::int32_flag("--connections", 1, [&](int32_t v) { o.connections = v; })
            .doc("C",
                 "the lanes share C channels, lane i on channel i mod C (1..N, default N: each user on its "
                 "own connection; 1: a proxy multiplexing every user onto one HTTP/2 connection)"),
        frost::cli::int32_flag("--requests", 1, [&](int32_t v) { o.requests = v; })
            .doc("M", "measured requests (default 64)"),
        frost::cli::int32_flag("--warmup", 0, [&](int32_t v) { o.warmup = v; })
            .doc("K", "warm-up requests before them, not measured (default 0)"),
        frost::cli::int32_flag("--max-tokens", 1, [&](int32_t v) { o.max_tokens = v; })
            .doc("T", "tokens each request generates (default 128)"),
        frost::cli::value_flag("--prompt",
                               [&](const std::string& v) {
                                 o.prompt = v;
                                 return check("--prompt", !v.empty(), "a non-empty text", v);
                               })
            .doc("TEXT", "the prompt of every request (default \"Once upon a time\")"),
        frost::cli::int32_flag("--prompt-ids", 1, [&](int32_t v) { o.prompt_ids = v; })
            .doc("N", "prompts of N synthetic token ids (distinct per request) instead of --prompt"),
        frost::cli::int32_flag("--shared-prefix", 0, [&](int32_t v) { o.shared_prefix = v; })
            .doc("P",
                 "with --prompt-ids: the same P ids in front of every prompt (what prefix caching reuses)"),
        frost::cli::int32_flag("--background-prompt", 1, [&](int32_t v) { o.background_prompt = v; })
            .doc("B",
                 "one extra client sends B-token prompts (max_new_tokens 1) back to back during the measured "
                 "phase; reported apart (\"background\")"),
        frost::cli::value_flag("--metrics-addr",
                               [&](const std::string& v) {
                                 o.metrics_addr = v;
                                 return check("--metrics-addr", v.find(':') != std::string::npos, "HOST:PORT",
                                              v);
                               })
            .doc("HOST:PORT",
                 "scrape frostd's /metrics every 50 ms during the measured phase: KV pool peaks and counter "
                 "deltas (\"server_metrics\")"),
        frost::cli::double_flag("--temperature", 0, [&](double v) { o.temperature = v; })
            .doc("X", "sampling temperature (default: the server's)"),
        frost::cli::uint64_flag("--seed", [&](uint64_t v) { o.seed = v; })
            .doc("S", "request i (warm-up included) is sent with seed S + i, so a run repeats exactly"),
        frost::cli::value_flag("--timeout",
                               [&](const std::string& v) {
                                 absl::StatusOr<double> t = frost::cli::parse_double("--timeout", v);
                                 if (!t.ok()) return t.status();
                                 o.timeout_s = *t;
                                 return check("--timeout", *t > 0, "a number > 0", v);
                               })
            .doc("SECONDS", "deadline of each call, so a stuck server cannot hang the run (default 300)"),
        frost::cli::double_flag("--wait-ready", 0, [&](double v) { o.wait_ready_s = v; })
            .doc("SECONDS",
                 "first retry a one-token Generate until it succeeds (UNAVAILABLE while frostd loads), up to "
                 "SECONDS"),
        frost::cli::value_flag("--http",
                               [&](const std::string& v) {
                                 o.http_addr = v;
                                 return check("--http", v.find(':') != std::string::npos, "HOST:PORT", v);
                               })
            .doc("HOST:PORT",
                 "send the warm-up and measured requests through frostd's OpenAI API (streamed POST "
                 "/v1/completions) instead; --addr still names the gRPC port for readiness and the "
                 "vocabulary"),
        frost::cli::value_flag("--spec-method",
                               [&](const std::string& v) {
                                 o.spec_method = v;
                                 return check("--spec-method", v == "off" || v == "ngram" || v == "suffix",
                                              "off, ngram or suffix", v);
                               })
            .doc("off|ngram|suffix",
                 "speculative decoding for every request (default: the server's engine.speculative.method); "
                 "the report adds drafted and accepted tokens (\"speculative\")"),
        frost::cli::int32_flag("--spec-tokens", 0, [&](int32_t v) { o.spec_tokens = v; })
            .doc("K", "most drafted tokens per step (default 0: the server's engine.speculative.num_tokens)"),
        frost::cli::switch_flag("--json", [] {
        }).doc("accepted for symmetry with frost-bench (JSON is the only output format)")}}};
  command.footer =
      "Exit 1 when any request failed or returned a wrong stream, 2 on a usage error, 0 otherwise.";
  const std::vector<std::string> positional =
      frost::cli::parse_or_exit(command, std::vector<std::string>(argv + 1, argv + argc), 2);
  auto usage = [&command](const std::string& msg) { frost::cli::exit_usage_error(command, msg, 2); };
  if (!positional.empty()) usage("bad argument '" + positional.front() + "'");
  if (o.shared_prefix > 0 && o.prompt_ids == 0) usage("--shared-prefix needs --prompt-ids");
  if (o.connections > o.concurrency)
    usage("--connections must be <= --concurrency (" + std::to_string(o.concurrency) + "), got " +
          std::to_string(o.connections));
  if (o.connections == 0) o.connections = o.concurrency;
  return o;
}

}  // namespace frost::loadgen
