#include "core/serving/kvsplice_kind.h"

#include "absl/strings/str_cat.h"
#include "core/jobs/kvsplice_job.h"
#include "core/model/kv_dims.h"

namespace frost::serving {
namespace {

class KvSpliceKind final : public SlotKind<KvSpliceActive> {
 public:
  KvSpliceKind() : SlotKind("kvsplice") {}
  const char* serves() const override { return "kv.codec kvsplice"; }

 protected:
  absl::StatusOr<Loaded> load(const jobs::ArtifactInfo& a,
                              const std::shared_ptr<const LoadedModel>& model) const override {
    return jobs::load_kvsplice_artifact(a.dir, kvsplice_dims(model->config), a.name, model->name);
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

std::unique_ptr<ServedKind> make_kvsplice_kind() { return std::make_unique<KvSpliceKind>(); }

}  // namespace frost::serving
