#include "core/serving/checked_file.h"

#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"

namespace frost::serving {

using nlohmann::json;

absl::Status write_checked_file(const std::string& dir, const std::string& file, const std::string& format,
                                const std::function<absl::Status(const std::string& path)>& save) {
  const std::string path = dir + "/" + file;
  FROST_RETURN_IF_ERROR(save(path));
  FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  json manifest = {
      {"format", format}, {"file", file}, {"sha256", sha256_hex(bytes)}, {"bytes", bytes.size()}};
  return write_file_atomic(dir + "/manifest.json", manifest.dump(2));
}

absl::StatusOr<std::string> verify_checked_file(const std::string& dir, const std::string& file,
                                                const std::string& format) {
  FROST_ASSIGN_OR_RETURN(std::string mtext, read_file(dir + "/manifest.json", 1 << 20));
  const json manifest = json::parse(mtext, nullptr, false);
  // Fields are type-checked before they are read: json::value() throws on a field of another type, and a
  // damaged or foreign manifest would end the process with an uncaught type_error.
  auto string_field = [&manifest](const char* key) -> const std::string* {
    if (!manifest.is_object()) return nullptr;
    const auto it = manifest.find(key);
    return it != manifest.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
  };
  const std::string* m_format = string_field("format");
  const std::string* m_file = string_field("file");
  const std::string* m_sha256 = string_field("sha256");
  if (m_format == nullptr || *m_format != format || m_file == nullptr || *m_file != file ||
      m_sha256 == nullptr)
    return absl::DataLossError(absl::StrCat(dir, "/manifest.json: not a ", format, " manifest"));
  const std::string path = dir + "/" + file;
  FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (sha256_hex(bytes) != *m_sha256)
    return absl::DataLossError(absl::StrCat(dir, "/", file, ": sha256 does not match the manifest"));
  return path;
}

}  // namespace frost::serving
