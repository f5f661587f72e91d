// POST /v1/embeddings: OpenAiHttpServer's handler (server/openai_embeddings.h maps the body,
// server/embed_exec.h does the work, shared with Generation.Embed). Kept out of http_server.cc so that file
// holds the generation endpoints only.
//
// Threads: the handler runs on its connection's thread (server/http_front.h), which may block, so the
// backbone forwards run here; the connection is asked between inputs, and a client that went away stops the
// work. The response counts in active() while it is computed, so a drain waits for it like for a generation.
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "server/embed_exec.h"
#include "server/http_exchange.h"
#include "server/http_server.h"
#include "server/openai_embeddings.h"

namespace frost::server {

namespace oa = openai;

void OpenAiHttpServer::handle_embeddings(const HttpRequest& req, HttpResponse& res) {
  const int64_t t0 = RealClock::get().now_ns();
  auto finish = [&](grpc::StatusCode code) {
    if (metrics_)
      metrics_->record_request("embeddings", code, static_cast<double>(RealClock::get().now_ns() - t0) * 1e-9,
                               "http");
  };
  auto fail = [&](const oa::ApiError& e) {
    const bool sent = res.send(e.http, "application/json", oa::error_body(e));
    finish(sent ? static_cast<grpc::StatusCode>(oa::grpc_code_for_http(e.http))
                : grpc::StatusCode::CANCELLED);
  };
  std::variant<std::shared_ptr<const Served>, oa::ApiError> sv =
      serving(req, /*refuse_while_draining=*/true, "/frost.v1.Generation/Embed");
  if (auto* e = std::get_if<oa::ApiError>(&sv)) return fail(*e);
  // Held to the end: the engine, and with it the model.
  const std::shared_ptr<const Served> served_now = std::get<std::shared_ptr<const Served>>(std::move(sv));
  const LoadedModel& model = served_now->engine->model();

  std::variant<oa::EmbeddingsRequest, oa::ApiError> parsed = oa::parse_embeddings_request(req.body);
  if (auto* e = std::get_if<oa::ApiError>(&parsed)) return fail(*e);
  oa::EmbeddingsRequest& p = std::get<oa::EmbeddingsRequest>(parsed);
  if (std::optional<oa::ApiError> e = oa::check_model(p.model, model.name, cfg_.model.path)) return fail(*e);
  if (std::optional<oa::ApiError> e = oa::check_dimensions(p, model.config.dim)) return fail(*e);

  EmbedInputs in;
  in.texts = std::move(p.texts);
  in.ids = std::move(p.ids);
  in.texts_field = in.ids_field = "input";
  if (absl::Status st = check_embed_inputs(model, in, cfg_.limits); !st.ok())
    return fail(oa::error_from_status(st, "input"));
  active_.fetch_add(1);
  absl::StatusOr<EmbedOutput> out = run_embed(model, in, [&res] { return res.client_gone(); });
  active_.fetch_sub(1);
  if (!out.ok()) {
    if (out.status().code() == absl::StatusCode::kCancelled) return finish(grpc::StatusCode::CANCELLED);
    return fail(oa::error_from_status(out.status(), "input"));
  }
  const bool sent =
      res.send(200, "application/json",
               oa::embeddings_response_body(model.name, out->vectors, p.base64, out->prompt_tokens));
  finish(sent ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED);
}

}  // namespace frost::server
