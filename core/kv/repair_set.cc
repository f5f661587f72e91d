#include "core/kv/repair_set.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/store/safetensors.h"

namespace frost {

namespace {

constexpr const char* kFormat = "frost.kv_repair.v1";

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("kv repair file ", path, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> parse_repair_layers(const std::string& text, int64_t n_layers) {
  auto err = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("repair layers \"", text, "\": ", why,
                                                   " (expected \"mid\", \"all\", \"a-b\" or \"a,b,...\" with "
                                                   "layers in [0, ",
                                                   n_layers, "))"));
  };
  std::vector<int64_t> out;
  const std::string t(absl::StripAsciiWhitespace(text));
  if (t == "all") {
    for (int64_t l = 0; l < n_layers; ++l) out.push_back(l);
    return out;
  }
  if (t == "mid") {  // the middle ⌈L/3⌉ layers
    const int64_t n = (n_layers + 2) / 3, first = (n_layers - n) / 2;
    for (int64_t l = first; l < first + n; ++l) out.push_back(l);
    return out;
  }
  for (absl::string_view part : absl::StrSplit(t, ',')) {
    part = absl::StripAsciiWhitespace(part);
    std::vector<absl::string_view> ab = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int64_t a = 0, b = 0;
    if (!absl::SimpleAtoi(ab[0], &a) || (ab.size() == 2 && !absl::SimpleAtoi(ab[1], &b)))
      return err(absl::StrCat("\"", part, "\" is not a layer or range"));
    if (ab.size() == 1) b = a;
    if (a < 0 || b >= n_layers || a > b) return err(absl::StrCat("\"", part, "\" out of range"));
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return err("a layer appears twice");
  if (out.empty()) return err("no layers");
  return out;
}

std::string repair_layers_string(const std::vector<int64_t>& layers) { return absl::StrJoin(layers, ","); }

absl::StatusOr<std::shared_ptr<RepairSet>> RepairSet::create(const RepairConfig& cfg,
                                                             std::vector<int64_t> layers,
                                                             const RepairDims& dims, uint64_t seed) {
  if (layers.empty()) return absl::InvalidArgumentError("repair: no protected layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= dims.n_layers || (i > 0 && layers[i] <= layers[i - 1]))
      return absl::InvalidArgumentError(absl::StrCat("repair layers \"", repair_layers_string(layers),
                                                     "\": must ascend within [0, ", dims.n_layers, ")"));
  }
  if (cfg.rank < 1 || cfg.rank > dims.head_dim)
    return absl::InvalidArgumentError(
        absl::StrCat("repair rank ", cfg.rank, " outside [1, head_dim = ", dims.head_dim, "]"));
  if (cfg.option == RepairOption::kB && !(cfg.alpha_max > 0 && cfg.alpha_max < 1))
    return absl::InvalidArgumentError(absl::StrCat("repair alpha_max ", cfg.alpha_max, " outside (0, 1)"));
  if (!cfg.repair_k && !cfg.repair_v) return absl::InvalidArgumentError("repair apply_to: neither K nor V");
  if (!(cfg.contraction_rho >= 0) || !std::isfinite(cfg.contraction_rho))
    return absl::InvalidArgumentError(
        absl::StrCat("repair contraction_rho ", cfg.contraction_rho, " must be >= 0"));
  std::shared_ptr<RepairSet> s(new RepairSet());
  s->cfg_ = cfg;
  s->dims_ = dims;
  s->layers_ = std::move(layers);
  FROST_RETURN_IF_ERROR(torch_call([&] {
    if (cfg.option == RepairOption::kC)
      s->shared_ = make_repair_shared(dims.head_dim, dims.n_heads, cfg.rank, seed);
    s->by_layer_.resize(static_cast<size_t>(dims.n_layers));
    for (int64_t l : s->layers_) {
      s->by_layer_[static_cast<size_t>(l)] =
          std::make_unique<RepairLayer>(cfg, dims.head_dim, dims.n_heads, l, dims.n_layers, seed, s->shared_);
    }
    s->freeze();
  }));
  return s;
}

const RepairLayer* RepairSet::layer(int64_t l) const {
  return l >= 0 && l < static_cast<int64_t>(by_layer_.size()) ? by_layer_[static_cast<size_t>(l)].get()
                                                              : nullptr;
}

const RepairLayer::Fast* RepairSet::fast(int64_t l) const {
  return layer(l) && static_cast<size_t>(l) < fast_.size() ? &fast_[static_cast<size_t>(l)] : nullptr;
}

void RepairSet::freeze() {
  fast_.assign(by_layer_.size(), RepairLayer::Fast{});
  for (size_t l = 0; l < by_layer_.size(); ++l)
    if (by_layer_[l]) fast_[l] = by_layer_[l]->fast();
}

std::vector<std::pair<std::string, at::Tensor>> RepairSet::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (shared_) {
    const char* names[] = {"wk", "uk", "wv", "uv", "g1k", "g2k", "g1v", "g2v", "e_head"};
    std::vector<at::Tensor> ps = shared_->parameters();
    for (size_t i = 0; i < ps.size(); ++i) out.emplace_back(absl::StrCat("shared.", names[i]), ps[i]);
  }
  for (int64_t l : layers_)
    for (auto& [n, t] : by_layer_[static_cast<size_t>(l)]->named_parameters())
      out.emplace_back(absl::StrCat("layers.", l, ".", n), t);
  return out;
}

std::vector<at::Tensor> RepairSet::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t RepairSet::n_params() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

absl::Status RepairSet::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"option", repair_option_name(cfg_.option)},
      {"rank", std::to_string(cfg_.rank)},
      {"apply_to", repair_apply_to_name(cfg_)},
      {"alpha_max", absl::StrCat(cfg_.alpha_max)},
      {"contraction_rho", absl::StrCat(cfg_.contraction_rho)},
      {"layers", repair_layers_string(layers_)},
      {"head_dim", std::to_string(dims_.head_dim)},
      {"n_heads", std::to_string(dims_.n_heads)},
      {"n_layers", std::to_string(dims_.n_layers)},
  };
  for (const auto& [k, v] : extra) {
    if (meta.count(k))
      return absl::InvalidArgumentError(absl::StrCat("repair save: metadata key ", k, " is reserved"));
    meta[k] = v;
  }
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (auto& [n, t] : named_parameters()) ts.emplace_back(n, t.detach().contiguous());
  FROST_ASSIGN_OR_RETURN(std::string bytes, safetensors_serialize(ts, meta));
  return write_file_atomic(path, bytes);
}

absl::StatusOr<std::shared_ptr<RepairSet>> RepairSet::load(const std::string& path, const RepairDims& dims) {
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  const auto& m = f->metadata();
  auto field = [&](const std::string& k) -> absl::StatusOr<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return bad(path, absl::StrCat("metadata field ", k, " missing"));
    return it->second;
  };
  auto int_field = [&](const std::string& k) -> absl::StatusOr<int64_t> {
    FROST_ASSIGN_OR_RETURN(std::string v, field(k));
    int64_t x = 0;
    if (!absl::SimpleAtoi(v, &x))
      return bad(path, absl::StrCat("metadata ", k, " = \"", v, "\" is not an integer"));
    return x;
  };
  FROST_ASSIGN_OR_RETURN(std::string format, field("format"));
  if (format != kFormat) return bad(path, absl::StrCat("format \"", format, "\" (expected ", kFormat, ")"));
  RepairConfig cfg;
  FROST_ASSIGN_OR_RETURN(std::string opt, field("option"));
  FROST_ASSIGN_OR_RETURN(cfg.option, parse_repair_option(opt));
  FROST_ASSIGN_OR_RETURN(cfg.rank, int_field("rank"));
  FROST_ASSIGN_OR_RETURN(std::string apply, field("apply_to"));
  if (!set_repair_apply_to(apply, cfg)) return bad(path, absl::StrCat("apply_to \"", apply, "\""));
  FROST_ASSIGN_OR_RETURN(std::string am, field("alpha_max"));
  FROST_ASSIGN_OR_RETURN(std::string rho, field("contraction_rho"));
  if (!absl::SimpleAtod(am, &cfg.alpha_max) || !absl::SimpleAtod(rho, &cfg.contraction_rho))
    return bad(path, "alpha_max / contraction_rho not numbers");
  RepairDims fd;
  FROST_ASSIGN_OR_RETURN(fd.head_dim, int_field("head_dim"));
  FROST_ASSIGN_OR_RETURN(fd.n_heads, int_field("n_heads"));
  FROST_ASSIGN_OR_RETURN(fd.n_layers, int_field("n_layers"));
  for (auto [name, a, b] :
       {std::tuple{"head_dim", fd.head_dim, dims.head_dim}, std::tuple{"n_heads", fd.n_heads, dims.n_heads},
        std::tuple{"n_layers", fd.n_layers, dims.n_layers}}) {
    if (a != b)
      return bad(path, absl::StrCat("made for a model with ", name, " = ", a, ", this model has ", b));
  }
  FROST_ASSIGN_OR_RETURN(std::string ls, field("layers"));
  absl::StatusOr<std::vector<int64_t>> layers = parse_repair_layers(ls, dims.n_layers);
  if (!layers.ok()) return bad(path, std::string(layers.status().message()));
  absl::StatusOr<std::shared_ptr<RepairSet>> s = create(cfg, *layers, dims, 0);
  if (!s.ok()) return bad(path, std::string(s.status().message()));
  if (absl::Status st = safetensors_load_into(*f, (*s)->named_parameters()); !st.ok())
    return st.code() == absl::StatusCode::kInvalidArgument ? bad(path, std::string(st.message())) : st;
  (*s)->metadata_ = m;
  (*s)->freeze();
  return s;
}

absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> load_served_repair(const std::string& path,
                                                                             const RepairDims& dims,
                                                                             const std::string& name,
                                                                             const std::string& model) {
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<RepairSet> set, RepairSet::load(path, dims));
  if (auto m = set->metadata().find("model"); m != set->metadata().end() && m->second != model)
    return bad(path, absl::StrCat("trained on model \"", m->second, "\", this server runs \"", model, "\""));
  auto it = set->metadata().find("codec");
  if (it == set->metadata().end())
    return bad(path, "metadata field codec missing (which KV codec it repairs)");
  absl::StatusOr<KvCodecKind> codec = parse_kv_codec(it->second);
  if (!codec.ok()) return bad(path, std::string(codec.status().message()));
  auto a = std::make_shared<RepairSlot::Active>();
  a->set = std::move(set);
  a->name = name;
  a->codec = *codec;
  return std::shared_ptr<const RepairSlot::Active>(std::move(a));
}

}  // namespace frost
