// KvEventsPublisher (server/kv_events_publisher.h): the msgpack layout of a KVEventBatch as vLLM's msgspec
// writes it and llm-d's Go decoder reads it, the three-frame PUB messages with gap-free sequence numbers from
// 0 (AllBlocksCleared first), vLLM's replay protocol on the ROUTER socket, drops on a full queue followed by
// a snapshot request, and a stop() that does not wait for subscribers. Sockets on 127.0.0.1, ports picked by
// ZeroMQ ("*"); ~1 s.
#include "server/kv_events_publisher.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <msgpack.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace frost::server {
namespace {

uint64_t be64(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | m.data<unsigned char>()[i];
  return v;
}

std::string be64_bytes(uint64_t v) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>(v >> (56 - 8 * i));
  return b;
}

// The events array of a payload, checking the batch envelope [ts, events, 0].
std::vector<msgpack::object> events_of(const msgpack::object_handle& oh) {
  const msgpack::object& o = oh.get();
  EXPECT_EQ(o.type, msgpack::type::ARRAY);
  EXPECT_EQ(o.via.array.size, 3u);
  EXPECT_EQ(o.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(o.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& ev = o.via.array.ptr[1];
  return std::vector<msgpack::object>(ev.via.array.ptr, ev.via.array.ptr + ev.via.array.size);
}

std::string tag_of(const msgpack::object& event) { return event.via.array.ptr[0].as<std::string>(); }

bool wait_for(const std::function<bool()>& pred) {
  for (int i = 0; i < 400 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}

TEST(KvEventsPublisherTest, EncodesVllmKvEventBatchArrays) {
  KvEvent stored;
  stored.kind = KvEvent::Kind::kStored;
  stored.hashes = {0xFFFFFFFFFFFFFFF0ull, 42};  // a full 64-bit hash stays an unsigned integer
  stored.has_parent = true;
  stored.parent = 7;
  stored.tokens = {1, 2, 3, 4};
  stored.block_size = 2;
  KvEvent first = stored;
  first.has_parent = false;
  KvEvent removed;
  removed.kind = KvEvent::Kind::kRemoved;
  removed.hashes = {42};
  const std::string bytes = encode_kv_event_batch(1.5, {stored, first, removed, KvEvent{}}, "CPU");
  const msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  EXPECT_EQ(oh.get().via.array.ptr[0].as<double>(), 1.5);
  const std::vector<msgpack::object> ev = events_of(oh);
  ASSERT_EQ(ev.size(), 4u);

  // ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]
  ASSERT_EQ(ev[0].via.array.size, 8u);
  EXPECT_EQ(tag_of(ev[0]), "BlockStored");
  EXPECT_EQ(ev[0].via.array.ptr[1].as<std::vector<uint64_t>>(), stored.hashes);
  EXPECT_EQ(ev[0].via.array.ptr[1].via.array.ptr[0].type, msgpack::type::POSITIVE_INTEGER);
  EXPECT_EQ(ev[0].via.array.ptr[2].as<uint64_t>(), 7u);
  EXPECT_EQ(ev[0].via.array.ptr[3].as<std::vector<int32_t>>(), stored.tokens);
  EXPECT_EQ(ev[0].via.array.ptr[4].as<int>(), 2);
  EXPECT_TRUE(ev[0].via.array.ptr[5].is_nil());
  EXPECT_EQ(ev[0].via.array.ptr[6].as<std::string>(), "CPU");
  EXPECT_TRUE(ev[0].via.array.ptr[7].is_nil());
  EXPECT_TRUE(ev[1].via.array.ptr[2].is_nil()) << "a sequence's first block has no parent";
  // ["BlockRemoved", block_hashes, medium]
  ASSERT_EQ(ev[2].via.array.size, 3u);
  EXPECT_EQ(tag_of(ev[2]), "BlockRemoved");
  EXPECT_EQ(ev[2].via.array.ptr[1].as<std::vector<uint64_t>>(), std::vector<uint64_t>{42});
  EXPECT_EQ(ev[2].via.array.ptr[2].as<std::string>(), "CPU");
  // ["AllBlocksCleared"]
  ASSERT_EQ(ev[3].via.array.size, 1u);
  EXPECT_EQ(tag_of(ev[3]), "AllBlocksCleared");
}

TEST(KvEventsPublisherTest, PublishesInSequenceAndReplaysFromAnyNumber) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.topic = "kv@pod@model";
  o.buffer_steps = 3;
  absl::StatusOr<std::unique_ptr<KvEventsPublisher>> p = KvEventsPublisher::create(o, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.set(zmq::sockopt::rcvtimeo, 2000);
  sub.connect((*p)->endpoint());

  // A PUB drops what it sends before the subscription arrives (ZeroMQ's slow joiner): publish until one
  // batch comes through, then every later one must arrive, in order, without a gap.
  KvEvent removed;
  removed.kind = KvEvent::Kind::kRemoved;
  std::vector<zmq::message_t> msg;
  for (uint64_t h = 1; msg.empty() && h < 400; ++h) {
    removed.hashes = {h};
    (*p)->publish({removed});
    sub.set(zmq::sockopt::rcvtimeo, 5);
    (void)zmq::recv_multipart(sub, std::back_inserter(msg));
  }
  ASSERT_EQ(msg.size(), 3u);
  EXPECT_EQ(msg[0].to_string(), "kv@pod@model");
  ASSERT_EQ(msg[1].size(), 8u);
  uint64_t last = be64(msg[1]);
  sub.set(zmq::sockopt::rcvtimeo, 2000);
  for (int i = 0; i < 5; ++i) (*p)->publish({removed});
  ASSERT_TRUE(wait_for([&] { return (*p)->batches_published() >= last + 6; }));
  const uint64_t total = (*p)->batches_published();
  while (last + 1 < total) {  // everything sent arrives, in order (rcvtimeo 2 s)
    msg.clear();
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(msg))) << "batch " << last + 1 << " never came";
    EXPECT_EQ(be64(msg[1]), last + 1) << "a gap in sequence numbers";
    last = be64(msg[1]);
  }

  // Replay (a DEALER sends the empty delimiter a REQ would): only the last buffer_steps batches are kept.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 2000);
  dealer.connect((*p)->replay_endpoint());
  std::vector<uint64_t> replayed;
  for (uint64_t start : {uint64_t{0}, total - 2}) {
    replayed.clear();
    std::array<zmq::const_buffer, 2> req = {zmq::const_buffer(nullptr, 0), zmq::buffer(be64_bytes(start))};
    ASSERT_TRUE(zmq::send_multipart(dealer, req));
    for (;;) {
      msg.clear();
      ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(msg))) << "no replay answer";
      ASSERT_EQ(msg.size(), 3u);
      EXPECT_EQ(msg[0].size(), 0u);
      if (be64(msg[1]) == ~uint64_t{0}) {  // the end marker: -1 and an empty payload
        EXPECT_EQ(msg[2].size(), 0u);
        break;
      }
      replayed.push_back(be64(msg[1]));
    }
    if (start == 0)
      EXPECT_EQ(replayed, (std::vector<uint64_t>{total - 3, total - 2, total - 1}));
    else
      EXPECT_EQ(replayed, (std::vector<uint64_t>{total - 2, total - 1}));
  }
  const auto t0 = std::chrono::steady_clock::now();
  (*p)->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(KvEventsPublisherTest, FirstBatchIsAllBlocksClearedThroughReplay) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  absl::StatusOr<std::unique_ptr<KvEventsPublisher>> p = KvEventsPublisher::create(o, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(wait_for([&] { return (*p)->batches_published() == 1; }));
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 2000);
  dealer.connect((*p)->replay_endpoint());
  std::array<zmq::const_buffer, 2> req = {zmq::const_buffer(nullptr, 0), zmq::buffer(be64_bytes(0))};
  ASSERT_TRUE(zmq::send_multipart(dealer, req));
  std::vector<zmq::message_t> msg;
  ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(msg)));
  ASSERT_EQ(msg.size(), 3u);
  EXPECT_EQ(be64(msg[1]), 0u);
  const msgpack::object_handle oh = msgpack::unpack(msg[2].data<char>(), msg[2].size());
  const std::vector<msgpack::object> ev = events_of(oh);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(tag_of(ev[0]), "AllBlocksCleared");
}

TEST(KvEventsPublisherTest, AFullQueueDropsCountsAndAsksForOneSnapshot) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.queue_batches = 1;
  absl::StatusOr<std::unique_ptr<KvEventsPublisher>> p = KvEventsPublisher::create(o, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  KvEvent big;
  big.kind = KvEvent::Kind::kRemoved;
  big.hashes.assign(20000, 1);  // slow to encode: the queue of one fills
  for (int i = 0; i < 200; ++i) (*p)->publish({big});
  ASSERT_TRUE(wait_for([&] { return (*p)->batches_published() + (*p)->batches_dropped() == 201; }));
  ASSERT_GT((*p)->batches_dropped(), 0u) << "200 batches into a queue of one without a drop";
  EXPECT_TRUE((*p)->take_snapshot_request());
  EXPECT_FALSE((*p)->take_snapshot_request()) << "one snapshot per overflow";
}

TEST(KvEventsPublisherTest, AnEndpointThatCannotBeBoundNamesTheField) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://256.0.0.1:*";
  absl::StatusOr<std::unique_ptr<KvEventsPublisher>> p = KvEventsPublisher::create(o, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(p.status().message().find("server.kv_events.replay_endpoint \"tcp://256.0.0.1:*\""),
            std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace frost::server
