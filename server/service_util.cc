#include "server/service_util.h"

namespace frost::server {

UnaryServer unary_server(Runtime* rt, const char* service, Executor* executor) {
  UnaryServer s;
  s.service = service;
  s.auth = rt->auth();
  s.draining = [rt] { return rt->draining(); };
  s.metrics = rt->metrics();
  s.executor = executor;
  return s;
}

absl::Status need_scheduler(Runtime* rt) {
  if (!rt->cfg().jobs.enabled)
    return absl::FailedPreconditionError("training jobs are disabled (jobs.enabled: false)");
  if (!rt->scheduler()) {
    absl::Status why = rt->jobs_unavailable();
    return why.ok() ? absl::UnavailableError("model is loading: not ready yet") : why;
  }
  return absl::OkStatus();
}

absl::Status check_id(const std::string& id, const char* field) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (id.size() > 128) return absl::InvalidArgumentError(absl::StrCat(field, ": longer than 128 bytes"));
  return absl::OkStatus();
}

v1::Artifact to_proto(const serving::ArtifactInfo& a, bool active, int64_t device_bytes) {
  v1::Artifact p;
  p.set_name(a.name);
  p.set_kind(a.kind);
  p.set_version(a.version);
  p.set_active(active);
  p.set_bytes(a.bytes);
  p.set_device_bytes(device_bytes);
  p.set_job_id(a.job_id);
  p.set_created_unix(a.created_unix);
  p.set_backbone(a.backbone);
  p.set_report_json(a.report_json);
  return p;
}

v1::Job to_proto(const jobs::JobRecord& j, bool with_spec) {
  v1::Job p;
  p.set_id(j.id);
  p.set_kind(j.kind);
  p.set_state(static_cast<v1::JobState>(static_cast<int>(j.state)));
  p.set_reason(j.reason);
  p.set_priority(j.priority);
  p.set_idempotency_key(j.idempotency_key);
  p.set_created_unix(j.created_unix);
  p.set_started_unix(j.started_unix);
  p.set_finished_unix(j.finished_unix);
  p.set_attempts(j.attempts);
  p.set_artifact(j.artifact);
  p.set_report_json(j.report_json);
  if (with_spec) p.set_spec_json(jobs::spec_to_json(j.spec));  // the wire shows the journal's JSON
  if (j.progress) {
    v1::JobProgress* pr = p.mutable_progress();
    pr->set_stage(j.progress->stage);
    pr->set_epoch(j.progress->epoch);
    pr->set_step(j.progress->step);
    pr->set_steps_total(j.progress->steps_total);
    pr->set_loss(j.progress->loss);
    pr->set_examples_per_s(j.progress->examples_per_s);
    pr->set_eta_s(j.progress->eta_s);
  }
  return p;
}

}  // namespace frost::server
