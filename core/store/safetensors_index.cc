// model.safetensors.index.json: parsed with duplicate keys refused, then checked against the shards it names.
#include "core/store/safetensors_index.h"

#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace frost {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 16;  // a valid index nests 2 deep

struct IndexReject {
  std::string msg;
};

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::StatusOr<SafetensorsIndex> parse_safetensors_index(std::string_view text, const std::string& label) {
  auto invalid = [&](const std::string& msg) { return absl::InvalidArgumentError(absl::StrCat(label, ": ", msg)); };
  // Keys are checked per object as the parser meets them: nlohmann would keep the last of two silently, and a
  // tensor mapped twice (to two shards, or to one twice) is a broken index, not a choice to make for the user.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> path;  // the key of each open object ("" for the root)
  std::string last_key;
  int depth = 0;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        path.push_back(depth == 0 ? "" : last_key);
        [[fallthrough]];
      case json::parse_event_t::array_start:
        if (++depth > kMaxDepth) throw IndexReject{absl::StrCat("JSON nests deeper than ", kMaxDepth, " levels")};
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        path.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!keys.back().insert(last_key).second) {
          throw IndexReject{keys.size() == 2 && path.back() == "weight_map"
                                ? absl::StrCat("weight_map lists tensor '", last_key, "' twice")
                                : absl::StrCat("duplicate key '", last_key, "'")};
        }
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const IndexReject& r) {
    return invalid(r.msg);
  } catch (const json::exception& e) {
    return invalid(absl::StrCat("not valid JSON: ", e.what()));
  } catch (const std::exception& e) {
    return invalid(absl::StrCat("cannot parse: ", e.what()));
  }
  if (!j.is_object()) return invalid(absl::StrCat("top level must be a JSON object, got ", j.type_name()));
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return invalid("weight_map must be an object of tensor name → shard file");
  if (wm->empty()) return invalid("weight_map is empty");
  SafetensorsIndex idx;
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) {
      return invalid(absl::StrCat("weight_map['", name, "'] must be a shard file name, got ", file.dump()));
    }
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f.find('\0') != std::string::npos || !absl::EndsWith(f, ".safetensors")) {
      return invalid(absl::StrCat("weight_map['", name, "'] = \"", f,
                                  "\" must be a *.safetensors file name in the checkpoint directory"));
    }
    idx.weight_map.emplace(name, f);
    shards.insert(f);
  }
  idx.shards.assign(shards.begin(), shards.end());
  return idx;
}

absl::Status check_safetensors_index(const SafetensorsIndex& index, const std::vector<const SafetensorsFile*>& shards,
                                     const std::string& label) {
  std::map<std::string, const SafetensorsFile*> by_name;
  for (const SafetensorsFile* f : shards) by_name.emplace(base_name(f->path()), f);
  for (const auto& [tensor, shard] : index.weight_map) {
    auto it = by_name.find(shard);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": shard ", shard, " (of tensor '", tensor, "') was not opened"));
    }
    if (it->second->find(tensor) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": tensor '", tensor, "' is mapped to ", shard, ", which does not hold it"));
    }
  }
  for (const SafetensorsFile* f : shards) {
    const std::string name = base_name(f->path());
    for (const StTensorInfo& t : f->tensors()) {
      auto it = index.weight_map.find(t.name);
      if (it == index.weight_map.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": tensor '", t.name, "' is not listed in ", label, "'s weight_map"));
      }
      if (it->second != name) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": holds tensor '", t.name, "', which ", label,
                                                       " maps to ", it->second, " (a tensor in two shards)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace frost
