#pragma once
// The served device's backbone features (Predict, the prototype jobs' feature cache): a HiddenStateSource
// (core/model/model_loader.h) over a DeviceDecoder of its own — the CUDA decoder on the same GPU, or the host
// reference device — with a KV pool for one sequence of the full context, computing the final-norm hidden
// states of every position of a text in one prefill step (forward_hidden: no lm_head). Calls are serialized on
// a mutex (one device stream); they run beside the engine's steps, never inside them.
//
// Choice written down: the decoder is a second instance (its stream, step buffers and KV pool; the engine's
// belong to the engine thread) over the engine's weights: pass the DeviceWeights the executor runs on in
// opts.weights (frostd does), and the device holds one copy of the model.
#include <memory>

#include "absl/status/statusor.h"
#include "core/exec/make_executor.h"
#include "core/model/model_loader.h"

namespace frost {

// nullptr (OK) for model.device cpu: features stay on Transformer::forward. FAILED_PRECONDITION for a model or
// device the decoder cannot run (as make_executor). opts.weights: the device's weights (uploaded when empty).
absl::StatusOr<std::shared_ptr<const HiddenStateSource>> make_hidden_source(const LoadedModel& model,
                                                                            const ExecutorOptions& opts);

}  // namespace frost
