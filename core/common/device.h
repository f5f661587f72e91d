#pragma once
// Device and threading set-up: one thread pool (LibTorch's OpenMP pool, which the OpenMP
// build of OpenBLAS shares), sized from config.
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"

namespace frost {

struct DeviceConfig {
  // Number of intra-op threads; 0 = leave LibTorch's default (all cores).
  int n_threads = 0;
};

// Calls at::set_num_threads (and at::set_num_interop_threads(1) once). Returns
// INVALID_ARGUMENT for n_threads < 0.
absl::Status apply_device_config(const DeviceConfig& cfg);

// Runs `fn` on a new thread, waits for it and returns its result.
//
// Why: libgomp (the OpenMP runtime of LibTorch and of the OpenMP OpenBLAS) keeps one worker pool per thread
// that has started a parallel region, for as long as that thread lives. When the live pools hold more
// threads than there are CPUs, it stops idle workers from spinning, and every parallel region then pays a
// futex wake-up. Serving runs the model on the engine's worker thread; had the main thread loaded the model,
// its pool would stay alive beside the engine's: measured on 2 cores, 18.8 vs 7.6 us per small parallel
// region, and builtin:15m decoding through the Engine at 642 instead of 1015 tokens/s with 2 threads. Torch
// work done outside the thread that will run the model (loading, above all) goes through here, so its pool
// dies with its thread. `fn` must not throw.
template <typename F>
std::invoke_result_t<F> run_on_transient_thread(F&& fn) {
  std::optional<std::invoke_result_t<F>> out;
  std::thread t([&] { out.emplace(std::forward<F>(fn)()); });
  t.join();
  return std::move(*out);
}

}  // namespace frost
