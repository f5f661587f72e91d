#pragma once
// frost-loadgen's clients: one Generate request as a RequestResult, a phase of requests over gRPC lanes
// driven by one completion queue (run_phase) or over the OpenAI HTTP API (run_phase_http), and the helpers
// they share.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/loadgen_options.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::loadgen {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// "INVALID_ARGUMENT" etc.; gRPC and absl share the canonical code numbers.
std::string code_name(grpc::StatusCode code);

// A channel with its own connection (see loadgen_client.cc).
std::shared_ptr<grpc::Channel> make_channel(const std::string& addr);

// The model's vocabulary (from GetModelInfo): synthetic prompt ids are taken modulo it.
extern int64_t g_vocab;

// Request `index` of the run (warm-up included), named "<id_prefix><index>" in frostd's logs.
frost::v1::GenerateRequest make_request(const Options& o, const std::string& id_prefix, int index,
                                        int max_tokens);

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
  int64_t draft_tokens = 0;     // speculative decoding: Final.draft_tokens (HTTP: accepted + rejected)
  int64_t accepted_tokens = 0;  // Final.accepted_tokens (HTTP: usage accepted_prediction_tokens)
  // Inter-token latency. frostd coalesces tokens produced while a write is in flight into one chunk,
  // so the client cannot see when each of them was produced: a chunk of k tokens arriving g seconds
  // after the previous token-carrying chunk contributes k gaps of g / k. Tokens that share the first
  // chunk with the first token contribute nothing (their gap since the first token is unknown).
  std::vector<double> itl_s;
};

// One request on a blocking stub (the readiness probe and the background client).
RequestResult run_one(frost::v1::Generation::Stub* stub, const frost::v1::GenerateRequest& req,
                      const Options& o);

// Runs `count` requests (ids first_index, first_index + 1, ...) on min(concurrency, count) lanes, every lane
// driven from this thread through one completion queue; *wall_s: from the lanes' start to the end of the last
// request.
std::vector<RequestResult> run_phase(const Options& o, int first_index, int count,
                                     const std::vector<std::unique_ptr<frost::v1::Generation::Stub>>& stubs,
                                     double* wall_s);

// The same requests through the OpenAI API (--http): POST /v1/completions with stream: true.
std::vector<RequestResult> run_phase_http(const Options& o, int first_index, int count,
                                          const std::string& model, double* wall_s);

// The model id GET /v1/models reports ("" on any error).
std::string http_model(const std::string& addr);

}  // namespace frost::loadgen
