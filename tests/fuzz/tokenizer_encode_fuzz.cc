// Fuzz target: the BPE encode / decode path (core/model/tokenizer_bpe.h) on arbitrary text, with two real
// tokenizer.json files: stories260K's (LLaMA / sentencepiece style: metaspace, byte fallback) and a GPT-2
// style byte-level one (corpus/tokenizer_json/seed-*.json). sentencepiece's own tokenizer.model path is
// not fuzzed here: libfrost_spm.so cannot be loaded under AddressSanitizer (core/model/tokenizer_spm.h).
//
// Input: byte 0 picks the tokenizer (bit 0) and add_bos (bit 1); the rest is the text. Promises checked:
//   - encode never fails; ids are inside the vocabulary; BOS first exactly when asked and there is one;
//   - byte-level: decode(encode(t)) == t with invalid UTF-8 replaced by U+FFFD, and the token_bytes of the
//     ids concatenate to the same (what the streaming detokenizer relies on);
//   - metaspace: the same round trip for texts without ' ' and U+2581 (its normalizer strips and folds
//     spaces, so those do not come back byte for byte);
//   - decode always returns valid UTF-8.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/utf8.h"
#include "core/model/tokenizer_bpe.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::unique_ptr<frost::BpeTokenizer> load(const char* name) {
  const std::string path = std::string(FROST_FUZZ_SOURCE_DIR) + "/corpus/tokenizer_json/" + name;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::unique_ptr<frost::BpeTokenizer>> t = frost::BpeTokenizer::parse(ss.str(), path);
  if (!in || !t.ok()) {
    std::fprintf(stderr, "tokenizer_encode_fuzz: cannot load %s: %s\n", path.c_str(),
                 t.ok() ? "unreadable" : t.status().ToString().c_str());
    std::abort();
  }
  return *std::move(t);
}

const frost::BpeTokenizer* g_tok[2];

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  g_tok[0] = load("seed-stories260K.json").release();
  g_tok[1] = load("seed-gpt2-bytelevel.json").release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  if (size == 0) return 0;
  const frost::BpeTokenizer& tok = *g_tok[data[0] & 1];
  const bool add_bos = (data[0] & 2) != 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  absl::StatusOr<std::vector<int32_t>> ids = tok.encode(text, add_bos);
  FROST_FUZZ_CHECK(ids.ok(), "encode failed: " + ids.status().ToString());
  const bool bos = add_bos && tok.bos_id() >= 0;
  for (size_t i = 0; i < ids->size(); ++i) {
    const int32_t id = (*ids)[i];
    FROST_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "id outside the vocabulary");
    if (i == 0 && bos) FROST_FUZZ_CHECK(id == tok.bos_id(), "BOS missing");
  }
  const std::string decoded = tok.decode(*ids);
  FROST_FUZZ_CHECK(is_valid_utf8(decoded), "decode returned invalid UTF-8");

  const std::string want = sanitize_utf8(text);
  bool exact = tok.kind() == "bpe-bytelevel";
  if (tok.kind() == "bpe-metaspace")
    exact = want.find(' ') == std::string::npos && want.find("\xE2\x96\x81") == std::string::npos;
  if (exact) {
    FROST_FUZZ_CHECK(decoded == want, tok.kind() + ": decode(encode(text)) != text");
    if (tok.kind() == "bpe-bytelevel") {
      std::string bytes;
      for (int32_t id : *ids) bytes += tok.token_bytes(id);
      FROST_FUZZ_CHECK(bytes == want, "token_bytes do not concatenate to the text");
    }
  }
  return 0;
}
