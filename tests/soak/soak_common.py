"""Shared by the soak and fault suites (tests/soak/soak_test.py runs them): the generated stubs, the job of
the job suites, and helpers that start frost-loadgen, read an artifact's hashes and check serving.
soaklib.py holds the pieces without the stubs (scale, figures, report, temporary directories).
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from frost.v1 import admin_pb2
    from frost.v1 import admin_pb2_grpc
    from frost.v1 import generation_pb2 as G
    from frost.v1 import generation_pb2_grpc
    from frost.v1 import prediction_pb2_grpc
    from frost.v1 import training_pb2_grpc
    from frost.v1 import prediction_pb2
    from frost.v1 import training_pb2 as T
    from grpc_health.v1 import health_pb2
    from grpc_health.v1 import health_pb2_grpc
    import soaklib as sl
    from soaklib import lib
    import h2stall
except ImportError as e:
    print(f"soak_test: FAIL: cannot import the stubs ({e}); needs python3-grpcio, python3-protobuf and the "
          "frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

Code = grpc.StatusCode
ADMIN = lib.ADMIN

# The job of the job suites: the small prototype config of tests/client/jobs_test.py, 2 + 4 epochs on a
# 400-row subset of emobank (about 3 s with jobs.threads 1), a checkpoint every 5 steps.
JOB_ROWS = 400
JOB_CFG = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
           "epochs_a": "2", "epochs_b": "4"}
PREDICT_TEXTS = ["I love this wonderful sunny day!", "The meeting was moved to Tuesday.",
                 "Everything went terribly wrong and I am furious."]


def job_spec(train_rel, cfg=JOB_CFG):
    return T.PrototypeJobSpec(train_path=train_rel, config=cfg)


def need_shared(suite):
    if not os.path.isdir(lib.model_path()) or not os.path.isfile(os.path.join(lib.emobank_dir(), "train.jsonl")):
        suite.skip(f"no {lib.model_path()} or {lib.emobank_dir()} (FROST_SHARED)")
        return False
    return True


def stop_checked(suite, server, what):
    code = server.stop()
    suite.check(code == 0, f"{what}: frostd exited with {code} after SIGTERM (expected 0)\n{server.log()[-4000:]}")


def loadgen(server, concurrency, requests, max_tokens, warmup=0, seed=1, timeout_s=120):
    """frost-loadgen against `server`; returns its JSON report."""
    import json
    cmd = [sl.loadgen_binary(), "--addr", server.addr, "--concurrency", str(concurrency), "--requests",
           str(requests), "--warmup", str(warmup), "--max-tokens", str(max_tokens), "--seed", str(seed),
           "--timeout", "60", "--prompt", "Once upon a time"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise RuntimeError(f"frost-loadgen exited {p.returncode}: {p.stderr[-2000:]} {p.stdout[-2000:]}")


def artifact_sha(server, name):
    """(sha256 the manifest names, sha256 of the tensor file, manifest) of a prototype artifact."""
    m = server.artifact_manifest(name)
    f = os.path.join(server.artifact_dir(name), m["tensors"]["file"])
    return m["tensors"]["sha256"], lib.sha256_file(f), m


def predict_bytes(server):
    r = server.prediction.Predict(prediction_pb2.PredictRequest(texts=PREDICT_TEXTS), timeout=30)
    return r.SerializeToString(deterministic=True)


def serving_ok(server, want_predict):
    """Generate (32 tokens, exact), Predict (the same answer as before) and readiness; '' when all fine."""
    bad = []
    try:
        n, final = 0, None
        for r in server.generation.Generate(G.GenerateRequest(
                text="Once upon a time", sampling=G.SamplingParams(max_new_tokens=32, ignore_eos=True)), timeout=30):
            if r.WhichOneof("response") == "chunk":
                n += len(r.chunk.token_ids)
            else:
                final = r.final
        if n != 32 or final is None or final.completion_tokens != 32:
            bad.append(f"Generate gave {n} tokens")
    except grpc.RpcError as e:
        bad.append(f"Generate {e.code().name}: {e.details()}")
    try:
        if predict_bytes(server) != want_predict:
            bad.append("Predict answers differently")
    except grpc.RpcError as e:
        bad.append(f"Predict {e.code().name}: {e.details()}")
    try:
        h = server.health.Check(health_pb2.HealthCheckRequest(service=lib.READINESS_SERVICE), timeout=5)
        if h.status != health_pb2.HealthCheckResponse.SERVING:
            bad.append(f"readiness {h.status}")
    except grpc.RpcError as e:
        bad.append(f"health {e.code().name}")
    return "; ".join(bad)
