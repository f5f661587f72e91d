#include "server/openai_embeddings.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/common/json.h"
#include "server/embed_exec.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

// input is at most a list of lists: anything deeper is refused while parsing.
constexpr int kMaxEmbeddingsJsonDepth = 8;

bool token_id(const json& v, int32_t* out) {
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return false;
  if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) return false;
  *out = static_cast<int32_t>(x);
  return true;
}

std::optional<ApiError> parse_ids(const json& arr, const std::string& at, std::vector<int32_t>* out) {
  out->reserve(arr.size());
  for (size_t j = 0; j < arr.size(); ++j) {
    int32_t id = 0;
    if (!token_id(arr[j], &id))
      return bad_request("input", absl::StrCat(at, "[", j, "]: expected a token id (an integer), got ",
                                               utf8_for_json(arr[j].dump())));
    out->push_back(id);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_input(const json& in, EmbeddingsRequest* r) {
  if (in.is_string()) {
    r->texts.push_back(in.get<std::string>());
    return std::nullopt;
  }
  if (!in.is_array())
    return bad_request(
        "input",
        "input: expected a string, a list of strings, a list of token ids or a list of token-id lists");
  if (in.empty()) return bad_request("input", "input: must not be empty");
  if (in.size() > static_cast<size_t>(kMaxEmbedInputs) && !in[0].is_number_integer())
    return bad_request("input", absl::StrCat("input: ", in.size(), " inputs, more than the cap of ",
                                             kMaxEmbedInputs, " per request"));
  const json& first = in[0];
  if (first.is_number_integer()) {  // one token-id input
    r->ids.emplace_back();
    return parse_ids(in, "input", &r->ids.back());
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const json& e = in[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (first.is_string()) {
      if (!e.is_string()) return bad_request("input", absl::StrCat(at, ": expected a string like input[0]"));
      r->texts.push_back(e.get<std::string>());
    } else if (first.is_array()) {
      if (!e.is_array())
        return bad_request("input", absl::StrCat(at, ": expected a list of token ids like input[0]"));
      r->ids.emplace_back();
      if (auto err = parse_ids(e, at, &r->ids.back())) return err;
    } else {
      return bad_request("input", absl::StrCat(at, ": expected a string, a token id or a list of token ids"));
    }
  }
  return std::nullopt;
}

void append_float(std::string& out, float f) {
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), f);
  out.append(buf, r.ptr);
}

}  // namespace

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body) {
  json doc;
  if (std::optional<std::string> err = parse_json_bounded(body, kMaxEmbeddingsJsonDepth, &doc))
    return bad_request("", absl::StrCat("the body is not valid JSON (", *err, ")"));
  if (!doc.is_object()) return bad_request("", "the body must be a JSON object");
  static const std::set<std::string> kKnown = {"model", "input", "encoding_format", "dimensions", "user"};
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (!kKnown.count(it.key()))
      return bad_request(it.key(),
                         absl::StrCat("unrecognized request argument supplied: ", utf8_for_json(it.key())));
  auto get = [&](const char* key) -> const json* {
    auto it = doc.find(key);
    return it == doc.end() || it->is_null() ? nullptr : &*it;  // null = not given (OpenAI's SDKs send nulls)
  };
  EmbeddingsRequest r;
  const json* model = get("model");
  if (!model) return bad_request("model", "model: required (GET /v1/models lists the served model)");
  if (!model->is_string()) return bad_request("model", "model: expected a string");
  r.model = model->get<std::string>();
  const json* input = get("input");
  if (!input) return bad_request("input", "input: required");
  if (auto err = parse_input(*input, &r)) return *err;
  if (const json* f = get("encoding_format")) {
    const std::string v = f->is_string() ? f->get<std::string>() : f->dump();
    if (v != "float" && v != "base64")
      return bad_request(
          "encoding_format",
          absl::StrCat("encoding_format: expected \"float\" or \"base64\", got ", utf8_for_json(v)));
    r.base64 = v == "base64";
  }
  if (const json* d = get("dimensions")) {
    if (!d->is_number_integer() || d->get<int64_t>() < 1)
      return bad_request("dimensions", absl::StrCat("dimensions: expected a positive integer, got ",
                                                    utf8_for_json(d->dump())));
    r.dimensions = d->get<int64_t>();
  }
  if (const json* u = get("user"); u && !u->is_string())
    return bad_request("user", "user: expected a string");
  return r;
}

std::optional<ApiError> check_dimensions(const EmbeddingsRequest& req, int64_t d_model) {
  if (!req.dimensions || *req.dimensions == d_model) return std::nullopt;
  return bad_request(
      "dimensions",
      absl::StrCat("dimensions: this model's embeddings have ", d_model, " dimensions (got ", *req.dimensions,
                   "); the backbone has no Matryoshka training, so they cannot be shortened"));
}

std::string embedding_base64(const std::vector<float>& v) {
  static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559, "float32 expected");
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = 0;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b)
      bytes[i * 4 + static_cast<size_t>(b)] = static_cast<char>((u >> (8 * b)) & 0xff);
  }
  return absl::Base64Escape(bytes);
}

std::string embeddings_response_body(const std::string& model, const std::vector<std::vector<float>>& vectors,
                                     bool base64, int64_t prompt_tokens) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < vectors.size(); ++i) {
    if (i) out += ',';
    absl::StrAppend(&out, "{\"object\":\"embedding\",\"index\":", i, ",\"embedding\":");
    if (base64) {
      absl::StrAppend(&out, "\"", embedding_base64(vectors[i]), "\"}");
      continue;
    }
    out += '[';
    for (size_t j = 0; j < vectors[i].size(); ++j) {
      if (j) out += ',';
      append_float(out, vectors[i][j]);
    }
    out += "]}";
  }
  absl::StrAppend(&out, "],\"model\":", json(model).dump(-1, ' ', false, json::error_handler_t::replace),
                  ",\"usage\":{\"prompt_tokens\":", prompt_tokens, ",\"total_tokens\":", prompt_tokens, "}}");
  return out;
}

}  // namespace frost::server::openai
