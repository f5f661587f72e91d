// Fuzz target: tokenizer.json (core/model/tokenizer_bpe.h BpeTokenizer::parse) on arbitrary text.
//
// An accepted tokenizer is exercised the way frostd uses it: encode of a few fixed texts (ids inside the
// vocabulary, BOS first when asked), decode (valid UTF-8 out, whatever the ids), token_bytes /
// id_to_piece / is_special for every id and a few outside the vocabulary. A rejection is INVALID_ARGUMENT.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/utf8.h"
#include "core/model/tokenizer_bpe.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> parsed = BpeTokenizer::parse(text, "tokenizer.json");
  if (!parsed.ok()) {
    fuzz::check_rejection(parsed.status());
    return 0;
  }
  const BpeTokenizer& tok = **parsed;
  const int32_t n = tok.vocab_size();
  FROST_FUZZ_CHECK(n >= 0, "negative vocab_size");
  FROST_FUZZ_CHECK(tok.bos_id() >= -1 && tok.bos_id() < std::max(n, 1), "bos_id outside the vocabulary");
  FROST_FUZZ_CHECK(tok.eos_id() >= -1 && tok.eos_id() < std::max(n, 1), "eos_id outside the vocabulary");

  // Every id (bounded: a fuzzed vocabulary is small anyway) and a few outside.
  std::vector<int32_t> all;
  for (int32_t id = -2; id < std::min(n, 4096) + 2; ++id) {
    (void)tok.token_bytes(id);
    (void)tok.id_to_piece(id);
    (void)tok.is_special(id);
    all.push_back(id);
  }
  FROST_FUZZ_CHECK(is_valid_utf8(tok.decode(all)), "decode returned invalid UTF-8");

  for (const char* sample : {"Hello world", "  once upon\na time 123 ", "caf\xC3\xA9 \xF0\x9F\x99\x82 \xE2\x96\x81x",
                             "\xFF\xFE bad \xC3", ""}) {
    for (bool bos : {false, true}) {
      absl::StatusOr<std::vector<int32_t>> ids = tok.encode(sample, bos);
      FROST_FUZZ_CHECK(ids.ok(), "encode failed: " + ids.status().ToString());
      for (int32_t id : *ids) FROST_FUZZ_CHECK(id >= 0 && id < n, "encode returned an id outside the vocabulary");
      if (bos && tok.bos_id() >= 0) FROST_FUZZ_CHECK(!ids->empty() && (*ids)[0] == tok.bos_id(), "BOS missing");
      FROST_FUZZ_CHECK(is_valid_utf8(tok.decode(*ids)), "decode returned invalid UTF-8");
    }
    (void)tok.pre_tokenize(sample);
  }
  return 0;
}
