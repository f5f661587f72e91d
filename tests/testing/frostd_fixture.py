"""The start-up every Python test that runs a real frostd shares: the process on ephemeral ports (its
--port-file), its log, readiness, SIGTERM / SIGKILL and exit codes. One place, so that a change to how frostd
starts or reports its ports is made once.

FrostdProcess takes frostd's arguments as given; tests/client/frost_testlib.py builds on it (Frostd: a
generated config with jobs and bearer tokens, and the gRPC helpers), and tests with their own config subclass
it (tests/client/tls_test.py, metrics_slow_clients_test.py, python_client_test.py, tests/deploy/k8s_frostd.py).
It needs nothing beyond the standard library until a gRPC call is made: grpcio and the generated stubs
(<build>/client/python on PYTHONPATH) are imported where open_stubs() and the default readiness check use them,
so the k8s test, which runs without the stubs, can use it too.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

READINESS_SERVICE = "frost.v1.Generation"
START_TIMEOUT_S = 90


def frostd_binary():
    binary = os.environ.get("FROST_FROSTD")
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError(f"FROST_FROSTD must name the frostd binary (got {binary!r})")
    return os.path.abspath(binary)


def yaml_str(s):
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def yaml_value(v):
    """A scalar, or a dict / list written as a JSON flow collection (valid YAML)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list, str)):
        return json.dumps(v)
    return str(v)


def wait_for_port_file(proc, port_file, timeout_s, fail, required=("grpc", "metrics")):
    """Waits for frostd's --port-file (written atomically: temp + rename) and returns its
    `name=PORT` lines as a dict; calls fail(why) (which raises) when frostd exits first, the file
    does not appear within timeout_s, or it lacks one of the `required` lines (grpc= and metrics=)."""
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
    missing = [k for k in required if k not in ports]
    if missing:
        fail(f"port file without {'= and '.join(missing)}= lines: {ports}")
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


def write_config(path, lines):
    """Writes a frostd YAML config, one string per line."""
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class FrostdProcess:
    """One frostd process started with `args` (after the binary; --port-file is added), its output in
    <workdir>/<name>.log (appended to across restarts) and its ports from <workdir>/<name>.ports.

    env: the child's whole environment (None: this process's); cwd, preexec_fn: as for subprocess.Popen;
    required_ports: the port-file lines start-up waits for; start_timeout_s: for the port file and readiness;
    binary: frostd's path (None: $FROST_FROSTD)."""

    def __init__(self, workdir, name, args, *, env=None, cwd=None, preexec_fn=None,
                 required_ports=("grpc", "metrics"), start_timeout_s=START_TIMEOUT_S, binary=None):
        self.workdir = workdir
        self.name = name
        self.binary = binary  # None: frostd_binary(), read when it starts
        self.args = list(args)
        self.port_file = os.path.join(workdir, f"{name}.ports")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.env = env
        self.cwd = cwd
        self.preexec_fn = preexec_fn
        self.required_ports = tuple(required_ports)
        self.start_timeout_s = start_timeout_s
        self.proc = None
        self.channel = None
        self.ports = None
        self._log = None

    # -- process ----------------------------------------------------------------------------

    def spawn(self):
        """Starts the process (appending to its log) without waiting for anything. A port file left by an
        earlier run is removed first, so that wait_ports() reads this run's."""
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary or frostd_binary(), *self.args, "--port-file", self.port_file],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                     preexec_fn=self.preexec_fn)
        return self

    def wait_ports(self, timeout=None, fail=None):
        """Waits for the port file; sets and returns self.ports (and self.addr, the gRPC address). fail(why)
        is called when it does not come (default: stop frostd and raise with its output)."""
        self.ports = wait_for_port_file(self.proc, self.port_file, timeout or self.start_timeout_s,
                                        fail or self._fail, self.required_ports)
        self.addr = f"127.0.0.1:{self.ports['grpc']}"
        return self.ports

    def open_stubs(self):
        """A plaintext channel to the gRPC port and a stub for each service."""
        import grpc
        from frost.v1 import admin_pb2_grpc, generation_pb2_grpc, prediction_pb2_grpc, training_pb2_grpc
        from grpc_health.v1 import health_pb2_grpc

        self.channel = grpc.insecure_channel(self.addr)
        self.training = training_pb2_grpc.TrainingStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self.prediction = prediction_pb2_grpc.PredictionStub(self.channel)
        self.generation = generation_pb2_grpc.GenerationStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def wait_until_ready(self, check=None, timeout=None):
        """Polls readiness until it says SERVING. check() returns the readiness service's status name (it may
        raise grpc.RpcError, which counts as not ready yet); the default asks READINESS_SERVICE on the
        plaintext channel. Raises (with frostd's output) when frostd exits first or the time runs out."""
        import grpc
        from grpc_health.v1 import health_pb2

        timeout = timeout or self.start_timeout_s
        if check is None:
            def check():
                r = self.health.Check(health_pb2.HealthCheckRequest(service=READINESS_SERVICE), timeout=5)
                return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with {self.proc.returncode} while starting")
            try:
                last = check()
                if last == "SERVING":
                    return
            except grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            time.sleep(0.1)
        self._fail(f"{READINESS_SERVICE} not SERVING after {timeout} s (last: {last})")

    def start(self):
        """Starts it and waits until it serves (plaintext gRPC); returns self."""
        self.spawn()
        self.wait_ports()
        self.open_stubs()
        self.wait_until_ready()
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


