#pragma once
// frost.v1.Admin: server info, and the artifacts — list, activate (through the served-artifacts registry,
// core/serving/registry.h), delete. Every method needs the admin token.
//
// Threads (server/unary.h): GetServerInfo reads in-memory state on the callback thread; ListArtifacts,
// ActivateArtifact (hashes every file, loads the tensors) and DeleteArtifact touch the disk and run on the
// service's own executor, so a slow activation holds neither a gRPC thread nor the Predict workers.
#include <grpcpp/grpcpp.h>

#include "frost/v1/admin.grpc.pb.h"
#include "server/executor.h"
#include "server/runtime.h"

namespace frost::server {

using AdminServiceBase = v1::Admin::WithRawCallbackMethod_GetServerInfo<
    v1::Admin::WithRawCallbackMethod_ListArtifacts<v1::Admin::WithRawCallbackMethod_ActivateArtifact<
        v1::Admin::WithRawCallbackMethod_DeleteArtifact<v1::Admin::Service>>>>;

class AdminService final : public AdminServiceBase {
 public:
  explicit AdminService(Runtime* rt);
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ActivateArtifact(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteArtifact(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;

 private:
  Runtime* rt_;
  // Two workers: an activation in progress leaves one for listing and deleting. Declared last: destroyed
  // (queued calls answered, workers joined) before anything they use.
  Executor exec_;
};

}  // namespace frost::server
