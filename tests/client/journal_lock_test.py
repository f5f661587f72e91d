#!/usr/bin/python3
"""Integration test (label "integration"): a journal writer that holds the journal's lock does not delay
Admin.GetServerInfo or the first message of Training.WatchJob (issue 54, "callbacks that never wait on disk").

A frostd with jobs enabled (stories260K, a 200-row subset of ../shared/data/emobank_valence) runs a long
prototype job. The test then takes the SQLite write lock of <state_dir>/jobs.db from another connection
(BEGIN EXCLUSIVE) for HOLD_S seconds and submits a second job: frostd's SubmitJob, and the running job's
progress commits, wait for that lock inside the journal writer (up to its 10 s busy timeout), holding the
journal's own write mutex. Meanwhile GetServerInfo (its job counts: in memory, core/jobs/scheduler.h) and
WatchJob on the running job (its first read: on the training executor, through the journal's read connection,
core/jobs/journal.h) must each answer within ANSWER_S. Before issue 54 both read the journal behind that
mutex and answered only once the lock was released. ~30 s.

Environment: FROST_FROSTD (frostd), FROST_SHARED (models and data; exit 77, skipped, without them), PYTHONPATH
with the stubs and client/python (frost_testlib).
"""

import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from frost.v1 import admin_pb2
    from frost.v1 import training_pb2 as T
    import frost_testlib as lib
    from frost_testlib import ADMIN, Frostd
except ImportError as e:
    print(f"journal_lock_test: FAIL: cannot import the stubs ({e})", file=sys.stderr)
    sys.exit(1)

HOLD_S = 5.0    # how long the other connection holds the journal's write lock
ANSWER_S = 1.0  # how soon each call must answer meanwhile
# A prototype job that is still running when the lock is taken (tests/client/jobs_common.py VERY_LONG).
VERY_LONG = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
             "epochs_a": "2", "epochs_b": "200"}


class JournalLockTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="frost-journal-lock-")
        cls.data_root = os.path.join(cls.tmp, "data")
        cls.train_rel = lib.write_subset(cls.data_root, n_rows=200)
        cls.s = Frostd(cls.tmp, "main", os.path.join(cls.tmp, "state"), cls.data_root).start()

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        log = cls.s.log()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if code != 0:
            raise AssertionError(f"frostd exited with {code} after SIGTERM\n--- frostd output ---\n{log}")

    def spec(self, key):
        return T.PrototypeJobSpec(train_path=self.train_rel, config=VERY_LONG), key

    def test_a_held_journal_lock_delays_neither_server_info_nor_watch_job(self):
        s = self.s
        running = s.submit(*self.spec("running"))
        running = s.wait_job(running.id, timeout=120, states=(T.JOB_STATE_RUNNING,))

        db = sqlite3.connect(os.path.join(s.state_dir, "jobs.db"), timeout=30, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")  # in WAL mode: the write lock; readers go on
        t_locked = time.monotonic()
        blocked = {}

        def submit_behind_the_lock():
            try:
                blocked["job"] = s.submit(*self.spec("behind-the-lock"))
            except grpc.RpcError as e:
                blocked["error"] = e
            blocked["t"] = time.monotonic()

        writer = threading.Thread(target=submit_behind_the_lock)
        writer.start()
        try:
            time.sleep(1.0)  # the submit is in the journal writer by now, waiting for the lock
            self.assertTrue(writer.is_alive(), f"SubmitJob did not wait for the held lock: {blocked}")

            t0 = time.monotonic()
            info = s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN, timeout=30)
            took = time.monotonic() - t0
            self.assertLess(took, ANSWER_S, f"GetServerInfo took {took:.2f} s while the journal was locked")
            self.assertEqual(info.jobs_running, 1, info)

            t0 = time.monotonic()
            stream = s.training.WatchJob(T.WatchJobRequest(id=running.id), metadata=ADMIN, timeout=30)
            first = next(stream)
            took = time.monotonic() - t0
            stream.cancel()
            self.assertLess(took, ANSWER_S, f"WatchJob's first message took {took:.2f} s while the journal was locked")
            self.assertEqual(first.job.id, running.id)
            self.assertEqual(first.job.state, T.JOB_STATE_RUNNING, first)
            self.assertTrue(writer.is_alive(), "the lock was not held through both calls")
            time.sleep(max(0.0, HOLD_S - (time.monotonic() - t_locked)))
        finally:
            db.execute("ROLLBACK")
            db.close()
            writer.join(timeout=60)
        # The writer went on once the lock was released; both jobs are then cancelled.
        self.assertIn("job", blocked, blocked)
        self.assertGreaterEqual(blocked["t"] - t_locked, HOLD_S - 0.5, "SubmitJob did not wait for the lock")
        for job in (running, blocked["job"]):
            s.training.CancelJob(T.CancelJobRequest(id=job.id), metadata=ADMIN, timeout=30)
            s.wait_job(job.id, timeout=120)
        info = s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN, timeout=30)
        self.assertEqual((info.jobs_queued, info.jobs_running), (0, 0), info)


if __name__ == "__main__":
    if not os.path.isdir(lib.model_path()) or not os.path.isdir(lib.emobank_dir()):
        print(f"SKIP: needs {lib.model_path()} and {lib.emobank_dir()}")
        sys.exit(77)
    unittest.main(verbosity=2)
