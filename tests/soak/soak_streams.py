"""The streams suite of tests/soak/soak_test.py: N streams with random cancels, exact completions,
counters that match the clients, bounded RSS, no stream left hanging.
"""

from soak_common import *  # noqa: F401,F403 (the stubs, the job config and the helpers the suites share)


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
