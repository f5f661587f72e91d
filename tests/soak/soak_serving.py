"""The serving-pressure suites of tests/soak/soak_test.py: slow_readers (clients that stop reading mid-stream)
and health (every slot busy and the queue full; liveness and readiness stay fast).
"""

from soak_common import *  # noqa: F401,F403 (the stubs, the job config and the helpers the suites share)


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
