#include "server/predict_exec.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace frost::server {
namespace {
constexpr int kDefaultTopK = 3;
}  // namespace

absl::StatusOr<PredictJob> prepare_predict(Runtime* rt, std::vector<std::string> texts, std::optional<int> top_k,
                                           const std::string& texts_field, const std::string& top_k_field) {
  if (!rt->model()) return absl::UnavailableError("model is loading: not ready yet");
  const LimitsSection& lim = rt->cfg().limits;
  if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat(texts_field, ": at least one text is required"));
  if (static_cast<int64_t>(texts.size()) > lim.max_predict_texts)
    return absl::InvalidArgumentError(absl::StrCat(texts_field, ": ", texts.size(),
                                                   " texts is more than limits.max_predict_texts=",
                                                   lim.max_predict_texts));
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& t = texts[i];
    if (t.find_first_not_of(" \t\r\n") == std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat(texts_field, "[", i, "]: empty or whitespace only"));
    if (static_cast<int64_t>(t.size()) > lim.max_prompt_bytes)
      return absl::InvalidArgumentError(absl::StrCat(texts_field, "[", i, "]: ", t.size(),
                                                     " bytes is more than limits.max_prompt_bytes=",
                                                     lim.max_prompt_bytes));
  }
  PredictJob job;
  job.served = rt->registry().prototype().get();
  if (!job.served)
    return absl::FailedPreconditionError(
        "no prototype artifact is active: train one (Training.SubmitJob) and activate it "
        "(Admin.ActivateArtifact)");
  const int K = job.served->predictor->artifact().cfg.K;
  job.top_k = top_k.value_or(std::min(kDefaultTopK, K));
  if (job.top_k < 0 || job.top_k > K)
    return absl::InvalidArgumentError(absl::StrCat(top_k_field, ": ", job.top_k, " is outside [0, ", K, "]"));
  job.texts = std::move(texts);
  return job;
}

absl::StatusOr<std::vector<prototype::Prediction>> run_predict(Runtime* rt, const PredictJob& job) {
  c10::InferenceMode inference_mode;
  FROST_ASSIGN_OR_RETURN(std::vector<prototype::Prediction> ps, job.served->predictor->predict(job.texts, job.top_k));
  int64_t n_ood = 0;
  for (const prototype::Prediction& p : ps) n_ood += p.out_of_distribution;
  rt->metrics()->record_predictions(static_cast<int64_t>(ps.size()), n_ood);
  return ps;
}

}  // namespace frost::server
