"""Helpers for the Python integration tests that drive a real frostd: start it on ephemeral ports
with a generated YAML config and bearer tokens in its environment, wait until it serves, stop it
(SIGTERM) or kill it (SIGKILL), and call its services with or without a token.

Used by tests/client/jobs_test.py; needs the generated stubs (<build>/client/python) on PYTHONPATH.
"""

import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.request

import grpc
from frost.v1 import admin_pb2_grpc
from frost.v1 import generation_pb2_grpc
from frost.v1 import prediction_pb2_grpc
from frost.v1 import training_pb2
from frost.v1 import training_pb2_grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READINESS_SERVICE = "frost.v1.Generation"
START_TIMEOUT_S = 90

# Distinctive token strings, so that a leak into logs or /metrics cannot be a coincidence.
ADMIN_TOKEN = "adm1n-T0ken-7f3c9e51d2a84b06"
USER_TOKEN = "us3r-T0ken-c41d8e2f9b7a3350"

TERMINAL_STATES = (training_pb2.JOB_STATE_SUCCEEDED, training_pb2.JOB_STATE_FAILED,
                   training_pb2.JOB_STATE_CANCELLED, training_pb2.JOB_STATE_INTERRUPTED)


def frostd_binary():
    binary = os.environ.get("FROST_FROSTD")
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError(f"FROST_FROSTD must name the frostd binary (got {binary!r})")
    return os.path.abspath(binary)


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


def yaml_str(s):
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def yaml_value(v):
    """A scalar, or a dict / list written as a JSON flow collection (valid YAML)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list, str)):
        return json.dumps(v)
    return str(v)


def wait_for_port_file(proc, port_file, timeout_s, fail):
    """Waits for frostd's --port-file (written atomically: temp + rename) and returns its
    `name=PORT` lines as a dict; calls fail(why) (which raises) when frostd exits first, the file
    does not appear within timeout_s, or it lacks the grpc= and metrics= lines."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(port_file):
        if proc.poll() is not None:
            fail(f"exited with {proc.returncode} before writing {port_file}")
        if time.monotonic() > deadline:
            fail(f"no port file after {timeout_s} s")
        time.sleep(0.05)
    ports = {}
    with open(port_file) as f:
        for line in f:
            if line.strip():
                k, _, v = line.strip().partition("=")
                ports[k] = int(v)
    if "grpc" not in ports or "metrics" not in ports:
        fail(f"port file without grpc= and metrics= lines: {ports}")
    return ports


def stop_process(proc, timeout):
    """SIGTERM, then waits; returns the exit code (None if it had to be killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


class Frostd:
    """One frostd process on 127.0.0.1 port 0 (gRPC and metrics), jobs enabled on `state_dir`.

    `jobs` overrides entries of the jobs: section; `sections` adds whole sections ({"artifacts": {...}});
    `env` adds to the child's environment; `model` replaces stories260K (a path or "builtin:tiny")."""

    def __init__(self, workdir, name, state_dir, data_root, *, require_for_inference=False, jobs=None,
                 sections=None, env=None, admin_token=ADMIN_TOKEN, user_token=USER_TOKEN, model=None):
        self.workdir = workdir
        self.name = name
        self.state_dir = state_dir
        self.data_root = data_root
        self.config_path = os.path.join(workdir, f"{name}.yaml")
        self.port_file = os.path.join(workdir, f"{name}.ports")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.require_for_inference = require_for_inference
        self.proc = None
        self.channel = None
        self._log = None
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
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.env = dict(os.environ)
        self.env.pop("FROST_FAILPOINT", None)
        self.env["OPENBLAS_CORETYPE"] = "SkylakeX"
        self.env["FROST_ADMIN_TOKEN"] = admin_token
        self.env["FROST_USER_TOKEN"] = user_token
        self.env.update(env or {})

    # -- process ----------------------------------------------------------------------------

    def spawn(self):
        """Starts the process (appending to its log) without waiting for anything."""
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([frostd_binary(), "--config", self.config_path, "--port-file", self.port_file],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        return self

    def start(self):
        """Starts it and waits until it serves; returns self."""
        self.spawn()
        self.ports = self._wait_for_ports()
        self.addr = f"127.0.0.1:{self.ports['grpc']}"
        self.channel = grpc.insecure_channel(self.addr)
        self.training = training_pb2_grpc.TrainingStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self.prediction = prediction_pb2_grpc.PredictionStub(self.channel)
        self.generation = generation_pb2_grpc.GenerationStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self._wait_until_ready()
        return self

    @property
    def pid(self):
        return self.proc.pid

    def log(self):
        if self._log is not None and not self._log.closed:
            self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _fail(self, why):
        self.stop()
        raise RuntimeError(f"frostd {self.name}: {why}\n--- frostd output ---\n{self.log()}")

    def _wait_for_ports(self):
        return wait_for_port_file(self.proc, self.port_file, START_TIMEOUT_S, self._fail)

    def _wait_until_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with {self.proc.returncode} while starting")
            try:
                r = self.health.Check(health_pb2.HealthCheckRequest(service=READINESS_SERVICE), timeout=5)
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError as e:
                last = e.code().name
            time.sleep(0.1)
        self._fail(f"{READINESS_SERVICE} not SERVING after {START_TIMEOUT_S} s (last: {last})")

    def _close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def stop(self, timeout=60):
        """SIGTERM, then waits; returns the exit code (None if it had to be killed)."""
        self._close_channel()
        try:
            return None if self.proc is None else stop_process(self.proc, timeout)
        finally:
            if self._log is not None:
                self._log.close()

    def kill9(self):
        """SIGKILL, as a crash would; waits for the process to be gone."""
        self._close_channel()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
        return self.proc.returncode

    def wait_exit(self, timeout):
        """Waits for the process to end by itself; returns its code (None on timeout)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close_channel()
        if self._log is not None:
            self._log.close()
        return code

    def metrics_text(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=10) as r:
            return r.read().decode("utf-8", "replace")

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
