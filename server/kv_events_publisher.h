#pragma once
// KvEventsPublisher: the prefix cache's block events (core/kv/kv_events.h) over ZeroMQ, in the wire format of
// vLLM's KV events — what llm-d's KV-cache indexer (the endpoint picker's precise prefix scorer) subscribes
// to (issue 53; server.kv_events in docs/kv-events.md).
//
// Wire format, as read in vllm-project/vllm vllm/distributed/kv_events.py (EventBatch, KVEventBatch,
// BlockStored, BlockRemoved, AllBlocksCleared, ZmqEventPublisher) and in the Go decoder of
// llm-d/llm-d-kv-cache pkg/kvevents/engineadapter/vllm_adapter.go (msgpackVLLMEventBatch and the three
// msgpackVLLM*Event structs, decoded as msgpack arrays, the tag first):
//
//   PUB message    three frames: [topic, sequence, payload]
//                  topic     server.kv_events.topic as bytes (vLLM's default is ""; llm-d's indexer
//                            subscribes with a prefix filter, "kv@" in its examples, and reads
//                            "kv@<pod>@<model>" as the pod and the model: set the topic to that form for it)
//                  sequence  8 bytes, big-endian unsigned: 0, 1, 2 … per process start, one per batch
//                  payload   msgpack of one KVEventBatch, as msgspec's array_like encoding writes it:
//   KVEventBatch   [ts: float64 (Unix seconds), events: array, data_parallel_rank: int (always 0)]
//   BlockStored    ["BlockStored", block_hashes: [uint64…], parent_block_hash: uint64 | nil,
//                   token_ids: [int…] (block_size per hash, concatenated), block_size: int,
//                   lora_id: nil, medium: "GPU" | "CPU", lora_name: nil]
//   BlockRemoved   ["BlockRemoved", block_hashes: [uint64…], medium: "GPU" | "CPU"]
//   AllBlocksCleared ["AllBlocksCleared"]
// vLLM's later optional fields (extra_keys, group_idx, the cache-spec kind) are left out as msgspec omits
// fields at their defaults; the Go decoder takes exactly the fields above (it also accepts a hash as bytes,
// whose last 8 bytes it reads big-endian; frost sends msgpack unsigned integers, which it takes as they are).
// `medium` is "GPU" for a device pool and "CPU" for the host pool (llm-d lowercases it into its device tier).
//
// Life cycle. The first batch (sequence 0) is [AllBlocksCleared]: a subscriber that sees a new process (its
// sequence restarts at 0) drops what it knew of the pod. Then one batch per engine round that changed the
// cache. publish() (engine thread) only appends to a bounded queue under a mutex held for a push: it never
// waits for the network. The publisher's thread encodes, sends (a PUB socket never blocks: past its
// high-water mark ZeroMQ drops for that subscriber) and keeps the last `buffer_steps` batches for replay.
//
// Overflow. When the queue is full the batch is dropped and counted (frost_kv_event_batches_total{outcome=
// "dropped"}), its sequence number is still taken, so a subscriber sees a gap that replay cannot fill; the
// next batch the engine sends is a snapshot ([AllBlocksCleared, BlockStored… of every findable block],
// parents first), after which the subscriber's index is whole again.
//
// Replay (vLLM's protocol). A ROUTER socket on replay_endpoint: a client sends one request — an empty
// delimiter frame and the 8-byte big-endian first sequence number it wants (what a REQ socket sends for the
// one frame; a DEALER sends both frames itself) — and receives, in order, every buffered batch from that
// number on as [empty, sequence, payload], then the end marker [empty, 8 bytes of 0xFF (-1), empty].
//
// Endpoints follow vLLM's rule: one with a wildcard ("*", "::") or an ipc:// / inproc:// address is bound,
// any other is connected to (llm-d's centralised indexer binds and the pods connect). linger is 0: stop()
// never waits for an absent subscriber.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/kv/kv_events.h"

namespace frost::server {

class Metrics;

struct KvEventsOptions {
  std::string endpoint = "tcp://*:5557";
  std::string topic;
  std::string replay_endpoint;    // "" = no replay socket
  int32_t buffer_steps = 10000;   // batches kept for replay
  int32_t queue_batches = 10000;  // batches waiting for the publisher's thread before drops
  std::string medium = "GPU";
};

// The bytes of one KVEventBatch payload (see above); exposed for the unit tests.
std::string encode_kv_event_batch(double ts, const std::vector<KvEvent>& events, const std::string& medium);

class KvEventsPublisher final : public KvEventSink {
 public:
  // Creates the sockets (binds or connects: UNAVAILABLE naming the endpoint when that fails), queues the
  // AllBlocksCleared batch and starts the thread. `metrics` may be null; it must outlive the publisher.
  static absl::StatusOr<std::unique_ptr<KvEventsPublisher>> create(const KvEventsOptions& options,
                                                                   Metrics* metrics);
  ~KvEventsPublisher() override;  // stop()
  KvEventsPublisher(const KvEventsPublisher&) = delete;
  KvEventsPublisher& operator=(const KvEventsPublisher&) = delete;

  void publish(std::vector<KvEvent> events) override;
  bool take_snapshot_request() override;

  // The endpoints as bound (a wildcard port resolved: "tcp://0.0.0.0:41234"), or as given when connected.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // Sends what is queued (up to a second), then stops the thread and closes the sockets. Idempotent.
  void stop();

  uint64_t batches_published() const { return published_.load(); }
  uint64_t batches_dropped() const { return dropped_.load(); }

 private:
  struct Item {
    uint64_t seq = 0;
    double ts = 0;
    std::vector<KvEvent> events;
  };
  struct Sockets;  // the ZeroMQ context and sockets (kv_events_publisher.cc): zmq.hpp stays out of headers

  explicit KvEventsPublisher(const KvEventsOptions& options, Metrics* metrics);
  void run();
  bool wake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // the thread has work: a batch, or stop()

  KvEventsOptions opt_;
  Metrics* metrics_;
  std::unique_ptr<Sockets> z_;
  std::string endpoint_, replay_endpoint_;

  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool want_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> published_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace frost::server
