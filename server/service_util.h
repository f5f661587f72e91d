#pragma once
// What the Prediction, Training, Admin and Open Inference services share: their UnaryServer (server/unary.h:
// the one shape of a unary method), request-field checks, and the conversions of the jobs and artifacts they
// return (the proto edge of core/jobs and core/serving).
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/jobs/journal.h"
#include "core/serving/artifact_store.h"
#include "frost/v1/admin.pb.h"
#include "frost/v1/training.pb.h"
#include "server/proto_codec.h"
#include "server/runtime.h"
#include "server/status_convert.h"
#include "server/unary.h"

namespace frost::server {

// The UnaryServer of a Runtime service (frost.v1.Prediction, Training, Admin, the Open Inference Protocol):
// the runtime's authenticator, drain flag and metrics; Mode::kExecutor handlers run on `executor`.
UnaryServer unary_server(Runtime* rt, const char* service, Executor* executor);

// Training needs a running scheduler: FAILED_PRECONDITION when jobs are disabled, UNAVAILABLE while loading.
absl::Status need_scheduler(Runtime* rt);
// A job id field: INVALID_ARGUMENT naming `field` when empty or longer than 128 bytes.
absl::Status check_id(const std::string& id, const char* field = "id");

// JobRecord → frost.v1.Job (progress JSON → JobProgress); without spec_json when !with_spec (WatchJob
// events: the spec can hold megabytes of inline rows and is sent per progress step).
v1::Job to_proto(const jobs::JobRecord& j, bool with_spec = true);
// ArtifactInfo → frost.v1.Artifact.
v1::Artifact to_proto(const serving::ArtifactInfo& a, bool active, int64_t device_bytes);

}  // namespace frost::server
