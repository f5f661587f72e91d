#pragma once
// inference.GRPCInferenceService: the Open Inference Protocol (KServe V2, Triton) for the Predict model, so
// KServe / Triton clients and tooling call frost's prototype head with no frost-specific code
// (proto/inference/open_inference.proto).
//
// The model is named "prototype"; its versions are the prototype artifacts' ("3" for prototype/3) and only
// the active one serves (ModelReady of another version is false, ModelInfer of it NOT_FOUND). ModelInfer:
//   input   text   BYTES [N]        the texts (contents.bytes_contents, or raw_input_contents with the
//                                   protocol's 4-byte length prefixes); parameter top_k (int64) optional
//   outputs value FP32 [N], value_unrefined FP32 [N], knn_value FP32 [N], out_of_distribution BOOL [N],
//           population_consistency FP32 [N], agreement_consistency FP32 [N],
//           prototype_ids BYTES [N, k], prototype_texts BYTES [N, k], prototype_labels FP32 [N, k],
//           prototype_weights FP32 [N, k]   (attribution: the top-k prototypes behind each value)
// Errors as the protocol expects: an unknown model or version NOT_FOUND, a wrong datatype, a shape that does
// not match the elements, a missing or unknown tensor INVALID_ARGUMENT naming it. Same auth as Predict, and
// the same executor (the gRPC thread only validates and queues).
#include <grpcpp/grpcpp.h>

#include "inference/open_inference.grpc.pb.h"
#include "server/runtime.h"

namespace frost::server {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit InferenceService(Runtime* rt) : rt_(rt) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const inference::ServerLiveRequest* req,
                                       inference::ServerLiveResponse* resp) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx, const inference::ServerReadyRequest* req,
                                        inference::ServerReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest* req,
                                           inference::ServerMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx, const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) override;

 private:
  Runtime* rt_;
};

}  // namespace frost::server
