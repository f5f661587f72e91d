#!/usr/bin/python3
"""Integration test (label "integration") of frostd's KV events (server.kv_events, issue 53) on real frostd
processes serving stories260K, with a subscriber written from the format's description (docs/kv-events.md,
vLLM's KVEventBatch) rather than from frost's code: python3-zmq and python3-msgpack.

frostd runs with 4-token KV blocks and a pool of 48 blocks, so that concurrent requests preempt each other and
cached blocks get evicted. The subscriber joins after frostd started (it missed sequence 0 and the warm-up):
it catches up through the replay socket, then follows the PUB socket, asking for a replay at any gap. It decodes
every event and rebuilds the pod's block index keyed by what an indexer can see — (parent hash, token ids) —
and checks:
  - every message is [topic, 8-byte big-endian sequence, msgpack [ts, events, 0]], sequence numbers from 0
    without a gap, the first batch of each process is [AllBlocksCleared];
  - for every request sent alone, the longest prefix of whole blocks the index holds for its prompt (leaving
    the last prompt token to compute, as frost's scheduler does) equals frost's own prefix-cache hit, read as
    the delta of frost_prefix_cache_hits_tokens_total around that request;
  - whenever frostd is idle, the index holds exactly as many blocks as frost_kv_cache_blocks{state="cached"};
  - after concurrent traffic with preemptions, evictions and a cancelled stream, the same still holds;
  - a late subscriber that replays from 0 rebuilds the same index as the live one;
  - after a restart on the same endpoints, sequence numbers start again at 0 with AllBlocksCleared, and the
    checks hold for the new process.
Deterministic (greedy, fixed token prompts). ~5 s.

Environment: FROST_FROSTD (frostd), PYTHONPATH with the stubs and client/python (frost_testlib).
"""

import os
import re
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import msgpack
    import zmq
except ImportError as e:  # scripts/install_deps.sh installs both
    print(f"kv_events_test: FAIL: {e} (apt-get install python3-zmq python3-msgpack)", file=sys.stderr)
    sys.exit(1)

try:
    import frost_testlib as lib
    from frost.v1 import generation_pb2
except ImportError as e:
    print(f"kv_events_test: FAIL: cannot import frost_testlib or the stubs ({e})", file=sys.stderr)
    sys.exit(1)

BT = 4            # engine.kv_block_tokens
POOL_BLOCKS = 48  # engine.kv_cache_bytes / block bytes
TOPIC = "kv@frost-test@stories260K"
END_SEQ = b"\xff" * 8


def metric(text, name, labels=""):
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Index:
    """A pod's block index as an indexer rebuilds it: hash → (parent hash or None, tokens), and the lookup an
    indexer without frost's salt can do, by (parent, tokens)."""

    def __init__(self):
        self.blocks = {}

    def apply(self, batch):
        assert isinstance(batch, list) and len(batch) == 3, f"batch is not [ts, events, dp_rank]: {batch!r}"
        ts, events, dp_rank = batch
        assert isinstance(ts, float) and ts > 1.6e9, f"ts {ts!r}"
        assert dp_rank == 0
        for ev in events:
            tag = ev[0]
            if tag == "BlockStored":
                assert len(ev) == 8, f"BlockStored has {len(ev)} fields: {ev!r}"
                _, hashes, parent, tokens, block_size, lora_id, medium, lora_name = ev
                assert block_size == BT and len(tokens) == BT * len(hashes), ev
                assert lora_id is None and lora_name is None and medium == "CPU", ev
                for i, h in enumerate(hashes):
                    assert isinstance(h, int) and 0 <= h < 2**64
                    assert h not in self.blocks, f"block {h:#x} stored twice without a removal"
                    self.blocks[h] = (parent, tuple(tokens[i * BT:(i + 1) * BT]))
                    parent = h
            elif tag == "BlockRemoved":
                assert len(ev) == 3 and ev[2] == "CPU", ev
                for h in ev[1]:
                    assert h in self.blocks, f"removal of unknown block {h:#x}"
                    del self.blocks[h]
            elif tag == "AllBlocksCleared":
                assert len(ev) == 1, ev
                self.blocks.clear()
            else:
                raise AssertionError(f"unknown event tag {tag!r}")

    def cached_prefix_tokens(self, prompt):
        """Tokens of the longest run of whole blocks of `prompt` the index holds, from the first block, at
        most len(prompt) - 1 tokens (frost computes at least the last prompt token: core/generate/scheduler.cc)."""
        by_content = {(p, t): h for h, (p, t) in self.blocks.items()}
        parent, n = None, 0
        while (n + 1) * BT <= len(prompt) - 1:
            h = by_content.get((parent, tuple(prompt[n * BT:(n + 1) * BT])))
            if h is None:
                break
            parent, n = h, n + 1
        return n * BT


class Subscriber:
    """SUB on the PUB endpoint plus a DEALER on the replay endpoint; applies batches strictly in sequence order."""

    def __init__(self, ctx, pub_port, replay_port):
        self.ctx = ctx
        self.replay_addr = f"tcp://127.0.0.1:{replay_port}"
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, "kv@")  # llm-d's topic filter
        self.pub_addr = f"tcp://127.0.0.1:{pub_port}"
        self.sub.connect(self.pub_addr)
        self.index = Index()
        self.next_seq = 0   # the next sequence number to apply
        self.batches = []   # (seq, batch) as applied, for the first-batch checks
        self.ts_by_seq = {}  # this process's applied batches: a live copy of one of them is a duplicate
        self.replays = 0
        self.restarts = 0

    def close(self):
        self.sub.close()

    def reconnect(self):
        self.sub.close()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, "kv@")
        self.sub.connect(self.pub_addr)

    def replay_from(self, start):
        """Asks the replay socket for everything from `start` on; returns [(seq, payload)] until the end marker."""
        self.replays += 1
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.replay_addr)
        try:
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            out = []
            while True:
                if not dealer.poll(5000):
                    raise AssertionError(f"no replay answer from {self.replay_addr}")
                empty, seq, payload = dealer.recv_multipart()
                assert empty == b""
                if seq == END_SEQ:
                    assert payload == b""
                    return out
                out.append((int.from_bytes(seq, "big"), payload))
        finally:
            dealer.close()

    def _apply(self, seq, payload):
        assert seq == self.next_seq, f"applying {seq}, expected {self.next_seq}"
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if seq == 0:
            assert batch[1] == [["AllBlocksCleared"]], f"first batch of a process: {batch[1]!r}"
            self.index = Index()
            self.ts_by_seq = {}
        self.ts_by_seq[seq] = batch[0]
        self.index.apply(batch)
        self.batches.append((seq, batch))
        self.next_seq = seq + 1

    def _catch_up(self, upto):
        """Replays [next_seq, upto) (upto None: everything buffered)."""
        for seq, payload in self.replay_from(self.next_seq):
            if seq < self.next_seq:
                continue
            if upto is not None and seq >= upto:
                break
            assert seq == self.next_seq, f"replay has a gap at {self.next_seq} (got {seq}): buffer too small?"
            self._apply(seq, payload)

    def receive(self, timeout_ms):
        """Applies one live message if one comes within timeout_ms; False if none came."""
        if not self.sub.poll(timeout_ms):
            return False
        topic, seq_b, payload = self.sub.recv_multipart()
        assert topic == TOPIC.encode(), topic
        assert len(seq_b) == 8
        seq = int.from_bytes(seq_b, "big")
        if seq < self.next_seq and self.ts_by_seq.get(seq) == msgpack.unpackb(payload)[0]:
            return True  # already applied through a replay
        if seq < self.next_seq:  # a new process (sequence restarted): start over from its 0
            self.restarts += 1
            self.next_seq = 0
            self._catch_up(seq)
        elif seq > self.next_seq:  # joined late, or missed messages: replay the gap
            self._catch_up(seq)
        self._apply(seq, payload)
        return True

    def sync(self, published, timeout_s=10):
        """Receives until `published` batches (0 .. published-1) are applied. Nothing live for 100 ms while
        batches are missing (joined after the last one was sent): asks the replay socket for them."""
        deadline = time.monotonic() + timeout_s
        while self.next_seq < published:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.next_seq} of {published} batches arrived")
            if not self.receive(100):
                self._catch_up(None)


class KvEventsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="frost-kv-events-")
        cls.ctx = zmq.Context()

    @classmethod
    def tearDownClass(cls):
        cls.ctx.term()
        cls.tmp.cleanup()

    def start_frostd(self, name, pub="*", replay="*"):
        # "tcp://*:…": a wildcard host is what makes frostd bind rather than connect (vLLM's rule), so that the
        # restart can bind the same ports again; tcp://*:* picks a free port (written to --port-file).
        kv = {"enabled": True, "endpoint": f"tcp://*:{pub}", "topic": TOPIC,
              "replay_endpoint": f"tcp://*:{replay}", "buffer_steps": 100000}
        d = lib.Frostd(self.tmp.name, name, os.path.join(self.tmp.name, "state"), self.tmp.name,
                       jobs={"enabled": False}, sections={
                           "server": {"kv_events": kv},
                           "engine": {"kv_block_tokens": BT, "kv_cache_bytes": POOL_BLOCKS * BT * 1280,
                                      "max_running": 8}})
        d.start()
        self.assertIn("kv_events", d.ports, d.ports)
        return d

    def published(self, d):
        """Batches made so far (the engine hands a round's batch over before that round's tokens reach us)."""
        return int(metric(d.metrics_text(), "frost_kv_events_next_sequence"))

    def generate(self, d, prompt, max_new=8):
        req = generation_pb2.GenerateRequest(
            token_ids=generation_pb2.TokenIds(ids=prompt), add_bos=False,
            sampling=generation_pb2.SamplingParams(temperature=0, max_new_tokens=max_new, ignore_eos=True))
        return [r for r in d.generation.Generate(req, timeout=60)]

    def check_idle(self, d, sub):
        """frostd idle: the subscriber has every batch, and its index is the pool's cached blocks, no more."""
        sub.sync(self.published(d))
        text = d.metrics_text()
        self.assertEqual(metric(text, "frost_kv_event_batches_total", '{outcome="dropped"}'), 0)
        self.assertEqual(len(sub.index.blocks), metric(text, "frost_kv_cache_blocks", '{state="cached"}'),
                         "the rebuilt index and the pool's cached blocks differ")

    def check_alone(self, d, sub, prompt):
        """One request alone: the index predicts frost's prefix-cache hit exactly."""
        self.check_idle(d, sub)
        want = sub.index.cached_prefix_tokens(prompt)
        before = metric(d.metrics_text(), "frost_prefix_cache_hits_tokens_total")
        self.generate(d, prompt)
        got = metric(d.metrics_text(), "frost_prefix_cache_hits_tokens_total") - before
        self.assertEqual(got, want, f"prompt {prompt[:6]}… ({len(prompt)} tokens): frost hit {got}, index {want}")
        return want

    def test_events_rebuild_the_prefix_cache(self):
        # Prompts over a 512-token vocabulary: a shared 24-token system prefix, two branches, their extensions.
        base = [(7 * i + 3) % 500 + 5 for i in range(24)]
        a = base + [11, 12, 13, 14, 15, 16, 17, 18]
        b = base + [21, 22, 23, 24, 25, 26]
        a_long = a + [31, 32, 33, 34, 35, 36, 37, 38, 39]
        others = [[(13 * i + k) % 500 + 5 for i in range(30)] for k in range(6)]  # unrelated: evict the rest

        d = self.start_frostd("a")
        pub_port, replay_port = d.ports["kv_events"], d.ports["kv_events_replay"]
        sub = Subscriber(self.ctx, pub_port, replay_port)
        try:
            # Joined late: sequence 0 (AllBlocksCleared) and the warm-up come through replay.
            sub.sync(self.published(d))
            self.assertGreaterEqual(sub.replays, 1)
            self.assertEqual(sub.batches[0][0], 0)

            # Alone, one at a time: misses, a shared prefix, a longer prompt over a cached one, a repeat.
            self.assertEqual(self.check_alone(d, sub, base), 0)
            self.assertGreater(self.check_alone(d, sub, a), 0)
            self.assertGreater(self.check_alone(d, sub, b), 0)
            self.check_alone(d, sub, a_long)
            self.check_alone(d, sub, a)

            # Concurrent: more than the pool holds (preemption), one stream cancelled after its first tokens.
            calls, results = [], {}
            for i, p in enumerate([a_long, b, *others]):
                req = generation_pb2.GenerateRequest(
                    token_ids=generation_pb2.TokenIds(ids=p), add_bos=False,
                    sampling=generation_pb2.SamplingParams(temperature=0, max_new_tokens=24, ignore_eos=True))
                calls.append((i, d.generation.Generate(req, timeout=60)))

            def drain(i, call):
                n = 0
                try:
                    for _ in call:
                        n += 1
                        if i == 3 and n == 2:
                            call.cancel()
                except Exception as e:  # the cancelled stream ends with CANCELLED
                    results[i] = repr(e)
                    return
                results[i] = n
            threads = [threading.Thread(target=drain, args=c) for c in calls]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertIn("CANCELLED", str(results.get(3)), results)
            time.sleep(0.2)  # the cancellation reaches the engine within a round
            text = d.metrics_text()
            self.assertGreater(metric(text, "frost_preemptions_total"), 0, "no preemption: pool too large?")

            # After preemption, eviction and cancellation the index still predicts every hit.
            for p in [base, a, b, a_long, others[0], others[5], others[5][:17]]:
                self.check_alone(d, sub, p)
            self.check_idle(d, sub)
            evicted = sum(1 for _, bt in sub.batches for ev in bt[1] if ev[0] == "BlockRemoved")
            self.assertGreater(evicted, 0, "no block was evicted: pool too large?")

            # A late subscriber replaying from 0 rebuilds the same index.
            late = Subscriber(self.ctx, pub_port, replay_port)
            try:
                late._catch_up(None)
                self.assertEqual(late.next_seq, sub.next_seq)
                self.assertEqual(late.index.blocks, sub.index.blocks)
            finally:
                late.close()
        finally:
            self.assertIn(d.stop(), (0,), d.log()[-2000:])

        # Restart on the same endpoints: the subscriber's SUB reconnects by itself and notices the new process
        # by its sequence numbers going back; it replays the new process's batches from 0 (AllBlocksCleared).
        d = self.start_frostd("b", pub=pub_port, replay=replay_port)
        try:
            # Its SUB reconnects in the background and may miss the first batches; the first one it gets
            # tells it of the restart. New prompts make new batches until one arrives.
            for p in [base] + others:
                self.generate(d, p, max_new=1)
                deadline = time.monotonic() + 0.5
                while sub.restarts == 0 and time.monotonic() < deadline:
                    sub.receive(50)
                if sub.restarts:
                    break
            self.assertEqual(sub.restarts, 1, "the restart was not seen")
            self.check_idle(d, sub)
            self.check_alone(d, sub, base)
            self.assertEqual(self.check_alone(d, sub, a), len(base))
            self.check_alone(d, sub, a_long)
            self.check_idle(d, sub)
        finally:
            sub.close()
            self.assertIn(d.stop(), (0,), d.log()[-2000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
