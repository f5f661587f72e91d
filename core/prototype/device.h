#pragma once
// Where the prototype head computes: its feature cache, KeyCache / MemCache / LabelCache, the net, the
// optimizer state and every batch of a training run, and the Predictor's tensors.
//
// Choice written down: one compute device for the head, taken from the served model's device — a model on
// cuda:N (its backbone features come from the CUDA decoder, LoadedModel::hidden_source) puts the head on
// cuda:N as well when this LibTorch has a CUDA backend (at::hasCUDA(): a LibTorch with libtorch_cuda linked,
// cmake/frost_torch_root.cmake, and a visible GPU). Everything else computes on the CPU: model.device cpu,
// the host reference device (it stands in for a GPU in CI, and its features are host memory anyway), and a
// cuda model under a CPU-only LibTorch (Debian's 1.13, or FROST_TORCH_CUDA=OFF) — the CUDA decoder needs no
// CUDA LibTorch, the head does. Random draws stay on the CPU generators whatever the device (drawn there,
// then moved), so a seed draws the same numbers on every device; what differs is only float rounding of the
// device's kernels. Artifacts and checkpoints are written from CPU copies, as before.
//
// Only generic ATen headers (at::Device, at::hasCUDA): the code compiles against LibTorch 1.13 and 2.x, with
// or without CUDA.
#include <ATen/ATen.h>

#include <string>

#include "core/model/model_loader.h"

namespace frost::prototype {

struct ComputeDevice {
  at::Device device{at::kCPU};
  std::string name = "cpu";  // "cpu" | "cuda:N": what TensorStore accounts the head's bytes under
  std::string reason;        // why, for the start-up log line
  bool is_cpu() const { return device.is_cpu(); }
};

// `served`: the served model's device as model.device names it ("cpu", "reference", "cuda", "cuda:N");
// `cuda_available`: whether this LibTorch can compute on CUDA (at::hasCUDA()). Pure, for tests.
ComputeDevice resolve_compute_device(const std::string& served, bool cuda_available);

// The served model's device: its hidden_source's (model.device other than cpu), else "cpu".
std::string served_device(const LoadedModel& model);

// resolve_compute_device(served_device(model), at::hasCUDA()).
ComputeDevice compute_device(const LoadedModel& model);

// The CPU, explicitly (tests and tools that want the CPU head whatever the model's device).
ComputeDevice cpu_compute_device();

}  // namespace frost::prototype
