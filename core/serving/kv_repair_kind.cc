#include "core/serving/kv_repair_kind.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/model/kv_dims.h"
#include "core/serving/checked_file.h"

namespace frost::serving {
namespace {

class KvRepairKind final : public SlotKind<RepairActive> {
 public:
  KvRepairKind() : SlotKind("kv_repair") {}
  const char* serves() const override { return "KV repair"; }

 protected:
  absl::StatusOr<Loaded> load(const ArtifactInfo& a,
                              const std::shared_ptr<const LoadedModel>& model) const override {
    return load_kv_repair_artifact(a.dir, repair_dims(model->config), a.name, model->name);
  }
  absl::StatusOr<Loaded> load_file(const std::string& path,
                                   const std::shared_ptr<const LoadedModel>& model) const override {
    return load_served_repair(path, repair_dims(model->config), "file:" + path, model->name);
  }
  std::string describe(const RepairActive& r) const override {
    return absl::StrCat("KV repair for the ", kv_codec_name(r.codec), " codec");
  }
};

}  // namespace

std::unique_ptr<SlotKind<RepairActive>> make_kv_repair_kind() { return std::make_unique<KvRepairKind>(); }

absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> load_kv_repair_artifact(const std::string& dir,
                                                                                  const RepairDims& dims,
                                                                                  const std::string& name,
                                                                                  const std::string& model) {
  FROST_ASSIGN_OR_RETURN(std::string path, verify_checked_file(dir, kKvRepairFile, kKvRepairFormat));
  return load_served_repair(path, dims, name, model);
}

}  // namespace frost::serving
