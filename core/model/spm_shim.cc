// libfrost_spm.so: the only code that links libsentencepiece (see spm_backend.h for why).
#include <memory>
#include <string>

#include "core/model/spm_backend.h"

// Debian's sentencepiece 0.1.97 header declares `namespace absl { using std::string_view; }`,
// which collides with Abseil's own absl::string_view class if both are ever visible. Renaming
// the namespace for the duration of the include gives sentencepiece its alias in a private
// namespace; its functions still take std::string_view, so the symbols match the library.
#define absl frost_sentencepiece_absl
#include <sentencepiece_processor.h>
#undef absl

namespace {

class ProcessorBackend final : public frost::SpmBackend {
 public:
  explicit ProcessorBackend(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp) : sp_(std::move(sp)) {}
  bool encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    const auto st = sp_->Encode(text, ids);
    if (!st.ok()) *error = st.ToString();
    return st.ok();
  }
  bool decode(const std::vector<int>& ids, std::string* text, std::string* error) const override {
    const auto st = sp_->Decode(ids, text);
    if (!st.ok()) *error = st.ToString();
    return st.ok();
  }
  int piece_size() const override { return sp_->GetPieceSize(); }
  std::string id_to_piece(int id) const override { return sp_->IdToPiece(id); }
  bool is_control(int id) const override { return sp_->IsControl(id); }
  bool is_unknown(int id) const override { return sp_->IsUnknown(id); }
  bool is_byte(int id) const override { return sp_->IsByte(id); }
  int bos_id() const override { return sp_->bos_id(); }
  int eos_id() const override { return sp_->eos_id(); }

 private:
  const std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) frost::SpmBackend* frost_spm_open(const char* path,
                                                                                   std::string* error) {
  try {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = sp->Load(path);
    if (!st.ok()) {
      *error = st.ToString();
      return nullptr;
    }
    return new ProcessorBackend(std::move(sp));
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
