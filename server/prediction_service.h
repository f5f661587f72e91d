#pragma once
// frost.v1.Prediction: Predict on the active prototype head (core/serving/prototype_kind.h).
//
// The gRPC callback thread only checks auth, decodes and validates the request and queues it on the
// runtime's Predict executor (server/executor.h); a worker there runs the backbone forward and the head,
// serializes the response and finishes the call. A full queue is RESOURCE_EXHAUSTED at once. A request holds
// the ServedPrototype it started with until it returns, so an activation mid-request does not affect it, and
// the response names that version.
#include <grpcpp/grpcpp.h>

#include "frost/v1/prediction.grpc.pb.h"
#include "server/runtime.h"

namespace frost::server {

using PredictionServiceBase = v1::Prediction::WithRawCallbackMethod_Predict<v1::Prediction::Service>;

class PredictionService final : public PredictionServiceBase {
 public:
  explicit PredictionService(Runtime* rt) : rt_(rt) {}
  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  Runtime* rt_;
};

}  // namespace frost::server
