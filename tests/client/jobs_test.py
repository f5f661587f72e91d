#!/usr/bin/python3
"""Integration test (slow, label "integration") of frostd's training jobs, artifact registry and
Prediction service, through the generated Python stubs against real frostd processes running
the stories260K backbone on a 1500-row subset of emobank_valence (written to a temp data root).

Covers: submit → watch → activate → predict; idempotent submits; the bearer-token matrix of
every RPC (with and without auth.require_for_inference) and that tokens never reach the log or
/metrics; data paths leading out of jobs.data_root; invalid specs; cancelling queued, running
and finished jobs; kill -9 during training (resume from the checkpoint, bit-identical to an
uninterrupted run), SIGTERM during training (same), INTERRUPTED after max_attempts, kill -9
inside a checkpoint write (failpoint); hot-swapping artifacts under
Predict load and refusing a corrupt one; the state-directory lock.

Environment (ctest sets them; see tests/CMakeLists.txt):
  FROST_FROSTD   path of the frostd binary (required)
  FROST_SHARED   the shared models/data directory (default: <source>/../shared)
  PYTHONPATH     <build>/client/python (generated stubs); tests/client (frost_testlib) is added here

Run by hand:
  PYTHONPATH=build/client/python FROST_FROSTD=build/server/frostd /usr/bin/python3 tests/client/jobs_test.py
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The groups live in their own modules; JobsServiceTest runs them all against one server.
from jobs_common import *  # noqa: F401,F403,E402 (the shared imports, constants and helpers)
from jobs_basic import JobsBasicTests  # noqa: E402
from jobs_crash import CrashRecoveryTest  # noqa: E402,F401 (run by unittest.main from this module)
from jobs_replicas import JobsReplicaTests  # noqa: E402
from jobs_swap import JobsSwapTests  # noqa: E402


class JobsServiceTest(JobsBasicTests, JobsSwapTests, JobsReplicaTests, unittest.TestCase):
    """One frostd (auth.require_for_inference: false) for the class, with two trained artifacts
    (seeds 0 and 1) shared between the tests."""

    @classmethod
    def setUpClass(cls):
        cls.t0 = time.monotonic()
        cls.tmp = tempfile.mkdtemp(prefix="frost-jobs-")
        try:
            cls.data_root = os.path.join(cls.tmp, "data")
            cls.train_rel = lib.write_subset(cls.data_root)
            cls.train_rows = lib.read_rows(os.path.join(cls.data_root, cls.train_rel))
            cls.server = Frostd(cls.tmp, "main", os.path.join(cls.tmp, "state"), cls.data_root).start()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        s = cls.server
        try:
            # Artifact A (seed 0), watched from submit to the end; artifact B (seed 1).
            cls.job_a = s.submit(prototype_spec(cls.train_rel, SMALL), key="artifact-a")
            cls.events_a = s.watch(cls.job_a.id)
            cls.job_b = s.submit(prototype_spec(cls.train_rel, dict(SMALL, seed="1")), key="artifact-b")
            cls.job_b = s.wait_job(cls.job_b.id, timeout=300)
            cls.job_a = s.get_job(cls.job_a.id)
        except BaseException:
            s.stop()
            print(s.log(), file=sys.stderr)
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        if cls.job_a.state != T.JOB_STATE_SUCCEEDED or cls.job_b.state != T.JOB_STATE_SUCCEEDED:
            s.stop()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise RuntimeError(f"setup jobs did not succeed:\n{cls.job_a}\n{cls.job_b}\n{s.log()}")
        cls.art_a, cls.art_b = cls.job_a.artifact, cls.job_b.artifact

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        log = cls.server.log()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if code != 0:
            raise AssertionError(f"frostd exited with {code} after SIGTERM (expected 0)\n--- frostd output ---\n{log}")
        for tok in (ADMIN_TOKEN, USER_TOKEN, WRONG_TOKEN):
            if tok in log:
                raise AssertionError(f"a bearer token appears in frostd's log: {tok}")

    def setUp(self):
        self.s = self.server

    def job_count(self):
        return len(self.s.list_jobs())

    def assert_prototypes_from_training_rows(self, prototypes):
        by_text = rows_by_text(self.train_rows)
        for p in prototypes:
            self.assertIn(p.text, by_text, f"prototype text not in the training file: {p}")
            self.assertTrue(any(abs(p.label - lab) <= 1e-5 for lab in by_text[p.text]),
                            f"prototype label {p.label} is not the label of {p.text!r} ({by_text[p.text]})")
            self.assertGreaterEqual(p.weight, 0.0)
            self.assertLessEqual(p.weight, 1.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
