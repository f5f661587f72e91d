// Fuzz target: constrained decoding's compiler and recogniser for JSON Schema documents (core/constrain/json_schema.h), and with byte 0 == '!' the json_object kind.
// Input: the constraint text, compiled under small limits and a CompileControl deadline on a thread with
// a small stack; what compiles is run through the recogniser and a Matcher over a small vocabulary.
// The promises checked are listed in tests/fuzz/constrain_fuzz.h.
#include <cstdint>
#include <string_view>

#include "tests/fuzz/constrain_fuzz.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '!') {
    frost::fuzz::fuzz_constraint(frost::constrain::ConstraintSpec::Kind::kJsonObject, text);
    return 0;
  }
  frost::fuzz::fuzz_constraint(frost::constrain::ConstraintSpec::Kind::kJsonSchema, text);
  return 0;
}
