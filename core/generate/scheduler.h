#pragma once
// Scheduler: the decisions of one engine step and the KV books behind them (vLLM's Scheduler +
// KVCacheManager; llama.cpp keeps "planning a batch" apart from mutating the cache the same way). The engine
// (core/generate/engine.h) runs schedule → execute (core/exec/step_executor.h; commit once it ran) → update
// (sampling), once per round. It keeps only books (core/kv/block_books.h): the same decisions on host and device pages.
//
// Policy (a step is at most max_batch_tokens tokens and max_running sequences):
//  1. Running sequences that decode (one token to compute) go first: inter-token latency never waits for a
//     prompt (Sarathi-Serve's stall-free batching). Then running sequences still in their prompt get a chunk
//     of it from what is left of the token budget (chunked prefill), oldest first.
//  2. A running sequence that needs a block the pool cannot give preempts the newest running sequence
//     (itself, when it is the newest): its blocks go back to the pool — published ones stay in the prefix
//     cache — and it returns to the front of the waiting queue, to be recomputed from its tokens later. A
//     running sequence is never failed for lack of KV memory.
//  1b. Speculative drafts (SchedEntry::spec_rows): each decoding sequence with a draft gets its draft rows
//     next, in the same order, while the token budget and the executor's logits rows (max_logit_rows) last
//     and the pool gives their blocks without preempting anyone (a draft is only a guess). The engine truncates
//     the rows verification rejects before commit(), so unverified positions are never published.
//  3. Waiting sequences are admitted in order (preempted ones first) while fewer than max_running run, budget
//     remains and the pool keeps a watermark of free blocks after their first chunk (so admissions do not
//     immediately force preemptions). Admission looks up the longest cached prefix of its tokens (full
//     blocks, always leaving the last token to compute, which yields the logits) and adopts it.
// After the forward pass, commit() publishes every newly full block to the prefix cache.
//
// Sliding windows (KvSpec::window > 0: every layer of the model slides; core/kv/sequence_kv.h): commit() then
// gives back each sequence's blocks wholly below its window, and admission releases the adopted ones the window
// no longer needs, so a sequence holds at most ceil((W - 1 + chunk) / block_tokens) + 1 blocks. Admission,
// preemption and the pool gauges (frost_kv_cache_usage_ratio reads the books' used blocks) all count those held
// blocks, so a long generation is never refused or preempted for blocks it gave back. A released block that was
// published stays cached until evicted; a prefix is adopted only as an unbroken chain of cache hits from block 0.
//
// Engine thread only; not thread-safe.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/sequence_kv.h"
#include "core/model/transformer.h"

namespace frost {

struct EngineRequest;  // the engine's record of a request (core/generate/engine.cc)

struct SchedulerConfig {
  int32_t max_running = 32;        // sequences in one step
  int64_t max_batch_tokens = 128;  // tokens in one step (decode rows + prefill chunks), >= max_running
  int64_t watermark_blocks = 1;    // admission keeps at least this many blocks available
  bool prefix_caching = true;
  int64_t max_logit_rows = int64_t{1} << 40;  // the executor's (StepExecutor::max_logit_rows)
};

// One request as the scheduler sees it. The engine owns it (and everything else about the request).
struct SchedEntry {
  uint64_t order = 0;                          // admission order: preemption takes the largest
  const std::vector<int32_t>* tokens = nullptr;  // the cache must hold all of them before the next sample
  std::function<std::unique_ptr<SequenceKv>()> make_kv;  // its paged cache (codec, stages, salt), on first run
  std::unique_ptr<SequenceKv> kv;
  int32_t n_preempted = 0;
  bool running = false;
  // Speculative decoding: set by the engine before schedule() for a decoding sequence with a draft —
  // its last token, then the drafted tokens. The scheduler gives it as many draft rows as fit (StepSeq::draft).
  std::vector<int32_t> spec_rows;
  EngineRequest* owner = nullptr;  // the engine's record of the request
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvBlockBooks* pool) : cfg_(cfg), pool_(pool) {}

  // A new request joins the back of the waiting queue.
  void add(SchedEntry* e) { waiting_.push_back(e); }
  // A request leaves (finished, cancelled, failed): its blocks go back to the pool.
  void remove(SchedEntry* e);

  struct Step {
    std::vector<StepSeq> seqs;      // the batch, in the order the executor gets it
    std::vector<SchedEntry*> who;   // who[i] owns seqs[i]
    int64_t n_tokens = 0;           // rows of the step
    std::vector<SchedEntry*> preempted;  // sequences preempted while building it (now waiting)
  };
  // Decides this step: reserves the blocks for every scheduled token. Empty when there is nothing to run.
  Step schedule();
  // After the forward pass of `step`: publishes the newly full blocks (prefix caching).
  void commit(const Step& step);

  const std::vector<SchedEntry*>& running() const { return running_; }
  const std::deque<SchedEntry*>& waiting() const { return waiting_; }
  uint64_t prefix_queries_tokens() const { return prefix_queries_; }
  uint64_t prefix_hits_tokens() const { return prefix_hits_; }
  uint64_t preemptions() const { return preemptions_; }
  uint64_t released_blocks() const { return released_blocks_; }  // given back by sliding windows

  // Checks the books: every block's reference count equals the number of running sequences holding it, and
  // the pool's used / cached / free counts add up. "" when they do, else what is wrong.
  std::string audit() const;

 private:
  void preempt(SchedEntry* e, Step& step);
  bool admit(SchedEntry* e, int64_t budget, Step& step);
  void add_to_step(SchedEntry* e, int64_t n, Step& step);
  int64_t add_drafts(int64_t budget, Step& step);

  SchedulerConfig cfg_;
  KvBlockBooks* pool_;
  std::vector<SchedEntry*> running_;  // admission order (oldest first)
  std::deque<SchedEntry*> waiting_;   // preempted ones at the front
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0, preemptions_ = 0, released_blocks_ = 0;
};

}  // namespace frost
