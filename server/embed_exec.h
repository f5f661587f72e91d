#pragma once
// What Generation.Embed (gRPC) and POST /v1/embeddings (HTTP) share: the bounds of one request, the checks
// that are cheap enough for a gRPC callback thread (count, text bytes and UTF-8, token-id inputs), and the
// work itself (tokenizing the texts, then core/prototype/embedding.h per input) for a worker thread.
//
// Bounds: at most kMaxEmbedInputs inputs (OpenAI's 2048) and kMaxEmbedTokens tokens over every input
// (OpenAI's per-request cap); each input within the model's context (never truncated) and each text within
// limits.max_prompt_bytes. Errors are INVALID_ARGUMENT naming the input as the caller's field spells it
// ("texts[2]: ...", "input[0]: ...").
//
// Threads: run_embed blocks for the backbone forward of every input. gRPC runs it on the Generation
// service's embed executor (its own threads and bounded queue, sized like Predict's — prediction.threads,
// prediction.max_queued — so embeddings never hold the intake workers that admit Generate); HTTP on the
// connection's own thread (server/http_front.h), like the generation handlers' waits.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_loader.h"
#include "server/server_config.h"

namespace frost::server {

inline constexpr int kMaxEmbedInputs = 2048;
inline constexpr int64_t kMaxEmbedTokens = 300000;

// One request's inputs: texts or token-id lists (exactly one non-empty).
struct EmbedInputs {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  std::string texts_field = "texts";  // how errors name an input: "<field>[i]"
  std::string ids_field = "token_ids";
};

struct EmbedOutput {
  std::vector<std::vector<float>> vectors;  // one per input, d_model floats, L2 norm 1
  std::vector<int32_t> n_tokens;            // tokens per input (BOS included for a text)
  int64_t prompt_tokens = 0;                // over every input
};

// The callback-thread checks: exactly one kind of input, the count, every text's bytes and UTF-8, every
// token-id input (empty, length, range) and the token-id total. Texts are checked again after tokenizing
// (run_embed).
absl::Status check_embed_inputs(const LoadedModel& model, const EmbedInputs& in, const LimitsSection& limits);

// Tokenizes the texts (BOS prepended when the tokenizer has one), checks every input's length and the total,
// then embeds each input alone. Blocking: call it on a worker thread. `cancelled` (may be empty) is asked
// between inputs: true ends the work with CANCELLED (an HTTP client that went away).
absl::StatusOr<EmbedOutput> run_embed(const LoadedModel& model, const EmbedInputs& in,
                                      const std::function<bool()>& cancelled = {});

}  // namespace frost::server
