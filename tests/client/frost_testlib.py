"""Helpers for the Python tests that drive a real frostd over gRPC: Frostd, a frostd on a generated YAML
config with jobs and bearer tokens in its environment (used by tests/client/jobs_test.py and most served
tests), and calls to its services with or without a token. The process start-up itself (ports, log,
readiness, teardown) is tests/testing/frostd_fixture.py's, re-exported here. Needs the generated stubs
(<build>/client/python) on PYTHONPATH.
"""

import hashlib
import json
import os
import sys
import time

# The stubs, also used as frost_testlib.<module> by the tests.
import grpc  # noqa: F401
from frost.v1 import admin_pb2_grpc  # noqa: F401
from frost.v1 import generation_pb2_grpc  # noqa: F401
from frost.v1 import prediction_pb2_grpc  # noqa: F401
from frost.v1 import training_pb2
from frost.v1 import training_pb2_grpc  # noqa: F401
from grpc_health.v1 import health_pb2  # noqa: F401
from grpc_health.v1 import health_pb2_grpc  # noqa: F401

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "testing"))

# The shared start-up, re-exported: tests use it as frost_testlib.<name>.
from frostd_fixture import (READINESS_SERVICE, START_TIMEOUT_S, FrostdProcess, frostd_binary,  # noqa: E402,F401
                            stop_process, wait_for_port_file, write_config, yaml_str, yaml_value)

# Distinctive token strings, so that a leak into logs or /metrics cannot be a coincidence.
ADMIN_TOKEN = "adm1n-T0ken-7f3c9e51d2a84b06"
USER_TOKEN = "us3r-T0ken-c41d8e2f9b7a3350"

TERMINAL_STATES = (training_pb2.JOB_STATE_SUCCEEDED, training_pb2.JOB_STATE_FAILED,
                   training_pb2.JOB_STATE_CANCELLED, training_pb2.JOB_STATE_INTERRUPTED)


def shared_dir():
    return os.environ.get("FROST_SHARED") or os.path.join(os.path.dirname(SOURCE_DIR), "shared")


def model_path():
    return os.path.join(shared_dir(), "models", "stories260K")


def emobank_dir():
    return os.path.join(shared_dir(), "data", "emobank_valence")


def write_subset(data_root, name="emo", n_rows=1500):
    """The first n_rows lines of emobank's train.jsonl plus its meta.json, as
    <data_root>/<name>/{train.jsonl,meta.json}. Returns the path relative to data_root."""
    d = os.path.join(data_root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(emobank_dir(), "train.jsonl"), encoding="utf-8") as src, \
            open(os.path.join(d, "train.jsonl"), "w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if i >= n_rows:
                break
            dst.write(line)
    with open(os.path.join(emobank_dir(), "meta.json"), "rb") as src, \
            open(os.path.join(d, "meta.json"), "wb") as dst:
        dst.write(src.read())
    return f"{name}/train.jsonl"


def read_rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bearer(token):
    return [] if token is None else [("authorization", f"Bearer {token}")]


ADMIN = bearer(ADMIN_TOKEN)
USER = bearer(USER_TOKEN)


class Frostd(FrostdProcess):
    """frostd on a generated config: 127.0.0.1 port 0 (gRPC and metrics), jobs enabled on `state_dir`, bearer
    tokens from its environment.

    `jobs` overrides entries of the jobs: section; `sections` adds whole sections ({"artifacts": {...}});
    `env` adds to the child's environment; `model` replaces stories260K (a path or "builtin:tiny");
    `preexec_fn` runs in the child before frostd (e.g. to die with the test)."""

    def __init__(self, workdir, name, state_dir, data_root, *, require_for_inference=False, jobs=None,
                 sections=None, env=None, admin_token=ADMIN_TOKEN, user_token=USER_TOKEN, model=None,
                 preexec_fn=None):
        config_path = os.path.join(workdir, f"{name}.yaml")
        child_env = dict(os.environ)
        child_env.pop("FROST_FAILPOINT", None)
        child_env["OPENBLAS_CORETYPE"] = "SkylakeX"
        child_env["FROST_ADMIN_TOKEN"] = admin_token
        child_env["FROST_USER_TOKEN"] = user_token
        child_env.update(env or {})
        super().__init__(workdir, name, ["--config", config_path], env=child_env, preexec_fn=preexec_fn)
        self.config_path = config_path
        self.state_dir = state_dir
        self.data_root = data_root
        self.require_for_inference = require_for_inference
        js = {"state_dir": state_dir, "data_root": data_root, "checkpoint_every": 5, "max_queued": 64,
              "concurrency": 1, "threads": 1, "max_attempts": 3}
        js.update(jobs or {})
        sections = dict(sections or {})
        server_extra = sections.pop("server", {})  # entries of the server: section besides the listen addresses
        lines = [
            "server:",
            '  listen: "127.0.0.1:0"',
            '  metrics_listen: "127.0.0.1:0"',
            *(f"  {k}: {yaml_value(v)}" for k, v in server_extra.items()),
            "model:",
            f"  path: {yaml_str(model or model_path())}",
            "  threads: 1",
            "jobs:",
        ]
        for k, v in js.items():
            lines.append(f"  {k}: {yaml_str(v) if isinstance(v, str) else v}")
        lines += [
            "auth:",
            '  admin_token_env: "FROST_ADMIN_TOKEN"',
            '  user_token_env: "FROST_USER_TOKEN"',
            f"  require_for_inference: {'true' if require_for_inference else 'false'}",
        ]
        for section, entries in sections.items():
            lines.append(f"{section}:")
            for k, v in entries.items():
                lines.append(f"  {k}: {yaml_value(v)}")
        write_config(config_path, lines)

    # -- jobs -------------------------------------------------------------------------------

    def submit(self, spec, key="", priority=0, metadata=ADMIN):
        kind = "kv_repair" if isinstance(spec, training_pb2.KvRepairJobSpec) else "prototype"
        return self.training.SubmitJob(
            training_pb2.SubmitJobRequest(idempotency_key=key, priority=priority, **{kind: spec}),
            metadata=metadata, timeout=60)

    def get_job(self, job_id):
        return self.training.GetJob(training_pb2.GetJobRequest(id=job_id), metadata=ADMIN, timeout=30)

    def list_jobs(self, **kw):
        """Every job (all pages), newest first."""
        jobs, token = [], ""
        while True:
            r = self.training.ListJobs(training_pb2.ListJobsRequest(page_size=1000, page_token=token, **kw),
                                       metadata=ADMIN, timeout=30)
            jobs.extend(r.jobs)
            token = r.next_page_token
            if not token:
                return jobs

    def watch(self, job_id, timeout=600):
        """All events of WatchJob until the stream ends (after the terminal state)."""
        return list(self.training.WatchJob(training_pb2.WatchJobRequest(id=job_id), metadata=ADMIN,
                                           timeout=timeout))

    def wait_job(self, job_id, timeout=600, states=TERMINAL_STATES):
        """Polls GetJob until the job is in one of `states`; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            j = self.get_job(job_id)
            if j.state in states:
                return j
            if self.proc.poll() is not None:
                raise RuntimeError(f"frostd exited ({self.proc.returncode}) while waiting for {job_id}\n"
                                   f"--- frostd output ---\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not in {states} after {timeout} s: {j}")
            time.sleep(0.05)

    def wait_idle(self, timeout=600):
        """Waits until no job is QUEUED or RUNNING."""
        deadline = time.monotonic() + timeout
        while True:
            busy = self.list_jobs(states=[training_pb2.JOB_STATE_QUEUED, training_pb2.JOB_STATE_RUNNING])
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs still busy after {timeout} s: {[j.id for j in busy]}")
            time.sleep(0.1)

    # -- artifacts --------------------------------------------------------------------------

    def artifact_dir(self, name):
        return os.path.join(self.state_dir, "artifacts", name)

    def artifact_manifest(self, name):
        with open(os.path.join(self.artifact_dir(name), "manifest.json"), encoding="utf-8") as f:
            return json.load(f)
