"""The jobs test's state and replica group (run by tests/client/jobs_test.py, in its JobsServiceTest): the
state-directory lock, KV repair and KVSplice jobs served by Generate, and a replica following activation.
"""

from jobs_common import *  # noqa: F401,F403 (the shared imports, constants and helpers)


class JobsReplicaTests:
    """Tests 10-13 of JobsServiceTest (its server and artifacts)."""

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
