#pragma once
// parallel_tasks(n, fn): fn(i) for i in [0, n) on LibTorch's thread pool (the one OpenMP pool; DESIGN.md,
// "BLAS and threads"), each thread claiming the next task from a shared counter.
//
// Why not at::parallel_for's static split: it gives each thread one contiguous chunk, so when the OS
// deschedules one thread (another process, gRPC's threads, a noisy neighbour — every 2-core VM and every
// Kubernetes pod with a CPU limit), the others finish their chunk and wait at the barrier for it. With
// claimed tasks, the threads that keep running take over the rest; only the task in flight on the
// descheduled thread is late. Tasks must be independent; fn must not throw.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace frost::kernels {

template <typename Fn>
void parallel_tasks(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t n_threads = std::min<int64_t>(at::get_num_threads(), n);
  if (n_threads <= 1 || at::in_parallel_region()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, n_threads, 1, [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  });
}

// As parallel_tasks, but each thread claims its next task before it runs the current one and fn(i, next)
// learns it (-1: none), so it can prefetch what it will read next (the packed GEMM pulls its next weight
// panel into L2). Still dynamic: only the claim moves one task earlier, so a descheduled thread holds up at
// most two tasks instead of one.
template <typename Fn>
void parallel_tasks_ahead(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t n_threads = std::min<int64_t>(at::get_num_threads(), n);
  if (n_threads <= 1 || at::in_parallel_region()) {
    for (int64_t i = 0; i < n; ++i) fn(i, i + 1 < n ? i + 1 : int64_t{-1});
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, n_threads, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;) {
      const int64_t j = next.fetch_add(1, std::memory_order_relaxed);
      fn(i, j < n ? j : int64_t{-1});
      i = j;
    }
  });
}

}  // namespace frost::kernels
