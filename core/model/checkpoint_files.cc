#include "core/model/checkpoint_files.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/store/safetensors_index.h"

namespace fs = std::filesystem;

namespace frost {
namespace {

constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;  // a 1000-layer model's index is a few MiB

// Every *.safetensors of `dir` (sorted), or why there is none.
absl::StatusOr<std::vector<std::string>> find_weight_files(const fs::path& dir) {
  std::vector<std::string> st, other;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    if (e.path().extension() == ".safetensors") {
      st.push_back(e.path().string());
    } else if (!check_not_pickle(e.path().string()).ok()) {
      other.push_back(e.path().filename().string());  // pickle / TorchScript weights
    }
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
  if (st.empty()) {
    if (!other.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported format: use safetensors (", dir.string(),
                                                     " has only ", other.front(), ")"));
    }
    return absl::NotFoundError(absl::StrCat("no *.safetensors weights in ", dir.string()));
  }
  std::sort(st.begin(), st.end());
  return st;
}

absl::StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>> open_sharded(const fs::path& dir,
                                                                           const std::string& index_path) {
  FROST_ASSIGN_OR_RETURN(std::string text, read_file(index_path, kMaxIndexBytes));
  const std::string label = kSafetensorsIndexName;
  FROST_ASSIGN_OR_RETURN(SafetensorsIndex index, parse_safetensors_index(text, label));
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  std::vector<const SafetensorsFile*> views;
  for (const std::string& shard : index.shards) {
    const std::string path = (dir / shard).string();
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
    if (absl::IsNotFound(f.status())) {
      std::string tensor;  // one tensor the missing shard holds, so the user sees what is lost
      int64_t n = 0;
      for (const auto& [name, file] : index.weight_map) {
        if (file != shard) continue;
        if (n++ == 0) tensor = name;
      }
      return absl::NotFoundError(absl::StrCat(label, ": shard ", shard, " is missing from ", dir.string(),
                                              " (it holds tensor '", tensor, "'",
                                              n > 1 ? absl::StrCat(" and ", n - 1, " more") : "", ")"));
    }
    if (!f.ok()) return f.status();
    views.push_back(f->get());
    opened.push_back(std::move(f).value());
  }
  FROST_RETURN_IF_ERROR(check_safetensors_index(index, views, label));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors" && !std::binary_search(index.shards.begin(), index.shards.end(), name))
      FROST_LOG_WARN("%s: %s is not a shard of %s; not loaded", dir.c_str(), name.c_str(), label.c_str());
  }
  return opened;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>> open_checkpoint_weights(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  const fs::path index_path = d / kSafetensorsIndexName;
  if (fs::exists(index_path, ec)) return open_sharded(d, index_path.string());
  FROST_ASSIGN_OR_RETURN(std::vector<std::string> files, find_weight_files(d));
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  for (const auto& f : files) {
    FROST_ASSIGN_OR_RETURN(auto st, SafetensorsFile::open(f));
    opened.push_back(std::move(st));
  }
  return opened;
}

}  // namespace frost
