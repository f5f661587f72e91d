#include "core/serving/prototype_kind.h"

#include "absl/strings/str_cat.h"
#include "core/prototype/artifact.h"

namespace frost::serving {
namespace {

class PrototypeKind final : public SlotKind<ServedPrototype> {
 public:
  explicit PrototypeKind(TensorStore* tensors) : SlotKind("prototype"), tensors_(tensors) {}
  const char* serves() const override { return "Predict"; }

 protected:
  absl::StatusOr<Loaded> load(const ArtifactInfo& a,
                              const std::shared_ptr<const LoadedModel>& model) const override {
    absl::StatusOr<prototype::PrototypeArtifact> art = prototype::load_artifact(a.dir);
    if (!art.ok()) return art.status();
    const int64_t bytes = art->tensor_bytes();
    absl::StatusOr<std::unique_ptr<prototype::Predictor>> p = prototype::Predictor::create(*std::move(art), *model);
    if (!p.ok()) return p.status();
    auto s = std::make_shared<ServedPrototype>();
    s->name = a.name;
    s->model = model;
    s->predictor = *std::move(p);
    s->lease = tensors_->account(a.name, bytes, s->predictor->device().name);  // where the head computes
    return Loaded(std::move(s));
  }
  std::string describe(const ServedPrototype& s) const override {
    const prototype::PrototypeArtifact& art = s.predictor->artifact();
    return absl::StrCat("prototype head: K=", art.cfg.K, " prototypes, values in [", art.bounds.a, ", ",
                        art.bounds.b, "], on ", s.predictor->device().name);
  }

 private:
  TensorStore* tensors_;
};

}  // namespace

std::unique_ptr<SlotKind<ServedPrototype>> make_prototype_kind(TensorStore* tensors) {
  return std::make_unique<PrototypeKind>(tensors);
}

}  // namespace frost::serving
