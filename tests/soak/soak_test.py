#!/usr/bin/python3
"""Soak and fault suites of frostd (issue "Hardening"): each starts its own frostd processes on free ports,
drives them through the generated Python stubs, checks its invariants and prints one figure line
("soak.<suite>: ..."). Exit status 1 when a check failed, 77 when every suite asked for was skipped.

Suites (all by default, or those named on the command line):
  streams       N streams x 64 tokens, 20% cancelled at random points, 64 concurrent: the others complete
                exactly, frostd's counters match what the clients saw, RSS after the run within 5% of after
                warm-up, no stream left hanging (each has a deadline).
  slow_readers  clients that stop reading mid-stream (raw HTTP/2, tests/soak/h2stall.py): frostd sends no
                more than their flow-control window, its memory per stalled stream is bounded, the other
                streams (frost-loadgen) keep their throughput and inter-token latency, the stalled calls end
                at their deadline and are counted DEADLINE_EXCEEDED.
  health        every engine slot busy and the waiting queue full (frost-loadgen): liveness ("") and
                readiness (frost.v1.Generation) Check p99 < 250 ms, on one channel and on a new connection.
  kill9         kill -9 of frostd at random points of training jobs, restarts on the same state directory:
                no acknowledged job lost or duplicated, each job SUCCEEDED bit-identical to an uninterrupted
                run, or INTERRUPTED naming max_attempts.
  disk_full     jobs.state_dir on a tmpfs of a few MiB filled up: jobs fail with a reason naming the
                full disk, serving (Generate, Predict, health) continues, the journal and the active artifact
                stay intact (and load again after a restart); a restart on the full volume serves Predict,
                reports jobs unavailable and takes them back once there is space. Needs root (mount);
                skipped otherwise.
  corrupt       truncated and bit-flipped artifact files and job journals: refused at start or at
                activation with a message naming the file, never served, never replaced.

Scale: SOAK_SCALE=ci (default: scaled down, about 3 minutes on 2 cores) or SOAK_SCALE=full (`make soak`).
Report: --out PATH (default: $SOAK_OUT, else bench/results/soak.json at full scale, else
<build>/soak/soak.json), merged with the suites already there.

Environment: FROST_FROSTD (frostd), FROST_LOADGEN (frost-loadgen; default <build>/bench/frost-loadgen),
FROST_SHARED (../shared: stories260K and emobank for the job suites), PYTHONPATH with <build>/client/python.

By hand:
  PYTHONPATH=build/client/python FROST_FROSTD=build/server/frostd /usr/bin/python3 tests/soak/soak_test.py streams
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from frost.v1 import admin_pb2
    from frost.v1 import admin_pb2_grpc
    from frost.v1 import generation_pb2 as G
    from frost.v1 import generation_pb2_grpc
    from frost.v1 import prediction_pb2_grpc
    from frost.v1 import training_pb2_grpc
    from frost.v1 import prediction_pb2
    from frost.v1 import training_pb2 as T
    from grpc_health.v1 import health_pb2
    from grpc_health.v1 import health_pb2_grpc
    import soaklib as sl
    from soaklib import lib
    import h2stall
except ImportError as e:
    print(f"soak_test: FAIL: cannot import the stubs ({e}); needs python3-grpcio, python3-protobuf and the "
          "frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

Code = grpc.StatusCode
ADMIN = lib.ADMIN

# The job of the job suites: the small prototype config of tests/client/jobs_test.py, 2 + 4 epochs on a
# 400-row subset of emobank (about 3 s with jobs.threads 1), a checkpoint every 5 steps.
JOB_ROWS = 400
JOB_CFG = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
           "epochs_a": "2", "epochs_b": "4"}
PREDICT_TEXTS = ["I love this wonderful sunny day!", "The meeting was moved to Tuesday.",
                 "Everything went terribly wrong and I am furious."]


def job_spec(train_rel, cfg=JOB_CFG):
    return T.PrototypeJobSpec(train_path=train_rel, config=cfg)


def need_shared(suite):
    if not os.path.isdir(lib.model_path()) or not os.path.isfile(os.path.join(lib.emobank_dir(), "train.jsonl")):
        suite.skip(f"no {lib.model_path()} or {lib.emobank_dir()} (FROST_SHARED)")
        return False
    return True


def stop_checked(suite, server, what):
    code = server.stop()
    suite.check(code == 0, f"{what}: frostd exited with {code} after SIGTERM (expected 0)\n{server.log()[-4000:]}")


# ================================================================================================ streams


class StreamPlan:
    def __init__(self, i, cancel_at):
        self.i = i
        self.cancel_at = cancel_at  # None: read to the end; k: cancel once k tokens arrived (0: at once)


class StreamResult:
    __slots__ = ("i", "cancel_at", "tokens", "chunks", "final", "code", "details", "cancel_sent", "t")

    def __init__(self, plan):
        self.i, self.cancel_at = plan.i, plan.cancel_at
        self.tokens, self.chunks, self.final, self.code, self.details = 0, 0, None, None, ""
        self.cancel_sent = False
        self.t = 0.0


def make_plans(n, cancel_frac, max_tokens, seed):
    rng = random.Random(seed)
    cancel = set(rng.sample(range(n), round(n * cancel_frac)))
    return [StreamPlan(i, rng.randrange(0, max_tokens) if i in cancel else None) for i in range(n)]


def run_streams(stub, plans, concurrency, max_tokens, deadline_s, tag):
    """Runs the plans on `concurrency` threads; returns (results, hung) where hung counts the streams whose
    thread had not returned deadline_s + 30 s after the last start (a deadline that did not end the call)."""
    results = [None] * len(plans)
    lock = threading.Lock()
    nxt = [0]

    def one(p):
        r = StreamResult(p)
        t0 = time.monotonic()
        req = G.GenerateRequest(request_id=f"soak-{tag}-{p.i}", text=f"Once upon a time, story {p.i} began",
                                sampling=G.SamplingParams(max_new_tokens=max_tokens, ignore_eos=True, seed=p.i))
        call = stub.Generate(req, timeout=deadline_s)
        try:
            if p.cancel_at == 0:
                r.cancel_sent = call.cancel()
            for resp in call:
                kind = resp.WhichOneof("response")
                if kind == "chunk":
                    r.tokens += len(resp.chunk.token_ids)
                    r.chunks += 1
                    if p.cancel_at is not None and not r.cancel_sent and r.tokens >= p.cancel_at:
                        r.cancel_sent = call.cancel()
                elif kind == "final":
                    r.final = resp.final
            r.code = Code.OK
        except grpc.RpcError as e:
            r.code, r.details = e.code(), e.details() or ""
        r.t = time.monotonic() - t0
        return r

    def worker():
        while True:
            with lock:
                if nxt[0] >= len(plans):
                    return
                k = nxt[0]
                nxt[0] += 1
            results[k] = one(plans[k])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    # Each stream has deadline_s; a thread blocked longer than every stream it can run is hung.
    limit = time.monotonic() + deadline_s * (len(plans) // concurrency + 2) + 30
    for t in threads:
        t.join(max(0.0, limit - time.monotonic()))
    hung = sum(1 for r in results if r is None)
    return [r for r in results if r is not None], hung


def suite_streams(suite, tmp):
    n = sl.pick(200, 1000)
    conc, max_tokens, cancel_frac = 64, 64, 0.2
    n_warm = sl.pick(128, 256)
    deadline_s = 60
    max_running, max_waiting = 32, 128
    suite.fig(streams=n, tokens_per_stream=max_tokens, concurrency=conc, cancel_fraction=cancel_frac,
              deadline_s=deadline_s, engine={"max_running": max_running, "max_waiting": max_waiting},
              model="models/stories260K")
    s = sl.start_frostd(tmp, "streams", model=sl.repo_model(),
                        sections={"engine": {"max_running": max_running, "max_waiting": max_waiting}})
    try:
        warm, warm_hung = run_streams(s.generation, make_plans(n_warm, cancel_frac, max_tokens, seed=1), conc,
                                      max_tokens, deadline_s, "warm")
        m0, ok = sl.wait_metrics(s, lambda m: sl.idle(m) and m.value("frost_requests_total", rpc="Generate") >=
                                 n_warm - sum(1 for r in warm if r.cancel_at == 0))
        suite.check(ok and warm_hung == 0, f"warm-up did not drain: {warm_hung} hung, gauges not idle")
        time.sleep(0.5)
        rss_warm = sl.rss_bytes(s.pid)

        plans = make_plans(n, cancel_frac, max_tokens, seed=2)
        t0 = time.monotonic()
        res, hung = run_streams(s.generation, plans, conc, max_tokens, deadline_s, "soak")
        wall = time.monotonic() - t0
        n_cancel0 = sum(1 for p in plans if p.cancel_at == 0)
        base = m0.value("frost_requests_total", rpc="Generate")
        m1, drained = sl.wait_metrics(
            s, lambda m: sl.idle(m) and m.value("frost_requests_total", rpc="Generate") >= base + n - n_cancel0)
        time.sleep(0.5)
        m1 = sl.scrape(s)
        rss_after = sl.rss_bytes(s.pid)

        # ---- the client's view
        plain = [r for r in res if r.cancel_at is None]
        cancelled = [r for r in res if r.cancel_at is not None]
        exact = [r for r in plain if r.code == Code.OK and r.tokens == max_tokens and r.final is not None
                 and r.final.completion_tokens == max_tokens and r.final.finish_reason == G.FINISH_REASON_LENGTH]
        c_cancelled = [r for r in cancelled if r.code == Code.CANCELLED]
        c_first = [r for r in cancelled if r.code == Code.OK]  # completed before the cancel landed
        other = [r for r in res if r.code not in (Code.OK, Code.CANCELLED)]
        suite.check(hung == 0, f"{hung} streams hung past their deadline")
        suite.check(len(exact) == len(plain),
                    f"{len(plain) - len(exact)} of {len(plain)} uncancelled streams not complete and exact: " +
                    "; ".join(f"#{r.i} {r.code} {r.tokens} tokens {r.details}" for r in plain if r not in exact)[:2000])
        suite.check(not other, "streams ended with another code: " +
                    "; ".join(f"#{r.i} {r.code.name} {r.details}" for r in other)[:2000])
        suite.check(all(r.tokens <= max_tokens for r in cancelled), "a cancelled stream got more tokens than asked")
        suite.check(all(r.tokens == max_tokens and r.final is not None for r in c_first),
                    "a stream that ended OK after its cancel was sent is not complete")

        # ---- frostd's view (deltas over the measured run)
        def d(name, **labels):
            return m1.value(name, **labels) - m0.value(name, **labels)

        calls = d("frost_requests_total", rpc="Generate")
        by_code = {k: m1.by_label("frost_requests_total", "code", rpc="Generate").get(k, 0) -
                   m0.by_label("frost_requests_total", "code", rpc="Generate").get(k, 0)
                   for k in m1.by_label("frost_requests_total", "code", rpc="Generate")}
        by_code = {k: int(v) for k, v in by_code.items() if v}
        gens = d("frost_generations_total")
        gen_len = d("frost_generations_total", finish_reason="length")
        gen_can = d("frost_generations_total", finish_reason="cancelled")
        s_tokens = d("frost_generation_tokens_total")
        c_tokens = sum(r.tokens for r in res)
        c_ok = len(exact) + len(c_first)
        never_reached = n - calls  # cancelled before frostd's service saw the call (only cancels "at once")
        races = by_code.get("OK", 0) - c_ok  # completed on frostd, CANCELLED on the client: the cancel raced
        suite.check(drained, f"frostd not idle / not every call counted after the run: {calls} of {n} counted, "
                             f"running {m1.value('frost_requests_running')}, "
                             f"waiting {m1.value('frost_requests_waiting')}")
        suite.check(set(by_code) <= {"OK", "CANCELLED"}, f"frostd counted other codes: {by_code}")
        suite.check(0 <= never_reached <= n_cancel0,
                    f"{calls} Generate calls counted for {n} streams ({n_cancel0} cancelled before any token)")
        suite.check(0 <= races <= len(c_cancelled),
                    f"frostd counted {by_code.get('OK', 0)} OK calls, the clients saw {c_ok}")
        suite.check(by_code.get("CANCELLED", 0) == len(c_cancelled) - never_reached - races,
                    f"frostd counted {by_code.get('CANCELLED', 0)} CANCELLED calls, the clients saw "
                    f"{len(c_cancelled)} ({never_reached} never reached the service, {races} raced)")
        suite.check(gens == gen_len + gen_can and gens <= calls and gen_len >= by_code.get("OK", 0),
                    f"generations {gens} (length {gen_len}, cancelled {gen_can}) vs calls {by_code}")
        # Tokens: every completed stream is exact (checked above against its own Final); frostd generated at
        # least what the clients received, and the excess is what cancelled streams did not read.
        unread = s_tokens - c_tokens
        in_cancelled_gens = s_tokens - max_tokens * gen_len
        suite.check(0 <= unread <= max_tokens * len(c_cancelled) and
                    0 <= in_cancelled_gens <= (max_tokens - 1) * gen_can,
                    f"tokens: frostd {s_tokens:.0f}, clients {c_tokens} ({gen_len} length + {gen_can} cancelled)")
        suite.check(m1.value("frost_kv_cache_bytes_in_use") == 0,
                    f"KV cache still in use when idle: {m1.value('frost_kv_cache_bytes_in_use')} bytes")
        suite.check(m1.value("frost_requests_rejected_total") == 0,
                    f"requests rejected: {m1.by_label('frost_requests_rejected_total', 'reason')}")
        growth = (rss_after - rss_warm) / rss_warm
        suite.check(abs(growth) <= 0.05, f"RSS after the run {sl.mib(rss_after):.1f} MiB vs "
                                         f"{sl.mib(rss_warm):.1f} MiB after warm-up: {growth * 100:+.1f}% (limit 5%)")
        lat = [r.t for r in exact]
        suite.fig(wall_s=round(wall, 2), completed=len(exact), cancel_planned=len(cancelled),
                  cancelled=len(c_cancelled), completed_before_cancel=len(c_first), hung=hung,
                  other_codes=len(other), server_calls=int(calls), server_by_code=by_code,
                  server_generations={"length": int(gen_len), "cancelled": int(gen_can)},
                  never_reached_service=int(never_reached), cancelled_before_engine=int(calls - gens),
                  cancel_races=int(races),
                  tokens_server=int(s_tokens), tokens_client=int(c_tokens), tokens_unread=int(unread),
                  rss_warm_mib=round(sl.mib(rss_warm), 1), rss_after_mib=round(sl.mib(rss_after), 1),
                  rss_growth_pct=round(growth * 100, 2), stream_s_p50=round(sl.pct(lat, 50), 3),
                  stream_s_p99=round(sl.pct(lat, 99), 3), streams_per_s=round(n / wall, 1))
        suite.report(
            f"{n} streams x {max_tokens} tokens, {conc} concurrent, {len(cancelled)} cancelled at random points "
            f"({len(c_cancelled)} CANCELLED, {len(c_first)} completed first), {len(exact)}/{len(plain)} others "
            f"complete and exact, {hung} hung; frostd counted {int(calls)} calls {by_code}, "
            f"tokens {int(s_tokens)} generated / {c_tokens} received; RSS {growth * 100:+.1f}% "
            f"({sl.mib(rss_warm):.1f} -> {sl.mib(rss_after):.1f} MiB); {wall:.1f} s")
    finally:
        stop_checked(suite, s, "streams")



# ================================================================================================ slow_readers


def loadgen(server, concurrency, requests, max_tokens, warmup=0, seed=1, timeout_s=120):
    """frost-loadgen against `server`; returns its JSON report."""
    import json
    cmd = [sl.loadgen_binary(), "--addr", server.addr, "--concurrency", str(concurrency), "--requests",
           str(requests), "--warmup", str(warmup), "--max-tokens", str(max_tokens), "--seed", str(seed),
           "--timeout", "60", "--prompt", "Once upon a time"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise RuntimeError(f"frost-loadgen exited {p.returncode}: {p.stderr[-2000:]} {p.stdout[-2000:]}")


def suite_slow_readers(suite, tmp):
    n_stalled = sl.pick(16, 64)
    stall_tokens, logprobs, window = 400, 20, 2048
    lg_conc, lg_requests, lg_tokens = 8, sl.pick(48, 160), 64
    max_running, max_waiting = 32, 128
    # Stated bounds for the streams that keep reading, relative to the mean of the runs before and after.
    tput_min, itl_max = (0.75, 1.33) if sl.scale() == "full" else (0.5, 2.0)
    per_stream_bound = 1 << 20  # bytes of frostd RSS per stalled stream (400 tokens x 20 logprobs)
    suite.fig(stalled_streams=n_stalled, stalled_max_new_tokens=stall_tokens, stalled_logprobs=logprobs,
              stalled_window_bytes=window, loadgen={"concurrency": lg_conc, "requests": lg_requests,
                                                    "max_tokens": lg_tokens},
              bounds={"throughput_min_ratio": tput_min, "tpot_p50_max_ratio": itl_max, "tpot_p50_slack_ms": 0.25,
                      "rss_per_stalled_stream_bytes": per_stream_bound}, model="models/stories260K")
    s = sl.start_frostd(tmp, "slow", model=sl.repo_model(),
                        sections={"engine": {"max_running": max_running, "max_waiting": max_waiting}})
    req = G.GenerateRequest(text="Once upon a time", sampling=G.SamplingParams(
        max_new_tokens=stall_tokens, ignore_eos=True, logprobs=logprobs))
    req_bytes = req.SerializeToString()

    def stalled_round(n, timeout_s):
        return [h2stall.StalledStream("127.0.0.1", s.ports["grpc"], req_bytes, window, timeout_s,
                                      G.GenerateResponse.FromString) for _ in range(n)]

    try:
        # What one such stream is on the wire when it is read to the end.
        wire = sum(r.ByteSize() + 5 for r in s.generation.Generate(req, timeout=60))
        # Warm-up: the load, and a few stalled calls through their deadline (allocator arenas, gRPC pools).
        loadgen(s, lg_conc, 16, lg_tokens)
        warm = stalled_round(4, 2.0)
        c = h2stall.StalledClients(warm)
        c.wait(10)
        c.stop()
        sl.wait_metrics(s, sl.idle)
        a = loadgen(s, lg_conc, lg_requests, lg_tokens, seed=11)
        time.sleep(0.3)
        m0 = sl.scrape(s)
        rss0 = sl.rss_bytes(s.pid)

        # The stalled clients: they read `window` bytes, then nothing. The deadline leaves room for their
        # generation (about 3 s for 16 streams, 11 s for 64 on 2 cores: logprobs are not cheap) and the load.
        deadline = sl.pick(10.0, 24.0)
        t_open = time.monotonic()
        stalled = stalled_round(n_stalled, deadline)
        clients = h2stall.StalledClients(stalled)
        gen0 = m0.value("frost_generations_total")
        m_gen, generated = sl.wait_metrics(
            s, lambda m: m.value("frost_generations_total") >= gen0 + n_stalled and sl.idle(m), timeout=deadline)
        t_generated = time.monotonic() - t_open
        time.sleep(0.3)
        rss1 = sl.rss_bytes(s.pid)
        b = loadgen(s, lg_conc, lg_requests, lg_tokens, seed=12)
        rss2 = sl.rss_bytes(s.pid)
        open_during_b = sum(1 for x in stalled if x.ended is None)
        clients.wait(deadline + 15)
        clients.stop()
        ends = [(x.t_end - x.t_start) if x.t_end else None for x in stalled]
        m1, counted = sl.wait_metrics(
            s, lambda m: m.value("frost_requests_total", rpc="Generate") >=
            m0.value("frost_requests_total", rpc="Generate") + n_stalled + lg_requests, timeout=10)
        time.sleep(0.3)
        rss3 = sl.rss_bytes(s.pid)
        c_ = loadgen(s, lg_conc, lg_requests, lg_tokens, seed=13)
        # A second round of stalled streams reuses what the first one freed: memory does not pile up.
        rss4 = sl.rss_bytes(s.pid)
        deadline2 = 1.5 * t_generated + 3.0
        again = stalled_round(n_stalled, deadline2)
        c2 = h2stall.StalledClients(again)
        c2.wait(deadline2 + 15)
        c2.stop()
        rss5 = sl.rss_bytes(s.pid)
        round2 = (rss5 - rss4) / n_stalled
        suite.check(all(x.ended for x in again), "second round: stalled calls not ended by their deadline")
        suite.check(round2 <= 0.25 * per_stream_bound,
                    f"a second round of stalled streams grew RSS {round2 / 1024:.0f} KiB per stream (the first "
                    f"round's memory is not reused)")

        suite.check(generated and t_generated + b["wall_s"] < deadline - 1,
                    f"the stalled streams' generations ({t_generated:.1f} s) and the load ({b['wall_s']:.1f} s) "
                    f"did not fit in their deadline ({deadline:.0f} s)")
        over = [x.data_bytes for x in stalled if x.data_bytes > window]
        suite.check(not over, f"frostd sent more than the {window}-byte window: {over}")
        suite.check(open_during_b == n_stalled,
                    f"only {open_during_b} of {n_stalled} stalled calls were still open during the measured load")
        late = [e for e in ends if e is None or e > deadline + 1.0]
        suite.check(not late, f"stalled calls not ended by their deadline ({deadline:.1f} s + 1 s): "
                              f"{[None if e is None else round(e, 2) for e in late]}")
        suite.check(all(x.ended in ("trailers", "data-end") or str(x.ended).startswith("rst")
                        for x in stalled), f"stalled calls ended by {[x.ended for x in stalled]}")
        by_code = {k: int(v - m0.by_label("frost_requests_total", "code", rpc="Generate").get(k, 0))
                   for k, v in m1.by_label("frost_requests_total", "code", rpc="Generate").items()}
        by_code = {k: v for k, v in by_code.items() if v}
        suite.check(counted and by_code.get("DEADLINE_EXCEEDED", 0) == n_stalled,
                    f"frostd counted the {n_stalled} stalled calls (ended by their deadline) and "
                    f"{lg_requests} load calls as {by_code}")
        for name, r in (("before", a), ("stalled", b), ("after", c_)):
            suite.check(r["requests_failed"] == 0 and r["requests_ok"] == lg_requests,
                        f"load {name}: {r['requests_ok']} ok, {r['requests_failed']} failed {r.get('errors')}")
        ref_tput = (a["output_tokens_per_s"] + c_["output_tokens_per_s"]) / 2
        # Inter-token latency as each stream's mean (TPOT: (end - first token) / (tokens - 1)): frostd coalesces
        # tokens a stream has not sent yet into one message, so single gaps are mostly 0 or a whole step.
        ref_itl = (a["tpot_s"]["p50"] + c_["tpot_s"]["p50"]) / 2
        tput_ratio = b["output_tokens_per_s"] / ref_tput
        itl_ratio = b["tpot_s"]["p50"] / ref_itl
        suite.check(tput_ratio >= tput_min, f"throughput with stalled readers {tput_ratio:.2f} x (bound {tput_min})")
        suite.check(b["tpot_s"]["p50"] <= itl_max * ref_itl + 0.25e-3,
                    f"ITL (TPOT) p50 with stalled readers {b['tpot_s']['p50'] * 1e3:.2f} ms = {itl_ratio:.2f} x "
                    f"the reference {ref_itl * 1e3:.2f} ms (bound {itl_max} x + 0.25 ms)")
        per_stream = (max(rss1, rss2) - rss0) / n_stalled
        suite.check(per_stream <= per_stream_bound,
                    f"frostd RSS grew {per_stream / 1024:.0f} KiB per stalled stream (bound "
                    f"{per_stream_bound >> 10} KiB)")
        drift = rss2 - rss1
        suite.check(drift <= max(2 << 20, 0.02 * rss1),
                    f"RSS grew {drift / 1024:.0f} KiB while the stalled calls only waited (nothing queued)")
        suite.fig(stream_wire_bytes=wire, deadline_s=round(deadline, 1), generated_s=round(t_generated, 2),
                  data_bytes_max=max(x.data_bytes for x in stalled),
                  tokens_received_max=max(x.tokens for x in stalled),
                  end_s=[round(min(e for e in ends if e), 2), round(max(e for e in ends if e), 2)],
                  ended_by=sorted(set(str(x.ended) for x in stalled)), server_by_code=by_code,
                  rss_mib={"before": round(sl.mib(rss0), 1), "stalled_generated": round(sl.mib(rss1), 1),
                           "stalled_end_of_load": round(sl.mib(rss2), 1), "after": round(sl.mib(rss3), 1)},
                  rss_per_stalled_stream_kib=round(per_stream / 1024, 1),
                  rss_second_round_per_stream_kib=round(round2 / 1024, 1),
                  load={k: {"tokens_per_s": round(r["output_tokens_per_s"], 1),
                            "tpot_p50_ms": round(r["tpot_s"]["p50"] * 1e3, 3),
                            "tpot_p99_ms": round(r["tpot_s"]["p99"] * 1e3, 3),
                            "itl_p50_ms": round(r["itl_s"]["p50"] * 1e3, 2),
                            "itl_p99_ms": round(r["itl_s"]["p99"] * 1e3, 2),
                            "ttft_p50_ms": round(r["ttft_s"]["p50"] * 1e3, 2)}
                        for k, r in (("before", a), ("stalled", b), ("after", c_))},
                  throughput_ratio=round(tput_ratio, 3), itl_p50_ratio=round(itl_ratio, 3))
        suite.report(
            f"{n_stalled} clients stop reading after {window} B of {stall_tokens}-token streams "
            f"(logprobs {logprobs}, {wire / 1024:.0f} KiB on the wire): frostd sent <= the window, RSS "
            f"+{per_stream / 1024:.0f} KiB per stalled stream (bound {per_stream_bound >> 10}), "
            f"{drift / 1024:+.0f} KiB while they waited, {round2 / 1024:+.0f} KiB per stream for a second round; "
            f"{lg_conc} reading streams at "
            f"{tput_ratio:.2f} x throughput, ITL (per-stream mean) p50 {b['tpot_s']['p50'] * 1e3:.2f} ms "
            f"({itl_ratio:.2f} x), ITL p99 {b['itl_s']['p99'] * 1e3:.2f} ms; stalled calls ended at "
            f"{min(e for e in ends if e):.2f}-{max(e for e in ends if e):.2f} s (deadline {deadline:.1f} s), "
            f"counted {by_code}")
    finally:
        stop_checked(suite, s, "slow_readers")
    stalled_without_deadline(suite, tmp, req_bytes, window)


def stalled_without_deadline(suite, tmp, req_bytes, window):
    """Clients that stop reading and set no deadline: frostd cuts each stream once its next message has waited
    server.write_stall_timeout_s, counts it, and frees what it held."""
    n, stall_s = sl.pick(8, 16), 2
    s = sl.start_frostd(tmp, "nodeadline", model=sl.repo_model(), sections={"server": {"write_stall_timeout_s": stall_s}})
    try:
        m0 = sl.scrape(s)
        streams = [h2stall.StalledStream("127.0.0.1", s.ports["grpc"], req_bytes, window, None,
                                         G.GenerateResponse.FromString) for _ in range(n)]
        clients = h2stall.StalledClients(streams)
        bound = 30.0  # generation (a few s) + the stall timeout + the sweeper's period, with room for a busy CI
        clients.wait(bound)
        clients.stop()
        ends = [x.t_end - x.t_start for x in streams if x.t_end]
        # gRPC ends a cancelled call with trailers (HEADERS are not flow-controlled) or RST_STREAM.
        suite.check(len(ends) == n and all(x.ended == "trailers" or str(x.ended).startswith("rst") for x in streams),
                    f"stalled calls without a deadline not cut within {bound:.0f} s: ended by "
                    f"{[x.ended for x in streams]}")
        m1, ok = sl.wait_metrics(s, lambda m: m.value("frost_generate_write_stalls_total") -
                                 m0.value("frost_generate_write_stalls_total") >= n and sl.idle(m), timeout=10)
        cut = m1.value("frost_generate_write_stalls_total") - m0.value("frost_generate_write_stalls_total")
        suite.check(ok and cut == n, f"frostd counted {cut} write stalls for {n} stalled streams")
        suite.check(s.generation is not None and
                    sum(1 for _ in s.generation.Generate(G.GenerateRequest(
                        text="Once", sampling=G.SamplingParams(max_new_tokens=8, ignore_eos=True)), timeout=30)) > 0,
                    "frostd did not serve a normal stream after cutting the stalled ones")
        suite.fig(no_deadline={"streams": n, "write_stall_timeout_s": stall_s, "cut": int(cut),
                               "ended_s": [round(min(ends), 2), round(max(ends), 2)] if ends else None,
                               "ended_by": sorted(set(str(x.ended) for x in streams))})
        print(f"soak.slow_readers: {n} stalled clients without a deadline were cut at "
              f"{min(ends) if ends else float('nan'):.2f}-{max(ends) if ends else float('nan'):.2f} s "
              f"(server.write_stall_timeout_s {stall_s}), counted {int(cut)} write stalls", flush=True)
    finally:
        stop_checked(suite, s, "slow_readers (no deadline)")



# ================================================================================================ health


def suite_health(suite, tmp):
    max_running, max_waiting = sl.pick((8, 16), (32, 128))
    extra = sl.pick(8, 16)
    n_checks, n_fresh = sl.pick(300, 2000), sl.pick(30, 200)
    limit_ms = 250.0
    suite.fig(engine={"max_running": max_running, "max_waiting": max_waiting},
              load_clients=max_running + max_waiting + extra, checks_per_service=n_checks,
              fresh_connection_checks_per_service=n_fresh, p99_limit_ms=limit_ms, model="models/stories260K")
    s = sl.start_frostd(tmp, "health", model=sl.repo_model(),
                        sections={"engine": {"max_running": max_running, "max_waiting": max_waiting}})
    load = None
    try:
        m0 = sl.scrape(s)
        # More clients than slots + queue, back to back: every slot busy, the queue full, the rest refused
        # (RESOURCE_EXHAUSTED) and retried at once.
        load = subprocess.Popen(
            [sl.loadgen_binary(), "--addr", s.addr, "--concurrency", str(max_running + max_waiting + extra),
             "--requests", "10000000", "--max-tokens", "256", "--timeout", "120", "--prompt", "Once upon a time"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, saturated = sl.wait_metrics(s, lambda m: m.value("frost_requests_running") == max_running and
                                       m.value("frost_requests_waiting") == max_waiting, timeout=60)
        suite.check(saturated, "frostd never reached every slot busy and the queue full")
        samples = []
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                try:
                    m = sl.scrape(s)
                    samples.append((m.value("frost_requests_running"), m.value("frost_requests_waiting")))
                except OSError:
                    pass
                stop.wait(0.1)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        lat = {"": [], lib.READINESS_SERVICE: []}
        fresh = {"": [], lib.READINESS_SERVICE: []}
        bad = []
        t0 = time.monotonic()
        for i in range(2 * n_checks):
            svc = "" if i % 2 == 0 else lib.READINESS_SERVICE
            t = time.perf_counter()
            try:
                r = s.health.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5)
                if r.status != health_pb2.HealthCheckResponse.SERVING:
                    bad.append(f"{svc!r}: {r.status}")
            except grpc.RpcError as e:
                bad.append(f"{svc!r}: {e.code().name}")
            lat[svc].append((time.perf_counter() - t) * 1e3)
        for i in range(2 * n_fresh):  # a probe's way: a new connection for every check
            svc = "" if i % 2 == 0 else lib.READINESS_SERVICE
            t = time.perf_counter()
            ch = grpc.insecure_channel(s.addr)
            try:
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=svc), timeout=5)
                if r.status != health_pb2.HealthCheckResponse.SERVING:
                    bad.append(f"fresh {svc!r}: {r.status}")
            except grpc.RpcError as e:
                bad.append(f"fresh {svc!r}: {e.code().name}")
            finally:
                ch.close()
            fresh[svc].append((time.perf_counter() - t) * 1e3)
        wall = time.monotonic() - t0
        # At least 20 samples (2 s) before judging the saturated fraction: at CI scale the checks take ~0.4 s,
        # and with 4 samples one caught between a finish and the refill would fail the 80% bar on its own.
        t_end = time.monotonic() + 5
        while len(samples) < 20 and time.monotonic() < t_end:
            time.sleep(0.05)
        stop.set()
        th.join()
        m1 = sl.scrape(s)
        rejected = m1.value("frost_requests_rejected_total", reason="queue_full") - \
            m0.value("frost_requests_rejected_total", reason="queue_full")
        full = sum(1 for r, w in samples if r == max_running and w >= max_waiting - 1)
        frac = full / len(samples) if samples else 0.0
        suite.check(load.poll() is None, f"frost-loadgen exited early ({load.returncode})")
        suite.check(not bad, f"health checks not SERVING: {bad[:20]}")
        suite.check(frac >= 0.8, f"saturated (running {max_running}, waiting >= {max_waiting - 1}) in only "
                                 f"{full} of {len(samples)} samples")
        suite.check(rejected > 0, "no request was refused queue_full: the queue was never full")
        figs = {}
        for mode, d in (("channel", lat), ("fresh", fresh)):
            for svc, v in d.items():
                key = f"{mode}_{'liveness' if svc == '' else 'readiness'}"
                figs[key] = {"n": len(v), "p50_ms": round(sl.pct(v, 50), 2), "p99_ms": round(sl.pct(v, 99), 2),
                             "max_ms": round(max(v), 2)}
                suite.check(sl.pct(v, 99) < limit_ms, f"{key}: p99 {sl.pct(v, 99):.1f} ms >= {limit_ms} ms")
        suite.fig(checks=figs, saturated_fraction=round(frac, 3), samples=len(samples),
                  rejected_queue_full=int(rejected), measure_s=round(wall, 1))
        suite.report(
            f"{max_running} slots busy + {max_waiting} queued ({frac * 100:.0f}% of samples, {int(rejected)} refused "
            f"queue_full): liveness p99 {figs['channel_liveness']['p99_ms']:.1f} ms, readiness p99 "
            f"{figs['channel_readiness']['p99_ms']:.1f} ms ({n_checks} each); new connection per check: "
            f"{figs['fresh_liveness']['p99_ms']:.1f} / {figs['fresh_readiness']['p99_ms']:.1f} ms "
            f"({n_fresh} each); limit {limit_ms:.0f} ms")
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        stop_checked(suite, s, "health")



# ================================================================================================ kill9


def artifact_sha(server, name):
    """(sha256 the manifest names, sha256 of the tensor file, manifest) of a prototype artifact."""
    m = server.artifact_manifest(name)
    f = os.path.join(server.artifact_dir(name), m["tensors"]["file"])
    return m["tensors"]["sha256"], lib.sha256_file(f), m


def suite_kill9(suite, tmp):
    if not need_shared(suite):
        return
    trials = sl.pick(10, 100)
    max_attempts = 5
    rng = random.Random(20240607)
    data_root = os.path.join(tmp, "data")
    rel = lib.write_subset(data_root, n_rows=JOB_ROWS)
    jobs_cfg = {"max_attempts": max_attempts}

    # The uninterrupted run every job must match.
    ref = lib.Frostd(tmp, "reference", os.path.join(tmp, "state-ref"), data_root, jobs=jobs_cfg).start()
    try:
        t = time.monotonic()
        j = ref.wait_job(ref.submit(job_spec(rel), key="reference").id, timeout=300)
        t_job = time.monotonic() - t
        if j.state != T.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"the reference job did not succeed: {j}\n{ref.log()[-3000:]}")
        ref_sha, ref_file_sha, m = artifact_sha(ref, j.artifact)
        if ref_sha != ref_file_sha or m.get("report", {}).get("resumed") is not False:
            raise RuntimeError(f"the reference artifact is not an intact uninterrupted run: {m.get('report')}")
    finally:
        stop_checked(suite, ref, "reference")

    state = os.path.join(tmp, "state")
    acked = {}          # idempotency key -> job id, for every SubmitJob that returned
    unacked = []        # keys whose SubmitJob was cut by a kill
    kills = []
    next_key = [0]
    lost, dups = [], []

    def new_key():
        next_key[0] += 1
        return f"k{next_key[0]}"

    def audit(server, when):
        """Every acknowledged job is there under its key; a retried key maps to one job."""
        jobs = server.list_jobs()
        by_key = {}
        for jb in jobs:
            by_key.setdefault(jb.idempotency_key, []).append(jb.id)
        for k, jid in acked.items():
            if by_key.get(k) != [jid]:
                lost.append(f"{when}: key {k} job {jid} -> {by_key.get(k)}")
        for k, ids in by_key.items():
            if len(ids) > 1:
                dups.append(f"{when}: key {k} -> {ids}")
        for k in list(unacked):  # the client retries what it never got an answer for
            jb = server.submit(job_spec(rel), key=k)
            acked[k] = jb.id
            unacked.remove(k)
        return jobs

    t_start = time.monotonic()
    for trial in range(trials):
        s = lib.Frostd(tmp, f"trial{trial}", state, data_root, jobs=jobs_cfg).start()
        jobs = audit(s, f"trial {trial}")
        if sum(1 for jb in jobs if jb.state in (T.JOB_STATE_QUEUED, T.JOB_STATE_RUNNING)) < 2:
            k = new_key()
            acked[k] = s.submit(job_spec(rel), key=k).id
        delay = rng.uniform(0.0, 1.5 * t_job)
        race = None
        if rng.random() < 0.4:  # a submit in flight around the kill
            k = new_key()
            unacked.append(k)

            def racing_submit(key=k, at=max(0.0, delay - rng.uniform(0.0, 0.05))):
                time.sleep(at)
                try:
                    acked[key] = s.training.SubmitJob(
                        T.SubmitJobRequest(idempotency_key=key, prototype=job_spec(rel)), metadata=ADMIN,
                        timeout=10).id
                    unacked.remove(key)
                except (grpc.RpcError, ValueError, AttributeError):
                    pass

            race = threading.Thread(target=racing_submit, daemon=True)
            race.start()
        t_kill = time.monotonic() + delay
        seen = None
        while time.monotonic() < t_kill:
            try:
                running = s.list_jobs(states=[T.JOB_STATE_RUNNING])
                if running:
                    seen = (running[0].id, running[0].progress.stage or "starting", running[0].progress.step)
            except grpc.RpcError:
                pass
            time.sleep(min(0.1, max(0.0, t_kill - time.monotonic())))
        s.kill9()
        if race is not None:
            race.join(15)
        kills.append({"delay_s": round(delay, 2), "job": seen[0] if seen else None,
                      "stage": seen[1] if seen else "idle", "step": seen[2] if seen else 0})
    trials_s = time.monotonic() - t_start

    final = lib.Frostd(tmp, "final", state, data_root, jobs=jobs_cfg).start()
    try:
        audit(final, "final")
        final.wait_idle(timeout=max(300, 4 * t_job * len(acked)))
        jobs = {jb.id: jb for jb in final.list_jobs()}
        audit(final, "after the drain")
        outcome = {"SUCCEEDED": 0, "INTERRUPTED": 0, "other": 0}
        mismatched, bad = [], []
        for k, jid in acked.items():
            jb = jobs.get(jid)
            if jb is None:
                continue  # reported by audit()
            if jb.state == T.JOB_STATE_SUCCEEDED:
                outcome["SUCCEEDED"] += 1
                sha, file_sha, _ = artifact_sha(final, jb.artifact)
                if sha != ref_sha or file_sha != ref_sha:
                    mismatched.append(f"{jid} ({k}, attempts {jb.attempts}): {file_sha[:12]} vs {ref_sha[:12]}")
            elif jb.state == T.JOB_STATE_INTERRUPTED and "max_attempts" in jb.reason and \
                    jb.attempts == max_attempts and not jb.artifact:
                outcome["INTERRUPTED"] += 1
            else:
                outcome["other"] += 1
                bad.append(f"{jid} ({k}): {T.JobState.Name(jb.state)} attempts {jb.attempts}: {jb.reason}")
        arts = final.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(), metadata=ADMIN).artifacts
        owned = {jb.artifact for jb in jobs.values() if jb.artifact}
        orphans = [a.name for a in arts if a.name not in owned]
        leftovers = [n for n in os.listdir(os.path.join(state, "artifacts")) if n.startswith(".tmp-")]
        resumed = sum(1 for jb in jobs.values() if jb.attempts > 1 and jb.state == T.JOB_STATE_SUCCEEDED)
    finally:
        stop_checked(suite, final, "kill9 final")
    suite.check(not lost, f"acknowledged jobs lost: {lost[:10]}")
    suite.check(not dups, f"a key maps to several jobs: {dups[:10]}")
    suite.check(not mismatched, f"SUCCEEDED but not bit-identical to the uninterrupted run: {mismatched[:10]}")
    suite.check(not bad, f"jobs neither SUCCEEDED nor INTERRUPTED after max_attempts: {bad[:10]}")
    suite.check(not leftovers, f"partial artifact directories left: {leftovers}")
    stages = {}
    for k in kills:
        stages[k["stage"]] = stages.get(k["stage"], 0) + 1
    suite.fig(trials=trials, max_attempts=max_attempts, job_s=round(t_job, 2), acked_jobs=len(acked),
              outcome=outcome, resumed_and_succeeded=resumed, lost=len(lost), duplicates=len(dups),
              not_bit_identical=len(mismatched), orphan_artifacts=orphans, kills_by_stage=stages,
              trials_s=round(trials_s, 1), kills=kills if sl.scale() == "full" else kills[:20])
    suite.report(
        f"{trials} kill -9 at random points ({', '.join(f'{k} {v}' for k, v in sorted(stages.items()))}): "
        f"{len(acked)} acknowledged jobs, {len(lost)} lost, {len(dups)} duplicated; {outcome['SUCCEEDED']} "
        f"SUCCEEDED ({resumed} after a resume), all bit-identical to the uninterrupted run"
        f"{'' if not mismatched else ' EXCEPT ' + str(len(mismatched))}, {outcome['INTERRUPTED']} INTERRUPTED "
        f"after max_attempts={max_attempts}, {outcome['other']} other; {len(orphans)} orphan artifacts; "
        f"{trials_s:.0f} s")



# ================================================================================================ disk_full


def predict_bytes(server):
    r = server.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=30)
    return r.SerializeToString(deterministic=True)


def serving_ok(server, want_predict):
    """Generate (32 tokens, exact), Predict (the same answer as before) and readiness; '' when all fine."""
    bad = []
    try:
        n, final = 0, None
        for r in server.generation.Generate(G.GenerateRequest(
                text="Once upon a time", sampling=G.SamplingParams(max_new_tokens=32, ignore_eos=True)), timeout=30):
            if r.WhichOneof("response") == "chunk":
                n += len(r.chunk.token_ids)
            else:
                final = r.final
        if n != 32 or final is None or final.completion_tokens != 32:
            bad.append(f"Generate gave {n} tokens")
    except grpc.RpcError as e:
        bad.append(f"Generate {e.code().name}: {e.details()}")
    try:
        if predict_bytes(server) != want_predict:
            bad.append("Predict answers differently")
    except grpc.RpcError as e:
        bad.append(f"Predict {e.code().name}: {e.details()}")
    try:
        h = server.health.Check(health_pb2.HealthCheckRequest(service=lib.READINESS_SERVICE), timeout=5)
        if h.status != health_pb2.HealthCheckResponse.SERVING:
            bad.append(f"readiness {h.status}")
    except grpc.RpcError as e:
        bad.append(f"health {e.code().name}")
    return "; ".join(bad)


class DiskHog:
    """Fills a filesystem and keeps it full (takes whatever space is freed) until release()."""

    def __init__(self, path, leave=0):
        self.path = path
        self.leave = leave
        self._stop = threading.Event()
        self.full = threading.Event()
        self.f = open(path, "ab", buffering=0)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        block = b"\0" * 65536
        while not self._stop.is_set():
            st = os.statvfs(os.path.dirname(self.path))
            free = st.f_bavail * st.f_frsize - self.leave
            try:
                if free > 0:
                    self.f.write(block[:min(len(block), free)])
                    continue
            except OSError:
                pass
            self.full.set()
            self._stop.wait(0.005)

    def release(self):
        self._stop.set()
        self.thread.join(10)
        self.f.close()
        os.unlink(self.path)


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def journal_snapshot(state_dir):
    """(integrity_check, [(id, state, reason, artifact)]) of a copy of <state_dir>/jobs.db (+ -wal)."""
    import sqlite3
    d = sl.tempdir("frost-soak-journal-")
    try:
        for suffix in ("", "-wal"):
            src = os.path.join(state_dir, "jobs.db" + suffix)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(d, "jobs.db" + suffix))
        con = sqlite3.connect(os.path.join(d, "jobs.db"))
        try:
            ic = con.execute("PRAGMA integrity_check").fetchone()[0]
            rows = con.execute("SELECT id, state, reason, artifact FROM jobs ORDER BY seq").fetchall()
        finally:
            con.close()
        return ic, rows
    finally:
        shutil.rmtree(d, ignore_errors=True)


def suite_disk_full(suite, tmp):
    if not need_shared(suite):
        return
    if os.geteuid() != 0:
        suite.skip("needs root to mount a small tmpfs for jobs.state_dir")
        return
    size_mib = 8
    mnt = os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        suite.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        return
    data_root = os.path.join(tmp, "data")
    rel = lib.write_subset(data_root, n_rows=JOB_ROWS)
    state = os.path.join(mnt, "state")
    s = None
    cases = []
    try:
        s = lib.Frostd(tmp, "diskfull", state, data_root).start()
        first = s.wait_job(s.submit(job_spec(rel), key="first").id, timeout=300)
        if first.state != T.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"the first job did not succeed: {first}")
        s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=first.artifact), metadata=ADMIN)
        p0 = predict_bytes(s)
        sha0, file_sha0, _ = artifact_sha(s, first.artifact)
        active_marker = os.path.join(state, "artifacts", "prototype", "ACTIVE")
        with open(active_marker) as f:
            active0 = f.read()

        def run_case(name, trigger, leave=0, hold_s=2.0):
            """Submits a job; fills the disk (and keeps it full) when the job reaches `trigger` ('' = before the
            submit); checks serving meanwhile; frees the disk. Returns the case's record."""
            hog = None
            rec = {"case": name}
            hog_path = os.path.join(mnt, "hog")
            if not trigger:
                hog = DiskHog(hog_path, leave)
                hog.full.wait(10)
            try:
                jb = s.submit(job_spec(rel), key=f"case-{name}")
            except grpc.RpcError as e:
                rec.update(outcome="refused", code=e.code().name, reason=e.details())
                suite.check(e.code() == Code.RESOURCE_EXHAUSTED and "jobs.db" in e.details() and
                            "full" in e.details(), f"{name}: SubmitJob refused with {e.code().name}: {e.details()}")
                rec["serving"] = serving_ok(s, p0)
                suite.check(not rec["serving"], f"{name}: serving broken while the disk is full: {rec['serving']}")
                hog.release()
                return rec
            if trigger:
                deadline = time.monotonic() + 120
                while True:
                    g = s.get_job(jb.id)
                    if g.progress.stage == trigger or g.state in lib.TERMINAL_STATES:
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{name}: job never reached {trigger}: {g}")
                    time.sleep(0.01)
                hog = DiskHog(hog_path, leave)
                hog.full.wait(10)
            # The job must end while the disk stays full, with its reason; serving must go on.
            t_end = time.monotonic() + 60
            while True:
                g = s.get_job(jb.id)
                if g.state in lib.TERMINAL_STATES or time.monotonic() > t_end:
                    break
                time.sleep(0.05)
            cpu0 = proc_cpu_s(s.pid)
            time.sleep(hold_s)
            cpu = proc_cpu_s(s.pid) - cpu0
            rec["serving"] = serving_ok(s, p0)
            rec.update(outcome=T.JobState.Name(g.state), reason=g.reason, cpu_while_full_s=round(cpu, 2))
            hog.release()
            suite.check(g.state in (T.JOB_STATE_FAILED, T.JOB_STATE_SUCCEEDED),
                        f"{name}: job {T.JobState.Name(g.state)} 60 s after the disk filled: {g.reason}")
            if g.state == T.JOB_STATE_FAILED:
                suite.check("No space left on device" in g.reason and state in g.reason,
                            f"{name}: the reason does not name the full disk and the file: {g.reason!r}")
            else:  # it published before the disk filled: the artifact must be whole
                sha, file_sha, _ = artifact_sha(s, g.artifact)
                suite.check(sha == file_sha, f"{name}: SUCCEEDED with a damaged artifact {g.artifact}")
            suite.check(not rec["serving"], f"{name}: serving broken while the disk is full: {rec['serving']}")
            suite.check(cpu < 0.5 * hold_s, f"{name}: frostd used {cpu:.1f} s of CPU in {hold_s} s with the disk "
                                            "full and no work (spinning on the journal?)")
            # After the disk is freed the journal takes the outcome.
            g2 = s.wait_job(jb.id, timeout=30)
            suite.check(g2.state == g.state, f"{name}: {T.JobState.Name(g.state)} became {T.JobState.Name(g2.state)}")
            return rec

        cases.append(run_case("full-at-submit", "", leave=0))
        cases.append(run_case("64KiB-left", "", leave=64 << 10))
        for stage in sl.pick(("stage_a", "done"), ("features", "stage_a", "stage_b", "done")):
            cases.append(run_case(f"full-in-{stage}", stage))
        # A queued job behind one that fills the disk: it must wait (not spin), then run once there is space.
        hog_path = os.path.join(mnt, "hog")
        a = s.submit(job_spec(rel), key="queue-a")
        b = s.submit(job_spec(rel), key="queue-b")
        while s.get_job(a.id).progress.stage not in ("stage_a", "stage_b") and \
                s.get_job(a.id).state not in lib.TERMINAL_STATES:
            time.sleep(0.01)
        hog = DiskHog(hog_path)
        hog.full.wait(10)
        ga = s.wait_job(a.id, timeout=60)
        cpu0 = proc_cpu_s(s.pid)
        time.sleep(2.0)
        cpu_q = proc_cpu_s(s.pid) - cpu0
        gb_full = s.get_job(b.id)
        hog.release()
        gb = s.wait_job(b.id, timeout=120)
        cases.append({"case": "queued-behind", "outcome": f"{T.JobState.Name(ga.state)} then "
                      f"{T.JobState.Name(gb_full.state)} while full, {T.JobState.Name(gb.state)} after",
                      "reason": ga.reason, "cpu_while_full_s": round(cpu_q, 2)})
        suite.check(ga.state == T.JOB_STATE_FAILED and "No space left on device" in ga.reason,
                    f"queued-behind: the running job {T.JobState.Name(ga.state)}: {ga.reason}")
        suite.check(cpu_q < 1.0, f"queued-behind: frostd used {cpu_q:.1f} s of CPU in 2 s with the disk full")
        suite.check(gb.state == T.JOB_STATE_SUCCEEDED, f"queued-behind: the queued job then {gb}")
        # Space again: a job succeeds without a restart.
        after = s.wait_job(s.submit(job_spec(rel), key="after").id, timeout=300)
        suite.check(after.state == T.JOB_STATE_SUCCEEDED, f"no job succeeds once the disk has space: {after}")
        suite.check(not serving_ok(s, p0), "serving broken after the disk was freed")
        listed = [(jb.id, jb.state, jb.reason, jb.artifact) for jb in s.list_jobs()]
        code = s.stop()
        s = None
        suite.check(code == 0, f"frostd exited {code} after SIGTERM")

        # The journal and the active artifact, on disk and after a restart.
        ic, rows = journal_snapshot(state)
        suite.check(ic == "ok", f"jobs.db integrity_check: {ic}")
        suite.check(sorted(rows) == sorted((i, st, r, a) for i, st, r, a in listed),
                    "jobs.db does not hold what ListJobs answered before the stop")
        with open(active_marker) as f:
            suite.check(f.read() == active0, "the ACTIVE marker changed")
        suite.check(lib.sha256_file(os.path.join(state, "artifacts", first.artifact, "prototype.safetensors"))
                    == sha0 == file_sha0, "the active artifact's tensor file changed")
        s = lib.Frostd(tmp, "diskfull-restart", state, data_root).start()
        again = [(jb.id, jb.state, jb.reason, jb.artifact) for jb in s.list_jobs()]
        suite.check(again == listed, "ListJobs after the restart differs from before")
        suite.check(predict_bytes(s) == p0, "Predict after the restart answers differently")
        code = s.stop()
        s = None
        suite.check(code == 0, f"restarted frostd exited {code} after SIGTERM")

        # A restart on the full volume: frostd starts, serves Predict of what is active, reports jobs
        # unavailable (Training UNAVAILABLE naming jobs.state_dir, frost.v1.Training NOT_SERVING) and takes
        # them back once there is space, without another restart.
        hog = DiskHog(os.path.join(mnt, "hog"))
        hog.full.wait(10)
        try:
            s = lib.Frostd(tmp, "diskfull-start", state, data_root, jobs={"state_retry_s": 1}).start()
            suite.check(predict_bytes(s) == p0, "Predict on a full state volume answers differently")
            training_ready = s.health.Check(health_pb2.HealthCheckRequest(service="frost.v1.Training"), timeout=5)
            suite.check(training_ready.status == health_pb2.HealthCheckResponse.NOT_SERVING,
                        f"frost.v1.Training is {training_ready.status} on a full state volume")
            try:
                s.list_jobs()
                suite.check(False, "ListJobs answered on a full state volume")
            except grpc.RpcError as e:
                suite.check(e.code() == Code.UNAVAILABLE and "jobs.state_dir" in e.details(),
                            f"ListJobs on a full state volume: {e.code().name}: {e.details()}")
        finally:
            hog.release()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = s.health.Check(health_pb2.HealthCheckRequest(service="frost.v1.Training"), timeout=5)
            if r.status == health_pb2.HealthCheckResponse.SERVING:
                break
            time.sleep(0.2)
        suite.check(r.status == health_pb2.HealthCheckResponse.SERVING,
                    "frost.v1.Training not SERVING 30 s after the state volume had space again")
        suite.check([(jb.id, jb.state, jb.reason, jb.artifact) for jb in s.list_jobs()] == listed,
                    "ListJobs after the state volume came back differs from before")
        code = s.stop()
        s = None
        suite.check(code == 0, f"frostd started on a full volume exited {code} after SIGTERM")
    finally:
        if s is not None:
            s.stop()
        subprocess.run(["umount", mnt], capture_output=True)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
    failed = sum(1 for c in cases if c.get("outcome") == "JOB_STATE_FAILED" or
                 str(c.get("outcome", "")).startswith("JOB_STATE_FAILED"))
    refused = sum(1 for c in cases if c.get("outcome") == "refused")
    succeeded = sum(1 for c in cases if c.get("outcome") == "JOB_STATE_SUCCEEDED")
    suite.fig(tmpfs_mib=size_mib, cases=cases)
    suite.report(
        f"jobs.state_dir on a {size_mib} MiB tmpfs filled in {len(cases)} ways: {refused} submit refused "
        f"(RESOURCE_EXHAUSTED naming jobs.db), {failed} jobs FAILED naming the file and 'No space left on device', "
        f"{succeeded} published before the disk filled; serving (Generate, Predict, health) unaffected, "
        f"max {max(c.get('cpu_while_full_s', 0) for c in cases):.2f} s CPU per 2 s while full; journal "
        f"integrity ok and unchanged, active artifact intact, same answers after a restart")



# ================================================================================================ corrupt


def damage(path, how, rng):
    """Damages a file in place; returns a description. how: 'truncate0' | 'truncate-half' | 'truncate-1' |
    'flip' (one random bit) | 'flip-in-row' (one random bit near a "job-" id: inside a journal row)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how in ("flip", "flip-in-row"):
        if how == "flip-in-row":  # inside a job row: a byte of its id, spec, reason or report
            starts = [i for i in range(len(data)) if data.startswith(b"job-", i)]
            off = min(len(data) - 1, rng.choice(starts) + rng.randrange(0, 64))
        else:
            off = rng.randrange(len(data))
        bit = rng.randrange(8)
        data[off] ^= 1 << bit
        desc = f"bit {bit} of byte {off}/{len(data)}"
    else:
        keep = {"truncate0": 0, "truncate-half": len(data) // 2, "truncate-1": len(data) - 1}[how]
        data = data[:keep]
        desc = f"truncated to {keep} bytes"
    with open(path, "wb") as f:
        f.write(data)
    return desc


def try_start(server, timeout=90):
    """Starts a Frostd; ('started', None) once readiness is SERVING, ('exited', code) when it stops first."""
    server.spawn()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            server.stop()
            return "exited", server.proc.returncode
        if os.path.exists(server.port_file):
            try:
                ports = lib.wait_for_port_file(server.proc, server.port_file, 5, lambda why: None)
                ch = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}")
                try:
                    r = health_pb2_grpc.HealthStub(ch).Check(
                        health_pb2.HealthCheckRequest(service=lib.READINESS_SERVICE), timeout=2)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        server.ports = ports
                        server.addr = f"127.0.0.1:{ports['grpc']}"
                        server.channel = grpc.insecure_channel(server.addr)
                        server.training = training_pb2_grpc.TrainingStub(server.channel)
                        server.admin = admin_pb2_grpc.AdminStub(server.channel)
                        server.prediction = prediction_pb2_grpc.PredictionStub(server.channel)
                        server.generation = generation_pb2_grpc.GenerationStub(server.channel)
                        server.health = health_pb2_grpc.HealthStub(server.channel)
                        return "started", None
                except grpc.RpcError:
                    pass
                finally:
                    ch.close()
            except (OSError, ValueError, TypeError, KeyError):
                pass
        time.sleep(0.1)
    server.stop()
    return "timeout", None


def jobs_view(server):
    return sorted(jb.SerializeToString(deterministic=True) for jb in server.list_jobs())


def suite_corrupt(suite, tmp):
    if not need_shared(suite):
        return
    rng = random.Random(777)
    n_flips_activation = sl.pick(6, 48)   # per artifact file, each at activation (one frostd)
    start_cases_artifact = sl.pick(3, 8)  # frostd starts on a damaged active artifact
    n_flips_journal = sl.pick(4, 32)
    data_root = os.path.join(tmp, "data")
    rel = lib.write_subset(data_root, n_rows=JOB_ROWS)
    golden = os.path.join(tmp, "golden")
    # Two artifacts: prototype/1 active, prototype/2 not (seeds differ, so their answers differ).
    s = lib.Frostd(tmp, "golden", golden, data_root).start()
    try:
        a1 = s.wait_job(s.submit(job_spec(rel), key="one").id, timeout=300)
        cfg2 = dict(JOB_CFG, seed="1")
        a2 = s.wait_job(s.submit(job_spec(rel, cfg2), key="two").id, timeout=300)
        if a1.state != T.JOB_STATE_SUCCEEDED or a2.state != T.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"golden jobs did not succeed: {a1} {a2}")
        s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a2.artifact), metadata=ADMIN)
        p2 = predict_bytes(s)
        s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a1.artifact), metadata=ADMIN)
        p1 = predict_bytes(s)
        golden_jobs = jobs_view(s)
    finally:
        stop_checked(suite, s, "golden")
    if p1 == p2:
        raise RuntimeError("the two golden artifacts answer alike: pick another seed")
    files = ("prototype.safetensors", "manifest.json", "artifact.json")
    results = {"activation": {}, "start": {}, "journal": {}}
    loaded = []

    def tally(where, key, outcome):
        results[where].setdefault(key, {}).setdefault(outcome, 0)
        results[where][key][outcome] += 1

    # ---- at activation: damage prototype/2, ask to activate it, restore.
    state = os.path.join(tmp, "state-activation")
    shutil.copytree(golden, state)
    s = lib.Frostd(tmp, "activation", state, data_root).start()
    try:
        art_dir = s.artifact_dir(a2.artifact)
        for fname in files:
            path = os.path.join(art_dir, fname)
            with open(path, "rb") as f:
                orig = f.read()
            for how in ["truncate0", "truncate-half", "truncate-1"] + ["flip"] * n_flips_activation:
                desc = damage(path, how, rng)
                with open(path, "rb") as f:
                    damaged = f.read()
                try:
                    s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a2.artifact), metadata=ADMIN,
                                             timeout=30)
                    outcome = "loaded"
                    same = predict_bytes(s) == p2
                    loaded.append(f"activation {fname} {desc}: activated ({'same' if same else 'different'} "
                                  f"answers)")
                    s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a1.artifact), metadata=ADMIN)
                except grpc.RpcError as e:
                    names = art_dir + "/" in (e.details() or "")  # a file of the artifact, by path
                    outcome = "refused" if names else "refused-unnamed"
                    suite.check(names, f"activation {fname} {desc}: refused without naming the file: "
                                       f"{e.code().name} {e.details()}")
                    suite.check(predict_bytes(s) == p1, f"activation {fname} {desc}: the active head changed")
                with open(path, "rb") as f:
                    suite.check(f.read() == damaged, f"activation {fname} {desc}: the damaged file was rewritten")
                tally("activation", fname, outcome)
                with open(path, "wb") as f:
                    f.write(orig)
        suite.check(not serving_ok(s, p1), "activation: serving broken after the refusals")
    finally:
        stop_checked(suite, s, "activation")

    # ---- at start: the active prototype/1 damaged.
    start_cases = [("prototype.safetensors", "truncate-half"), ("prototype.safetensors", "flip"),
                   ("manifest.json", "flip"), ("artifact.json", "truncate-1"), ("manifest.json", "truncate-half"),
                   ("artifact.json", "flip"), ("prototype.safetensors", "flip"), ("manifest.json", "flip")]
    for k, (fname, how) in enumerate(start_cases[:start_cases_artifact]):
        state = os.path.join(tmp, f"state-start{k}")
        shutil.copytree(golden, state)
        path = os.path.join(state, "artifacts", a1.artifact, fname)
        desc = damage(path, how, rng)
        with open(path, "rb") as f:
            damaged = f.read()
        s = lib.Frostd(tmp, f"start{k}", state, data_root)
        outcome, code = try_start(s)
        if outcome == "started":
            try:
                p = predict_bytes(s)
                outcome = "loaded"
                loaded.append(f"start {fname} {desc}: served ({'same' if p == p1 else 'different'} answers)")
            except grpc.RpcError as e:
                log = s.log()
                named = path in log or os.path.join(state, "artifacts", a1.artifact) in log
                outcome = "refused" if named else "refused-unnamed"
                suite.check(named, f"start {fname} {desc}: not served, but the log does not name the file")
                suite.check(e.code() == Code.FAILED_PRECONDITION, f"start {fname} {desc}: Predict {e.code().name}")
                suite.check(not serving_ok(s, None) or "Predict" in serving_ok(s, None),
                            f"start {fname} {desc}: Generate/health broken: {serving_ok(s, None)}")
            stop_checked(suite, s, f"start {fname}")
        else:
            suite.check(False, f"start {fname} {desc}: frostd {outcome} ({code}) instead of serving without the "
                               f"head\n{s.log()[-2000:]}")
        with open(path, "rb") as f:
            suite.check(f.read() == damaged, f"start {fname} {desc}: the damaged file was rewritten")
        with open(os.path.join(state, "artifacts", "prototype", "ACTIVE")) as f:
            suite.check(f.read() == a1.artifact, f"start {fname} {desc}: the ACTIVE marker was replaced")
        tally("start", fname, outcome)
        shutil.rmtree(state, ignore_errors=True)

    # ---- the job journal.
    jcases = ["truncate0", "truncate-half", "truncate-1"] + ["flip"] * n_flips_journal + \
        ["flip-in-row"] * sl.pick(2, 8)
    for k, how in enumerate(jcases):
        state = os.path.join(tmp, f"state-journal{k}")
        shutil.copytree(golden, state)
        path = os.path.join(state, "jobs.db")
        desc = damage(path, how, rng)
        with open(path, "rb") as f:
            damaged = f.read()
        s = lib.Frostd(tmp, f"journal{k}", state, data_root)
        outcome, code = try_start(s)
        if outcome == "exited":
            named = path in s.log()
            outcome = "refused" if named else "refused-unnamed"
            suite.check(named, f"journal {desc}: frostd exited {code} without naming {path}:\n{s.log()[-1500:]}")
            with open(path, "rb") as f:
                suite.check(f.read() == damaged, f"journal {desc}: the damaged journal was rewritten")
        elif outcome == "started":
            try:
                same = jobs_view(s) == golden_jobs
                outcome = "started-identical" if same else "loaded"
                if not same:
                    loaded.append(f"journal {desc}: frostd started and lists other jobs")
            except grpc.RpcError as e:
                outcome = "refused-late"
                loaded.append(f"journal {desc}: frostd started, ListJobs then {e.code().name}: {e.details()}")
            stop_checked(suite, s, f"journal {desc}")
        else:
            suite.check(False, f"journal {desc}: frostd neither served nor exited")
        tally("journal", how, outcome)
        shutil.rmtree(state, ignore_errors=True)

    suite.check(not loaded, f"damaged files loaded: {loaded[:20]}")
    suite.fig(results=results, loaded=loaded)

    def summary(where):
        tot = {}
        for per in results[where].values():
            for o, n in per.items():
                tot[o] = tot.get(o, 0) + n
        return ", ".join(f"{n} {o}" for o, n in sorted(tot.items()))

    suite.report(
        f"artifact files damaged at activation: {summary('activation')}; active artifact damaged at start: "
        f"{summary('start')} (frostd serves Generate without the head, the log names the file); job journal "
        f"damaged: {summary('journal')} (refused = frostd exits naming jobs.db; started-identical = a flip in "
        f"unused bytes)")


# ================================================================================================ main

SUITES = {
    "streams": suite_streams,
    "slow_readers": suite_slow_readers,
    "health": suite_health,
    "kill9": suite_kill9,
    "disk_full": suite_disk_full,
    "corrupt": suite_corrupt,
}


def default_out():
    if os.environ.get("SOAK_OUT"):
        return os.environ["SOAK_OUT"]
    if sl.scale() == "full":
        return os.path.join(sl.SOURCE_DIR, "bench", "results", "soak.json")
    build = os.path.dirname(os.path.dirname(lib.frostd_binary()))
    return os.path.join(build, "soak", "soak.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="*", choices=list(SUITES) + [[]], default=[],
                    help="suites to run (default: all)")
    ap.add_argument("--out", help="JSON report (merged with the suites already in it)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    names = args.suites or list(SUITES)
    out = args.out or default_out()
    lib.frostd_binary()  # fails early without FROST_FROSTD
    print(f"soak: scale {sl.scale()}, suites {' '.join(names)}, report {out}", flush=True)
    done = []
    t0 = time.monotonic()
    for name in names:
        suite = sl.Suite(name)
        tmp = sl.tempdir(f"frost-soak-{name}-")
        try:
            SUITES[name](suite, tmp)
        except Exception as e:  # a crashed suite is a failed one; the others still run
            import traceback
            traceback.print_exc()
            suite.check(False, f"suite raised {type(e).__name__}: {str(e)[:3000]}")
        finally:
            if args.keep or suite.failures:
                print(f"soak.{name}: files kept in {tmp}", flush=True)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        if not suite.line:
            suite.report("FAILED before its figure" if suite.failures else "no figure")
        done.append(suite)
        sl.write_report(out, [suite])
    failed = [s.name for s in done if s.failures]
    print(f"soak: {len(done)} suites in {time.monotonic() - t0:.0f} s, "
          f"{'failed: ' + ' '.join(failed) if failed else 'all passed'}; report {out}", flush=True)
    if failed:
        return 1
    if all(s.skipped for s in done):
        return sl.SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
