#include "server/prediction_service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status_macros.h"
#include "core/serving/prototype_kind.h"
#include "server/predict_exec.h"
#include "server/service_util.h"

namespace frost::server {
namespace {

// Callback-thread part: everything that needs no model work.
absl::StatusOr<PredictJob> prepare(Runtime* rt, const v1::PredictRequest& req) {
  return prepare_predict(rt, std::vector<std::string>(req.texts().begin(), req.texts().end()),
                         req.has_top_k() ? std::optional<int>(req.top_k()) : std::nullopt, "texts", "top_k");
}

// Worker part: the backbone forward and the head.
absl::StatusOr<v1::PredictResponse> predict(Runtime* rt, const PredictJob& job) {
  FROST_ASSIGN_OR_RETURN(std::vector<prototype::Prediction> ps, run_predict(rt, job));
  const prototype::PrototypeArtifact& art = job.served->predictor->artifact();
  v1::PredictResponse resp;
  resp.set_artifact(job.served->name);
  resp.set_label_min(art.bounds.a);
  resp.set_label_max(art.bounds.b);
  for (const prototype::Prediction& p : ps) {
    v1::PredictionResult* r = resp.add_results();
    r->set_value(p.value);
    r->set_value_unrefined(p.value_unrefined);
    r->set_knn_value(p.knn_value);
    r->set_population_consistency(p.population_consistency);
    r->set_agreement_consistency(p.agreement_consistency);
    r->set_out_of_distribution(p.out_of_distribution);
    r->set_alpha(p.alpha);
    r->set_beta(p.beta);
    r->set_restr_fallback(p.restr_fallback);
    r->set_label_reliance(p.label_reliance);
    for (const prototype::Attribution& a : p.top) {
      v1::PrototypeRef* pr = r->add_prototypes();
      pr->set_dataset_index(a.index);
      pr->set_id(a.id);
      pr->set_text(a.text);
      pr->set_label(a.label);
      pr->set_weight(a.weight);
      pr->set_slot(static_cast<int32_t>(a.slot));
    }
  }
  return resp;
}

}  // namespace

grpc::ServerUnaryReactor* PredictionService::Predict(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  // The job owns the served version it was validated against until the response is written.
  return serve_unary<v1::PredictRequest, v1::PredictResponse>(
      unary_server(rt_, "frost.v1.Prediction", &rt_->predict_executor()), ctx, in, out,
      {"Predict", Mode::kExecutor}, [rt = rt_](v1::PredictRequest&& req) { return prepare(rt, req); },
      [rt = rt_](const PredictJob& job) { return predict(rt, job); });
}

}  // namespace frost::server
