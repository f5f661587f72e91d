#pragma once
// The `prototype` kind: a prototype-regression head (core/prototype) that Predict serves. A loaded version
// holds its Predictor (artifact tensors + the model it computes features with) and a TensorStore lease on
// its bytes; a request holds the ServedPrototype it started with until it returns.
#include <memory>
#include <string>

#include "core/model/model_loader.h"
#include "core/prototype/predictor.h"
#include "core/serving/served_kind.h"
#include "core/serving/tensor_store.h"

namespace frost::serving {

struct ServedPrototype {
  std::string name;  // "prototype/3"
  std::shared_ptr<const LoadedModel> model;
  std::unique_ptr<prototype::Predictor> predictor;
  std::shared_ptr<TensorStore::Lease> lease;
};
using PrototypeSlot = ActiveSlot<ServedPrototype>;

// Loads verify the artifact completely (manifest checksums, tensor set and shapes, backbone identity).
std::unique_ptr<SlotKind<ServedPrototype>> make_prototype_kind(TensorStore* tensors);

}  // namespace frost::serving
