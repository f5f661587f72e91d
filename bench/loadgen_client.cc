// frost-loadgen's gRPC and HTTP clients (see loadgen_client.h).
#include "bench/loadgen_client.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/status/status.h"

namespace frost::loadgen {

using nlohmann::ordered_json;

namespace {

// Synthetic token ids, spread over [1000, 31000) (every built-in and real model here has more ids than that
// is not required: ids are taken modulo the vocabulary the server reports).
void add_ids(frost::v1::GenerateRequest* req, int n, uint64_t salt, int64_t vocab) {
  const int64_t lo = std::min<int64_t>(3, vocab - 1), span = std::max<int64_t>(1, vocab - lo);
  for (int i = 0; i < n; ++i)
    req->mutable_token_ids()->add_ids(static_cast<int32_t>(
        lo + (static_cast<int64_t>(i) * 7919 + static_cast<int64_t>(salt % 1000003) * 104729) % span));
}

}  // namespace

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

int64_t g_vocab = 32000;

// Request `index` of the run (warm-up included), named "<id_prefix><index>" in frostd's logs.

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
  if (o.spec_method == "off") req.mutable_speculative()->set_method(frost::v1::SPEC_METHOD_OFF);
  if (o.spec_method == "ngram") req.mutable_speculative()->set_method(frost::v1::SPEC_METHOD_NGRAM);
  if (o.spec_method == "suffix") req.mutable_speculative()->set_method(frost::v1::SPEC_METHOD_SUFFIX);
  if (o.spec_tokens > 0) req.mutable_speculative()->set_num_tokens(o.spec_tokens);
  return req;
}

namespace {

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
      r.draft_tokens = final_->draft_tokens();
      r.accepted_tokens = final_->accepted_tokens();
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

}  // namespace

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
        if (!o.spec_method.empty()) body["speculative"]["method"] = o.spec_method;
        if (o.spec_tokens > 0) body["speculative"]["num_tokens"] = o.spec_tokens;
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
            if (j.contains("usage") && j["usage"].is_object()) {
              usage_tokens = j["usage"]["completion_tokens"];
              // Present only when the request speculated (server/openai_speculative.h).
              if (const auto d = j["usage"].find("completion_tokens_details"); d != j["usage"].end()) {
                r.accepted_tokens = d->value("accepted_prediction_tokens", int64_t{0});
                r.draft_tokens = r.accepted_tokens + d->value("rejected_prediction_tokens", int64_t{0});
              }
            }
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

}  // namespace frost::loadgen
