#pragma once
// frost.v1.Training: SubmitJob / GetJob / ListJobs / CancelJob / WatchJob over the job scheduler
// (core/jobs/scheduler.h). Every method is raw (ByteBuffer) like Generate, so invalid UTF-8 in a string is
// INVALID_ARGUMENT naming the field (server/proto_codec.h), and needs the admin token.
//
// Threads (server/unary.h): every unary method reads or writes the journal and SubmitJob's JobKind::prepare
// reads (and tokenizes) whole data files, so all four run on the service's own executor, never on a gRPC
// callback thread; the callback thread only checks auth, the drain and the request caps.
//
// WatchJob is a write reactor fed by Scheduler::subscribe (server/stream_writer.h); progress events that
// arrive while a write is in flight are coalesced (the latest snapshot wins; a terminal state is always
// delivered last). Its first read of the job runs on the executor too (a full queue: RESOURCE_EXHAUSTED).
#include <grpcpp/grpcpp.h>

#include <string>

#include "core/jobs/job_spec.h"
#include "frost/v1/training.grpc.pb.h"
#include "server/executor.h"
#include "server/runtime.h"

namespace frost::server {

using TrainingServiceBase =
    v1::Training::WithRawCallbackMethod_SubmitJob<v1::Training::WithRawCallbackMethod_GetJob<
        v1::Training::WithRawCallbackMethod_ListJobs<v1::Training::WithRawCallbackMethod_CancelJob<
            v1::Training::WithRawCallbackMethod_WatchJob<v1::Training::Service>>>>>;

class TrainingService final : public TrainingServiceBase {
 public:
  explicit TrainingService(Runtime* rt);
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;

 private:
  class WatchCall;
  Runtime* rt_;
  // Two workers: a SubmitJob reading a large file leaves one for GetJob / ListJobs / CancelJob. Declared
  // last: destroyed (queued calls answered, workers joined) before anything they use.
  Executor exec_;
};

// frost.v1.PrototypeJobSpec / KvRepairJobSpec / KvSpliceJobSpec → the kinds' typed specs
// (core/jobs/job_spec.h): the proto edge of the jobs. The scalar fields are the spec tables' rows
// (jobs::prototype_spec_table() ...), read by proto field name; a value a row refuses (a NaN label_min, which
// the journal's JSON could not hold) is INVALID_ARGUMENT "prototype.label_min: expected a finite number, got
// nan".
absl::StatusOr<jobs::PrototypeJobSpec> from_proto(const v1::PrototypeJobSpec& spec);
absl::StatusOr<jobs::KvRepairJobSpec> from_proto(const v1::KvRepairJobSpec& spec);
absl::StatusOr<jobs::KvSpliceJobSpec> from_proto(const v1::KvSpliceJobSpec& spec);

}  // namespace frost::server
