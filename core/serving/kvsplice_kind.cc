#include "core/serving/kvsplice_kind.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/model/kv_dims.h"
#include "core/serving/checked_file.h"

namespace frost::serving {
namespace {

class KvSpliceKind final : public SlotKind<KvSpliceActive> {
 public:
  KvSpliceKind() : SlotKind("kvsplice") {}
  const char* serves() const override { return "kv.codec kvsplice"; }

 protected:
  absl::StatusOr<Loaded> load(const ArtifactInfo& a,
                              const std::shared_ptr<const LoadedModel>& model) const override {
    return load_kvsplice_artifact(a.dir, kvsplice_dims(model->config), a.name, model->name);
  }
  absl::StatusOr<Loaded> load_file(const std::string& path,
                                   const std::shared_ptr<const LoadedModel>& model) const override {
    return load_served_kvsplice(path, kvsplice_dims(model->config), "file:" + path, model->name);
  }
  std::string describe(const KvSpliceActive& s) const override {
    return absl::StrCat("KVSplice rank ", s.set->ranks().label(), " for kv.codec kvsplice");
  }
};

}  // namespace

std::unique_ptr<SlotKind<KvSpliceActive>> make_kvsplice_kind() { return std::make_unique<KvSpliceKind>(); }

absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> load_kvsplice_artifact(const std::string& dir,
                                                                                   const KvSpliceDims& dims,
                                                                                   const std::string& name,
                                                                                   const std::string& model) {
  FROST_ASSIGN_OR_RETURN(std::string path, verify_checked_file(dir, kKvSpliceFile, kKvSpliceFormat));
  return load_served_kvsplice(path, dims, name, model);
}

}  // namespace frost::serving
