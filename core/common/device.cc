#include "core/common/device.h"

#include <ATen/Parallel.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace frost {

absl::Status apply_device_config(const DeviceConfig& cfg) {
  if (cfg.n_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 0, got ", cfg.n_threads));
  }
  static std::once_flag interop_once;
  std::call_once(interop_once, [] {
    // Inter-op parallelism is unused; one pool only. Only settable before first use.
    try {
      at::set_num_interop_threads(1);
    } catch (...) {
    }
  });
  if (cfg.n_threads > 0) at::set_num_threads(cfg.n_threads);
  return absl::OkStatus();
}

}  // namespace frost
