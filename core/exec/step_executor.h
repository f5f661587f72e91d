#pragma once
// StepExecutor: the device seam under the engine — what runs one scheduled step (vLLM's model runner behind
// its executor; llama.cpp's backend). The engine keeps one schedule → execute → update loop, one Scheduler
// and one set of KV books (core/kv/block_books.h) whatever the device; an executor owns the weights as the
// device reads them, the KV pool's storage (core/kv/block_storage.h) and the math of a step:
//
//   CpuExecutor     (core/exec/cpu_executor.h)    Transformer::forward_batch on host pages; the host sampler
//                                                 picks every token.
//   DeviceExecutor  (core/exec/device_executor.h) a DeviceDecoder — the CUDA decoder (core/exec/cuda_decoder.h)
//                                                 or the host reference device with the same KV layout
//                                                 (core/exec/reference_decoder.h) — on device pages, with
//                                                 sampling on the device where the row allows it.
//
// Life cycle: the engine asks for the block size (kv_block_bytes), decides the pool size, calls allocate_kv()
// once, then execute() once per step from its one thread. Not thread-safe except stats() and health().
//
// Shapes: L = logits rows of a step: one per sequence with logits, 1 + draft for a speculative draft
// (StepSeq::n_logit_rows(), in the order of ExecStep::seqs), V = vocab.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/device_spec.h"
#include "core/kv/block_storage.h"
#include "core/kv/kv_spec.h"
#include "core/model/transformer.h"

namespace frost {

// How one sequence's next token is chosen from its logits row, as the device sampler sees it. The host
// sampler (core/generate/sampler.h) fills it; `on_device` only when the choice is a function of the raw
// logits and one uniform draw (no penalties, no logprobs): the executor may then sample the row itself and
// return only the id. Otherwise it returns the row's logits and the host sampler decides.
struct RowSampling {
  bool on_device = false;
  bool greedy = true;        // temperature 0 or top_k 1: argmax, ties → lowest id
  float temperature = 1.0f;  // > 0 unless greedy
  int32_t top_k = 0;         // 0 = off (already 0 when the request asked for >= V)
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  double u = 0.0;            // the sequence's uniform draw in [0, 1) for this token (its own seeded RNG)
  // Constrained decoding (core/constrain/token_mask.h's layout: bit i of word i / 32 = token i may be drawn,
  // ceil(V / 32) words): every other token's logit is -inf before the sampling above, as the host sampler
  // masks it. Host memory, valid until execute() returns; null = every token. Read only when on_device.
  const uint32_t* mask = nullptr;
};

// One step: the rows of every scheduled sequence (their KV positions are reserved; each kv advances by its
// n_tokens), and for each logits row (in order) how its token is chosen (a draft's rows: on_device false —
// verification needs their logits on the host).
struct ExecStep {
  const std::vector<StepSeq>* seqs = nullptr;
  std::vector<RowSampling> sampling;  // [L]
};

struct ExecResult {
  // [L]: the id the executor sampled, or -1 when the row's logits are at logits + row[i] · V.
  std::vector<int32_t> ids;
  std::vector<int32_t> row;
  const float* logits = nullptr;  // [rows returned, V]; valid until the next execute()
};

// What the executor holds, for /metrics and `frostctl info` (bytes in the device's memory for a device).
struct ExecutorStats {
  std::string device;          // "cpu", "cuda:0", "reference"
  std::string device_name;     // the card ("NVIDIA H100 80GB HBM3"), "host" for the CPU
  int64_t weight_bytes = 0;    // weights as the executor reads them
  int64_t kv_pool_bytes = 0;   // the KV pool's storage
  int64_t device_bytes = 0;    // everything the executor allocated on its device (0 for the CPU)
  int64_t device_total_bytes = 0;  // the device's memory (0 for the CPU)
  uint64_t rows_sampled_on_device = 0;  // logits rows sampled by the executor
  uint64_t rows_sampled_on_host = 0;    // logits rows handed back to the host sampler
  int32_t graphs = 0;                   // CUDA graphs captured (bounded by the buckets)
  bool healthy = true;                  // false after a sticky device error (health())
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  // "cpu", "cuda:N" or "reference" (the model.device value that made it).
  virtual std::string device() const = 0;

  // Bytes of one pool block for engine.kv_block_tokens = block_tokens. Host: block_tokens positions at fp32
  // (compact codecs fit more); device: block_tokens positions in the device's KV format.
  virtual int64_t kv_block_bytes(int64_t block_tokens) const = 0;
  // The pool size when engine.kv_cache_bytes is 0, given the bytes of one full-context sequence.
  virtual int64_t default_kv_pool_bytes(int64_t full_context_bytes, int32_t max_running) const = 0;

  // Sizes of a step, fixed at allocate_kv (device buffers are sized from them).
  struct Plan {
    int64_t n_blocks = 0;
    int64_t block_tokens = 16;  // engine.kv_block_tokens
    bool prefault = true;       // host pages: commit at start
    int64_t max_rows = 128;     // tokens in one step (engine.max_batch_tokens)
    int32_t max_seqs = 32;      // sequences in one step (engine.max_running)
  };
  // Allocates the KV pool's storage and the step buffers; once. RESOURCE_EXHAUSTED when memory is short.
  virtual absl::Status allocate_kv(const Plan& plan) = 0;
  virtual const KvBlockStorage& kv_storage() const = 0;

  // What this executor cannot run for a request, before it is queued: INVALID_ARGUMENT naming the field
  // ("kv.codec: ...") for a KV codec it does not store, FAILED_PRECONDITION for a repair operator or KVSplice
  // it lacks. `repair` = the request requires a repair operator (kv.repair ON).
  virtual absl::Status check_request(KvCodecKind codec, bool repair) const = 0;
  // Whether sequences on this executor run the active repair operator at all (the engine attaches it only
  // when true).
  virtual bool runs_kv_repair() const = 0;
  // Whether execute() samples the rows whose RowSampling::on_device is set (else every row comes back as
  // logits, and the engine does not plan device draws).
  virtual bool samples_on_device() const = 0;
  // The most logits rows one step may ask for (speculative drafts add rows beyond one per sequence): the
  // host's batched forward takes any number (the step's rows); a device decoder samples at most one row per
  // sequence slot (Plan::max_seqs). Valid after allocate_kv().
  virtual int64_t max_logit_rows() const = 0;

  // Runs one step. Errors: INTERNAL for a broken invariant of this step (its sequences fail, the engine keeps
  // serving); UNAVAILABLE once the device is unusable (health() then says why, for good).
  virtual absl::Status execute(const ExecStep& step, ExecResult* out) = 0;

  // OK, or the sticky error that makes every further step fail (a CUDA context that is lost). Thread-safe.
  virtual absl::Status health() const = 0;
  // Thread-safe snapshot.
  virtual ExecutorStats stats() const = 0;
};

}  // namespace frost
