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

import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from google.protobuf import symbol_database
    from frost.v1 import admin_pb2
    from frost.v1 import generation_pb2
    from frost.v1 import prediction_pb2
    from frost.v1 import training_pb2
    from inference import open_inference_pb2 as oip
    from inference import open_inference_pb2_grpc as oip_grpc
    import frost_testlib as lib
except ImportError as e:
    print(f"jobs_test: FAIL: cannot import the stubs ({e}); needs python3-grpcio, python3-protobuf and the "
          "frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

from frost_testlib import ADMIN, USER, ADMIN_TOKEN, USER_TOKEN, Frostd

T = training_pb2
Code = grpc.StatusCode

# A small, fast prototype config (≈3 s per job on the 1500-row subset with 1 thread).
SMALL = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
         "epochs_a": "1", "epochs_b": "1"}
# Long enough to be killed in stage B (≈8 s): 2 + 8 epochs of 43 steps, a checkpoint every 5 steps.
LONG = dict(SMALL, epochs_a="2", epochs_b="8")
# For a job that must still be running when it is cancelled.
VERY_LONG = dict(SMALL, epochs_a="2", epochs_b="200")

WRONG_TOKEN = "wr0ng-T0ken-5a5a5a5a5a5a5a5a"
STAGE_RANK = {"features": 1, "stage_a": 2, "cache": 3, "stage_b": 4, "finalize": 5, "evaluate": 6, "done": 7}
PREDICT_TEXTS = ["I love this wonderful sunny day!", "The meeting was moved to Tuesday.",
                 "Everything went terribly wrong and I am furious."]


def state_name(s):
    return T.JobState.Name(s)


def rpc_code(fn, *args, **kwargs):
    """The status code of a call (OK when it returns)."""
    try:
        r = fn(*args, **kwargs)
        if hasattr(r, "__iter__") and not hasattr(r, "SerializeToString"):
            for _ in r:
                pass
        return Code.OK
    except grpc.RpcError as e:
        return e.code()


def message_class(descriptor):
    return symbol_database.Default().GetSymbol(descriptor.full_name)


def all_methods():
    """(service descriptor, method descriptor) for every method of the four frost services."""
    out = []
    for module, service in ((training_pb2, "Training"), (admin_pb2, "Admin"), (prediction_pb2, "Prediction"),
                            (generation_pb2, "Generation")):
        sd = module.DESCRIPTOR.services_by_name[service]
        for m in sd.methods:
            out.append((sd, m))
    return out


def call_method(channel, sd, m, metadata):
    """Calls sd/m with a default request; returns (code, details). Streams are read to the end."""
    req_cls, resp_cls = message_class(m.input_type), message_class(m.output_type)
    path = f"/{sd.full_name}/{m.name}"
    kw = dict(request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString)
    try:
        if m.client_streaming:
            raise AssertionError(f"{path}: client streaming is not expected")
        if m.server_streaming:
            for _ in channel.unary_stream(path, **kw)(req_cls(), metadata=metadata, timeout=60):
                pass
        else:
            channel.unary_unary(path, **kw)(req_cls(), metadata=metadata, timeout=60)
        return Code.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def rows_by_text(rows):
    out = {}
    for r in rows:
        out.setdefault(r["text"], []).append(float(r["label"]))
    return out


def prototype_spec(train_path, cfg, **kw):
    return T.PrototypeJobSpec(train_path=train_path, config=cfg, **kw)


class JobsServiceTest(unittest.TestCase):
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

    # -- 1 -------------------------------------------------------------------------------------

    def test_01_train_activate_predict(self):
        ev = [e.job for e in self.events_a]
        self.assertGreater(len(ev), 3, "WatchJob sent too few events")
        self.assertEqual(ev[-1].state, T.JOB_STATE_SUCCEEDED, ev[-1])
        self.assertEqual(ev[-1].id, self.job_a.id)
        for j in ev[:-1]:
            self.assertIn(j.state, (T.JOB_STATE_QUEUED, T.JOB_STATE_RUNNING), j)
        states = [j.state for j in ev]
        self.assertEqual(states, sorted(states), "job states went backwards")
        # Progress: known stage names in pipeline order; the global step never goes back.
        stages = [j.progress.stage for j in ev if j.progress.stage]
        for st in stages:
            self.assertIn(st, STAGE_RANK, f"unknown progress stage {st!r}")
        ranks = [STAGE_RANK[st] for st in stages]
        self.assertEqual(ranks, sorted(ranks), f"stages out of order: {stages}")
        for st in ("features", "stage_a", "stage_b"):
            self.assertIn(st, stages)
        steps = [(j.progress.step, j.progress.steps_total) for j in ev if j.progress.stage in ("stage_a", "stage_b")]
        self.assertEqual([s for s, _ in steps], sorted(s for s, _ in steps), "progress steps went backwards")
        totals = {t for _, t in steps}
        self.assertEqual(len(totals), 1, totals)
        self.assertGreater(totals.pop(), 0)
        # (WatchJob may skip events a slow reader cannot keep up with, but not the order.)
        self.assertGreater(steps[-1][0], steps[0][0])
        self.assertTrue(ev[-1].artifact.startswith("prototype/"), ev[-1].artifact)
        self.assertEqual(ev[-1].artifact, self.art_a)
        self.assertEqual(self.job_a.attempts, 1)
        self.assertGreater(self.job_a.finished_unix, self.job_a.started_unix)
        self.assertGreater(len(self.job_a.report_json), 0)
        json.loads(self.job_a.report_json)

        arts = {a.name: a for a in self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(), metadata=ADMIN).artifacts}
        self.assertIn(self.art_a, arts)
        a = arts[self.art_a]
        self.assertFalse(a.active, "activate=false artifact is active")
        self.assertEqual((a.kind, a.job_id), ("prototype", self.job_a.id))
        self.assertGreater(a.bytes, 0)

        r = self.s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=self.art_a), metadata=ADMIN)
        self.assertEqual(r.name, self.art_a)
        self.assertTrue(r.active)
        arts = {a.name: a for a in self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(), metadata=ADMIN).artifacts}
        self.assertTrue(arts[self.art_a].active)
        info = self.s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN)
        self.assertEqual(list(info.active_artifacts), [self.art_a])

        resp = self.s.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=60)
        self.assertEqual(resp.artifact, self.art_a)
        self.assertEqual((resp.label_min, resp.label_max), (1.0, 5.0))  # meta.json of emobank_valence
        self.assertEqual(len(resp.results), len(PREDICT_TEXTS))
        for res in resp.results:
            self.assertTrue(math.isfinite(res.value))
            self.assertGreaterEqual(res.value, resp.label_min)
            self.assertLessEqual(res.value, resp.label_max)
            self.assertEqual(len(res.prototypes), 3)  # default top_k
            self.assert_prototypes_from_training_rows(res.prototypes)
            w = [p.weight for p in res.prototypes]
            self.assertEqual(w, sorted(w, reverse=True), "prototypes not by descending weight")
        # The artifact's stored prototypes are training rows too.
        self.assert_prototypes_from_training_rows(
            [prediction_pb2.PrototypeRef(text=p["text"], label=p["label"], weight=0)
             for p in self.s.artifact_manifest(self.art_a)["prototypes"]])

    # -- 2 -------------------------------------------------------------------------------------

    def test_02_idempotent_submit(self):
        before = self.job_count()
        key = "idem-key-0001"
        rows = [T.TrainingRow(text=r["text"], label=r["label"]) for r in self.train_rows[:40]]
        spec = T.PrototypeJobSpec(inline_rows=T.InlineRows(rows=rows), label_min=1, label_max=5,
                                  holdout_fraction=0, config=dict(SMALL, K="4"))
        j1 = self.s.submit(spec, key=key)
        j2 = self.s.submit(spec, key=key)
        # A retry with another spec and priority still answers with the first job.
        j3 = self.s.submit(prototype_spec(self.train_rel, SMALL), key=key, priority=7)
        self.assertEqual(j1.id, j2.id)
        self.assertEqual(j1.id, j3.id)
        self.assertEqual(j3.priority, 0)
        self.assertEqual(j1.idempotency_key, key)
        jobs = self.s.list_jobs()
        self.assertEqual(len(jobs), before + 1)
        self.assertEqual([j.id for j in jobs if j.idempotency_key == key], [j1.id])
        done = self.s.wait_job(j1.id, timeout=300)
        self.assertEqual(done.state, T.JOB_STATE_SUCCEEDED, done)
        # After it ended, the key still names it.
        self.assertEqual(self.s.submit(spec, key=key).id, j1.id)
        self.assertEqual(self.job_count(), before + 1)

    # -- 3 -------------------------------------------------------------------------------------

    def check_auth_matrix(self, server, require_for_inference):
        methods = all_methods()
        names = {f"{sd.name}/{m.name}" for sd, m in methods}
        for expected in ("Training/SubmitJob", "Training/WatchJob", "Admin/DeleteArtifact", "Prediction/Predict",
                         "Generation/Generate"):
            self.assertIn(expected, names)
        channel = grpc.insecure_channel(server.addr)
        bad_for_authorized = (Code.UNAUTHENTICATED, Code.PERMISSION_DENIED, Code.UNIMPLEMENTED, Code.UNKNOWN,
                              Code.INTERNAL)
        try:
            for sd, m in methods:
                admin_only = sd.name in ("Training", "Admin")
                results = {}
                for who, md in (("none", []), ("wrong", lib.bearer(WRONG_TOKEN)), ("user", USER), ("admin", ADMIN),
                                ("malformed", [("authorization", f"Basic {ADMIN_TOKEN}")])):
                    results[who] = call_method(channel, sd, m, md)
                where = f"{sd.name}/{m.name} (require_for_inference={require_for_inference}): {results}"
                if admin_only or require_for_inference:
                    self.assertEqual(results["none"][0], Code.UNAUTHENTICATED, where)
                    self.assertEqual(results["wrong"][0], Code.UNAUTHENTICATED, where)
                    self.assertEqual(results["malformed"][0], Code.UNAUTHENTICATED, where)
                    if admin_only:
                        self.assertEqual(results["user"][0], Code.PERMISSION_DENIED, where)
                    else:
                        self.assertNotIn(results["user"][0], bad_for_authorized, where)
                else:
                    for who in ("none", "wrong", "user", "malformed"):
                        self.assertNotIn(results[who][0], bad_for_authorized, where)
                self.assertNotIn(results["admin"][0], bad_for_authorized, where)
            # Health stays open.
            from grpc_health.v1 import health_pb2, health_pb2_grpc
            h = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            self.assertEqual(h.status, health_pb2.HealthCheckResponse.SERVING)
        finally:
            channel.close()

    def assert_no_tokens(self, text, where):
        for tok in (ADMIN_TOKEN, USER_TOKEN, WRONG_TOKEN):
            self.assertNotIn(tok, text, f"a bearer token appears in {where}")

    def test_03_auth_matrix(self):
        self.check_auth_matrix(self.s, require_for_inference=False)
        strict = Frostd(self.tmp, "strict", os.path.join(self.tmp, "state-strict"), self.data_root,
                        require_for_inference=True).start()
        try:
            self.check_auth_matrix(strict, require_for_inference=True)
            # With the token, inference works for real.
            self.assertGreater(len(strict.generation.Tokenize(generation_pb2.TokenizeRequest(text="hello"),
                                                              metadata=USER, timeout=30).token_ids), 0)
            self.assert_no_tokens(strict.metrics_text(), "the strict server's /metrics")
        finally:
            code = strict.stop()
        self.assertEqual(code, 0)
        self.assert_no_tokens(strict.log(), "the strict server's log")
        metrics = self.s.metrics_text()
        self.assertIn("frost", metrics)
        self.assert_no_tokens(metrics, "/metrics")
        self.assert_no_tokens(self.s.log(), "frostd's log")

    # -- 4 -------------------------------------------------------------------------------------

    def test_04_paths_outside_the_data_root(self):
        # Valid training files outside the root, so that only the path rules can refuse them.
        outside = os.path.join(self.tmp, "outside")
        lib.write_subset(outside, n_rows=100)
        sibling = self.data_root + "2"  # "<root>2/...": shares the root's string prefix
        lib.write_subset(sibling, n_rows=100)
        link = os.path.join(self.data_root, "link")
        if not os.path.lexists(link):
            os.symlink(os.path.join(outside, "emo"), link)
        file_link = os.path.join(self.data_root, "emo", "escape.jsonl")
        if not os.path.lexists(file_link):
            os.symlink(os.path.join(outside, "emo", "train.jsonl"), file_link)
        before = self.job_count()
        bad = {
            "../x": "outside",
            "../outside/emo/train.jsonl": "outside",
            "emo/../../outside/emo/train.jsonl": "outside",
            "/etc/passwd": "outside",
            os.path.join(outside, "emo", "train.jsonl"): "outside",
            "link/train.jsonl": "outside",
            "emo/escape.jsonl": "outside",
            os.path.join(sibling, "emo", "train.jsonl"): "outside",
            sibling + "/../" + os.path.basename(sibling) + "/emo/train.jsonl": "outside",
            "emo/no-such-file.jsonl": "does not exist",
            "": "empty",
            "emo": "not a regular file",
        }
        for path, why in bad.items():
            with self.subTest(train_path=path):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.s.submit(prototype_spec(path, SMALL))
                self.assertEqual(ctx.exception.code(), Code.INVALID_ARGUMENT, ctx.exception.details())
                self.assertIn("train_path", ctx.exception.details())
                self.assertIn(why, ctx.exception.details())
        # test_path follows the same rules.
        with self.assertRaises(grpc.RpcError) as ctx:
            self.s.submit(prototype_spec(self.train_rel, SMALL, test_path="link/train.jsonl"))
        self.assertEqual(ctx.exception.code(), Code.INVALID_ARGUMENT)
        self.assertIn("test_path", ctx.exception.details())
        self.assertEqual(self.job_count(), before, "a refused submit created a job")

    # -- 5 -------------------------------------------------------------------------------------

    def test_05_invalid_specs(self):
        before = self.job_count()

        def inline(bad_row, n=10, at=3, **kw):
            rows = [T.TrainingRow(text=f"training row {i}", label=2.0 + i / 10) for i in range(n)]
            if bad_row is not None:
                rows[at] = bad_row
            return T.PrototypeJobSpec(inline_rows=T.InlineRows(rows=rows), **kw)

        bounds = dict(label_min=1.0, label_max=5.0)
        cases = [
            ("no spec", T.SubmitJobRequest(), "spec"),
            ("label out of bounds", T.SubmitJobRequest(prototype=inline(T.TrainingRow(text="x", label=7), **bounds)),
             "inline_rows:4"),
            ("empty text", T.SubmitJobRequest(prototype=inline(T.TrainingRow(text="", label=2), **bounds)),
             "inline_rows:4"),
            ("NaN label", T.SubmitJobRequest(prototype=inline(T.TrainingRow(text="x", label=math.nan), at=6,
                                                              **bounds)), "inline_rows:7"),
            ("inf label", T.SubmitJobRequest(prototype=inline(T.TrainingRow(text="x", label=math.inf), at=0,
                                                              **bounds)), "inline_rows:1"),
            ("inline without bounds", T.SubmitJobRequest(prototype=inline(None)), "label_min"),
            ("label_min without label_max",
             T.SubmitJobRequest(prototype=prototype_spec(self.train_rel, SMALL, label_min=1.0)), "label_max"),
            ("label_min >= label_max",
             T.SubmitJobRequest(prototype=prototype_spec(self.train_rel, SMALL, label_min=5.0, label_max=1.0)),
             "label"),
            ("unknown config key",
             T.SubmitJobRequest(prototype=prototype_spec(self.train_rel, dict(SMALL, no_such_field="1"))),
             "no_such_field"),
            ("bad config value", T.SubmitJobRequest(prototype=prototype_spec(self.train_rel, dict(SMALL, K="many"))),
             "K"),
            ("K larger than the rows",
             T.SubmitJobRequest(prototype=inline(None, holdout_fraction=0, config=dict(SMALL, K="20"), **bounds)),
             "K"),
            ("holdout_fraction 0.9",
             T.SubmitJobRequest(prototype=prototype_spec(self.train_rel, SMALL, holdout_fraction=0.9)),
             "holdout_fraction"),
            ("priority 1000", T.SubmitJobRequest(priority=1000, prototype=prototype_spec(self.train_rel, SMALL)),
             "priority"),
            ("priority -101", T.SubmitJobRequest(priority=-101, prototype=prototype_spec(self.train_rel, SMALL)),
             "priority"),
            ("idempotency key too long",
             T.SubmitJobRequest(idempotency_key="k" * 129, prototype=prototype_spec(self.train_rel, SMALL)),
             "idempotency_key"),
        ]
        for name, req, needle in cases:
            with self.subTest(case=name):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.s.training.SubmitJob(req, metadata=ADMIN, timeout=60)
                self.assertEqual(ctx.exception.code(), Code.INVALID_ARGUMENT, ctx.exception.details())
                self.assertIn(needle, ctx.exception.details())
        self.assertEqual(self.job_count(), before, "a refused submit created a job")

    # -- 6 -------------------------------------------------------------------------------------

    def test_06_cancel(self):
        self.s.wait_idle(timeout=300)
        arts_before = [a.name for a in self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(),
                                                                     metadata=ADMIN).artifacts]
        running = self.s.submit(prototype_spec(self.train_rel, VERY_LONG), key="cancel-running")
        queued = self.s.submit(prototype_spec(self.train_rel, SMALL), key="cancel-queued")
        self.s.wait_job(running.id, timeout=60, states=(T.JOB_STATE_RUNNING,))
        self.assertEqual(self.s.get_job(queued.id).state, T.JOB_STATE_QUEUED)

        # Queued: cancelled at once.
        c = self.s.training.CancelJob(T.CancelJobRequest(id=queued.id), metadata=ADMIN, timeout=30)
        self.assertEqual(c.state, T.JOB_STATE_CANCELLED, c)
        self.assertIn("cancel", c.reason.lower())
        self.assertEqual(self.s.get_job(queued.id).state, T.JOB_STATE_CANCELLED)

        # Running: stops at its next step.
        c = self.s.training.CancelJob(T.CancelJobRequest(id=running.id), metadata=ADMIN, timeout=30)
        self.assertIn(c.state, (T.JOB_STATE_RUNNING, T.JOB_STATE_CANCELLED), c)
        t0 = time.monotonic()
        done = self.s.wait_job(running.id, timeout=120)
        self.assertEqual(done.state, T.JOB_STATE_CANCELLED, done)
        self.assertIn("cancelled", done.reason.lower())
        self.assertEqual(done.artifact, "")
        self.assertLess(time.monotonic() - t0, 30, "a running job took long to stop after CancelJob")
        # WatchJob of a finished job: the job, then the end of the stream.
        ev = self.s.watch(running.id, timeout=30)
        self.assertEqual([e.job.state for e in ev], [T.JOB_STATE_CANCELLED])

        # No artifact and no partial one left behind; the checkpoint directory is gone.
        arts_after = [a.name for a in self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(),
                                                                    metadata=ADMIN).artifacts]
        self.assertEqual(arts_after, arts_before)
        self.assertEqual([n for n in os.listdir(os.path.join(self.s.state_dir, "artifacts")) if n.startswith(".tmp-")],
                         [])
        self.assertFalse(os.path.exists(os.path.join(self.s.state_dir, "jobs", running.id)))

        # Finished jobs cannot be cancelled; unknown ids are NOT_FOUND.
        for jid in (running.id, queued.id, self.job_a.id):
            with self.subTest(cancel=jid):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.s.training.CancelJob(T.CancelJobRequest(id=jid), metadata=ADMIN, timeout=30)
                self.assertEqual(ctx.exception.code(), Code.FAILED_PRECONDITION, ctx.exception.details())
        self.assertEqual(self.s.get_job(self.job_a.id).state, T.JOB_STATE_SUCCEEDED)
        for fn, req in ((self.s.training.GetJob, T.GetJobRequest(id="job-doesnotexist")),
                        (self.s.training.CancelJob, T.CancelJobRequest(id="job-doesnotexist")),
                        (self.s.training.WatchJob, T.WatchJobRequest(id="job-doesnotexist"))):
            self.assertEqual(rpc_code(fn, req, metadata=ADMIN, timeout=30), Code.NOT_FOUND)

    # -- 9 -------------------------------------------------------------------------------------

    def test_09_hot_swap_under_load(self):
        a, b = self.art_a, self.art_b
        activate = lambda name: self.s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=name),
                                                              metadata=ADMIN, timeout=60)
        activate(a)
        stop = threading.Event()
        lock = threading.Lock()
        seen, errors, count = {}, [], [0]

        def load():
            channel = grpc.insecure_channel(self.s.addr)
            stub = lib.prediction_pb2_grpc.PredictionStub(channel)
            try:
                while not stop.is_set():
                    try:
                        r = stub.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=30)
                        ok = len(r.results) == len(PREDICT_TEXTS) and all(
                            r.label_min <= x.value <= r.label_max for x in r.results)
                        with lock:
                            seen[r.artifact] = seen.get(r.artifact, 0) + 1
                            count[0] += 1
                            if not ok:
                                errors.append(f"bad response from {r.artifact}: {r}")
                    except grpc.RpcError as e:
                        with lock:
                            errors.append(f"{e.code().name}: {e.details()}")
            finally:
                channel.close()

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        swaps = 0
        try:
            t_end = time.monotonic() + 5
            while time.monotonic() < t_end:
                time.sleep(0.5)
                activate(b if swaps % 2 == 0 else a)
                swaps += 1
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(errors, [], f"{len(errors)} failed Predict calls of {count[0]}")
        self.assertLessEqual(set(seen), {a, b}, seen)
        self.assertEqual(set(seen), {a, b}, f"not both artifacts served: {seen}")
        self.assertGreater(count[0], 20)
        self.assertGreaterEqual(swaps, 8)

        # A corrupt artifact is refused; the active one stays and keeps serving.
        activate(a)
        path = os.path.join(self.s.artifact_dir(b), "prototype.safetensors")
        with open(path, "rb") as f:
            original = f.read()
        self.addCleanup(lambda: open(path, "wb").write(original))  # b is activated again by test_13
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            mid = len(data) // 2
            for i in range(mid, mid + 64):
                data[i] ^= 0xFF
            f.seek(0)
            f.write(data)
        with self.assertRaises(grpc.RpcError) as ctx:
            activate(b)
        self.assertEqual(ctx.exception.code(), Code.FAILED_PRECONDITION, ctx.exception.details())
        self.assertIn(b, ctx.exception.details())
        r = self.s.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=30)
        self.assertEqual(r.artifact, a)
        info = self.s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN)
        self.assertEqual(list(info.active_artifacts), [a])
        arts = {x.name: x for x in self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(),
                                                                 metadata=ADMIN).artifacts}
        self.assertTrue(arts[a].active)
        self.assertFalse(arts[b].active)

        # The active artifact cannot be deleted; unknown and malformed names are refused.
        with self.assertRaises(grpc.RpcError) as ctx:
            self.s.admin.DeleteArtifact(admin_pb2.DeleteArtifactRequest(name=a), metadata=ADMIN, timeout=30)
        self.assertEqual(ctx.exception.code(), Code.FAILED_PRECONDITION, ctx.exception.details())
        self.assertTrue(os.path.isdir(self.s.artifact_dir(a)))
        self.assertEqual(rpc_code(self.s.admin.ActivateArtifact, admin_pb2.ActivateArtifactRequest(name="prototype/999"),
                                  metadata=ADMIN, timeout=30), Code.NOT_FOUND)
        self.assertEqual(rpc_code(self.s.admin.ActivateArtifact,
                                  admin_pb2.ActivateArtifactRequest(name="prototype/../1"), metadata=ADMIN,
                                  timeout=30), Code.INVALID_ARGUMENT)
        r = self.s.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=30)
        self.assertEqual(r.artifact, a)

    def test_09b_concurrent_predicts_leave_health_and_generate_responsive(self):
        """16 Predicts in flight at once run on frostd's Predict executor, not on gRPC's threads: Health and
        Generate keep answering within their idle latency, and the Predict CPU time is on frost-predict-*."""
        self.s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=self.art_a), metadata=ADMIN, timeout=60)
        long_texts = [(t + " ") * 20 for t in PREDICT_TEXTS] * 20  # 60 texts of ~600 bytes: a slow Predict

        def health_ms():
            t0 = time.monotonic()
            self.s.health.Check(lib.health_pb2.HealthCheckRequest(service=lib.READINESS_SERVICE), timeout=30)
            return (time.monotonic() - t0) * 1e3

        def generate_ttft_ms():
            req = generation_pb2.GenerateRequest(
                text="Once upon a time",
                sampling=generation_pb2.SamplingParams(temperature=0, max_new_tokens=4, ignore_eos=True))
            t0 = time.monotonic()
            ttft = None
            for m in self.s.generation.Generate(req, timeout=60):
                if ttft is None and m.HasField("chunk"):
                    ttft = (time.monotonic() - t0) * 1e3
            return ttft

        def thread_cpu_s(prefix):
            total = 0.0
            for tid in os.listdir(f"/proc/{self.s.pid}/task"):
                try:
                    with open(f"/proc/{self.s.pid}/task/{tid}/comm") as f:
                        comm = f.read().strip()
                    with open(f"/proc/{self.s.pid}/task/{tid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if comm.startswith(prefix):
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            return total

        idle_health = sorted(health_ms() for _ in range(20))
        idle_ttft = sorted(generate_ttft_ms() for _ in range(5))
        cpu_before = thread_cpu_s("frost-predict")

        start, errors, done = threading.Barrier(17), [], []
        lock = threading.Lock()

        def one_predict():
            channel = grpc.insecure_channel(self.s.addr)
            stub = lib.prediction_pb2_grpc.PredictionStub(channel)
            try:
                start.wait()
                for _ in range(2):
                    r = stub.Predict(prediction_pb2.PredictRequest(texts=long_texts), timeout=120)
                    with lock:
                        done.append(len(r.results))
            except grpc.RpcError as e:
                with lock:
                    errors.append(f"{e.code().name}: {e.details()}")
            finally:
                channel.close()

        threads = [threading.Thread(target=one_predict) for _ in range(16)]
        for t in threads:
            t.start()
        start.wait()
        t_load = time.monotonic()
        busy_health, busy_ttft = [], []
        while any(t.is_alive() for t in threads) and time.monotonic() - t_load < 120:
            busy_health.append(health_ms())
            if len(busy_ttft) < 5:
                busy_ttft.append(generate_ttft_ms())
            time.sleep(0.02)
        load_s = time.monotonic() - t_load
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertEqual(done, [len(long_texts)] * 32)
        self.assertGreater(load_s, 0.3, "the Predict load was too short to measure anything")
        # Health is answered by a gRPC thread: with Predict off those threads it stays at its idle latency
        # (a blocked reactor would hold it for the length of the queued Predicts, seconds here).
        busy_health.sort()
        p90 = lambda xs: xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        self.assertLess(p90(busy_health), max(3 * p90(idle_health), p90(idle_health) + 50),
                        f"Health under 16 Predicts {busy_health} vs idle {idle_health}")
        self.assertGreaterEqual(len(busy_health), 5, f"Health answered only {len(busy_health)} times in {load_s:.1f} s")
        # Generate shares the CPU with the Predict worker (2 cores), not a thread pool.
        busy_ttft.sort()
        self.assertLess(busy_ttft[len(busy_ttft) // 2], 3 * idle_ttft[len(idle_ttft) // 2] + 100,
                        f"Generate TTFT under 16 Predicts {busy_ttft} vs idle {idle_ttft} (ms)")
        self.assertGreater(thread_cpu_s("frost-predict") - cpu_before, 0.2 * load_s,
                           "the Predict work did not run on the frost-predict threads")

    def test_09c_open_inference_protocol(self):
        """inference.GRPCInferenceService (KServe V2) over stubs generated by grpc_python_plugin from
        proto/inference/open_inference.proto: metadata, readiness by version, ModelInfer equal to Predict, and the
        protocol's errors."""
        a, b = self.art_a, self.art_b
        self.s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a), metadata=ADMIN, timeout=60)
        ver_a, ver_b = a.split("/")[1], b.split("/")[1]
        stub = oip_grpc.GRPCInferenceServiceStub(self.s.channel)
        self.assertTrue(stub.ServerLive(oip.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(stub.ServerReady(oip.ServerReadyRequest(), timeout=10).ready)
        meta = stub.ServerMetadata(oip.ServerMetadataRequest(), timeout=10)
        self.assertEqual(meta.name, "frost")
        self.assertTrue(meta.version)
        self.assertTrue(stub.ModelReady(oip.ModelReadyRequest(name="prototype"), timeout=10).ready)
        self.assertTrue(stub.ModelReady(oip.ModelReadyRequest(name="prototype", version=ver_a), timeout=10).ready)
        self.assertFalse(stub.ModelReady(oip.ModelReadyRequest(name="prototype", version=ver_b), timeout=10).ready,
                         "only the active version serves")
        mm = stub.ModelMetadata(oip.ModelMetadataRequest(name="prototype"), timeout=10)
        self.assertIn(ver_a, list(mm.versions))
        self.assertIn(ver_b, list(mm.versions))
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in mm.inputs], [("text", "BYTES", [-1])])
        outs = {t.name: (t.datatype, list(t.shape)) for t in mm.outputs}
        self.assertEqual(outs["value"], ("FP32", [-1]))
        self.assertEqual(outs["out_of_distribution"], ("BOOL", [-1]))
        self.assertEqual(outs["prototype_texts"], ("BYTES", [-1, -1]))

        texts = [t.encode() for t in PREDICT_TEXTS]
        req = oip.ModelInferRequest(model_name="prototype", id="req-7")
        req.inputs.add(name="text", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(texts)
        req.parameters["top_k"].int64_param = 2
        r = stub.ModelInfer(req, timeout=60)
        self.assertEqual((r.model_name, r.model_version, r.id), ("prototype", ver_a, "req-7"))
        got = {o.name: o for o in r.outputs}
        want = self.s.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS, top_k=2), timeout=60)
        self.assertEqual(list(got["value"].shape), [len(texts)])
        # The protocol's value output is FP32: Predict's double, rounded to float.
        as_f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
        self.assertEqual(list(got["value"].contents.fp32_contents), [as_f32(x.value) for x in want.results],
                         "ModelInfer and Predict run the same head")
        self.assertEqual(list(got["out_of_distribution"].contents.bool_contents),
                         [x.out_of_distribution for x in want.results])
        self.assertEqual(list(got["prototype_texts"].shape), [len(texts), 2])
        self.assertEqual([t.decode() for t in got["prototype_texts"].contents.bytes_contents],
                         [p.text for x in want.results for p in x.prototypes])
        self.assertEqual(list(got["prototype_weights"].contents.fp32_contents),
                         [p.weight for x in want.results for p in x.prototypes])

        # The protocol's raw BYTES encoding (4-byte little-endian length, then the bytes) and an output filter.
        raw = oip.ModelInferRequest(model_name="prototype")
        raw.inputs.add(name="text", datatype="BYTES", shape=[len(texts)])
        raw.raw_input_contents.append(b"".join(len(t).to_bytes(4, "little") + t for t in texts))
        raw.outputs.add(name="value")
        rr = stub.ModelInfer(raw, timeout=60)
        self.assertEqual([o.name for o in rr.outputs], ["value"])
        self.assertEqual(list(rr.outputs[0].contents.fp32_contents), [as_f32(x.value) for x in want.results])

        def infer_code(model="prototype", version="", datatype="BYTES", shape=None, name="text", data=None,
                       output=None):
            q = oip.ModelInferRequest(model_name=model, model_version=version)
            t = q.inputs.add(name=name, datatype=datatype, shape=shape if shape is not None else [len(texts)])
            if datatype == "FP32":
                t.contents.fp32_contents.extend([1.0] * len(texts))
            else:
                t.contents.bytes_contents.extend(data if data is not None else texts)
            if output:
                q.outputs.add(name=output)
            with self.assertRaises(grpc.RpcError) as e:
                stub.ModelInfer(q, timeout=30)
            return e.exception.code(), e.exception.details()

        code, msg = infer_code(model="nope")
        self.assertEqual(code, Code.NOT_FOUND, msg)
        code, msg = infer_code(version=ver_b)
        self.assertEqual(code, Code.NOT_FOUND, msg)
        self.assertIn(ver_b, msg)
        code, msg = infer_code(datatype="FP32")
        self.assertEqual(code, Code.INVALID_ARGUMENT, msg)
        self.assertIn("datatype", msg)
        code, msg = infer_code(shape=[len(texts) + 1])
        self.assertEqual(code, Code.INVALID_ARGUMENT, msg)
        self.assertIn("shape", msg)
        code, msg = infer_code(name="input_ids")
        self.assertEqual(code, Code.INVALID_ARGUMENT, msg)
        code, msg = infer_code(output="logits")
        self.assertEqual(code, Code.INVALID_ARGUMENT, msg)
        self.assertIn("logits", msg)
        code, msg = infer_code(data=[b"\xff\xfe", b"ok", b"fine"])
        self.assertEqual(code, Code.INVALID_ARGUMENT, msg)
        self.assertIn("UTF-8", msg)
        with self.assertRaises(grpc.RpcError) as e:
            stub.ModelReady(oip.ModelReadyRequest(name="nope"), timeout=10)
        self.assertEqual(e.exception.code(), Code.NOT_FOUND)

    # -- 10 ------------------------------------------------------------------------------------

    def test_10_second_frostd_on_the_state_dir(self):
        dup = Frostd(self.tmp, "dup", self.s.state_dir, self.data_root).spawn()
        code = dup.wait_exit(timeout=120)
        if code is None:
            dup.stop()
            self.fail(f"a second frostd on {self.s.state_dir} kept running\n{dup.log()}")
        log = dup.log()
        self.assertNotEqual(code, 0, log)
        self.assertIn("in use", log)
        self.assertIn("state directory", log)
        self.assertFalse(os.path.exists(dup.port_file), "the refused frostd wrote a port file")
        # The first one is untouched.
        info = self.s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN, timeout=30)
        self.assertEqual(info.state_dir, self.s.state_dir)
        with open(os.path.join(self.s.state_dir, "LOCK")) as f:
            self.assertEqual(f.read().strip(), str(self.s.pid))


    # -- 11 ------------------------------------------------------------------------------------

    def test_11_kv_repair_job_then_generate_with_it(self):
        """A kv_repair job (int4 codec, every layer) trains on the calibration text, reports a lower
        held-out KL with repair than without, and once activated Generate repairs int4 sequences: the
        Final names the operator, OFF opts out, ON with another codec is refused, and /metrics shows it."""
        test_rel = "emo/heldout.jsonl"  # 200 lines of emobank's test split
        with open(os.path.join(lib.emobank_dir(), "test.jsonl"), encoding="utf-8") as src, \
                open(os.path.join(self.data_root, test_rel), "w", encoding="utf-8") as dst:
            dst.writelines(line for i, line in enumerate(src) if i < 200)
        spec = T.KvRepairJobSpec(calib_path=self.train_rel, test_path=test_rel, calib_windows=24, eval_windows=8,
                                 activate=True, config={"codec": "int4", "layers": "all", "steps": "60",
                                                        "window": "32", "lr": "0.01", "batch": "4"})
        job = self.s.wait_job(self.s.submit(spec, key="kv-repair-1").id, timeout=300)
        self.assertEqual(job.state, T.JOB_STATE_SUCCEEDED, f"{job}\n{self.s.log()}")
        self.assertEqual(job.kind, "kv_repair")
        self.assertTrue(job.artifact.startswith("kv_repair/"), job.artifact)
        report = json.loads(job.report_json)
        self.assertGreater(report["corrupted"]["mean_kl"], 0)
        self.assertLess(report["repaired"]["mean_kl"], report["corrupted"]["mean_kl"], report)
        info = self.s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN)
        self.assertIn(job.artifact, list(info.active_artifacts))

        def generate(**kv):
            req = generation_pb2.GenerateRequest(
                text="Once upon a time", sampling=generation_pb2.SamplingParams(temperature=0, max_new_tokens=12,
                                                                                ignore_eos=True),
                kv=generation_pb2.KvOptions(**kv))
            final, text = None, ""
            for m in self.s.generation.Generate(req, timeout=60):
                if m.HasField("chunk"):
                    text += m.chunk.text
                if m.HasField("final"):
                    final = m.final
            return final, text

        f_rep, t_rep = generate(codec="int4")
        self.assertEqual((f_rep.kv_codec, f_rep.kv_repair), ("int4", job.artifact))
        self.assertEqual(f_rep.completion_tokens, 12)
        f_off, _ = generate(codec="int4", repair=generation_pb2.KV_REPAIR_MODE_OFF)
        self.assertEqual((f_off.kv_codec, f_off.kv_repair), ("int4", ""))
        f_fp32, _ = generate(codec="fp32")
        self.assertEqual(f_fp32.kv_repair, "", "an int4 operator must not touch an fp32 cache")
        with self.assertRaises(grpc.RpcError) as e:
            generate(codec="fp32", repair=generation_pb2.KV_REPAIR_MODE_ON)
        self.assertEqual(e.exception.code(), Code.FAILED_PRECONDITION)
        self.assertIn("int4", e.exception.details())
        m = self.s.metrics_text()
        self.assertIn(f'frost_kv_repair_active{{artifact="{job.artifact}",codec="int4"}} 1', m)
        self.assertRegex(m, r"frost_kv_repair_sequences_total [1-9]")
        self.assertRegex(m, r'frost_kv_sequences_total\{codec="int4"\} [2-9]')
        # the active operator cannot be deleted
        with self.assertRaises(grpc.RpcError) as e:
            self.s.admin.DeleteArtifact(admin_pb2.DeleteArtifactRequest(name=job.artifact), metadata=ADMIN)
        self.assertEqual(e.exception.code(), Code.FAILED_PRECONDITION)


    # -- 12 ------------------------------------------------------------------------------------

    def test_12_kvsplice_job_then_generate_with_it(self):
        """kv.codec "kvsplice" is refused (FAILED_PRECONDITION) until a KVSplice is active; a kvsplice job
        (rank 4, a few steps) calibrates one, reports the Fisher analysis and held-out perplexities, and once
        activated Generate stores kvsplice sequences with it: the Final names it, ListArtifacts and
        ServerInfo show it active, /metrics exports it. A kv_repair job for the kvsplice codec is refused."""
        def generate(**kv):
            req = generation_pb2.GenerateRequest(
                text="Once upon a time", sampling=generation_pb2.SamplingParams(temperature=0, max_new_tokens=12,
                                                                                ignore_eos=True),
                kv=generation_pb2.KvOptions(**kv))
            final, text, n = None, "", 0
            for m in self.s.generation.Generate(req, timeout=60):
                if m.HasField("chunk"):
                    text += m.chunk.text
                    n += len(m.chunk.token_ids)
                if m.HasField("final"):
                    final = m.final
            return final, text, n

        self.assertEqual(len(self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(kind="kvsplice"),
                                                        metadata=ADMIN, timeout=30).artifacts), 0)
        with self.assertRaises(grpc.RpcError) as e:
            generate(codec="kvsplice")
        self.assertEqual(e.exception.code(), Code.FAILED_PRECONDITION, e.exception.details())
        self.assertIn("kvsplice", e.exception.details())
        self.assertIn("no KVSplice is active", e.exception.details())
        # KV repair does not train for the kvsplice codec: refused at submit.
        with self.assertRaises(grpc.RpcError) as e:
            self.s.submit(T.KvRepairJobSpec(calib_path=self.train_rel, config={"codec": "kvsplice"}))
        self.assertEqual(e.exception.code(), Code.INVALID_ARGUMENT, e.exception.details())
        self.assertIn("kvsplice", e.exception.details())

        test_rel = "emo/heldout_kvsplice.jsonl"
        with open(os.path.join(lib.emobank_dir(), "test.jsonl"), encoding="utf-8") as src, \
                open(os.path.join(self.data_root, test_rel), "w", encoding="utf-8") as dst:
            dst.writelines(line for i, line in enumerate(src) if i < 100)
        spec = T.KvSpliceJobSpec(calib_path=self.train_rel, test_path=test_rel, calib_windows=8, eval_windows=4,
                                 fisher_windows=4, activate=True,
                                 config={"rank": "4", "v_rank": "6", "latent": "int8", "steps": "5", "window": "32",
                                         "batch": "4", "lr": "0.01"})
        t0 = time.monotonic()
        job = self.s.training.SubmitJob(T.SubmitJobRequest(idempotency_key="kvsplice-1", kvsplice=spec),
                                        metadata=ADMIN, timeout=60)
        self.assertEqual(job.kind, "kvsplice")
        spec_json = json.loads(job.spec_json)
        self.assertEqual((spec_json["calib_windows"], spec_json["eval_windows"], spec_json["fisher_windows"]),
                         (8, 4, 4), spec_json)
        job = self.s.wait_job(job.id, timeout=300)
        self.assertEqual(job.state, T.JOB_STATE_SUCCEEDED, f"{job}\n{self.s.log()}")
        self.assertTrue(job.artifact.startswith("kvsplice/"), job.artifact)
        report = json.loads(job.report_json)
        self.assertIn("suggested_rank", report["fisher"], report)
        self.assertEqual((report["rank"], report["k_rank"], report["v_rank"], report["rank_source"]),
                         (4, 4, 6, "config"), report)
        for k in ("fp32", "fp16", "pca", "kvsplice"):
            self.assertTrue(math.isfinite(report[k]["ppl"]) and report[k]["ppl"] > 0, report)
        self.assertIn("ppl_vs_fp16", report["kvsplice"])
        # stories260K: 5 layers, d = 4 kv heads x 8 = 32; fp16 2*32*2 B, int8 kvsplice 4 + 6 + 2*4 B per layer
        self.assertEqual(report["kv_bytes_per_token"], {"fp16": 640, "kvsplice": 90}, report)
        self.assertAlmostEqual(report["compression_vs_fp16"], 640 / 90, places=9)
        self.assertEqual((report["latent"], report["config"]["pca_metric"]), ("int8", "attention"), report)
        info = self.s.admin.GetServerInfo(admin_pb2.ServerInfoRequest(), metadata=ADMIN)
        self.assertIn(job.artifact, list(info.active_artifacts))
        arts = self.s.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(kind="kvsplice"), metadata=ADMIN,
                                          timeout=30).artifacts
        self.assertEqual([a.name for a in arts], [job.artifact])
        self.assertTrue(arts[0].active)
        self.assertEqual(json.loads(arts[0].report_json)["rank"], 4)

        f_sp, t_sp, n_sp = generate(codec="kvsplice")
        self.assertEqual((f_sp.kv_codec, f_sp.kv_splice), ("kvsplice", job.artifact))
        self.assertEqual((f_sp.completion_tokens, n_sp), (12, 12))
        self.assertEqual(f_sp.kv_repair, "", "no repair operator applies to a kvsplice cache")
        f_fp32, _, _ = generate(codec="fp32")
        self.assertEqual((f_fp32.kv_codec, f_fp32.kv_splice), ("fp32", ""))
        frostctl = os.environ.get("FROST_FROSTCTL") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(os.environ["FROST_FROSTD"]))), "client", "frostctl")
        if os.path.exists(frostctl):
            r = subprocess.run([frostctl, "--addr", self.s.addr, "generate", "--kv-codec", "kvsplice",
                                "--temperature", "0", "--max-new-tokens", "12", "--ignore-eos", "Once upon a time"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, t_sp)
            self.assertIn(f"kv=kvsplice kv_splice={job.artifact}", r.stderr)
        m = self.s.metrics_text()
        self.assertIn(f'frost_kv_splice_active{{artifact="{job.artifact}",rank="4/6"}} 1', m)
        self.assertRegex(m, r"frost_kv_splice_sequences_total [1-9]")
        self.assertRegex(m, r'frost_kv_sequences_total\{codec="kvsplice"\} [1-9]')
        # the active KVSplice cannot be deleted
        with self.assertRaises(grpc.RpcError) as e:
            self.s.admin.DeleteArtifact(admin_pb2.DeleteArtifactRequest(name=job.artifact), metadata=ADMIN)
        self.assertEqual(e.exception.code(), Code.FAILED_PRECONDITION)
        self.assertLess(time.monotonic() - t0, 60, "the small kvsplice job and its checks should take seconds")


    # -- 13 ------------------------------------------------------------------------------------

    def test_13_replica_follows_activation(self):
        """An inference replica (jobs.enabled: false, artifacts.follow_state_dir on this frostd's state directory)
        serves the trainer's active head from its start, picks up each activation without a restart and with the
        same predictions as the trainer, and refuses to activate anything itself."""
        a, b = self.art_a, self.art_b
        activate = lambda name: self.s.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=name),
                                                              metadata=ADMIN, timeout=60)
        activate(a)
        replica = Frostd(self.tmp, "replica", os.path.join(self.tmp, "replica-unused"), self.data_root,
                         jobs={"enabled": False},
                         sections={"artifacts": {"follow_state_dir": self.s.state_dir, "follow_interval_ms": 200}})
        replica.start()
        try:
            def predict(server):
                return server.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=60)

            def assert_same(r_replica, r_trainer):
                self.assertEqual(r_replica.artifact, r_trainer.artifact)
                for x, y in zip(r_replica.results, r_trainer.results):
                    self.assertAlmostEqual(x.value, y.value, places=5)
                    self.assertEqual([p.text for p in x.prototypes], [p.text for p in y.prototypes])

            def swaps():
                for line in replica.metrics_text().splitlines():
                    if line.startswith("frost_artifact_swaps_total "):
                        return float(line.split()[1])
                self.fail("no frost_artifact_swaps_total on the replica's /metrics")

            # Ready means already serving the trainer's active head (restored before the port opened), and
            # every other kind the trainer has active (earlier tests activate kv_repair and kvsplice).
            swaps_at_start = swaps()
            assert_same(predict(replica), predict(self.s))
            self.assertEqual(predict(replica).artifact, a)

            # The trainer activates b: the replica follows within a few polls, no restart.
            t0 = time.monotonic()
            activate(b)
            while predict(replica).artifact != b:
                if time.monotonic() - t0 > 20:
                    self.fail(f"the replica still serves {predict(replica).artifact} 20 s after {b} was activated\n"
                              f"{replica.log()}")
                time.sleep(0.05)
            follow_s = time.monotonic() - t0
            assert_same(predict(replica), predict(self.s))
            oip_stub = oip_grpc.GRPCInferenceServiceStub(replica.channel)
            self.assertTrue(oip_stub.ModelReady(oip.ModelReadyRequest(name="prototype", version=b.split("/")[1]),
                                                timeout=10).ready)
            print(f"\n  replica followed {a} -> {b} in {follow_s:.2f} s (poll 200 ms)", file=sys.stderr)

            # The replica reads the store (ListArtifacts) but activates and deletes nothing itself.
            names = {x.name for x in replica.admin.ListArtifacts(admin_pb2.ListArtifactsRequest(),
                                                                 metadata=ADMIN, timeout=30).artifacts}
            self.assertLessEqual({a, b}, names)
            with self.assertRaises(grpc.RpcError) as ctx:
                replica.admin.ActivateArtifact(admin_pb2.ActivateArtifactRequest(name=a), metadata=ADMIN, timeout=30)
            self.assertEqual(ctx.exception.code(), Code.FAILED_PRECONDITION, ctx.exception.details())
            self.assertIn("follow", ctx.exception.details())
            self.assertEqual(rpc_code(replica.admin.DeleteArtifact, admin_pb2.DeleteArtifactRequest(name=a),
                                      metadata=ADMIN, timeout=30), Code.FAILED_PRECONDITION)
            self.assertTrue(os.path.isdir(self.s.artifact_dir(a)))
            self.assertEqual(predict(self.s).artifact, b, "the replica's refused activation changed the trainer")
            self.assertEqual(swaps(), swaps_at_start + 1, "one follow = one swap on the replica")

            # And back: a second activation is followed too.
            activate(a)
            t0 = time.monotonic()
            while predict(replica).artifact != a:
                self.assertLess(time.monotonic() - t0, 20, replica.log())
                time.sleep(0.05)
        finally:
            code = replica.stop()
        self.assertEqual(code, 0, replica.log())
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "replica-unused")),
                         "a follower created a state directory of its own")


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
