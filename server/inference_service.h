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

// Every method raw (server/proto_codec.h): bytes that are no request message get INVALID_ARGUMENT naming the
// type, not gRPC's empty UNIMPLEMENTED. The wire contract is the protocol's: clients use ordinary stubs.
using InferenceServiceBase = inference::GRPCInferenceService::WithRawCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithRawCallbackMethod_ServerReady<
        inference::GRPCInferenceService::WithRawCallbackMethod_ModelReady<
            inference::GRPCInferenceService::WithRawCallbackMethod_ServerMetadata<
                inference::GRPCInferenceService::WithRawCallbackMethod_ModelMetadata<
                    inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                        inference::GRPCInferenceService::Service>>>>>>;

// Caps on the repeated fields of a ModelInferRequest (INVALID_ARGUMENT naming the field, the count and the cap;
// the texts themselves: limits.max_predict_texts).
inline constexpr int kMaxInferInputs = 8;       // inputs (the model takes one, "text")
inline constexpr int kMaxInferParameters = 16;  // entries of each parameters map (request, input, output)
inline constexpr int kMaxInferShapeDims = 8;    // inputs[i].shape
// outputs: at most the number of outputs the model has (10); raw_input_contents: at most one per input.

class InferenceService final : public InferenceServiceBase {
 public:
  explicit InferenceService(Runtime* rt) : rt_(rt) {}

  // Each: the serialized inference.<Method>Request in, the serialized inference.<Method>Response out.
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                           grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;

 private:
  Runtime* rt_;
};

}  // namespace frost::server
