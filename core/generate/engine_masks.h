#pragma once
// MaskFiller: constrained decoding's masks off the critical path (issue 54). Each round the engine hands it
// the constrained sequences the host sampler will sample this step (not a draft's rows: shape_draft saved
// theirs; not the rows a device samples: plan_sample computed their masks, which the device needs before the
// step); its thread computes their masks (Sequence::fill_mask, the matcher's allowed()) while the engine
// thread runs the executor's step. join() after the step: the engine thread fills what the thread has not
// claimed and waits for the one in flight, so update()'s sampling finds every mask ready. Without a filler
// (EngineConfig:: overlap_masks off) sample() computes each mask lazily, inside update()'s parallel sampling:
// the naive twin, with the same outputs (tests/unit/generate/engine_constraint_test.cc compares them).
//
// Why this is safe: a matcher belongs to its sequence, and between start() and join() the engine thread runs
// only the executor's step, which reads the step's tokens and KV but never a sequence's matcher; the filler
// touches nothing but the matchers it is given (their mask caches are shared and internally locked). join()
// returns only when no fill is in flight, and its mutex orders every fill before what follows.
//
// What it costs: one thread, started with the first constrained step (an engine that never sees a constraint
// has none), a wake-up and a few uncontended lock / unlock pairs per constrained step. On a device the step
// runs on the accelerator while the host thread waits, so the fills are hidden completely. On the CPU (2
// cores, the forward's team on both) the filler is a third runnable thread: the forward's regions claim their
// tasks dynamically (kernels/cpu/parallel.h), so they lose about the fills' CPU time and no more, and in the
// serial gaps between regions the team's worker spins yielding (kernels/cpu/parallel.cc), so the fills run
// there; without the overlap the same fills ran inside update()'s sampling on the same two cores. Measured
// with scripts/bench_structured_ab.sh (bench/results/structured_ab.json).
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace frost {

class Sequence;

class MaskFiller {
 public:
  MaskFiller() = default;
  ~MaskFiller();  // stops and joins the thread (no round in progress)
  MaskFiller(const MaskFiller&) = delete;
  MaskFiller& operator=(const MaskFiller&) = delete;

  // Starts filling the masks of `seqs` (distinct, alive until join()) on the filler's thread. Until join()
  // nothing else may touch their matchers. Engine thread only; one round at a time.
  void start(const std::vector<Sequence*>& seqs);
  // Fills, on the calling thread, the masks the filler has not claimed, then waits for the one in flight.
  void join();

 private:
  void run();
  Sequence* claim(uint64_t round);  // the next sequence of `round` to fill, null when none is left
  void done();

  absl::Mutex mu_;
  std::vector<Sequence*> work_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;  // between start() and join()
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t started_ = 0;  // the round start() opened (engine thread)
  std::thread thread_;
};

}  // namespace frost
