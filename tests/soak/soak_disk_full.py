"""The disk_full suite of tests/soak/soak_test.py: jobs.state_dir on a small tmpfs filled up; jobs fail
naming the full disk while serving continues (needs root for the mount; skipped otherwise).
"""

from soak_common import *  # noqa: F401,F403 (the stubs, the job config and the helpers the suites share)


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
