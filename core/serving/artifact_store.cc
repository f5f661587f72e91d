#include "core/serving/artifact_store.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"

namespace frost::serving {

namespace fs = std::filesystem;

namespace {

constexpr char kInfoFile[] = "artifact.json";
constexpr char kChecksumsFile[] = "checksums.json";
constexpr int64_t kMaxSmallFile = 16 << 20;

bool valid_kind(const std::string& k) {
  if (k.empty() || k.size() > 32) return false;
  return std::all_of(k.begin(), k.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// checksums.json for the regular files of `dir`: {"files": {name: {"bytes": N, "sha256": hex}}}.
absl::Status write_checksums(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(dir + "/" + n));
    files[n] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  }
  nlohmann::json doc = {{"format", "frost-artifact-checksums"}, {"files", files}};
  return write_file_atomic(dir + "/" + kChecksumsFile, doc.dump(1));
}

int64_t dir_bytes(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += static_cast<int64_t>(e.file_size(ec));
  return n;
}

// artifact.json, declared once (core/common/config_fields.h): publish() writes it with to_json (keys sorted,
// as nlohmann::json writes them: the bytes earlier versions wrote), read_info() reads it back typed, so a
// field of another JSON type is an error naming it and its value rather than nlohmann's type_error, which
// nothing above catches. Fields it does not know are skipped (a later version's); absent ones keep these
// defaults (kind and version are the directory's; the file's copy is for people).
struct ArtifactRecord {
  std::string kind;
  int64_t version = 0;
  std::string job_id;
  double created_unix = 0;
  std::string backbone;
  std::string report_json;
  std::optional<std::string> checksums;  // kChecksumsFile; unset in artifacts published before it existed
};

const ConfigTable<ArtifactRecord>& record_table() {
  using R = ArtifactRecord;
  static const ConfigTable<R> t(
      "",
      {string_field<R>("kind", &R::kind).doc("the artifact's kind"),
       int_field<R>("version", &R::version).doc("the artifact's version within its kind"),
       string_field<R>("job_id", &R::job_id).doc("the job that produced it"),
       number_field<R>("created_unix", &R::created_unix).doc("publication time, seconds since 1970"),
       string_field<R>("backbone", &R::backbone).doc("the model it was trained on"),
       string_field<R>("report_json", &R::report_json).doc("its evaluation report (\"\" = none)"),
       optional_field<R>(&R::checksums,
                         string_field<std::string>("checksums", self()).doc("its checksum list"))},
      FieldStyle::kPath);
  return t;
}

}  // namespace

absl::StatusOr<std::pair<std::string, int64_t>> parse_artifact_name(const std::string& name,
                                                                    const std::string& field) {
  const size_t slash = name.find('/');
  int64_t v = 0;
  if (slash == std::string::npos || !valid_kind(name.substr(0, slash)) ||
      !absl::SimpleAtoi(name.substr(slash + 1), &v) || v <= 0 || absl::StrCat(v) != name.substr(slash + 1))
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", name.size() > 80 ? name.substr(0, 80) + "..." : name,
                     "\" is not an artifact name (expected KIND/VERSION, e.g. \"prototype/3\")"));
  return std::make_pair(name.substr(0, slash), v);
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::open(const std::string& root) {
  FROST_RETURN_IF_ERROR(make_dirs(root));
  std::error_code ec;
  const std::string abs = fs::absolute(root, ec).lexically_normal().string();
  for (const auto& e : fs::directory_iterator(abs, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  return std::unique_ptr<ArtifactStore>(new ArtifactStore(abs, /*read_only=*/false));
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::open_read_only(const std::string& root,
                                                                             const std::string& why) {
  std::error_code ec;
  const std::string abs = fs::absolute(root, ec).lexically_normal().string();
  std::unique_ptr<ArtifactStore> s(new ArtifactStore(abs, /*read_only=*/true));
  s->read_only_why_ = why;
  return s;
}

absl::Status ArtifactStore::check_writable(const char* what) const {
  if (!read_only_) return absl::OkStatus();
  if (!read_only_why_.empty())
    return absl::UnavailableError(
        absl::StrCat("cannot ", what, ": the artifact store ", root_, " is read-only: ", read_only_why_));
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot ", what, ": the artifact store ", root_,
      " is followed read-only (artifacts are published and activated on the frostd that owns it)"));
}

absl::StatusOr<ArtifactInfo> ArtifactStore::publish(
    const std::string& kind, const ArtifactMeta& meta,
    const std::function<absl::Status(const std::string& dir)>& write) {
  FROST_RETURN_IF_ERROR(check_writable("publish"));
  if (!valid_kind(kind))
    return absl::InvalidArgumentError(absl::StrCat("artifact kind \"", kind, "\" is invalid"));
  std::string tmpl = absl::StrCat(root_, "/.tmp-", kind, "-XXXXXX");
  if (!::mkdtemp(tmpl.data()))
    return absl::UnavailableError(absl::StrCat("cannot create a temporary directory in ", root_));
  const std::string tmp = tmpl;
  auto fail = [&](absl::Status s) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return s;
  };
  absl::Status ws = write(tmp);
  if (!ws.ok()) return fail(ws);

  absl::MutexLock l(&mu_);
  const std::string kdir = absl::StrCat(root_, "/", kind);
  if (absl::Status s = make_dirs(kdir); !s.ok()) return fail(s);
  int64_t version = 1;
  if (absl::StatusOr<std::string> next = read_file(kdir + "/NEXT", 64); next.ok()) {
    if (!absl::SimpleAtoi(*next, &version) || version <= 0)
      return fail(absl::DataLossError(absl::StrCat(kdir, "/NEXT: not a version number")));
  } else if (!absl::IsNotFound(next.status())) {
    return fail(next.status());
  }
  // Never reuse a directory name, even if NEXT was lost.
  while (fs::exists(absl::StrCat(kdir, "/", version))) ++version;

  const ArtifactRecord record{kind,          version,          meta.job_id,   now_unix(),
                              meta.backbone, meta.report_json, kChecksumsFile};
  const std::string info = record_table().to_json<nlohmann::json>(record).dump(2);
  if (absl::Status s = write_file_atomic(tmp + "/" + kInfoFile, info); !s.ok()) return fail(s);
  if (absl::Status s = write_checksums(tmp); !s.ok()) return fail(s);
  if (absl::Status s = write_file_atomic(kdir + "/NEXT", absl::StrCat(version + 1)); !s.ok()) return fail(s);
  const std::string dst = absl::StrCat(kdir, "/", version);
  if (absl::Status s = rename_durable(tmp, dst); !s.ok()) return fail(s);
  return read_info(kind, version);
}

absl::StatusOr<ArtifactInfo> ArtifactStore::read_info(const std::string& kind, int64_t version) const {
  ArtifactInfo a;
  a.kind = kind;
  a.version = version;
  a.name = absl::StrCat(kind, "/", version);
  a.dir = absl::StrCat(root_, "/", a.name);
  std::error_code ec;
  if (!fs::is_directory(a.dir, ec))
    return absl::NotFoundError(absl::StrCat("artifact '", a.name, "' not found"));
  FROST_ASSIGN_OR_RETURN(std::string text, read_file(a.dir + "/" + kInfoFile, kMaxSmallFile));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError(absl::StrCat(a.dir, "/", kInfoFile, ": not a JSON object"));
  ArtifactRecord r;
  JsonRead how;
  how.typed = true;
  how.ignore_unknown = true;
  if (absl::Status s = record_table().set_json(r, j, how); !s.ok())
    return absl::DataLossError(absl::StrCat(a.dir, "/", kInfoFile, ": ", s.message()));
  a.job_id = r.job_id;
  a.created_unix = r.created_unix;
  a.backbone = r.backbone;
  a.report_json = r.report_json;
  a.has_checksums = r.checksums.has_value();
  a.bytes = dir_bytes(a.dir);
  return a;
}

absl::Status ArtifactStore::verify(const ArtifactInfo& a) const {
  const std::string sums_path = absl::StrCat(a.dir, "/", kChecksumsFile);
  absl::StatusOr<std::string> text = read_file(sums_path, kMaxSmallFile);
  if (absl::IsNotFound(text.status()) && !a.has_checksums)
    return absl::OkStatus();  // published before checksums
  if (!text.ok()) return absl::DataLossError(std::string(text.status().message()));
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  // Types are checked before values are read (json::value() would throw on a field of another type).
  if (!doc.is_object() || !doc.contains("format") || !doc["format"].is_string() ||
      doc["format"].get<std::string>() != "frost-artifact-checksums" || !doc.contains("files") ||
      !doc["files"].is_object() || doc["files"].empty())
    return absl::DataLossError(absl::StrCat(sums_path, ": not a checksum list (damaged file)"));
  if (!doc["files"].contains(kInfoFile))
    return absl::DataLossError(absl::StrCat(sums_path, ": does not list ", kInfoFile, " (damaged file)"));
  for (const auto& [name, want] : doc["files"].items()) {
    const std::string path = absl::StrCat(a.dir, "/", name);
    if (name.empty() || name.find('/') != std::string::npos || name == kChecksumsFile || !want.is_object() ||
        !want.contains("bytes") || !want["bytes"].is_number_unsigned() || !want.contains("sha256") ||
        !want["sha256"].is_string())
      return absl::DataLossError(
          absl::StrCat(sums_path, ": a malformed entry \"", name, "\" (damaged file)"));
    absl::StatusOr<std::string> bytes = read_file(path);
    if (absl::IsNotFound(bytes.status())) return bytes.status();  // (a follower may not see it yet)
    if (!bytes.ok()) return absl::DataLossError(std::string(bytes.status().message()));
    if (bytes->size() != want["bytes"].get<uint64_t>())
      return absl::DataLossError(absl::StrCat(path, ": ", bytes->size(), " bytes, ", kChecksumsFile, " says ",
                                              want["bytes"].get<uint64_t>(),
                                              " (truncated or replaced file)"));
    if (sha256_hex(*bytes) != want["sha256"].get<std::string>())
      return absl::DataLossError(
          absl::StrCat(path, ": sha256 does not match ", kChecksumsFile, " (damaged or replaced file)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ArtifactInfo>> ArtifactStore::list(const std::string& kind) const {
  if (!kind.empty() && !valid_kind(kind))
    return absl::InvalidArgumentError(absl::StrCat("kind: \"", kind, "\" is not an artifact kind"));
  std::vector<std::pair<std::string, int64_t>> found;
  std::error_code ec;
  for (const auto& k : fs::directory_iterator(root_, ec)) {
    const std::string kn = k.path().filename().string();
    if (!k.is_directory(ec) || !valid_kind(kn) || (!kind.empty() && kn != kind)) continue;
    for (const auto& v : fs::directory_iterator(k.path(), ec)) {
      int64_t ver = 0;
      if (v.is_directory(ec) && absl::SimpleAtoi(v.path().filename().string(), &ver) && ver > 0)
        found.push_back({kn, ver});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<ArtifactInfo> out;
  for (const auto& [k, v] : found) {
    absl::StatusOr<ArtifactInfo> a = read_info(k, v);
    if (a.ok()) out.push_back(*std::move(a));  // a damaged entry is skipped here; get() reports it
  }
  return out;
}

absl::StatusOr<ArtifactInfo> ArtifactStore::get(const std::string& name) const {
  FROST_ASSIGN_OR_RETURN(auto kv, parse_artifact_name(name));
  return read_info(kv.first, kv.second);
}

absl::Status ArtifactStore::remove(const std::string& name) {
  FROST_RETURN_IF_ERROR(check_writable("delete an artifact"));
  FROST_ASSIGN_OR_RETURN(auto kv, parse_artifact_name(name));
  absl::MutexLock l(&mu_);
  const std::string dir = absl::StrCat(root_, "/", name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat("artifact '", name, "' not found"));
  // Rename out of sight first (atomic), then delete: a crash mid-delete leaves a .tmp- directory.
  std::string tmpl = absl::StrCat(root_, "/.tmp-", kv.first, "-deleted-XXXXXX");
  if (!::mkdtemp(tmpl.data())) return absl::UnavailableError(absl::StrCat("cannot delete ", name));
  fs::remove(tmpl, ec);
  FROST_RETURN_IF_ERROR(rename_durable(dir, tmpl));
  fs::remove_all(tmpl, ec);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> ArtifactStore::active(const std::string& kind) const {
  if (!valid_kind(kind)) return absl::InvalidArgumentError(absl::StrCat("kind: \"", kind, "\" is invalid"));
  absl::StatusOr<std::string> t = read_file(absl::StrCat(root_, "/", kind, "/ACTIVE"), 256);
  if (absl::IsNotFound(t.status())) return std::optional<std::string>();
  if (!t.ok()) return t.status();
  if (t->empty()) return std::optional<std::string>();
  FROST_RETURN_IF_ERROR(parse_artifact_name(*t, absl::StrCat(kind, "/ACTIVE")).status());
  return std::optional<std::string>(*t);
}

absl::Status ArtifactStore::set_active(const std::string& kind, const std::string& name) {
  FROST_RETURN_IF_ERROR(check_writable("activate an artifact"));
  if (!name.empty()) FROST_RETURN_IF_ERROR(parse_artifact_name(name).status());
  absl::MutexLock l(&mu_);
  FROST_RETURN_IF_ERROR(make_dirs(absl::StrCat(root_, "/", kind)));
  return write_file_atomic(absl::StrCat(root_, "/", kind, "/ACTIVE"), name);
}

}  // namespace frost::serving
