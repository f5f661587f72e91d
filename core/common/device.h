#pragma once
// Device and threading set-up: one thread pool (LibTorch's OpenMP pool, which the OpenMP
// build of OpenBLAS shares), sized from config.
#include <string>

#include "absl/status/status.h"

namespace frost {

struct DeviceConfig {
  // Number of intra-op threads; 0 = leave LibTorch's default (all cores).
  int n_threads = 0;
};

// Calls at::set_num_threads (and at::set_num_interop_threads(1) once). Returns
// INVALID_ARGUMENT for n_threads < 0.
absl::Status apply_device_config(const DeviceConfig& cfg);

}  // namespace frost
