// tokenizer.json parsing into BpeTokenizer::Impl, and BpeTokenizer::parse / load. Shared
// declarations are in tokenizer_bpe_internal.h.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/common/fs.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/model/tokenizer_bpe_internal.h"

namespace frost {
namespace bpe_internal {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------
// tokenizer.json parsing. Every error names the JSON field path; the caller prefixes the file.
// ---------------------------------------------------------------------------------------

absl::Status field_error(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// "path.key", or "key" at the root (path "").
std::string join_path(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// obj[key], or nullptr when absent or null.
const json* member(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> get_string(const json& obj, const char* key, const std::string& path,
                                       const char* fallback = nullptr) {
  const json* v = member(obj, key);
  if (!v) {
    if (fallback) return std::string(fallback);
    return field_error(join_path(path, key), "missing");
  }
  if (!v->is_string()) return field_error(join_path(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<bool> get_bool(const json& obj, const char* key, const std::string& path,
                              bool fallback) {
  const json* v = member(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return field_error(join_path(path, key), "expected true/false");
  return v->get<bool>();
}

absl::StatusOr<int64_t> get_count(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (!v) return int64_t{0};
  if (!v->is_number_integer() || v->get<int64_t>() < 0) {
    return field_error(join_path(path, key), "expected a non-negative integer");
  }
  return v->get<int64_t>();
}

absl::StatusOr<std::string> get_type(const json& obj, const std::string& path) {
  if (!obj.is_object()) return field_error(path, "expected an object");
  return get_string(obj, "type", path);
}

// The elements of obj[key] (an array), with their paths.
absl::StatusOr<std::vector<std::pair<const json*, std::string>>> get_items(
    const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  const std::string p = join_path(path, key);
  if (!v || !v->is_array()) return field_error(p, "expected an array");
  std::vector<std::pair<const json*, std::string>> items;
  for (size_t i = 0; i < v->size(); ++i) items.emplace_back(&(*v)[i], absl::StrCat(p, "[", i, "]"));
  return items;
}

absl::StatusOr<Pattern> parse_pattern(const json& obj, const std::string& path) {
  const json* v = member(obj, "pattern");
  const std::string p = absl::StrCat(path, ".pattern");
  if (!v || !v->is_object()) {
    return field_error(p, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  if (const json* s = member(*v, "String"); s && s->is_string()) {
    return Pattern{s->get<std::string>(), nullptr};
  }
  if (const json* r = member(*v, "Regex"); r && r->is_string()) {
    auto rx = HfRegex::compile(r->get<std::string>());
    if (!rx.ok()) return field_error(absl::StrCat(p, ".Regex"), rx.status().message());
    return Pattern{"", *std::move(rx)};
  }
  return field_error(p, "expected {\"String\": ...} or {\"Regex\": ...}");
}

bool is_single_char(const std::string& s) {
  size_t n_chars = 0;
  for (const char c : s) n_chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;  // lead bytes
  return n_chars == 1;
}

absl::StatusOr<PrependScheme> parse_prepend_scheme(const json& obj, const std::string& path) {
  if (const json* v = member(obj, "prepend_scheme")) {
    const std::string s = v->is_string() ? v->get<std::string>() : "";
    if (s == "first") return PrependScheme::kFirst;
    if (s == "always") return PrependScheme::kAlways;
    if (s == "never") return PrependScheme::kNever;
    return field_error(absl::StrCat(path, ".prepend_scheme"), "expected first|always|never");
  }
  // Files written before prepend_scheme existed use add_prefix_space.
  FROST_ASSIGN_OR_RETURN(const bool add, get_bool(obj, "add_prefix_space", path, true));
  return add ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::string> parse_replacement(const json& obj, const std::string& path) {
  FROST_ASSIGN_OR_RETURN(std::string r, get_string(obj, "replacement", path, "\xE2\x96\x81"));
  if (!is_single_char(r)) {
    return field_error(absl::StrCat(path, ".replacement"), "expected a single character");
  }
  return r;
}

absl::Status parse_normalizer(const json& obj, const std::string& path, std::vector<NormalizerStage>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "normalizers", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_normalizer(*item, p, out));
    return absl::OkStatus();
  }
  NormalizerStage stage{NormalizerStage::kReplace, {}, "", false, false, UnicodeForm::kNFC};
  if (type == "Replace") {
    FROST_ASSIGN_OR_RETURN(stage.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.content, get_string(obj, "content", path));
  } else if (type == "Prepend") {
    stage.kind = NormalizerStage::kPrepend;
    FROST_ASSIGN_OR_RETURN(stage.content, get_string(obj, "prepend", path));
  } else if (type == "Strip") {
    stage.kind = NormalizerStage::kStrip;
    FROST_ASSIGN_OR_RETURN(stage.left, get_bool(obj, "strip_left", path, true));
    FROST_ASSIGN_OR_RETURN(stage.right, get_bool(obj, "strip_right", path, true));
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    if (!unicode_normalization_available()) {
      return field_error(absl::StrCat(path, ".type"),
                         absl::StrCat("normalizer \"", type,
                                      "\" needs ICU, and this frost was built without it (libicu-dev)"));
    }
    stage.kind = NormalizerStage::kUnicode;
    stage.form = type == "NFC"    ? UnicodeForm::kNFC
                 : type == "NFD"  ? UnicodeForm::kNFD
                 : type == "NFKC" ? UnicodeForm::kNFKC
                                  : UnicodeForm::kNFKD;
  } else {
    // Lowercase / StripAccents / Precompiled would need more Unicode tables or the
    // sentencepiece charsmap; BERT-style ones belong to WordPiece models.
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported normalizer \"", type,
                                    "\" (supported: Sequence, Replace, Prepend, Strip, NFC, NFD, NFKC, NFKD)"));
  }
  out.push_back(std::move(stage));
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> parse_behavior(const json& obj, const std::string& path) {
  FROST_ASSIGN_OR_RETURN(const std::string b, get_string(obj, "behavior", path, "Isolated"));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return field_error(absl::StrCat(path, ".behavior"), absl::StrCat("unknown behavior \"", b, "\""));
}

// The regex of the ByteLevel pre-tokenizer with use_regex (GPT-2's).
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

absl::Status parse_pre_tokenizer(const json& obj, const std::string& path,
                                 std::vector<PreTokenizerStage>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "pretokenizers", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_pre_tokenizer(*item, p, out));
    return absl::OkStatus();
  }
  PreTokenizerStage stage{PreTokenizerStage::kSplit,
                          {},
                          SplitBehavior::kIsolated,
                          false,
                          "",
                          PrependScheme::kAlways,
                          true,
                          false};
  if (type == "Split") {
    FROST_ASSIGN_OR_RETURN(stage.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.behavior, parse_behavior(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.invert, get_bool(obj, "invert", path, false));
  } else if (type == "Digits") {
    // HF isolates char::is_numeric chars, i.e. general category N: \p{N}.
    FROST_ASSIGN_OR_RETURN(const bool individual, get_bool(obj, "individual_digits", path, false));
    FROST_ASSIGN_OR_RETURN(auto rx, HfRegex::compile(individual ? "\\p{N}" : "\\p{N}+"));
    stage.pattern = Pattern{"", std::move(rx)};
  } else if (type == "Metaspace") {
    stage.kind = PreTokenizerStage::kMetaspace;
    FROST_ASSIGN_OR_RETURN(stage.replacement, parse_replacement(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.scheme, parse_prepend_scheme(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.split, get_bool(obj, "split", path, true));
  } else if (type == "ByteLevel") {
    stage.kind = PreTokenizerStage::kByteLevel;
    FROST_ASSIGN_OR_RETURN(stage.add_prefix_space, get_bool(obj, "add_prefix_space", path, true));
    FROST_ASSIGN_OR_RETURN(const bool use_regex, get_bool(obj, "use_regex", path, true));
    if (use_regex) {
      // Compiled once per process (a constant pattern the tests cover, so it cannot fail).
      static const auto* gpt2 = new std::shared_ptr<const HfRegex>(*HfRegex::compile(kGpt2Pattern));
      stage.pattern = Pattern{"", *gpt2};
    }
  } else {
    return field_error(
        absl::StrCat(path, ".type"),
        absl::StrCat("unsupported pre_tokenizer \"", type,
                     "\" (supported: Sequence, Split, Digits, Metaspace, ByteLevel)"));
  }
  out.push_back(std::move(stage));
  return absl::OkStatus();
}

absl::Status parse_decoder(const json& obj, const std::string& path, std::vector<DecoderStage>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "decoders", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_decoder(*item, p, out));
    return absl::OkStatus();
  }
  DecoderStage stage{DecoderStage::kReplace, {}, "", 0, 0, PrependScheme::kAlways};
  if (type == "Replace") {
    FROST_ASSIGN_OR_RETURN(stage.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.content, get_string(obj, "content", path));
  } else if (type == "ByteFallback") {
    stage.kind = DecoderStage::kByteFallback;
  } else if (type == "Fuse") {
    stage.kind = DecoderStage::kFuse;
  } else if (type == "Strip") {
    stage.kind = DecoderStage::kStrip;
    FROST_ASSIGN_OR_RETURN(stage.content, get_string(obj, "content", path));
    if (!is_single_char(stage.content)) {
      return field_error(absl::StrCat(path, ".content"), "expected a single character");
    }
    FROST_ASSIGN_OR_RETURN(const int64_t start, get_count(obj, "start", path));
    FROST_ASSIGN_OR_RETURN(const int64_t stop, get_count(obj, "stop", path));
    stage.start = static_cast<size_t>(start);
    stage.stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    stage.kind = DecoderStage::kMetaspace;
    FROST_ASSIGN_OR_RETURN(stage.content, parse_replacement(obj, path));
    FROST_ASSIGN_OR_RETURN(stage.scheme, parse_prepend_scheme(obj, path));
  } else if (type == "ByteLevel") {
    stage.kind = DecoderStage::kByteLevel;
  } else {
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported decoder \"", type,
                                    "\" (supported: Sequence, Replace, ByteFallback, Fuse, Strip, "
                                    "Metaspace, ByteLevel)"));
  }
  out.push_back(std::move(stage));
  return absl::OkStatus();
}

// Ids must stay small enough for dense per-id tables.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

absl::StatusOr<int32_t> parse_id(const json& v, const std::string& path, int64_t max_id = kMaxTokenId) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max_id) {
    return field_error(path, absl::StrCat("expected a token id in [0, ", max_id, "]"));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

// The largest id of model.vocab and added_tokens: the per-id tables are dense, so the id space may be at
// most twice the tokens the file lists (plus 1024). A one-token file with id 16777215 used to allocate
// over a gigabyte (tests/fuzz/corpus/tokenizer_json/regress-sparse-token-id.json).
int64_t max_token_id(const json& root) {
  size_t listed = 0;
  if (auto m = root.find("model"); m != root.end() && m->is_object())
    if (auto v = m->find("vocab"); v != m->end() && v->is_object()) listed += v->size();
  if (auto a = root.find("added_tokens"); a != root.end() && a->is_array()) listed += a->size();
  return std::min<int64_t>(kMaxTokenId, 2 * static_cast<int64_t>(listed) + 1024);
}

void set_piece(std::vector<std::string>& pieces, int32_t id, const std::string& s) {
  if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(static_cast<size_t>(id) + 1);
  pieces[static_cast<size_t>(id)] = s;
}

absl::Status parse_model(const json& root, BpeTokenizer::Impl& impl) {
  const json* m = member(root, "model");
  if (!m || !m->is_object()) return field_error("model", "expected an object");
  // Old files may omit the type; merges then identify BPE.
  FROST_ASSIGN_OR_RETURN(const std::string type,
                         get_string(*m, "type", "model", m->contains("merges") ? "BPE" : ""));
  if (type != "BPE") {
    return field_error("model.type", absl::StrCat("unsupported model \"", type, "\" (only BPE)"));
  }
  // dropout 0 changes nothing, so only a positive one is unsupported.
  if (const json* d = member(*m, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0)) {
    return field_error("model.dropout", "BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = member(*m, key); v && !(v->is_string() && v->get<std::string>().empty())) {
      return field_error(absl::StrCat("model.", key), "not supported (expected null)");
    }
  }
  BpeModel& model = impl.model;
  FROST_ASSIGN_OR_RETURN(model.fuse_unk, get_bool(*m, "fuse_unk", "model", false));
  FROST_ASSIGN_OR_RETURN(model.byte_fallback, get_bool(*m, "byte_fallback", "model", false));
  FROST_ASSIGN_OR_RETURN(model.ignore_merges, get_bool(*m, "ignore_merges", "model", false));

  const json* vocab = member(*m, "vocab");
  if (!vocab || !vocab->is_object()) return field_error("model.vocab", "expected an object");
  model.vocab.reserve(vocab->size());
  const int64_t max_id = max_token_id(root);
  for (const auto& [token, v] : vocab->items()) {
    FROST_ASSIGN_OR_RETURN(const int32_t id,
                           parse_id(v, absl::StrCat("model.vocab[\"", token, "\"]"), max_id));
    model.vocab[token] = id;
    set_piece(impl.pieces, id, token);
  }
  model.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    model.byte_ids[static_cast<size_t>(b)] = model.lookup(name);
  }
  if (const json* unk = member(*m, "unk_token")) {
    const int32_t id = unk->is_string() ? model.lookup(unk->get<std::string>()) : -1;
    if (id < 0) return field_error("model.unk_token", "not a token of model.vocab");
    model.unk_id = id;
  }

  // Merges: "left right" strings (older files) or ["left", "right"] pairs (tokens may then
  // contain spaces). Rank = position. A repeated pair keeps its last rank, as HF's map does.
  FROST_ASSIGN_OR_RETURN(auto merges, get_items(*m, "merges", "model"));
  model.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [item, p] = merges[rank];
    std::string left, right;
    if (item->is_string()) {
      const std::string s = item->get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return field_error(p, absl::StrCat("\"", s, "\": expected \"left right\""));
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (item->is_array() && item->size() == 2 && (*item)[0].is_string() &&
               (*item)[1].is_string()) {
      left = (*item)[0].get<std::string>();
      right = (*item)[1].get<std::string>();
    } else {
      return field_error(p, "expected \"left right\" or [\"left\", \"right\"]");
    }
    const int32_t a = model.lookup(left), b = model.lookup(right), ab = model.lookup(left + right);
    if (a < 0 || b < 0 || ab < 0) {
      return field_error(p, absl::StrCat("token \"",
                                         a < 0   ? left
                                         : b < 0 ? right
                                                 : left + right,
                                         "\" is not in model.vocab"));
    }
    model.merges[pair_key(a, b)] = Merge{static_cast<int32_t>(rank), ab};
  }
  return absl::OkStatus();
}

// bos from the post_processor: the first special token a template puts before $A.
absl::StatusOr<int32_t> parse_post_processor_bos(const json& obj, const std::string& path,
                                                 const BpeTokenizer::Impl& impl) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "processors", path));
    for (const auto& [item, p] : items) {
      FROST_ASSIGN_OR_RETURN(const int32_t bos, parse_post_processor_bos(*item, p, impl));
      if (bos >= 0) return bos;
    }
    return -1;
  }
  if (type == "ByteLevel") return -1;  // offsets only
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json* cls = member(obj, "cls");
    if (!cls || !cls->is_array() || cls->size() != 2) {
      return field_error(absl::StrCat(path, ".cls"), "expected [token, id]");
    }
    return parse_id((*cls)[1], absl::StrCat(path, ".cls[1]"));
  }
  if (type != "TemplateProcessing") {
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported post_processor \"", type, "\""));
  }
  FROST_ASSIGN_OR_RETURN(auto single, get_items(obj, "single", path));
  for (const auto& [item, p] : single) {
    if (!item->is_object()) return field_error(p, "expected an object");
    if (item->contains("Sequence")) return -1;  // reached $A without a special token
    const json* st = member(*item, "SpecialToken");
    if (!st || !st->is_object()) continue;
    FROST_ASSIGN_OR_RETURN(const std::string name, get_string(*st, "id", p + ".SpecialToken"));
    // The id list lives in special_tokens; fall back to the vocabulary spelling.
    const json* specials = member(obj, "special_tokens");
    const json* entry =
        specials && specials->is_object() ? member(*specials, name.c_str()) : nullptr;
    const json* ids = entry && entry->is_object() ? member(*entry, "ids") : nullptr;
    if (ids && ids->is_array() && !ids->empty()) {
      return parse_id((*ids)[0], absl::StrCat(path, ".special_tokens[\"", name, "\"].ids[0]"));
    }
    for (size_t id = 0; id < impl.pieces.size(); ++id) {
      if (impl.pieces[id] == name) return static_cast<int32_t>(id);
    }
    return field_error(p, absl::StrCat("special token \"", name, "\" has no id"));
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer::Impl>> parse_json(const json& root) {
  if (!root.is_object()) return field_error("(root)", "expected a JSON object");
  auto impl = std::make_unique<BpeTokenizer::Impl>();
  FROST_RETURN_IF_ERROR(parse_model(root, *impl));

  // Added tokens extend the id space; "special" ones are skipped by decode.
  std::vector<std::pair<std::string, int32_t>> added_special;
  std::vector<AddedToken> added_tokens;
  if (member(root, "added_tokens")) {
    FROST_ASSIGN_OR_RETURN(auto added, get_items(root, "added_tokens", ""));
    const int64_t max_id = max_token_id(root);
    for (const auto& [item, p] : added) {
      if (!item->is_object()) return field_error(p, "expected an object");
      const json* idv = member(*item, "id");
      if (!idv) return field_error(p + ".id", "missing");
      FROST_ASSIGN_OR_RETURN(const int32_t id, parse_id(*idv, p + ".id", max_id));
      FROST_ASSIGN_OR_RETURN(const std::string content, get_string(*item, "content", p));
      FROST_ASSIGN_OR_RETURN(const bool special, get_bool(*item, "special", p, false));
      set_piece(impl->pieces, id, content);
      if (special) added_special.emplace_back(content, id);
      AddedToken t{content, id, special};
      FROST_ASSIGN_OR_RETURN(t.lstrip, get_bool(*item, "lstrip", p, false));
      FROST_ASSIGN_OR_RETURN(t.rstrip, get_bool(*item, "rstrip", p, false));
      // HF's default: special tokens are matched in the raw text, the others after normalization.
      FROST_ASSIGN_OR_RETURN(t.normalized, get_bool(*item, "normalized", p, !special));
      FROST_ASSIGN_OR_RETURN(t.single_word, get_bool(*item, "single_word", p, false));
      added_tokens.push_back(std::move(t));
    }
  }
  impl->special.assign(impl->pieces.size(), false);
  for (const auto& [content, id] : added_special) impl->special[static_cast<size_t>(id)] = true;
  if (impl->model.unk_id >= 0) impl->special[static_cast<size_t>(impl->model.unk_id)] = true;

  if (const json* n = member(root, "normalizer")) {
    FROST_RETURN_IF_ERROR(parse_normalizer(*n, "normalizer", impl->normalizers));
  }
  if (const json* p = member(root, "pre_tokenizer")) {
    FROST_RETURN_IF_ERROR(parse_pre_tokenizer(*p, "pre_tokenizer", impl->pre_tokenizers));
  }
  if (const json* d = member(root, "decoder")) {
    impl->has_decoder = true;
    FROST_RETURN_IF_ERROR(parse_decoder(*d, "decoder", impl->decoders));
  }
  // Normalized added tokens are looked for in normalized text, so their content is normalized
  // too (HF does the same when it builds its matcher).
  for (AddedToken& t : added_tokens) {
    if (t.normalized && !impl->normalizers.empty()) {
      t.content = impl->normalize(t.content);
      impl->added_normalized.add(std::move(t));
    } else {
      impl->added_raw.add(std::move(t));
    }
  }
  for (const PreTokenizerStage& s : impl->pre_tokenizers)
    impl->byte_level |= s.kind == PreTokenizerStage::kByteLevel;
  for (const DecoderStage& s : impl->decoders) impl->byte_level |= s.kind == DecoderStage::kByteLevel;

  if (const json* pp = member(root, "post_processor")) {
    FROST_ASSIGN_OR_RETURN(impl->bos, parse_post_processor_bos(*pp, "post_processor", *impl));
  }
  auto find_special = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      for (const auto& [content, id] : added_special) {
        if (content == name) return id;
      }
    }
    return int32_t{-1};
  };
  if (impl->bos < 0) {
    impl->bos = find_special({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  }
  impl->eos = find_special({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
  if (static_cast<size_t>(impl->bos + 1) > impl->pieces.size()) {
    return field_error("post_processor",
                       absl::StrCat("bos id ", impl->bos, " is outside the vocabulary"));
  }

  // What each token adds to a generated stream, computed once.
  impl->token_bytes.resize(impl->pieces.size());
  for (size_t id = 0; id < impl->pieces.size(); ++id) {
    if (impl->special[id] || impl->pieces[id].empty()) continue;
    std::vector<std::string> one{impl->pieces[id]};
    run_decoders(impl->decoders, one, /*stream=*/true);
    impl->token_bytes[id] = absl::StrJoin(one, "");
  }
  return impl;
}

}  // namespace
}  // namespace bpe_internal

using bpe_internal::json;
using bpe_internal::parse_json;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::parse(std::string_view json_text,
                                                                  const std::string& source) {
  // nlohmann throws on malformed input; nothing may escape this boundary.
  absl::StatusOr<std::unique_ptr<Impl>> impl;
  try {
    const json root = json::parse(json_text.begin(), json_text.end());
    impl = parse_json(root);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (!impl.ok()) {
    return absl::Status(impl.status().code(), absl::StrCat(source, ": ", impl.status().message()));
  }
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(*std::move(impl)));
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  // read_file: a FIFO or device in the model directory is refused at once instead of blocking the load.
  absl::StatusOr<std::string> text = read_file(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status()))
      return absl::NotFoundError(absl::StrCat(path, ": tokenizer.json not found or unreadable"));
    return text.status();
  }
  return parse(*text, path);
}

}  // namespace frost
