"""The jobs test's crash recovery (run by tests/client/jobs_test.py): kill -9 and SIGTERM during training,
INTERRUPTED after max_attempts, and kill -9 inside a checkpoint write.
"""

from jobs_common import *  # noqa: F401,F403 (the shared imports, constants and helpers)


class CrashRecoveryTest(unittest.TestCase):
    """kill -9 while a job trains and inside a checkpoint write; the resumed jobs must produce the
    same prototype.safetensors as an uninterrupted run of the same spec (jobs.threads: 1)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="frost-crash-")
        try:
            cls.make_reference()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def make_reference(cls):
        cls.data_root = os.path.join(cls.tmp, "data")
        cls.train_rel = lib.write_subset(cls.data_root)
        ref = Frostd(cls.tmp, "reference", os.path.join(cls.tmp, "state-ref"), cls.data_root).start()
        try:
            j = ref.submit(prototype_spec(cls.train_rel, LONG), key="reference")
            j = ref.wait_job(j.id, timeout=300)
            if j.state != T.JOB_STATE_SUCCEEDED:
                raise RuntimeError(f"reference job did not succeed: {j}\n{ref.log()}")
            m = ref.artifact_manifest(j.artifact)
            cls.ref_sha = m["tensors"]["sha256"]
            if lib.sha256_file(os.path.join(ref.artifact_dir(j.artifact), m["tensors"]["file"])) != cls.ref_sha:
                raise RuntimeError("the reference artifact does not match its manifest")
            if m.get("report", {}).get("resumed") is not False:
                raise RuntimeError(f"the reference run is not an uninterrupted one: {m.get('report')}")
        finally:
            code = ref.stop()
        if code != 0:
            raise RuntimeError(f"reference frostd exited with {code}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def manifest_sha(self, server, artifact):
        m = server.artifact_manifest(artifact)
        sha = m["tensors"]["sha256"]
        self.assertEqual(lib.sha256_file(os.path.join(server.artifact_dir(artifact), m["tensors"]["file"])), sha)
        return sha, m

    def test_07_kill9_during_training_resumes(self):
        state = os.path.join(self.tmp, "state-kill9")
        s = Frostd(self.tmp, "kill9", state, self.data_root).start()
        try:
            long_job = s.submit(prototype_spec(self.train_rel, LONG), key="long")
            queued = s.submit(prototype_spec(self.train_rel, SMALL), key="queued")
            ckpt = os.path.join(state, "jobs", long_job.id, "checkpoint.safetensors")
            deadline = time.monotonic() + 300
            while True:
                j = s.get_job(long_job.id)
                self.assertIn(j.state, (T.JOB_STATE_QUEUED, T.JOB_STATE_RUNNING), j)
                spe = int(j.progress.steps_total) // (int(LONG["epochs_a"]) + int(LONG["epochs_b"])) \
                    if j.progress.steps_total else 0
                if (j.progress.stage == "stage_b" and j.progress.step >= int(LONG["epochs_a"]) * spe + 12
                        and os.path.exists(ckpt)):
                    break
                self.assertLess(time.monotonic(), deadline, f"job never reached stage B: {j}")
                time.sleep(0.02)
            self.assertEqual(s.get_job(queued.id).state, T.JOB_STATE_QUEUED)
            step_at_kill = j.progress.step
            code = s.kill9()
            self.assertEqual(code, -signal.SIGKILL)
        except BaseException:
            s.stop()
            print(s.log(), file=sys.stderr)
            raise
        self.assertTrue(os.path.exists(ckpt), "the checkpoint is gone after the kill")

        s2 = Frostd(self.tmp, "kill9-restart", state, self.data_root).start()
        try:
            j = s2.get_job(long_job.id)
            self.assertIn(j.state, (T.JOB_STATE_QUEUED, T.JOB_STATE_RUNNING), j)
            self.assertIn("resumed", j.reason, j)
            self.assertIn(s2.get_job(queued.id).state, (T.JOB_STATE_QUEUED, T.JOB_STATE_RUNNING))
            done = s2.wait_job(long_job.id, timeout=300)
            self.assertEqual(done.state, T.JOB_STATE_SUCCEEDED, f"{done}\n{s2.log()}")
            self.assertEqual(done.attempts, 2)
            q = s2.wait_job(queued.id, timeout=300)
            self.assertEqual(q.state, T.JOB_STATE_SUCCEEDED, f"{q}\n{s2.log()}")
            self.assertEqual(q.attempts, 1)
            self.assertIn("resuming from", s2.log())
            sha, m = self.manifest_sha(s2, done.artifact)
            self.assertIs(m["report"].get("resumed"), True, "the restarted job did not resume from its checkpoint")
            self.assertEqual(
                sha, self.ref_sha,
                f"RESUME IS NOT BIT-IDENTICAL: job {done.id} killed at global step {step_at_kill} (stage B) and "
                f"resumed produced prototype.safetensors sha256 {sha}, the uninterrupted run of the same spec "
                f"{self.ref_sha}")
            self.assertFalse(os.path.exists(os.path.join(state, "jobs", long_job.id)))
        finally:
            code = s2.stop()
        self.assertEqual(code, 0, s2.log())

    def test_07b_sigterm_during_training_resumes(self):
        """SIGTERM: the running job checkpoints where it is, goes back to QUEUED, resumes at the next
        start and ends bit-identical to the uninterrupted run."""
        state = os.path.join(self.tmp, "state-sigterm")
        s = Frostd(self.tmp, "sigterm", state, self.data_root).start()
        try:
            job = s.submit(prototype_spec(self.train_rel, LONG), key="sigterm")
            deadline = time.monotonic() + 300
            while True:
                j = s.get_job(job.id)
                if j.progress.stage == "stage_b":
                    break
                self.assertLess(time.monotonic(), deadline, f"job never reached stage B: {j}")
                time.sleep(0.02)
            time.sleep(0.3)  # somewhere inside stage B, not on a checkpoint_every boundary as a rule
        finally:
            code = s.stop()
        self.assertEqual(code, 0, s.log())
        self.assertIn("QUEUED", s.log())
        self.assertTrue(os.path.exists(os.path.join(state, "jobs", job.id, "checkpoint.safetensors")))

        s2 = Frostd(self.tmp, "sigterm-restart", state, self.data_root).start()
        try:
            done = s2.wait_job(job.id, timeout=300)
            self.assertEqual(done.state, T.JOB_STATE_SUCCEEDED, f"{done}\n{s2.log()}")
            self.assertEqual(done.attempts, 2)
            sha, m = self.manifest_sha(s2, done.artifact)
            self.assertIs(m["report"].get("resumed"), True)
            self.assertEqual(sha, self.ref_sha, "RESUME AFTER SIGTERM IS NOT BIT-IDENTICAL to the uninterrupted run")
        finally:
            code = s2.stop()
        self.assertEqual(code, 0, s2.log())

    def test_07c_interrupted_after_max_attempts(self):
        state = os.path.join(self.tmp, "state-maxattempts")
        s = Frostd(self.tmp, "maxattempts", state, self.data_root, jobs={"max_attempts": 1}).start()
        try:
            job = s.submit(prototype_spec(self.train_rel, LONG), key="once")
            deadline = time.monotonic() + 300
            while s.get_job(job.id).progress.stage not in ("stage_a", "stage_b"):
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            s.kill9()
        except BaseException:
            s.stop()
            raise
        s2 = Frostd(self.tmp, "maxattempts-restart", state, self.data_root, jobs={"max_attempts": 1}).start()
        try:
            j = s2.get_job(job.id)
            self.assertEqual(j.state, T.JOB_STATE_INTERRUPTED, j)
            self.assertEqual(j.attempts, 1)
            self.assertIn("max_attempts", j.reason)
            self.assertGreater(j.finished_unix, 0)
            self.assertEqual(j.artifact, "")
            self.assertEqual(rpc_code(s2.training.CancelJob, T.CancelJobRequest(id=job.id), metadata=ADMIN,
                                      timeout=30), Code.FAILED_PRECONDITION)
            time.sleep(0.5)
            self.assertEqual(s2.get_job(job.id).state, T.JOB_STATE_INTERRUPTED)
        finally:
            code = s2.stop()
        self.assertEqual(code, 0, s2.log())

    def test_08_kill_inside_checkpoint_write(self):
        state = os.path.join(self.tmp, "state-failpoint")
        s = Frostd(self.tmp, "failpoint", state, self.data_root,
                   env={"FROST_FAILPOINT": "kill_before_rename:checkpoint"}).start()
        job = s.submit(prototype_spec(self.train_rel, LONG), key="failpoint")
        code = s.wait_exit(timeout=300)
        if code is None:
            s.stop()
            self.fail(f"the failpoint did not kill frostd\n{s.log()}")
        self.assertEqual(code, -signal.SIGKILL, s.log())
        # The crash left a written-but-not-renamed checkpoint and a partial artifact directory.
        jdir = os.path.join(state, "jobs", job.id)
        self.assertFalse(os.path.exists(os.path.join(jdir, "checkpoint.safetensors")))
        self.assertTrue([n for n in os.listdir(jdir) if n.startswith("checkpoint.safetensors.tmp")], os.listdir(jdir))
        adir = os.path.join(state, "artifacts")
        partial = [n for n in os.listdir(adir) if n.startswith(".tmp-")]
        self.assertTrue(partial, os.listdir(adir))

        s2 = Frostd(self.tmp, "failpoint-restart", state, self.data_root).start()
        try:
            # (The resumed job may already be writing its own new .tmp- directory.)
            left = [n for n in os.listdir(adir) if n in partial]
            self.assertEqual(left, [], "a partial artifact survived the restart")
            self.assertEqual(list(s2.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(), metadata=ADMIN).artifacts),
                             [])
            done = s2.wait_job(job.id, timeout=300)
            self.assertEqual(done.state, T.JOB_STATE_SUCCEEDED, f"{done}\n{s2.log()}")
            self.assertEqual(done.attempts, 2)
            sha, m = self.manifest_sha(s2, done.artifact)
            # Nothing to resume from: the temp file of the interrupted write must not have been loaded.
            self.assertIs(m["report"].get("resumed"), False)
            self.assertEqual(sha, self.ref_sha, "the re-run after a crash inside a checkpoint write differs from an "
                                                "uninterrupted run")
            arts = s2.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(), metadata=ADMIN).artifacts
            self.assertEqual([a.name for a in arts], [done.artifact])
            for a in arts:
                self.assertTrue(os.path.isfile(os.path.join(s2.artifact_dir(a.name), "manifest.json")))
                self.assertTrue(os.path.isfile(os.path.join(s2.artifact_dir(a.name), "artifact.json")))
            self.assertEqual([n for n in os.listdir(adir) if n.startswith(".tmp-")], [])
            self.assertFalse(os.path.exists(jdir))
            # It serves.
            s2.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=done.artifact), metadata=ADMIN)
            r = s2.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS[:1]), timeout=30)
            self.assertEqual(r.artifact, done.artifact)
        finally:
            code = s2.stop()
        self.assertEqual(code, 0, s2.log())
