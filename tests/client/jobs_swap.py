"""The jobs test's hot-swap group (run by tests/client/jobs_test.py, in its JobsServiceTest): activating
artifacts under Predict load and refusing a corrupt one, concurrent predicts leaving Health and Generate
responsive, and the Open Inference Protocol.
"""

from jobs_common import *  # noqa: F401,F403 (the shared imports, constants and helpers)


class JobsSwapTests:
    """Tests 09-09c of JobsServiceTest (its server and artifacts)."""

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
