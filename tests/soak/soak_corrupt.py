"""The corrupt suite of tests/soak/soak_test.py: truncated and bit-flipped artifact files and job journals
refused at start or activation, naming the file, never served, never replaced.
"""

from soak_common import *  # noqa: F401,F403 (the stubs, the job config and the helpers the suites share)


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
                        server.open_stubs()
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
