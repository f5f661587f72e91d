"""The kill9 suite of tests/soak/soak_test.py: kill -9 of frostd at random points of training jobs, restarts
on the same state directory, no acknowledged job lost or duplicated, results bit-identical.
"""

from soak_common import *  # noqa: F401,F403 (the stubs, the job config and the helpers the suites share)


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
