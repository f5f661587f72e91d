// Fuzz target: the safetensors reader (core/store/safetensors.h) on arbitrary file bytes.
//
// Beyond "no crash": an accepted file keeps every promise of the header comment (tensors sorted, tiling
// the data section exactly, numel * dtype size == their bytes), each view() holds the file's bytes, and
// the project's writer re-serializes the parsed tensors into a file the reader accepts with the same
// tensors and bytes. A rejection is INVALID_ARGUMENT.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/store/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace frost {
namespace {

uint64_t read_le_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void check_file(const SafetensorsFile& f, const std::string& bytes) {
  FROST_FUZZ_CHECK(bytes.size() >= 8, "accepted a file shorter than the header length");
  const uint64_t data_start = 8 + read_le_u64(bytes.data());
  FROST_FUZZ_CHECK(data_start <= bytes.size(), "header extends past the file");
  const uint64_t data_size = bytes.size() - data_start;
  uint64_t expect = 0;
  for (const StTensorInfo& t : f.tensors()) {
    FROST_FUZZ_CHECK(t.begin == expect, "tensor '" + t.name + "' does not start where the previous ended");
    FROST_FUZZ_CHECK(t.end >= t.begin && t.end <= data_size, "tensor '" + t.name + "' outside the data section");
    FROST_FUZZ_CHECK(static_cast<uint64_t>(t.numel() * st_dtype_size(t.dtype)) == t.end - t.begin,
                     "tensor '" + t.name + "': numel * dtype size != its bytes");
    FROST_FUZZ_CHECK(f.find(t.name) == &t, "find('" + t.name + "') does not return the tensor");
    expect = t.end;

    const at::Tensor v = f.view(t);
    FROST_FUZZ_CHECK(v.sizes().vec() == t.shape, "view of '" + t.name + "' has another shape");
    const size_t nbytes = static_cast<size_t>(t.end - t.begin);
    FROST_FUZZ_CHECK(static_cast<size_t>(v.numel()) * v.element_size() == nbytes, "view size");
    if (nbytes > 0) {
      FROST_FUZZ_CHECK(std::memcmp(v.data_ptr(), bytes.data() + data_start + t.begin, nbytes) == 0,
                       "view of '" + t.name + "' does not hold the file's bytes");
    }
  }
  FROST_FUZZ_CHECK(expect == data_size, "tensors do not cover the data section");
}

}  // namespace
}  // namespace frost

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::from_bytes(bytes, "fuzz.safetensors");
  if (!f.ok()) {
    fuzz::check_rejection(f.status());
    return 0;
  }
  check_file(**f, bytes);

  // Write the parsed tensors back with the project's writer; the reader must accept the result as the
  // same tensors, bytes and metadata.
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const StTensorInfo& t : (*f)->tensors()) named.emplace_back(t.name, (*f)->view(t));
  absl::StatusOr<std::string> again = safetensors_serialize(named, (*f)->metadata());
  if (!again.ok()) {
    // The only documented refusals: a name the writer reserves.
    FROST_FUZZ_CHECK(again.status().code() == absl::StatusCode::kInvalidArgument, again.status().ToString());
    return 0;
  }
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> g = SafetensorsFile::from_bytes(*again, "again.safetensors");
  FROST_FUZZ_CHECK(g.ok(), "the writer's output is refused: " + g.status().ToString());
  check_file(**g, *again);
  FROST_FUZZ_CHECK((*g)->tensors().size() == (*f)->tensors().size(), "tensor count changed");
  FROST_FUZZ_CHECK((*g)->metadata() == (*f)->metadata(), "metadata changed");
  for (const StTensorInfo& t : (*f)->tensors()) {
    const StTensorInfo* u = (*g)->find(t.name);
    FROST_FUZZ_CHECK(u != nullptr, "tensor '" + t.name + "' lost");
    FROST_FUZZ_CHECK(u->dtype == t.dtype && u->shape == t.shape, "tensor '" + t.name + "' changed dtype/shape");
    const size_t n = static_cast<size_t>(t.end - t.begin);
    if (n > 0) {
      FROST_FUZZ_CHECK(std::memcmp(again->data() + (again->size() - (*g)->tensors().back().end) + u->begin,
                                   bytes.data() + (bytes.size() - (*f)->tensors().back().end) + t.begin, n) == 0,
                       "tensor '" + t.name + "' bytes changed");
    }
  }
  return 0;
}
