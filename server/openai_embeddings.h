#pragma once
// POST /v1/embeddings (OpenAI's shape): the body → the inputs to embed, and the vectors → the response. Pure
// functions, no I/O (tests/unit/server/openai_embeddings_test.cc); the handler is OpenAiHttpServer's
// (server/http_embeddings.cc) and the work is server/embed_exec.h's, shared with Generation.Embed.
//
// Body fields:
//   model            required; the served model's name (or model.path), else 404 model_not_found as for
//                    /v1/completions (checked by the handler)
//   input            a string, a list of strings, a list of token ids (one input), or a list of token-id
//                    lists; texts are tokenized like Predict's features (BOS prepended when the tokenizer
//                    has one), token ids are used exactly as given. At most kMaxEmbedInputs inputs.
//   encoding_format  "float" (default): JSON numbers; "base64": each embedding as the base64 of its
//                    little-endian float32 array (what the OpenAI SDKs send by default and decode)
//   dimensions       accepted only when equal to the model's d_model: the backbone has no Matryoshka
//                    training, so a shortened vector would mean nothing (check_dimensions)
//   user             ignored
// Anything else is refused with a 400 naming the field, like the other endpoints.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/openai_api.h"

namespace frost::server::openai {

struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> texts;         // text inputs...
  std::vector<std::vector<int32_t>> ids;  // ...or token-id inputs (exactly one non-empty)
  bool base64 = false;                    // encoding_format "base64"
  std::optional<int64_t> dimensions;
};

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body);

// dimensions, when given, must equal the model's d_model; a 400 naming `dimensions` otherwise.
std::optional<ApiError> check_dimensions(const EmbeddingsRequest& req, int64_t d_model);

// The base64 of `v` as little-endian float32 bytes.
std::string embedding_base64(const std::vector<float>& v);

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...] or "<base64>"}],"model":...,
// "usage":{"prompt_tokens":N,"total_tokens":N}}. Floats are written in their shortest form that reads back as
// the same float (std::to_chars), not as doubles: half the bytes, and the values the client decodes are the
// ones computed. Every value must be finite (core/prototype/embedding.h never returns others).
std::string embeddings_response_body(const std::string& model, const std::vector<std::vector<float>>& vectors,
                                     bool base64, int64_t prompt_tokens);

}  // namespace frost::server::openai
