#pragma once
// Bounded safetensors reader. The file is memory-mapped; tensors are zero-copy views.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section. Checks (each failure is INVALID_ARGUMENT naming the file and tensor):
// header length <= limit and inside the file; header is a JSON object; dtype in {F32, F16,
// BF16}; shape non-negative ints; offsets 0 <= begin <= end <= data size; numel * dtype size
// == end - begin; tensors contiguous and non-overlapping, covering the data section exactly;
// duplicate names rejected; no trailing bytes.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"

namespace frost {

enum class StDtype { kF32, kF16, kBF16, kF64 };
const char* st_dtype_name(StDtype d);
int64_t st_dtype_size(StDtype d);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets relative to the data section
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100ull << 20;  // 100 MiB, as the reference implementation
  int64_t max_tensors = 1'000'000;
  int max_rank = 8;
};

class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Opens and validates `path` (mmap, read-only). NOT_FOUND if missing.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path,
                                                               const SafetensorsLimits& limits = {});
  // Validates an in-memory buffer (copied). `label` names it in errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> from_bytes(std::string bytes,
                                                                     const std::string& label,
                                                                     const SafetensorsLimits& limits = {});

  const std::string& path() const { return path_; }
  // Sorted by begin offset.
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  const StTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Zero-copy CPU tensor viewing the mapped bytes, in the file's dtype. The view aliases this
  // object's mapping: valid only while this SafetensorsFile lives (clone to keep it).
  at::Tensor view(const StTensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  absl::Status parse(const SafetensorsLimits& limits);

  std::string path_;
  const uint8_t* data_ = nullptr;  // whole file
  uint64_t size_ = 0;
  void* mmap_base_ = nullptr;      // non-null when mmapped
  std::string owned_;              // from_bytes storage
  uint64_t data_start_ = 0;        // 8 + header length
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Serializes tensors (kFloat → F32, kHalf → F16, kBFloat16 → BF16; any device) in the given
// order with contiguous offsets and an 8-byte aligned header, as the reference writer does.
// Returns the whole file; INVALID_ARGUMENT for another dtype or a duplicate name.
absl::StatusOr<std::string> safetensors_serialize(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                                  const std::map<std::string, std::string>& metadata = {});

// Copies the file's tensors into `named` (name → preallocated tensor; values converted to its dtype):
// every name must be in the file with the same shape and only finite values, and the file must hold no
// other tensor. INVALID_ARGUMENT naming the tensor and the problem ("tensor X missing", "tensor X has
// shape [..], expected [..]", "tensor X has non-finite values", "unexpected tensor X"); the caller adds
// the file's name. On error some tensors may already have been written.
absl::Status safetensors_load_into(const SafetensorsFile& f,
                                   const std::vector<std::pair<std::string, at::Tensor>>& named);

// Refuses weight formats we do not load: *.bin / *.pt / *.pth / *.ckpt / pickle or
// TorchScript zip files → INVALID_ARGUMENT "unsupported format: use safetensors (<file>)".
// Returns OK for a file that is not one of those.
absl::Status check_not_pickle(const std::string& path);

}  // namespace frost
