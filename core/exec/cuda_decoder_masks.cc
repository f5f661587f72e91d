// CudaDecoder's token masks (constrained decoding sampled on the device; core/exec/device_decoder.h
// set_masks). Apart from cuda_decoder.cc, which is at the source-size limit.
//
// The masks live in the step metadata's pinned block (after the block tables, CudaDecoder::off_masks_), one
// row of ceil(V / 32) words per sampled row, and go up with one asynchronous copy on the decoder's stream: it
// is ordered before the step's kernels (cuda::apply_token_masks, then cuda::sample_rows, read them), and the
// previous forward() synchronised the stream, so the pinned rows are free to overwrite. The kernels read the
// same device address every step, so a captured CUDA graph reads this step's masks.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/exec/cuda_decoder.h"
#include "kernels/cuda/check.h"

namespace frost {

void CudaDecoder::set_masks(const uint32_t* words, int n_rows) {
  if (broken_) throw DeviceError(absl::StrCat("cuda:", opts_.device, " failed earlier (sticky error)"), true);
  if (n_rows < 0 || n_rows > lim_.max_seqs)
    throw DeviceError(absl::StrCat("cuda decoder: ", n_rows, " masked rows in a step of at most ",
                                   lim_.max_seqs, " sequences"),
                      false);
  try {
    const size_t bytes = 4 * static_cast<size_t>(n_rows) * ((static_cast<size_t>(cfg_.n_vocab) + 31) / 32);
    std::memcpy(meta_host_ + off_masks_, words, bytes);
    FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_ + off_masks_, meta_host_ + off_masks_, bytes,
                                     cudaMemcpyHostToDevice, stream_));
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    fail(e);
  }
}

}  // namespace frost
