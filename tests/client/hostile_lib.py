"""Helpers of tests/client/hostile_test.py: a raw HTTP/1.1 client (pipelining, chunked answers, a chosen source
address), facts about a process (CPU time, resident size, sockets in CLOSE-WAIT) and the prober — another
client that measures GET /v1/models and gRPC Health.Check while a case runs."""

import json
import os
import socket
import threading
import time

import grpc

import frost_testlib as tl
from grpc_health.v1 import health_pb2

PROBE_EVERY_S = 0.05


# ------------------------------------------------------------------------------------------------ HTTP helpers

class Conn:
    """A client socket plus the bytes read past the last response (pipelining)."""

    def __init__(self, sock):
        self.sock = sock
        self._pending = b""

    def __getattr__(self, name):
        return getattr(self.sock, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def connect(port, timeout=5.0, source=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Conn(s)


def read_response(sock, timeout=5.0, want_body=True):
    """One HTTP/1.1 response from `sock`: (status, headers dict (lower-case), body bytes). Handles Content-Length
    and chunked bodies. Raises on timeout or a closed connection before a status line."""
    sock.settimeout(timeout)
    buf = sock._pending
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a response head (got {buf[:200]!r})")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if status in (100, 204, 304) or not want_body:
        sock._pending = rest
        return status, headers, body
    if headers.get("transfer-encoding", "").lower() == "chunked":
        data = rest
        while True:
            while b"\r\n" not in data:
                more = sock.recv(65536)
                if not more:
                    raise ConnectionError("connection closed inside a chunked body")
                data += more
            size_line, _, data = data.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(data) < size + 2:
                more = sock.recv(65536)
                if not more:
                    raise ConnectionError("connection closed inside a chunk")
                data += more
            body += data[:size]
            data = data[size + 2:]
            if size == 0:
                break
        sock._pending = data
    else:
        n = int(headers.get("content-length", "0"))
        data = rest
        while len(data) < n:
            more = sock.recv(65536)
            if not more:
                break
            data += more
        body, sock._pending = data[:n], data[n:]
    return status, headers, body


def request(port, method, path, body=b"", headers=None, timeout=10.0, source=None):
    """A plain request on a fresh connection (from `source`, an address of 127/8): (status, headers, body,
    seconds)."""
    t0 = time.monotonic()
    with connect(port, timeout, source) as s:
        h = {"Host": "127.0.0.1", "Connection": "close"}
        if body or method == "POST":
            h["Content-Length"] = str(len(body))
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        s.sendall(head.encode("latin-1") + body)
        st, hd, b = read_response(s, timeout)
    return st, hd, b, time.monotonic() - t0


def post_json(port, path, obj, timeout=10.0):
    return request(port, "POST", path, json.dumps(obj).encode(), timeout=timeout)


def error_message(body):
    try:
        return json.loads(body)["error"]["message"]
    except Exception:  # noqa: BLE001
        return body[:300].decode("utf-8", "replace")


# ------------------------------------------------------------------------------------------------ process facts

def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss(pid):
    if not os.path.exists(f"/proc/{pid}/status"):
        return 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def close_wait_sockets(ports):
    """Sockets on `ports` (local side) in CLOSE-WAIT (state 08), from /proc/net/tcp{,6}."""
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state = parts[1], parts[3]
                    port = int(local.rsplit(":", 1)[1], 16)
                    if state == "08" and port in ports:
                        found.append((name, parts[1], parts[2]))
        except FileNotFoundError:
            pass
    return found


# ------------------------------------------------------------------------------------------------ the prober

class Prober(threading.Thread):
    """Another client: GET /v1/models on a new connection and gRPC Health.Check, every PROBE_EVERY_S."""

    def __init__(self, http_port, grpc_addr):
        super().__init__(daemon=True)
        self.http_port = http_port
        self.channel = grpc.insecure_channel(grpc_addr)
        self.health = tl.health_pb2_grpc.HealthStub(self.channel)
        self.samples = []  # (t, kind, seconds, ok)
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.running.set()
        self.stop_flag = False

    def run(self):
        while not self.stop_flag:
            if not self.running.is_set():
                time.sleep(0.01)
                continue
            t = time.monotonic()
            try:
                # Another client: another address (the attacks all come from 127.0.0.1).
                st, _, _, dt = request(self.http_port, "GET", "/v1/models", timeout=3, source="127.0.0.2")
                ok = st == 200 or f"HTTP {st}"
            except Exception as e:  # noqa: BLE001
                dt, ok = time.monotonic() - t, f"{type(e).__name__}: {e}"
            t2 = time.monotonic()
            try:
                r = self.health.Check(health_pb2.HealthCheckRequest(service=tl.READINESS_SERVICE), timeout=3)
                gok = r.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                gok = False
            gdt = time.monotonic() - t2
            with self.lock:
                self.samples.append((t, "http", dt, ok))
                self.samples.append((t2, "grpc", gdt, gok))
            time.sleep(PROBE_EVERY_S)

    def window(self, t0, t1):
        with self.lock:
            return [s for s in self.samples if t0 <= s[0] <= t1]


