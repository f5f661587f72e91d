#!/usr/bin/python3
"""Serving latency with and without a training job running (issue: a job must not starve serving).

Starts a real frostd on stories260K (ephemeral ports, a temporary state directory), trains and
activates a small prototype artifact, then measures, from one client thread:
  * Predict (1 text) latency and Generate (greedy, 32 new tokens) end-to-end latency, idle;
  * the same while a prototype training job runs (jobs.threads, jobs.nice from the flags).
Writes JSON with p50/p90/p99/mean per phase and the job's throughput.

  PYTHONPATH=build/client/python /usr/bin/python3 bench/bench_jobs_latency.py \
      --frostd build/server/frostd --shared ../shared --out bench/results/jobs_latency.json
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from frost.v1 import generation_pb2, generation_pb2_grpc
from frost.v1 import admin_pb2, admin_pb2_grpc
from frost.v1 import prediction_pb2, prediction_pb2_grpc
from frost.v1 import training_pb2, training_pb2_grpc

TOKEN = "bench-admin-token-0123456789"
MD = [("authorization", "Bearer " + TOKEN)]
SMALL = {"max_tokens": "32", "d_h": "32", "H": "2", "L": "1", "m": "4", "m_q": "4", "K": "8", "T": "32",
         "epochs_a": "1", "epochs_b": "1"}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summary(xs):
    return {"n": len(xs), "p50_ms": 1e3 * pct(xs, 0.5), "p90_ms": 1e3 * pct(xs, 0.9),
            "p99_ms": 1e3 * pct(xs, 0.99), "mean_ms": 1e3 * statistics.mean(xs)}


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def measure(gen, pred, seconds):
    p, g = [], []
    t_end = time.time() + seconds
    while time.time() < t_end:
        t0 = time.perf_counter()
        pred.Predict(prediction_pb2.PredictRequest(texts=["What a wonderful day it was."], top_k=3))
        p.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        req = generation_pb2.GenerateRequest(text="Once upon a time")
        req.sampling.temperature = 0
        req.sampling.max_new_tokens = 32
        for _ in gen.Generate(req):
            pass
        g.append(time.perf_counter() - t0)
    return {"predict": summary(p), "generate_32_tokens": summary(g)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frostd", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--job-threads", type=int, default=1)
    ap.add_argument("--job-nice", type=int, default=10)
    ap.add_argument("--model-threads", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="frost_bench_jobs_")
    data = os.path.join(a.shared, "data")
    cfg = os.path.join(tmp, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0"}}
model: {{path: "{os.path.join(a.shared, 'models', 'stories260K')}", threads: {a.model_threads}}}
jobs: {{state_dir: "{tmp}/state", data_root: "{data}", threads: {a.job_threads}, nice: {a.job_nice}}}
log: {{level: warn}}
""")
    env = dict(os.environ, FROST_ADMIN_TOKEN=TOKEN)
    ports = os.path.join(tmp, "ports")
    proc = subprocess.Popen([a.frostd, "--config", cfg, "--port-file", ports], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "frostd.log"), "w"))
    try:
        for _ in range(600):
            if os.path.exists(ports):
                break
            time.sleep(0.1)
        port = dict(l.split("=") for l in open(ports).read().split())["grpc"]
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(ch).result(timeout=60)
        tr, ad = training_pb2_grpc.TrainingStub(ch), admin_pb2_grpc.AdminStub(ch)
        gen, pred = generation_pb2_grpc.GenerationStub(ch), prediction_pb2_grpc.PredictionStub(ch)
        for _ in range(300):  # readiness: Generate answers once the model is loaded
            try:
                gen.GetModelInfo(generation_pb2.ModelInfoRequest())
                break
            except grpc.RpcError:
                time.sleep(0.2)
        spec = training_pb2.PrototypeJobSpec(train_path="emobank_valence/train.jsonl", activate=True,
                                             holdout_fraction=0.1, config=SMALL)
        j = tr.SubmitJob(training_pb2.SubmitJobRequest(prototype=spec), metadata=MD)
        for ev in tr.WatchJob(training_pb2.WatchJobRequest(id=j.id), metadata=MD):
            pass
        assert ev.job.state == training_pb2.JOB_STATE_SUCCEEDED, ev.job.reason
        idle = measure(gen, pred, a.seconds)
        # a longer job for the loaded phase
        big = dict(SMALL, epochs_a="20", epochs_b="20")
        spec2 = training_pb2.PrototypeJobSpec(train_path="emobank_valence/train.jsonl", holdout_fraction=0.1,
                                              config=big)
        j2 = tr.SubmitJob(training_pb2.SubmitJobRequest(prototype=spec2), metadata=MD)
        for _ in range(600):  # wait until it trains (past the feature pass)
            g = tr.GetJob(training_pb2.GetJobRequest(id=j2.id), metadata=MD)
            if g.progress.stage in ("stage_a", "stage_b"):
                break
            time.sleep(0.5)
        loaded = measure(gen, pred, a.seconds)
        g = tr.GetJob(training_pb2.GetJobRequest(id=j2.id), metadata=MD)
        tr.CancelJob(training_pb2.CancelJobRequest(id=j2.id), metadata=MD)
        out = {
            "bench": "jobs_latency",
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
            "model": "stories260K",
            "config": {"model_threads": a.model_threads, "job_threads": a.job_threads, "job_nice": a.job_nice,
                       "seconds_per_phase": a.seconds},
            "idle": idle,
            "with_training_job": loaded,
            "job_during_load": {"stage": g.progress.stage, "examples_per_s": g.progress.examples_per_s,
                                "state": training_pb2.JobState.Name(g.state)},
            "predict_p50_ratio": loaded["predict"]["p50_ms"] / idle["predict"]["p50_ms"],
            "generate_p50_ratio": loaded["generate_32_tokens"]["p50_ms"] / idle["generate_32_tokens"]["p50_ms"],
        }
        text = json.dumps(out, indent=2)
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
