#include "core/prototype/artifact.h"

#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/store/safetensors.h"

namespace frost::prototype {

namespace {

constexpr char kTensorFile[] = "prototype.safetensors";
constexpr char kManifestFile[] = "manifest.json";

absl::Status bad(const std::string& dir, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(dir, "/", kManifestFile, ": ", what));
}

// The manifest's integer fields. json::get<int64_t>() also converts a float, which is undefined behaviour
// for one outside the range ("d_model": 1e300; tests/fuzz/corpus/artifact_manifest/regress-*), so they must
// be JSON integers that fit. Thrown inside load_artifact's try block, caught there.
struct MistypedField {
  std::string what;
};
int64_t get_int(const nlohmann::json& parent, const char* key) {
  const nlohmann::json& v = parent.at(key);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    throw MistypedField{absl::StrCat(key, " must be an integer, got ", v.dump())};
  return v.get<int64_t>();
}
uint64_t get_uint(const nlohmann::json& parent, const char* key) {
  const nlohmann::json& v = parent.at(key);
  if (!v.is_number_unsigned())
    throw MistypedField{absl::StrCat(key, " must be a non-negative integer, got ", v.dump())};
  return v.get<uint64_t>();
}

}  // namespace

at::Tensor PrototypeArtifact::tensor(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return {};
}

int64_t PrototypeArtifact::tensor_bytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

absl::StatusOr<int64_t> save_artifact(const PrototypeArtifact& art, const std::string& dir) {
  FROST_RETURN_IF_ERROR(make_dirs(dir));
  FROST_ASSIGN_OR_RETURN(std::string bytes,
                         safetensors_serialize(art.tensors, {{"format", kArtifactFormat}}));
  nlohmann::json m;
  m["format"] = kArtifactFormat;
  m["format_version"] = kArtifactVersion;
  m["backbone"] = {{"name", art.backbone.name},       {"arch", art.backbone.arch},
                   {"dim", art.backbone.dim},         {"n_layer", art.backbone.n_layer},
                   {"n_vocab", art.backbone.n_vocab}, {"fingerprint", art.backbone.fingerprint},
                   {"weights", art.backbone.weights}};
  m["config"] = to_json(art.cfg);
  m["bounds"] = {{"a", art.bounds.a}, {"b", art.bounds.b}};
  m["label_stats"] = {{"mu", art.label_mu}, {"sigma", art.label_sigma}};
  m["d_model"] = art.d_model;
  m["n_train"] = art.n_train;
  nlohmann::json protos = nlohmann::json::array();
  for (const PrototypeEntry& p : art.prototypes)
    protos.push_back(
        {{"slot", p.slot}, {"index", p.index}, {"id", p.id}, {"text", p.text}, {"label", p.label}});
  m["prototypes"] = protos;
  m["tensors"] = {{"file", kTensorFile}, {"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  m["report"] = art.report;
  // The tensor file first, the manifest (which names its checksum) last: a reader that finds a
  // manifest finds the complete tensor file it describes.
  FROST_RETURN_IF_ERROR(write_file_atomic(dir + "/" + kTensorFile, bytes));
  const std::string manifest = m.dump(1);
  FROST_RETURN_IF_ERROR(write_file_atomic(dir + "/" + kManifestFile, manifest));
  return static_cast<int64_t>(bytes.size() + manifest.size());
}

absl::StatusOr<PrototypeArtifact> load_artifact(const std::string& dir) {
  FROST_ASSIGN_OR_RETURN(std::string text, read_file(dir + "/" + kManifestFile, 1LL << 30));
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return bad(dir, "not a JSON object");
  PrototypeArtifact art;
  try {
    if (m.value("format", "") != kArtifactFormat)
      return bad(dir, absl::StrCat("format is not \"", kArtifactFormat, "\""));
    const auto version = m.find("format_version");
    if (version == m.end() || !version->is_number_integer() || version->get<int64_t>() != kArtifactVersion)
      return bad(dir, absl::StrCat("format_version ", version == m.end() ? "(missing)" : version->dump(),
                                   " is not supported (expected ", kArtifactVersion, ")"));
    const nlohmann::json& bb = m.at("backbone");
    art.backbone.name = bb.at("name").get<std::string>();
    art.backbone.arch = bb.at("arch").get<std::string>();
    art.backbone.dim = get_int(bb, "dim");
    art.backbone.n_layer = get_int(bb, "n_layer");
    art.backbone.n_vocab = get_int(bb, "n_vocab");
    art.backbone.fingerprint = bb.at("fingerprint").get<std::string>();
    art.backbone.weights = bb.value("weights", "fp32");  // artifacts from before quantized weights
    nlohmann::json cj = m.at("config");
    // Artifacts written before these fields existed were trained with the seed's head and
    // N(0, 1) slots: read them as such, not with today's defaults.
    if (cj.is_object() && !cj.contains("key_bias")) cj["key_bias"] = 0.0;
    if (cj.is_object() && !cj.contains("slot_init")) cj["slot_init"] = "normal";
    if (cj.is_object() && !cj.contains("probe")) cj["probe"] = "none";  // trained before the probe existed
    if (cj.is_object() && !cj.contains("restr_guard_weight")) cj["restr_guard_weight"] = 0.0;
    absl::StatusOr<PrototypeConfig> cfg = config_from_json(cj);
    if (!cfg.ok()) return bad(dir, std::string(cfg.status().message()));
    art.cfg = *cfg;
    art.bounds.a = m.at("bounds").at("a").get<double>();
    art.bounds.b = m.at("bounds").at("b").get<double>();
    if (absl::Status s = validate_bounds(art.bounds); !s.ok()) return bad(dir, std::string(s.message()));
    art.label_mu = m.at("label_stats").at("mu").get<double>();
    art.label_sigma = m.at("label_stats").at("sigma").get<double>();
    art.d_model = get_int(m, "d_model");
    art.n_train = get_int(m, "n_train");
    if (art.d_model < 1 || art.n_train < 1) return bad(dir, "d_model and n_train must be >= 1");
    for (const nlohmann::json& p : m.at("prototypes")) {
      PrototypeEntry e;
      e.slot = get_int(p, "slot");
      e.index = get_int(p, "index");
      e.id = p.at("id").get<std::string>();
      e.text = p.at("text").get<std::string>();
      e.label = p.at("label").get<float>();
      if (e.index < 0 || e.index >= art.n_train)
        return bad(dir, absl::StrCat("prototype index ", e.index, " outside [0, ", art.n_train, ")"));
      art.prototypes.push_back(std::move(e));
    }
    if (static_cast<int64_t>(art.prototypes.size()) != art.cfg.K)
      return bad(dir, absl::StrCat(art.prototypes.size(), " prototypes, config K is ", art.cfg.K));
    art.report = m.value("report", nlohmann::json::object());
    const nlohmann::json& tj = m.at("tensors");
    if (tj.at("file").get<std::string>() != kTensorFile)
      return bad(dir, "tensors.file is not prototype.safetensors");
    const std::string want_sha = tj.at("sha256").get<std::string>();
    const uint64_t want_bytes = get_uint(tj, "bytes");
    FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(dir + "/" + kTensorFile, 1LL << 36));
    if (bytes.size() != want_bytes)
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/", kTensorFile, ": ", bytes.size(), " bytes, the manifest says ", want_bytes));
    if (sha256_hex(bytes) != want_sha)
      return absl::InvalidArgumentError(absl::StrCat(
          dir, "/", kTensorFile, ": sha256 does not match the manifest (corrupt or replaced file)"));
    FROST_ASSIGN_OR_RETURN(auto st, SafetensorsFile::from_bytes(std::move(bytes), dir + "/" + kTensorFile));
    for (const StTensorInfo& info : st->tensors())
      art.tensors.emplace_back(info.name, st->view(info).clone());
    // Written before the level offset existed: the probe was served with no offset.
    if (art.cfg.probe == "ridge" && !art.tensor("probe.offset").defined())
      art.tensors.emplace_back("probe.offset", at::zeros({1}, at::kDouble));
  } catch (const nlohmann::json::exception& e) {
    return bad(dir, absl::StrCat("missing or mistyped field: ", e.what()));
  } catch (const MistypedField& e) {
    return bad(dir, absl::StrCat("missing or mistyped field: ", e.what));
  }
  // Shapes the predictor relies on.
  const int64_t K = art.cfg.K, m_tok = art.cfg.m, d = art.cfg.d_h, N = art.n_train;
  const std::map<std::string, std::vector<int64_t>> want = {{"proto.memory", {K, m_tok, d}},
                                                            {"proto.labels", {K}},
                                                            {"cache.keys", {N, d}},
                                                            {"cache.labels", {N}},
                                                            {"rlcs.population", {N}}};
  for (const auto& [name, shape] : want) {
    at::Tensor t = art.tensor(name);
    if (!t.defined())
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/", kTensorFile, ": tensor '", name, "' is missing"));
    if (t.sizes().vec() != shape)
      return absl::InvalidArgumentError(absl::StrCat(dir, "/", kTensorFile, ": tensor '", name,
                                                     "' has shape [", absl::StrJoin(t.sizes(), ", "),
                                                     "], expected [", absl::StrJoin(shape, ", "), "]"));
  }
  return art;
}

}  // namespace frost::prototype
