// POST /v1/responses (server/openai_responses.h): the body becomes a chat request, submitted like
// /v1/chat/completions (OpenAiHttpServer::submit), and the answer is written in the Responses shapes — the
// whole response object, or (stream: true) the Responses event stream: response.created,
// response.in_progress, the items' events as the output arrives, then response.completed /
// response.incomplete (or response.failed on an engine error after the stream started). No "data: [DONE]":
// the stream ends with its last event.
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "server/http_exchange.h"
#include "server/http_server.h"
#include "server/openai_responses.h"

namespace frost::server {

using ojson = nlohmann::ordered_json;
using namespace http_internal;  // NOLINT: the exchange's helpers

namespace {

// How one response's output is parsed and described.
struct ResponsesAnswer {
  ToolCallFormat format = ToolCallFormat::kNone;
  std::string forced_name;
  ToolCallFormat id_format =
      ToolCallFormat::kHermes;  // call ids in the template's shape (Mistral: 9 characters)
  oa::ResponseMeta meta;
  ojson echo;
  std::vector<std::string> origin;
  std::string constraint_field;
};

oa::ApiError engine_error(const ResponsesAnswer& a, const absl::Status& st) {
  return oa::responses_error(api_error(oa::Endpoint::kChat, st, a.constraint_field), a.origin);
}

// The final status of a finished choice (under ex.mu).
oa::ResponseStatus final_status(const oa::ChoiceState& c) {
  oa::ResponseStatus st;
  const bool cut = c.result && std::string(oa::finish_reason(c.result->finish_reason)) == "length";
  st.status = cut ? "incomplete" : "completed";
  st.incomplete_length = cut;
  if (c.result) {
    st.has_usage = true;
    st.input_tokens = c.result->n_prompt;
    st.output_tokens = c.result->n_completion;
  }
  return st;
}

grpc::StatusCode answer_whole(Exchange& ex, const ResponsesAnswer& a, HttpResponse& res) {
  for (;;) {
    const Batch b = next_batch(ex, false, 1, absl::Milliseconds(OpenAiHttpServer::kPollMs));
    if (!b.all_done) {
      if (res.client_gone()) return grpc::StatusCode::CANCELLED;
      continue;
    }
    if (!b.error.ok()) {
      const oa::ApiError e = engine_error(a, b.error);
      return send_error(res, e) ? static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http))
                                : grpc::StatusCode::CANCELLED;
    }
    std::string body;
    {
      absl::MutexLock l(&ex.mu);
      const oa::ChoiceState& c = ex.choices[0];
      const oa::ResponseStatus st = final_status(c);
      oa::ResponsesOutput out(a.format, a.forced_name, a.id_format);
      out.feed(c.text, nullptr);
      out.finish(st.incomplete_length, nullptr);
      body =
          oa::response_object(a.meta, a.echo, st, &out).dump(-1, ' ', false, ojson::error_handler_t::replace);
    }
    return res.send(200, "application/json", body) ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED;
  }
}

grpc::StatusCode answer_stream(Exchange& ex, const ResponsesAnswer& a, HttpResponse& res) {
  if (!res.start(200, "text/event-stream", {{"Cache-Control", "no-cache"}}))
    return grpc::StatusCode::CANCELLED;
  oa::ResponsesEvents frames;
  oa::ResponsesOutput out(a.format, a.forced_name, a.id_format);
  oa::ResponseStatus running;
  running.status = "in_progress";
  std::string wire = frames.frame(oa::ResponsesEvents::lifecycle(
      "response.created", oa::response_object(a.meta, a.echo, running, nullptr)));
  wire += frames.frame(oa::ResponsesEvents::lifecycle("response.in_progress",
                                                      oa::response_object(a.meta, a.echo, running, nullptr)));
  if (!res.write(wire)) return grpc::StatusCode::CANCELLED;
  std::vector<ojson> pending;
  for (;;) {
    const Batch b = next_batch(ex, true, 1, absl::Milliseconds(OpenAiHttpServer::kPollMs));
    if (b.events.empty() && !b.all_done) {
      if (res.client_gone()) return grpc::StatusCode::CANCELLED;
      continue;
    }
    for (const auto& [i, events] : b.events) {
      std::string text;
      for (const TokenEvent& ev : events) text += ev.text;
      out.feed(text, &pending);
    }
    wire = frames.frame_all(&pending);
    if (b.all_done) {
      oa::ResponseStatus st;
      if (!b.error.ok()) {
        out.finish(false, &pending);
        st.status = "failed";
        st.error = engine_error(a, b.error);
      } else {
        absl::MutexLock l(&ex.mu);
        st = final_status(ex.choices[0]);
        out.finish(st.incomplete_length, &pending);
      }
      wire += frames.frame_all(&pending);
      const char* type = st.status == "failed"       ? "response.failed"
                         : st.status == "incomplete" ? "response.incomplete"
                                                     : "response.completed";
      wire +=
          frames.frame(oa::ResponsesEvents::lifecycle(type, oa::response_object(a.meta, a.echo, st, &out)));
    }
    if (!wire.empty() && !res.write(wire)) return grpc::StatusCode::CANCELLED;
    if (b.all_done) return res.finish() ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED;
    if (res.client_gone()) return grpc::StatusCode::CANCELLED;
  }
}

}  // namespace

void OpenAiHttpServer::handle_responses(const HttpRequest& req, HttpResponse& res) {
  const int64_t t0 = RealClock::get().now_ns();
  auto record = [&](grpc::StatusCode code) {
    if (metrics_) metrics_->record_request("responses", code, seconds_since(t0), "http");
  };
  auto refuse = [&](const oa::ApiError& e) {
    send_error(res, e);
    record(static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http)));
  };
  std::variant<std::shared_ptr<const Served>, oa::ApiError> sv = serving(req, /*refuse_while_draining=*/true);
  if (auto* e = std::get_if<oa::ApiError>(&sv)) return refuse(*e);
  const std::shared_ptr<const Served> s = std::get<std::shared_ptr<const Served>>(std::move(sv));

  std::variant<oa::ResponsesRequest, oa::ApiError> parsed =
      oa::parse_responses_request(req.body, cfg_.limits, sampling_defaults(s->engine->model().generation));
  if (auto* e = std::get_if<oa::ApiError>(&parsed)) return refuse(*e);
  oa::ResponsesRequest& r = std::get<oa::ResponsesRequest>(parsed);
  if (std::optional<oa::ApiError> e = oa::check_model(r.chat.model, s->model_name, cfg_.model.path))
    return refuse(*e);

  ResponsesAnswer a;
  a.echo = std::move(r.echo);
  a.origin = r.message_origin;
  a.constraint_field = r.chat.constraint.field;
  const bool stream = r.chat.stream;
  std::variant<Submitted, oa::ApiError> sub = submit(std::move(r.chat), s, t0);
  if (auto* e = std::get_if<oa::ApiError>(&sub)) return refuse(oa::responses_error(*e, a.origin));
  const Submitted& sb = std::get<Submitted>(sub);
  a.format = sb.tool_format;
  a.forced_name = sb.forced_name;
  a.id_format = sb.id_format;
  a.meta =
      oa::ResponseMeta{oa::new_response_id("resp_"), static_cast<int64_t>(std::time(nullptr)), s->model_name};

  active_.fetch_add(1);
  bool gone = false;
  grpc::StatusCode code = grpc::StatusCode::CANCELLED;
  if (std::optional<oa::ApiError> refused = await_admission(sb, res, &gone)) {
    const oa::ApiError e = oa::responses_error(*refused, a.origin);
    code = send_error(res, e) ? static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http))
                              : grpc::StatusCode::CANCELLED;
  } else if (!gone) {
    code = stream ? answer_stream(*sb.ex, a, res) : answer_whole(*sb.ex, a, res);
  }
  sb.ex->cancel_all();  // no-op when the choice finished; a client that went stops its request
  record(code);
  active_.fetch_sub(1);
}

}  // namespace frost::server
