// Fuzz target: the artifact manifests read back from the artifact store (core/serving, core/prototype). The
// input is used as each of
//   - <root>/k/1/artifact.json, read by ArtifactStore::get() and list() (core/serving/artifact_store.h);
//   - <dir>/manifest.json of a KV artifact's checked file, read by verify_checked_file()
//     (core/serving/checked_file.h), beside a fixed repair.safetensors;
//   - <dir>/manifest.json of a prototype artifact, read by prototype::load_artifact()
//   (core/prototype/artifact.h),
//     beside a fixed prototype.safetensors (generated/data/ of the fuzz build, written by
//     `frost_fuzz_make_seeds --tensors`).
// The readers take paths: the files live in a tmpfs directory rewritten per run.
// Promises checked: no exception escapes (a crash), and errors use the documented codes: DATA_LOSS or
// NOT_FOUND for a damaged store entry / checked file, INVALID_ARGUMENT for a prototype manifest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/prototype/artifact.h"
#include "core/serving/artifact_store.h"
#include "core/serving/checked_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// The checked file the seed manifest describes (make_seeds.cc writes the same bytes).
constexpr char kCheckedPayload[] = "frost fuzz checked payload\n";

std::string g_prototype_tensors;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  const std::string path = std::string(FROST_FUZZ_GENERATED_DIR) + "/data/prototype.safetensors";
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "artifact_manifest_fuzz: cannot read %s\n", path.c_str());
    std::abort();
  }
  g_prototype_tensors = ss.str();
  const frost::fuzz::FuzzDir& d = frost::fuzz::fuzz_dir();
  d.write("checked/repair.safetensors", kCheckedPayload);
  d.write("prototype/prototype.safetensors", g_prototype_tensors);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const fuzz::FuzzDir& d = fuzz::fuzz_dir();

  // artifact.json of a published artifact.
  d.write("store/k/1/artifact.json", text);
  absl::StatusOr<std::unique_ptr<serving::ArtifactStore>> store =
      serving::ArtifactStore::open_read_only(d.file("store"));
  FROST_FUZZ_CHECK(store.ok(), store.status().ToString());
  absl::StatusOr<serving::ArtifactInfo> info = (*store)->get("k/1");
  if (info.ok()) {
    FROST_FUZZ_CHECK(info->name == "k/1" && info->kind == "k" && info->version == 1, "artifact identity");
  } else {
    FROST_FUZZ_CHECK(info.status().code() == absl::StatusCode::kDataLoss, info.status().ToString());
  }
  absl::StatusOr<std::vector<serving::ArtifactInfo>> listed = (*store)->list("k");
  FROST_FUZZ_CHECK(listed.ok(), listed.status().ToString());
  FROST_FUZZ_CHECK(listed->size() == (info.ok() ? 1u : 0u), "list() disagrees with get()");

  // manifest.json of a KV artifact's checked file.
  d.write("checked/manifest.json", text);
  absl::StatusOr<std::string> checked =
      serving::verify_checked_file(d.file("checked"), "repair.safetensors", "frost.kv_repair.v1");
  if (checked.ok()) {
    FROST_FUZZ_CHECK(*checked == d.file("checked/repair.safetensors"),
                     "verify_checked_file returned another path");
  } else {
    FROST_FUZZ_CHECK(checked.status().code() == absl::StatusCode::kDataLoss, checked.status().ToString());
  }

  // manifest.json of a prototype artifact.
  d.write("prototype/manifest.json", text);
  absl::StatusOr<prototype::PrototypeArtifact> art = prototype::load_artifact(d.file("prototype"));
  if (!art.ok()) {
    fuzz::check_rejection(art.status());
  } else {
    FROST_FUZZ_CHECK(static_cast<int64_t>(art->prototypes.size()) == art->cfg.K, "prototype count != K");
    for (const prototype::PrototypeEntry& p : art->prototypes)
      FROST_FUZZ_CHECK(p.index >= 0 && p.index < art->n_train, "prototype index outside the training data");
  }
  return 0;
}
