#pragma once
// parallel_tasks(n, fn): fn(i) for i in [0, n) on at::get_num_threads() threads, each thread claiming the
// next task from a shared counter.
//
// Why not at::parallel_for's static split: it gives each thread one contiguous chunk, so when the OS
// deschedules one thread (another process, gRPC's threads, a noisy neighbour — every 2-core VM and every
// Kubernetes pod with a CPU limit), the others finish their chunk and wait at the barrier for it. With
// claimed tasks, the threads that keep running take over the rest; only the task in flight on the
// descheduled thread is late. Tasks must be independent; fn must not throw.
//
// Which threads: the caller and the workers of a spinning team (below), or LibTorch's OpenMP pool when the
// team is busy with another caller. Why a team of our own: a batched decode step opens ~32 parallel regions
// (every GEMM, every layer's attention, the sampler) with a few to a few hundred microseconds of serial work
// between them. libgomp lets its idle workers spin before they sleep only while the process has no more
// OpenMP threads than CPUs; frostd and frost-bench have several (the loading thread's, the engine thread's,
// …), so it throttles the spin to ~100 iterations and every region starts by waking a sleeping worker through
// the kernel. On the 2-vCPU VMs this runs on that costs ~50 µs per region (an empty region after 50 µs of
// serial work: 51 µs with two teams, 6.6 µs with one; `frost-bench parallel` measures it), about a tenth of a
// 32-stream step. The team's workers spin for kSpinUs after each region before they park, so the next
// region of the same step finds them awake.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace frost::kernels {

namespace team {
// How long an idle worker spins before it parks (microseconds): longer than the serial gaps inside a step
// (norms, RoPE, KV appends, the scheduler: 10–300 µs), short enough that a worker is not burning a core while
// the engine waits for requests; the engine also parks the team before it blocks (team::park).
inline constexpr int64_t kSpinUs = 300;

// False when the environment sets FROST_PARALLEL_TEAM=0: every region then runs on LibTorch's OpenMP pool,
// as before the team existed (for a CPU-limited pod that would rather sleep than spin, or to compare).
bool enabled();

// Runs body(ctx, 0) on the calling thread and body(ctx, t), 0 < t < n_threads, on the workers that join the
// region before body(ctx, 0) returns; returns when every body that started has returned. A worker that is
// descheduled or parked at that moment skips the region, so body must be able to do all the work alone (the
// callers' bodies claim tasks from a shared counter until none are left). Returns false without running
// anything when the team cannot take the call: it is running another caller's region, the call comes from
// inside a region (nested), or n_threads < 2.
bool run(int64_t n_threads, void (*body)(void*, int64_t), void* ctx);

// The caller will not start a region for a while (it is about to block): idle workers park now instead of
// spinning out kSpinUs, leaving the cores to the threads that have work (gRPC, delivery).
void park();

// True on a team worker and on a caller inside its own region.
bool in_region();

// Workers started so far (they persist for the life of the process).
int64_t workers();
}  // namespace team

namespace detail {
// fn(t) for t in [0, n_threads): on the team, else on LibTorch's pool.
template <typename Body>
void run_threads(int64_t n_threads, Body& body) {
  auto call = [](void* ctx, int64_t t) { (*static_cast<Body*>(ctx))(t); };
  if (team::run(n_threads, call, &body)) return;
  at::parallel_for(0, n_threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) body(t);
  });
}

inline bool serial(int64_t n_threads) {
  return n_threads <= 1 || at::in_parallel_region() || team::in_region();
}
}  // namespace detail

template <typename Fn>
void parallel_tasks(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t n_threads = std::min<int64_t>(at::get_num_threads(), n);
  if (detail::serial(n_threads)) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto body = [&](int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  };
  detail::run_threads(n_threads, body);
}

// As parallel_tasks, but each thread claims its next task before it runs the current one and fn(i, next)
// learns it (-1: none), so it can prefetch what it will read next (the packed GEMM pulls its next weight
// panel into L2). Still dynamic: only the claim moves one task earlier, so a descheduled thread holds up at
// most two tasks instead of one.
template <typename Fn>
void parallel_tasks_ahead(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t n_threads = std::min<int64_t>(at::get_num_threads(), n);
  if (detail::serial(n_threads)) {
    for (int64_t i = 0; i < n; ++i) fn(i, i + 1 < n ? i + 1 : int64_t{-1});
    return;
  }
  std::atomic<int64_t> next{0};
  auto body = [&](int64_t) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;) {
      const int64_t j = next.fetch_add(1, std::memory_order_relaxed);
      fn(i, j < n ? j : int64_t{-1});
      i = j;
    }
  };
  detail::run_threads(n_threads, body);
}

}  // namespace frost::kernels
