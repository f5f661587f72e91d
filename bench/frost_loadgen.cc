// frost-loadgen: serving load benchmark against a running frostd, printing one JSON object.
//
//   frost-loadgen [--addr HOST:PORT] [--concurrency N] [--connections C] [--requests M] [--warmup K]
//                 [--max-tokens T]
//                 [--prompt TEXT | --prompt-ids N [--shared-prefix P]] [--background-prompt B]
//                 [--metrics-addr HOST:PORT] [--temperature X] [--seed S] [--timeout SECONDS]
//                 [--wait-ready SECONDS] [--json]
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
// --seed S: request i (warm-up included) is sent with seed S + i, so streams differ but a run
// repeats exactly. --wait-ready S: first retry a one-token Generate until it succeeds (UNAVAILABLE
// while frostd loads its model), up to S seconds. JSON is the only output format; --json is
// accepted for symmetry with frost-bench.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_util.h"
#include "core/flags/flags.h"
#include "frost/v1/generation.grpc.pb.h"

namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using frost::bench::percentile;

constexpr char kUsage[] =
    "usage: frost-loadgen [--addr HOST:PORT] [--concurrency N] [--connections C] [--requests M] [--warmup K] "
    "[--max-tokens T] [--prompt TEXT | --prompt-ids N [--shared-prefix P]] [--background-prompt B] "
    "[--metrics-addr HOST:PORT] [--temperature X] [--seed S] [--timeout SECONDS] [--wait-ready SECONDS] "
    "[--http HOST:PORT] [--json]\n";

// Distinct error messages kept in the JSON, each with its count (status_counts covers every request).
constexpr size_t kMaxErrorMessages = 10;

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "frost-loadgen: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

struct Options {
  std::string addr = "localhost:50051";
  int concurrency = 1;
  int connections = 0;  // 0: one per lane
  int requests = 64;
  int warmup = 0;
  int max_tokens = 128;
  std::string prompt = "Once upon a time";
  std::optional<double> temperature;  // unset: the server's default
  std::optional<uint64_t> seed;       // unset: nondeterministic seeds
  double timeout_s = 300;             // deadline of each call, so a stuck server cannot hang the run
  double wait_ready_s = 0;
  int prompt_ids = 0;         // > 0: synthetic token-id prompts of this length
  int shared_prefix = 0;      // ids shared by every prompt, in front
  int background_prompt = 0;  // > 0: one extra client prefilling prompts of this length
  std::string metrics_addr;   // frostd's /metrics, scraped during the measured phase
  std::string http_addr;      // the OpenAI API: measured (and warm-up) requests go through /v1/completions
};

// -h / --help: the usage on stdout, exit 0.
[[noreturn]] void help() {
  std::fputs(kUsage, stdout);
  std::exit(0);
}

Options parse_flags(int argc, char** argv) {
  using frost::cli::Flag;
  Options o;
  // A value the flag refuses although it parses: bad_value() with what it expects.
  auto check = [](const std::string& flag, bool ok, const char* expected, const std::string& value) {
    return ok ? absl::OkStatus() : frost::cli::bad_value(flag, expected, value);
  };
  const std::vector<Flag> flags = {
      frost::cli::switch_flag("--json", [] {}),  // JSON is the only output format
      frost::cli::switch_flag("--help", help),
      frost::cli::switch_flag("-h", help),
      frost::cli::string_flag("--addr", [&](const std::string& v) { o.addr = v; }),
      frost::cli::int32_flag("--concurrency", 1, [&](int32_t v) { o.concurrency = v; }),
      frost::cli::int32_flag("--connections", 1, [&](int32_t v) { o.connections = v; }),
      frost::cli::int32_flag("--requests", 1, [&](int32_t v) { o.requests = v; }),
      frost::cli::int32_flag("--warmup", 0, [&](int32_t v) { o.warmup = v; }),
      frost::cli::int32_flag("--max-tokens", 1, [&](int32_t v) { o.max_tokens = v; }),
      Flag{"--prompt", true,
           [&](const std::string& v) {
             o.prompt = v;
             return check("--prompt", !v.empty(), "a non-empty text", v);
           }},
      frost::cli::double_flag("--temperature", 0, [&](double v) { o.temperature = v; }),
      frost::cli::uint64_flag("--seed", [&](uint64_t v) { o.seed = v; }),
      Flag{"--timeout", true,
           [&](const std::string& v) {
             absl::StatusOr<double> t = frost::cli::parse_double("--timeout", v);
             if (!t.ok()) return t.status();
             o.timeout_s = *t;
             return check("--timeout", *t > 0, "a number > 0", v);
           }},
      frost::cli::double_flag("--wait-ready", 0, [&](double v) { o.wait_ready_s = v; }),
      frost::cli::int32_flag("--prompt-ids", 1, [&](int32_t v) { o.prompt_ids = v; }),
      frost::cli::int32_flag("--shared-prefix", 0, [&](int32_t v) { o.shared_prefix = v; }),
      frost::cli::int32_flag("--background-prompt", 1, [&](int32_t v) { o.background_prompt = v; }),
      Flag{"--http", true,
           [&](const std::string& v) {
             o.http_addr = v;
             return check("--http", v.find(':') != std::string::npos, "HOST:PORT", v);
           }},
      Flag{"--metrics-addr", true,
           [&](const std::string& v) {
             o.metrics_addr = v;
             return check("--metrics-addr", v.find(':') != std::string::npos, "HOST:PORT", v);
           }},
  };
  absl::StatusOr<std::vector<std::string>> positional =
      frost::cli::parse_flags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!positional.ok()) usage(std::string(positional.status().message()));
  if (!positional->empty()) usage("bad argument '" + positional->front() + "'");
  if (o.shared_prefix > 0 && o.prompt_ids == 0) usage("--shared-prefix needs --prompt-ids");
  if (o.connections > o.concurrency)
    usage("--connections must be <= --concurrency (" + std::to_string(o.concurrency) + "), got " +
          std::to_string(o.connections));
  if (o.connections == 0) o.connections = o.concurrency;
  return o;
}

// Synthetic token ids, spread over [1000, 31000) (every built-in and real model here has more ids than that
// is not required: ids are taken modulo the vocabulary the server reports).
void add_ids(frost::v1::GenerateRequest* req, int n, uint64_t salt, int64_t vocab) {
  const int64_t lo = std::min<int64_t>(3, vocab - 1), span = std::max<int64_t>(1, vocab - lo);
  for (int i = 0; i < n; ++i)
    req->mutable_token_ids()->add_ids(static_cast<int32_t>(
        lo + (static_cast<int64_t>(i) * 7919 + static_cast<int64_t>(salt % 1000003) * 104729) % span));
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

// "INVALID_ARGUMENT" etc.; gRPC and absl share the canonical code numbers.
std::string code_name(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Every channel gets its own connection: channels with equal arguments otherwise share one
// subchannel (one TCP connection) process-wide, and N users would then contend on one HTTP/2
// connection's flow control and one server-side transport, which real clients would not.
std::shared_ptr<grpc::Channel> make_channel(const std::string& addr) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

// Request `index` of the run (warm-up included), named "<id_prefix><index>" in frostd's logs.
int64_t g_vocab = 32000;  // from GetModelInfo

frost::v1::GenerateRequest make_request(const Options& o, const std::string& id_prefix, int index,
                                        int max_tokens) {
  frost::v1::GenerateRequest req;
  req.set_request_id(id_prefix + std::to_string(index));
  if (o.prompt_ids > 0) {
    add_ids(&req, o.shared_prefix, 424242, g_vocab);                         // the same for everyone
    add_ids(&req, o.prompt_ids, 1 + static_cast<uint64_t>(index), g_vocab);  // this request's own
  } else {
    req.set_text(o.prompt);
  }
  frost::v1::SamplingParams* sp = req.mutable_sampling();
  sp->set_max_new_tokens(max_tokens);
  sp->set_ignore_eos(true);
  if (o.temperature.has_value()) sp->set_temperature(static_cast<float>(*o.temperature));
  if (o.seed.has_value()) sp->set_seed(*o.seed + static_cast<uint64_t>(index));
  return req;
}

// What the client saw of one request.
struct RequestResult {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string error;   // status message, or what is wrong with an OK stream
  bool valid = false;  // OK, exactly max_tokens tokens, one Final with FINISH_REASON_LENGTH
  double ttft_s = -1;  // -1: no token arrived
  double e2e_s = 0;
  double decode_s = 0;  // first token to last token
  int64_t tokens = 0;
  int64_t chunks = 0;  // chunks carrying tokens
  int64_t prompt_tokens = 0;
  double server_queue_s = 0;
  double server_ttft_s = 0;
  double server_decode_tps = 0;
  // Inter-token latency. frostd coalesces tokens produced while a write is in flight into one chunk,
  // so the client cannot see when each of them was produced: a chunk of k tokens arriving g seconds
  // after the previous token-carrying chunk contributes k gaps of g / k. Tokens that share the first
  // chunk with the first token contribute nothing (their gap since the first token is unknown).
  std::vector<double> itl_s;
};

// One request's stream as the client sees it, message by message: the same accounting for the blocking
// client (run_one) and the completion-queue one (run_phase).
class StreamTally {
 public:
  StreamTally(int64_t want, Clock::time_point t0) : want_(want), t0_(t0) {}

  void on_message(const frost::v1::GenerateResponse& resp, Clock::time_point now) {
    if (resp.has_final()) {
      ++n_final_;
      final_ = resp.final();
      return;
    }
    if (!resp.has_chunk()) return;
    if (n_final_ > 0) chunk_after_final_ = true;
    const int k = resp.chunk().token_ids_size();
    if (k == 0) return;  // text-only chunks do not exist today; they would carry no token timing
    if (r_.tokens == 0) {
      first_ = now;
      r_.ttft_s = seconds(now - t0_);
    } else {
      const double gap = seconds(now - last_) / k;
      r_.itl_s.insert(r_.itl_s.end(), static_cast<size_t>(k), gap);
    }
    last_ = now;
    r_.tokens += k;
    ++r_.chunks;
  }

  RequestResult finish(const grpc::Status& st, Clock::time_point now) {
    RequestResult r = std::move(r_);
    r.e2e_s = seconds(now - t0_);
    r.code = st.error_code();
    if (r.tokens > 0) r.decode_s = seconds(last_ - first_);
    if (final_.has_value()) {
      r.prompt_tokens = final_->prompt_tokens();
      r.server_queue_s = final_->timings().queue_s();
      r.server_ttft_s = final_->timings().time_to_first_token_s();
      r.server_decode_tps = final_->timings().decode_tokens_per_s();
    }
    if (!st.ok()) {
      r.error = code_name(st.error_code()) + ": " + st.error_message();
    } else if (n_final_ != 1 || chunk_after_final_) {
      r.error = "stream has " + std::to_string(n_final_) + " final messages" +
                (chunk_after_final_ ? " and chunks after one" : "");
    } else if (r.tokens != want_ || final_->completion_tokens() != want_) {
      r.error = "expected " + std::to_string(want_) + " tokens with ignore_eos, received " +
                std::to_string(r.tokens) +
                ", final.completion_tokens=" + std::to_string(final_->completion_tokens());
    } else if (final_->finish_reason() != frost::v1::FINISH_REASON_LENGTH) {
      r.error = "finish_reason " + frost::v1::FinishReason_Name(final_->finish_reason()) +
                ", expected FINISH_REASON_LENGTH";
    } else {
      r.valid = true;
    }
    return r;
  }

 private:
  const int64_t want_;
  const Clock::time_point t0_;
  Clock::time_point first_, last_;
  RequestResult r_;
  int n_final_ = 0;
  bool chunk_after_final_ = false;
  std::optional<frost::v1::Final> final_;
};

void set_deadline(grpc::ClientContext* ctx, double timeout_s) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(timeout_s)));
}

// One request on a blocking stub (the readiness probe and the background client).
RequestResult run_one(frost::v1::Generation::Stub* stub, const frost::v1::GenerateRequest& req,
                      const Options& o) {
  grpc::ClientContext ctx;
  set_deadline(&ctx, o.timeout_s);
  StreamTally tally(req.sampling().max_new_tokens(), Clock::now());
  std::unique_ptr<grpc::ClientReader<frost::v1::GenerateResponse>> reader = stub->Generate(&ctx, req);
  frost::v1::GenerateResponse resp;
  while (reader->Read(&resp)) tally.on_message(resp, Clock::now());
  const grpc::Status st = reader->Finish();
  return tally.finish(st, Clock::now());
}

// Runs `count` requests (ids first_index, first_index + 1, ...) on min(concurrency, count) lanes: a lane is
// one channel carrying one request at a time, the next starting as soon as the previous ends. All lanes start
// together; the returned wall time runs from that start to the end of the last request.
//
// Every lane is driven from this thread through one completion queue (gRPC's async API), not a thread per
// lane: the client shares the server's cores in `make bench-serve`, and 32 blocking reader threads cost it
// ~55 µs of CPU per token (a wake-up and a context switch per message), which the server then lacks. Here one
// wake-up drains every message that arrived together (one engine step delivers a token to each stream at
// once). A message's time is taken when this thread dequeues it: at most the handling of the messages ahead
// of it in the same wake-up (a few µs each) late.
std::vector<RequestResult> run_phase(const Options& o, int first_index, int count,
                                     const std::vector<std::unique_ptr<frost::v1::Generation::Stub>>& stubs,
                                     double* wall_s) {
  enum class Op { kStart, kRead, kFinish };
  struct Lane {
    frost::v1::Generation::Stub* stub = nullptr;
    int index = -1;  // the request's slot in `results`
    Op op = Op::kStart;
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientAsyncReader<frost::v1::GenerateResponse>> reader;
    frost::v1::GenerateResponse resp;
    grpc::Status status;
    std::optional<StreamTally> tally;
  };
  std::vector<RequestResult> results(static_cast<size_t>(count));
  grpc::CompletionQueue cq;
  int next = 0, active = 0;
  // Starts the lane's next request, if one is left.
  auto start = [&](Lane& l) {
    if (next >= count) return;
    l.index = next++;
    const frost::v1::GenerateRequest req = make_request(o, "loadgen-", first_index + l.index, o.max_tokens);
    l.ctx = std::make_unique<grpc::ClientContext>();
    set_deadline(l.ctx.get(), o.timeout_s);
    l.tally.emplace(req.sampling().max_new_tokens(), Clock::now());
    l.reader = l.stub->PrepareAsyncGenerate(l.ctx.get(), req, &cq);
    l.op = Op::kStart;
    l.reader->StartCall(&l);
    ++active;
  };
  std::vector<Lane> lanes(static_cast<size_t>(std::min(o.concurrency, count)));
  const Clock::time_point t0 = Clock::now();
  for (size_t t = 0; t < lanes.size(); ++t) {
    lanes[t].stub = stubs[t].get();
    start(lanes[t]);
  }
  void* tag = nullptr;
  bool ok = false;
  while (active > 0 && cq.Next(&tag, &ok)) {
    Lane& l = *static_cast<Lane*>(tag);
    const Clock::time_point now = Clock::now();
    switch (l.op) {
      case Op::kStart:  // not ok: the call could not start; Finish says why
      case Op::kRead:
        if (l.op == Op::kRead && ok) l.tally->on_message(l.resp, now);
        if (ok) {
          l.op = Op::kRead;
          l.reader->Read(&l.resp, &l);
        } else {  // the stream ended
          l.op = Op::kFinish;
          l.reader->Finish(&l.status, &l);
        }
        break;
      case Op::kFinish:
        results[static_cast<size_t>(l.index)] = l.tally->finish(l.status, now);
        --active;
        l.reader.reset();
        l.ctx.reset();
        start(l);
        break;
    }
  }
  *wall_s = seconds(Clock::now() - t0);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return results;
}

// The same requests through the OpenAI API (--http): POST /v1/completions with stream: true, one thread and
// one keep-alive connection per lane (cpp-httplib's client; its blocking reads cost a wake-up per event,
// which the gRPC lanes above avoid: the comparison is, if anything, unfair to HTTP). Tokens are counted from
// the final usage chunk (stream_options.include_usage); each SSE event with text is one token-carrying chunk.
std::vector<RequestResult> run_phase_http(const Options& o, int first_index, int count,
                                          const std::string& model, double* wall_s) {
  std::vector<RequestResult> results(static_cast<size_t>(count));
  const size_t colon = o.http_addr.rfind(':');
  const std::string host = o.http_addr.substr(0, colon);
  const int port = std::atoi(o.http_addr.c_str() + colon + 1);
  std::atomic<int> next{0};
  const int n_lanes = std::min(o.concurrency, count);
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> lanes;
  for (int t = 0; t < n_lanes; ++t) {
    lanes.emplace_back([&] {
      httplib::Client cli(host, port);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);  // as curl and node's http client do
      cli.set_read_timeout(static_cast<time_t>(o.timeout_s), 0);
      for (int i = next++; i < count; i = next++) {
        const frost::v1::GenerateRequest g = make_request(o, "loadgen-", first_index + i, o.max_tokens);
        ordered_json body = {{"model", model},
                             {"max_tokens", o.max_tokens},
                             {"ignore_eos", true},
                             {"stream", true},
                             {"stream_options", {{"include_usage", true}}}};
        if (g.has_token_ids()) {
          body["prompt"] = std::vector<int32_t>(g.token_ids().ids().begin(), g.token_ids().ids().end());
        } else {
          body["prompt"] = g.text();
        }
        if (g.sampling().has_temperature()) body["temperature"] = g.sampling().temperature();
        if (g.sampling().has_seed()) body["seed"] = g.sampling().seed();
        RequestResult& r = results[static_cast<size_t>(i)];
        const Clock::time_point start = Clock::now();
        Clock::time_point first{}, last{};
        std::string buf, finish;
        int64_t usage_tokens = -1, events = 0;
        bool done = false;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = body.dump();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
          buf.append(data, len);
          for (size_t end; (end = buf.find("\n\n")) != std::string::npos; buf.erase(0, end + 2)) {
            const std::string ev = buf.substr(0, end);
            if (ev.rfind("data: ", 0) != 0) continue;
            const std::string payload = ev.substr(6);
            if (payload == "[DONE]") {
              done = true;
              continue;
            }
            const ordered_json j = ordered_json::parse(payload, nullptr, false);
            if (j.is_discarded()) continue;
            if (j.contains("usage") && j["usage"].is_object()) usage_tokens = j["usage"]["completion_tokens"];
            if (!j.contains("choices") || j["choices"].empty()) continue;
            const ordered_json& c = j["choices"][0];
            if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
            if (!c.contains("text") || c["text"].get<std::string>().empty()) continue;
            const Clock::time_point now = Clock::now();
            if (events == 0) {
              first = now;
              r.ttft_s = seconds(now - start);
            } else {
              r.itl_s.push_back(seconds(now - last));
            }
            last = now;
            ++events;
          }
          return true;
        };
        const httplib::Result res = cli.send(req);
        r.e2e_s = seconds(Clock::now() - start);
        r.chunks = events;
        r.tokens = std::max<int64_t>(usage_tokens, 0);
        if (events > 1) r.decode_s = seconds(last - first);
        r.code = grpc::StatusCode::OK;
        if (!res) {
          r.code = grpc::StatusCode::UNAVAILABLE;
          r.error = "HTTP: " + httplib::to_string(res.error());
        } else if (res->status != 200) {
          r.code = grpc::StatusCode::UNKNOWN;
          r.error = "HTTP " + std::to_string(res->status);
        } else if (!done || usage_tokens != o.max_tokens || finish != "length") {
          r.error = "expected " + std::to_string(o.max_tokens) + " tokens, finish length and [DONE]; got " +
                    std::to_string(usage_tokens) + " tokens, finish '" + finish + "'" +
                    (done ? "" : ", no [DONE]");
        } else {
          r.valid = true;
        }
      }
    });
  }
  for (auto& th : lanes) th.join();
  *wall_s = seconds(Clock::now() - t0);
  return results;
}

// The model id GET /v1/models reports ("" on any error).
std::string http_model(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  httplib::Client cli(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1));
  const httplib::Result res = cli.Get("/v1/models");
  if (!res || res->status != 200) return "";
  const ordered_json j = ordered_json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) return "";
  return j["data"][0]["id"].get<std::string>();
}

// GET /metrics from host:port (plain HTTP/1.0); "" on any error.
std::string fetch_metrics(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) return "";
  std::string body;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) body.append(buf, static_cast<size_t>(n));
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return body;
}

// The value of an unlabelled sample (or the first sample whose line starts with `name`) in a text exposition.
double metric(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const char next = pos + name.size() < text.size() ? text[pos + name.size()] : '\0';
    if (line_start && (next == ' ' || next == '{')) {
      const size_t sp = text.find(' ', pos + name.size());
      return std::strtod(text.c_str() + sp + 1, nullptr);
    }
    pos += name.size();
  }
  return 0;
}

// Samples /metrics every 50 ms until stopped: the peak of KV bytes in use (and, at that moment, the bytes
// the held positions need without block rounding), and the counters at the start and the end.
struct Scraper {
  std::atomic<bool> stop{false};
  double peak_bytes = 0, needed_at_peak = 0, peak_usage = 0;
  double preempt0 = 0, preempt1 = 0, hits0 = 0, hits1 = 0, queries0 = 0, queries1 = 0;
  int samples = 0;
  std::thread th;
  void start(const std::string& addr) {
    const std::string first = fetch_metrics(addr);
    preempt0 = metric(first, "frost_preemptions_total");
    hits0 = metric(first, "frost_prefix_cache_hits_tokens_total");
    queries0 = metric(first, "frost_prefix_cache_queries_tokens_total");
    th = std::thread([this, addr] {
      while (!stop.load()) {
        const std::string m = fetch_metrics(addr);
        if (!m.empty()) {
          ++samples;
          const double b = metric(m, "frost_kv_cache_bytes_in_use");
          if (b > peak_bytes) {
            peak_bytes = b;
            needed_at_peak = metric(m, "frost_kv_cache_bytes_needed");
          }
          peak_usage = std::max(peak_usage, metric(m, "frost_kv_cache_usage_ratio"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      const std::string last = fetch_metrics(addr);
      preempt1 = metric(last, "frost_preemptions_total");
      hits1 = metric(last, "frost_prefix_cache_hits_tokens_total");
      queries1 = metric(last, "frost_prefix_cache_queries_tokens_total");
    });
  }
  void finish() {
    stop = true;
    if (th.joinable()) th.join();
  }
};

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

int main(int argc, char** argv) {
  // Abseil's debug-build lock-order detection (Debian builds Abseil without NDEBUG) off, as in frostd: gRPC's
  // own locks are absl::Mutex, and the detector's hash lookups were ~3% of the client's CPU per message,
  // taken from the two cores the server under test shares with it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const Options o = parse_flags(argc, argv);

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
  int64_t tokens = 0, chunks = 0, n_valid = 0, n_failed = 0;
  std::map<std::string, int> errors;  // message -> requests
  std::string first_error;
  const auto note_error = [&](const std::string& msg) {
    if (first_error.empty()) first_error = msg;
    if (errors.size() < kMaxErrorMessages || errors.count(msg)) ++errors[msg];
  };
  for (const RequestResult& r : results) {
    tokens += r.tokens;
    chunks += r.chunks;
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
