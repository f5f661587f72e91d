#pragma once
// The OpenAI endpoint's per-request plumbing (internal to server/http_*.cc): one request's exchange with the
// engine (Exchange: the engine's delivery thread appends, the HTTP worker drains), its sink, the served
// model, a submitted request, and the helpers every handler uses (auth, errors, SSE framing).
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/common/cancel.h"
#include "core/generate/engine.h"
#include "core/model/tool_calls.h"
#include "nlohmann/json.hpp"
#include "server/auth.h"
#include "server/http_front.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/openai_render.h"

namespace frost::server {

namespace oa = openai;

struct OpenAiHttpServer::Served {
  std::shared_ptr<Engine> engine;
  std::string model_name;
  oa::PromptSource prompts;  // the tokenizer and chat template (openai_render.h)
  int64_t created = 0;
};

namespace http_internal {

double seconds_since(int64_t t0_ns);

// One response's shared state: the engine's delivery thread appends, the HTTP worker drains.
struct Exchange {
  absl::Mutex mu;
  absl::CondVar cv;
  std::vector<std::deque<TokenEvent>> pending ABSL_GUARDED_BY(mu);
  std::vector<oa::ChoiceState> choices ABSL_GUARDED_BY(mu);
  std::vector<char> finish_sent ABSL_GUARDED_BY(mu);
  std::vector<char> started ABSL_GUARDED_BY(mu);
  int finished ABSL_GUARDED_BY(mu) = 0;
  absl::Status error ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<CancelToken>> cancels;  // set before any submit
  int64_t t0_ns = 0;
  bool first_token_seen ABSL_GUARDED_BY(mu) = false;
  int admitted ABSL_GUARDED_BY(mu) = 0;           // choices the engine queued (TokenSink::on_admitted)
  std::vector<char> refused ABSL_GUARDED_BY(mu);  // choices that ended before they were queued

  void cancel_all() {
    for (auto& c : cancels) c->cancel();
  }
};

class ChoiceSink final : public TokenSink {
 public:
  ChoiceSink(std::shared_ptr<Exchange> ex, int index, bool keep_events, Metrics* metrics)
      : ex_(std::move(ex)), index_(index), keep_events_(keep_events), metrics_(metrics) {}
  void on_admitted() override {
    absl::MutexLock l(&ex_->mu);
    admitted_ = true;
    ++ex_->admitted;
    ex_->cv.SignalAll();
  }
  void on_token(const TokenEvent& ev) override {
    absl::MutexLock l(&ex_->mu);
    if (ev.id >= 0 && !ex_->first_token_seen) {
      ex_->first_token_seen = true;
      if (metrics_) metrics_->record_time_to_first_token(seconds_since(ex_->t0_ns));
    }
    ex_->pending[index_].push_back(ev);
    ex_->choices[index_].text += ev.text;
    if (keep_events_) ex_->choices[index_].events.push_back(ev);
    ex_->cv.SignalAll();
  }
  void on_finish(absl::StatusOr<GenerationResult> result) override {
    absl::MutexLock l(&ex_->mu);
    if (result.ok()) {
      if (metrics_) {
        metrics_->record_generation(result->n_prompt, result->n_completion, result->t_queue_s,
                                    seconds_since(ex_->t0_ns), finish_reason_name(result->finish_reason));
      }
      ex_->choices[index_].result = *std::move(result);
    } else if (ex_->error.ok()) {
      ex_->error = result.status();
    }
    if (!admitted_) ex_->refused[index_] = 1;
    ++ex_->finished;
    ex_->cv.SignalAll();
  }

 private:
  std::shared_ptr<Exchange> ex_;
  int index_;
  bool keep_events_;
  Metrics* metrics_;
  bool admitted_ = false;  // under ex_->mu
};

// What the engine delivered since the last look: the events of each choice with news (coalesced), the choices
// that finished, and whether every choice has.
struct Batch {
  std::vector<std::pair<int, std::vector<TokenEvent>>> events;
  std::vector<char> first;  // per entry of `events`: the choice's first chunk
  std::vector<std::pair<int, FinishReason>> ended;
  bool all_done = false;
  absl::Status error;
};

// Waits up to `wait` for news (streamed: any event; whole: every choice finished) and takes it.
Batch next_batch(Exchange& ex, bool stream, int n, absl::Duration wait);
// One server-sent event carrying `j`.
std::string sse(const nlohmann::json& j);
bool send_error(HttpResponse& res, const oa::ApiError& e);
// An engine error as OpenAI's error object: "constraint: …" messages name the body field the constraint came
// from (guided_json, response_format.json_schema.schema, …), others the field the engine named.
oa::ApiError api_error(oa::Endpoint ep, const absl::Status& st, const std::string& constraint_field);
RejectReason reject_reason(const absl::Status& st);

}  // namespace http_internal

struct OpenAiHttpServer::Submitted {
  oa::Endpoint ep = oa::Endpoint::kCompletions;
  std::shared_ptr<http_internal::Exchange> ex;
  oa::ResponseMeta meta;
  std::shared_ptr<Engine> engine;  // held until the response ends
  int n = 1;                       // choices in all (prompts x n for a batched completions request)
  bool stream = false, include_usage = false, logprobs = false;
  std::string constraint_field;  // the body field the constraint came from ("" = none)
  // Chat with tools: how each choice's output is parsed (kNone: plain content), and per choice the streaming
  // parser and the calls sent so far (touched only by the HTTP thread answering this request).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  ToolCallFormat id_format =
      ToolCallFormat::kHermes;  // call ids in the template's shape (Mistral: 9 characters)
  std::string forced_name;
  mutable std::vector<ToolCallStream> tool_streams;
  mutable std::vector<int> calls_sent;
};

}  // namespace frost::server
