#pragma once
// SpmBackend: the boundary between frost_core and libsentencepiece.
//
// Why a boundary: Debian's libsentencepiece (0.1.97) bundles its own protobuf-lite (3.14-era)
// and exports all of its symbols, while LibTorch pulls in the system libprotobuf (3.21). In
// one global symbol scope the two copies interpose each other and the process crashes during
// static initialisation. So libsentencepiece is only ever linked into a small shared library,
// libfrost_spm.so (core/model/spm_shim.cc), which frost_core dlopen()s with RTLD_LOCAL |
// RTLD_DEEPBIND: sentencepiece binds to its own protobuf, the rest of the process never sees it.
// Only virtual calls cross the boundary (same libstdc++ and malloc on both sides).
#include <string>
#include <string_view>
#include <vector>

namespace frost {

class SpmBackend {
 public:
  virtual ~SpmBackend() = default;
  // false + *error on failure
  virtual bool encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string* text, std::string* error) const = 0;
  virtual int piece_size() const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual bool is_control(int id) const = 0;
  virtual bool is_unknown(int id) const = 0;
  virtual bool is_byte(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

// Exported by libfrost_spm.so: loads a tokenizer.model; nullptr + *error on failure.
using SpmOpenFn = SpmBackend* (*)(const char* path, std::string* error);
constexpr const char* kSpmOpenSymbol = "frost_spm_open";

}  // namespace frost
