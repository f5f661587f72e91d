#include "server/kv_events_publisher.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/log.h"
#include "server/metrics.h"

#ifndef FROST_KV_EVENTS
#define FROST_KV_EVENTS 0  // built with -DFROST_KV_EVENTS=OFF (CMakeLists.txt): no ZeroMQ
#endif

#if FROST_KV_EVENTS
#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace frost::server {
namespace {

// How long the thread sleeps between looks at the replay socket when nothing is queued (a replay request
// waits at most this long; batches wake the thread at once).
constexpr auto kIdleWait = absl::Milliseconds(50);
// stop(): how long queued batches may still be sent (vLLM's publisher waits one second too).
constexpr auto kStopFlush = absl::Seconds(1);

// vLLM's rule (ZmqEventPublisher._socket_setup): bind a wildcard or local transport, connect anything else.
bool binds(const std::string& endpoint) {
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

std::string seq_bytes(int64_t seq) {
  std::string b(8, '\0');
  const auto u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>((u >> (56 - 8 * i)) & 0xFF);
  return b;
}

void pack_hashes(msgpack::packer<msgpack::sbuffer>& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

}  // namespace

std::string encode_kv_event_batch(double ts, const std::vector<KvEvent>& events, const std::string& medium) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored:
        pk.pack_array(8);
        pk.pack(std::string("BlockStored"));
        pack_hashes(pk, e.hashes);
        if (e.has_parent)
          pk.pack_uint64(e.parent);
        else
          pk.pack_nil();
        pk.pack_array(static_cast<uint32_t>(e.tokens.size()));
        for (int32_t t : e.tokens) pk.pack_int32(t);
        pk.pack_int32(e.block_size);
        pk.pack_nil();  // lora_id
        pk.pack(medium);
        pk.pack_nil();  // lora_name
        break;
      case KvEvent::Kind::kRemoved:
        pk.pack_array(3);
        pk.pack(std::string("BlockRemoved"));
        pack_hashes(pk, e.hashes);
        pk.pack(medium);
        break;
      case KvEvent::Kind::kAllCleared:
        pk.pack_array(1);
        pk.pack(std::string("AllBlocksCleared"));
        break;
    }
  }
  pk.pack_int32(0);  // data_parallel_rank: frost runs one engine per process
  return std::string(buf.data(), buf.size());
}

struct KvEventsPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
  std::deque<std::pair<uint64_t, std::string>> ring;  // (sequence, payload) of the last buffer_steps batches
};

KvEventsPublisher::KvEventsPublisher(const KvEventsOptions& options, Metrics* metrics)
    : opt_(options), metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<KvEventsPublisher>> KvEventsPublisher::create(const KvEventsOptions& options,
                                                                             Metrics* metrics) {
  std::unique_ptr<KvEventsPublisher> p(new KvEventsPublisher(options, metrics));
  p->z_ = std::make_unique<Sockets>();
  Sockets& z = *p->z_;
  // cppzmq reports errors as zmq::error_t: caught here, at the one place sockets are set up.
  std::string field = "server.kv_events.endpoint", value = options.endpoint;
  try {
    z.pub.set(zmq::sockopt::linger, 0);
    z.pub.set(zmq::sockopt::sndhwm, 100000);  // vLLM's default high-water mark
    if (binds(options.endpoint)) {
      z.pub.bind(options.endpoint);
      p->endpoint_ = z.pub.get(zmq::sockopt::last_endpoint);
    } else {
      z.pub.connect(options.endpoint);
      p->endpoint_ = options.endpoint;
    }
    if (!options.replay_endpoint.empty()) {
      field = "server.kv_events.replay_endpoint";
      value = options.replay_endpoint;
      z.replay = std::make_unique<zmq::socket_t>(z.ctx, zmq::socket_type::router);
      z.replay->set(zmq::sockopt::linger, 0);
      z.replay->bind(options.replay_endpoint);
      p->replay_endpoint_ = z.replay->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat(field, " \"", value, "\": ", e.what()));
  }
  p->publish({KvEvent{}});  // AllBlocksCleared (a default KvEvent) as sequence 0
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  FROST_LOG_INFO("frostd: KV events on %s (topic \"%s\")%s%s", p->endpoint_.c_str(), options.topic.c_str(),
                 p->replay_endpoint_.empty() ? "" : ", replay on ", p->replay_endpoint_.c_str());
  return p;
}

KvEventsPublisher::~KvEventsPublisher() { stop(); }

void KvEventsPublisher::publish(std::vector<KvEvent> events) {
  Item item;
  item.ts = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  item.events = std::move(events);
  {
    absl::MutexLock lock(&mu_);
    item.seq = next_seq_++;  // taken even when dropped: the subscriber sees the gap
    if (metrics_) metrics_->set_kv_event_next_sequence(next_seq_);  // under mu_: never goes back
    if (!stop_ && static_cast<int64_t>(queue_.size()) < opt_.queue_batches) {
      queue_.push_back(std::move(item));
      return;
    }
    want_snapshot_ = !stop_;
  }
  ++dropped_;
  if (metrics_) metrics_->record_kv_event_batch(false, 0);
}

bool KvEventsPublisher::take_snapshot_request() {
  absl::MutexLock lock(&mu_);
  // Only once the queue has room again: a snapshot that would be dropped too is not worth building.
  if (!want_snapshot_ || static_cast<int64_t>(queue_.size()) >= opt_.queue_batches) return false;
  want_snapshot_ = false;
  return true;
}

void KvEventsPublisher::stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  z_.reset();  // closes the sockets (linger 0) and the context
}

bool KvEventsPublisher::wake() const { return stop_ || !queue_.empty(); }

void KvEventsPublisher::run() {
  pthread_setname_np(pthread_self(), "frost-kv-events");
  Sockets& z = *z_;
  const std::string topic = opt_.topic;
  absl::Time flush_deadline = absl::InfiniteFuture();
  for (;;) {
    std::deque<Item> batch;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition wake(this, &KvEventsPublisher::wake);
      if (z.replay)
        mu_.AwaitWithTimeout(wake, kIdleWait);
      else
        mu_.Await(wake);
      batch.swap(queue_);
      stopping = stop_;
    }
    if (stopping && flush_deadline == absl::InfiniteFuture()) flush_deadline = absl::Now() + kStopFlush;
    for (Item& item : batch) {
      if (absl::Now() > flush_deadline) break;  // stop(): whatever is left is not sent
      std::string payload = encode_kv_event_batch(item.ts, item.events, opt_.medium);
      const std::string seq = seq_bytes(static_cast<int64_t>(item.seq));
      try {
        // PUB never blocks (dontwait to be sure): past the high-water mark ZeroMQ drops for that subscriber.
        z.pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z.pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        FROST_LOG_WARN("frostd: KV events: sending batch %llu failed: %s",
                       static_cast<unsigned long long>(item.seq), e.what());
      }
      ++published_;
      if (metrics_) metrics_->record_kv_event_batch(true, static_cast<int64_t>(item.events.size()));
      if (opt_.buffer_steps > 0) {
        z.ring.emplace_back(item.seq, std::move(payload));
        while (static_cast<int64_t>(z.ring.size()) > opt_.buffer_steps) z.ring.pop_front();
      }
    }
    // Replay requests: [identity, empty, 8-byte start] in; the buffered batches from start, then the end
    // marker.
    while (z.replay) {
      std::vector<zmq::message_t> req;
      try {
        if (!zmq::recv_multipart(*z.replay, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
        if (req.size() != 3 || req[2].size() != 8) {
          FROST_LOG_WARN(
              "frostd: KV events: replay request of %zu frames ignored (expected [empty, 8-byte "
              "start sequence])",
              req.size() > 0 ? req.size() - 1 : 0);
          continue;
        }
        uint64_t start = 0;
        for (size_t i = 0; i < 8; ++i) start = (start << 8) | req[2].data<unsigned char>()[i];
        const std::string id = req[0].to_string();
        for (const auto& [seq, payload] : z.ring) {
          if (seq < start) continue;
          const std::string sb = seq_bytes(static_cast<int64_t>(seq));
          z.replay->send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z.replay->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z.replay->send(zmq::buffer(sb), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z.replay->send(zmq::buffer(payload), zmq::send_flags::dontwait);
        }
        const std::string end = seq_bytes(-1);
        z.replay->send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z.replay->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z.replay->send(zmq::buffer(end), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z.replay->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        FROST_LOG_WARN("frostd: KV events: replay failed: %s", e.what());
        break;
      }
    }
    if (stopping) {
      absl::MutexLock lock(&mu_);
      if (queue_.empty() || absl::Now() > flush_deadline) return;
    }
  }
}

}  // namespace frost::server

#else  // FROST_KV_EVENTS

namespace frost::server {

// Without ZeroMQ: create() refuses, naming the key that asked for it; nothing else is ever reached.
std::string encode_kv_event_batch(double, const std::vector<KvEvent>&, const std::string&) { return ""; }
struct KvEventsPublisher::Sockets {};
KvEventsPublisher::KvEventsPublisher(const KvEventsOptions& options, Metrics* metrics)
    : opt_(options), metrics_(metrics) {}
absl::StatusOr<std::unique_ptr<KvEventsPublisher>> KvEventsPublisher::create(const KvEventsOptions&,
                                                                             Metrics*) {
  return absl::FailedPreconditionError(
      "server.kv_events.enabled: this frostd was built without ZeroMQ (cmake -DFROST_KV_EVENTS=OFF)");
}
KvEventsPublisher::~KvEventsPublisher() = default;
void KvEventsPublisher::publish(std::vector<KvEvent>) {}
bool KvEventsPublisher::take_snapshot_request() { return false; }
void KvEventsPublisher::stop() {}
bool KvEventsPublisher::wake() const { return true; }
void KvEventsPublisher::run() {}

}  // namespace frost::server

#endif  // FROST_KV_EVENTS
