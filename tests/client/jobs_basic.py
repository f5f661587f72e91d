"""The jobs test's first group (run by tests/client/jobs_test.py, in its JobsServiceTest): submit → watch →
activate → predict, idempotent submits, the bearer-token matrix, data paths outside jobs.data_root, invalid
specs and cancelling.
"""

from jobs_common import *  # noqa: F401,F403 (the shared imports, constants and helpers)


class JobsBasicTests:
    """Tests 01-06 of JobsServiceTest (its server and artifacts)."""

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
