#include "server/admin_service.h"

#include "core/common/status_macros.h"
#include "core/jobs/scheduler.h"
#include "server/service_util.h"

namespace frost::server {
namespace {
constexpr int kAdminThreads = 2, kAdminMaxQueued = 64;
constexpr char kService[] = "frost.v1.Admin";
}  // namespace

AdminService::AdminService(Runtime* rt) : rt_(rt), exec_("frost-admin", kAdminThreads, kAdminMaxQueued) {}

grpc::ServerUnaryReactor* AdminService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::ServerInfoRequest, v1::ServerInfo>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"GetServerInfo", Mode::kInline},
      [&](const v1::ServerInfoRequest&) -> absl::StatusOr<v1::ServerInfo> {
        v1::ServerInfo info;
        info.set_version(FROST_VERSION);
        std::shared_ptr<const LoadedModel> m = rt_->model();
        info.set_model(m ? m->name : "");
        info.set_device(rt_->tensors().device());
        for (const auto& [d, b] : rt_->tensors().bytes_by_device()) (*info.mutable_store_bytes())[d] = b;
        for (const std::string& name : rt_->registry().active_names()) info.add_active_artifacts(name);
        if (rt_->scheduler()) {
          jobs::Scheduler::Counts c = rt_->scheduler()->counts();
          info.set_jobs_queued(static_cast<int32_t>(c.queued));
          info.set_jobs_running(static_cast<int32_t>(c.running));
        }
        info.set_state_dir(rt_->cfg().jobs.enabled ? rt_->cfg().jobs.state_dir : "");
        return info;
      });
}

grpc::ServerUnaryReactor* AdminService::ListArtifacts(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::ListArtifactsRequest, v1::ListArtifactsResponse>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"ListArtifacts", Mode::kExecutor},
      [rt = rt_](const v1::ListArtifactsRequest& req) -> absl::StatusOr<v1::ListArtifactsResponse> {
        if (!rt->store())
          return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
        FROST_ASSIGN_OR_RETURN(std::vector<serving::ArtifactInfo> all, rt->store()->list(req.kind()));
        v1::ListArtifactsResponse resp;
        for (const serving::ArtifactInfo& a : all)
          *resp.add_artifacts() =
              to_proto(a, rt->registry().is_active(a.name), rt->tensors().bytes_of(a.name));
        return resp;
      });
}

grpc::ServerUnaryReactor* AdminService::ActivateArtifact(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::ActivateArtifactRequest, v1::Artifact>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"ActivateArtifact", Mode::kExecutor},
      [rt = rt_](const v1::ActivateArtifactRequest& req) -> absl::StatusOr<v1::Artifact> {
        FROST_RETURN_IF_ERROR(serving::parse_artifact_name(req.name()).status());
        FROST_ASSIGN_OR_RETURN(serving::ArtifactInfo a, rt->activate(req.name()));
        return to_proto(a, true, rt->tensors().bytes_of(a.name));
      });
}

grpc::ServerUnaryReactor* AdminService::DeleteArtifact(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::DeleteArtifactRequest, v1::DeleteArtifactResponse>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"DeleteArtifact", Mode::kExecutor},
      [rt = rt_](const v1::DeleteArtifactRequest& req) -> absl::StatusOr<v1::DeleteArtifactResponse> {
        if (!rt->store())
          return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
        FROST_ASSIGN_OR_RETURN(auto kv, serving::parse_artifact_name(req.name()));
        FROST_ASSIGN_OR_RETURN(std::optional<std::string> active, rt->store()->active(kv.first));
        if ((active && *active == req.name()) || rt->registry().is_active(req.name()))
          return absl::FailedPreconditionError(
              absl::StrCat("artifact '", req.name(), "' is active; activate another version first"));
        FROST_RETURN_IF_ERROR(rt->store()->remove(req.name()));
        return v1::DeleteArtifactResponse();
      });
}

}  // namespace frost::server
