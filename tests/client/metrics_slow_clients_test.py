#!/usr/bin/python3
"""Integration test (label "integration") of frostd's /metrics against slow and excess clients (issue 42),
plaintext and HTTPS (server.tls.metrics), on real frostd processes (builtin:tiny).

16 connections trickle a request head one byte every 200 ms: 13 from 127.0.0.2 and 3 from 127.0.0.1, the
scraper's own address (over TLS, half of them stall the handshake, half complete it and trickle the request).
Meanwhile scrapes from 127.0.0.1 are each answered within a second. The 9 oldest connections of 127.0.0.2 are
cut at once (4 per address: each newer one displaces the oldest still reading its head), the 7 others by the
5 s head deadline (TLS handshake included), and frost_metrics_connections_refused_total counts them by reason.
The limits are server/metrics_https.h's; the unit test (tests/unit/server/metrics_http_server_test.cc) covers
the rest at a scaled-down deadline. ~15 s.

Environment: FROST_FROSTD (frostd), PYTHONPATH with the stubs and client/python (frost_testlib).
"""

import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import frost_testlib as lib
except ImportError as e:
    print(f"metrics_slow_clients_test: FAIL: cannot import frost_testlib ({e})", file=sys.stderr)
    sys.exit(1)

HEAD_DEADLINE_S = 5  # server/metrics_https.h kMetricsHeadDeadlineS
PER_ADDRESS = 4      # kMetricsMaxConnectionsPerAddress
SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow-loris-test\r\n\r\n"
TLS_STALL = b"\x16\x03\x01\x3f\xff" + bytes(64)  # a handshake record header announcing 16 KiB, then zeros


class Server(lib.FrostdProcess):
    """frostd on builtin:tiny with `server_lines` spliced into its server: section, started: only /metrics is
    used, so start-up waits for the port file and not for gRPC readiness."""

    def __init__(self, workdir, name, server_lines=()):
        config = os.path.join(workdir, f"{name}.yaml")
        super().__init__(workdir, name, ["--config", config], start_timeout_s=60)
        lib.write_config(config, ["server:", '  listen: "127.0.0.1:0"', '  metrics_listen: "127.0.0.1:0"',
                                  *server_lines, "model:", "  path: builtin:tiny", "  threads: 1", "jobs:",
                                  "  enabled: false"])
        self.spawn()
        self.metrics_port = self.wait_ports()["metrics"]


class Tricklers:
    """Connections that send one byte every 200 ms (never the last bytes: the head stays incomplete), watched
    every 10 ms for the server closing them."""

    def __init__(self):
        self.conns = []  # [sock, bytes, sent, opened, closed_after or None]
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def add(self, sock, data):
        sock.setblocking(False)
        with self.lock:
            self.conns.append([sock, data, 0, time.monotonic(), None])

    def closed(self, sock):
        try:
            while True:
                if not sock.recv(4096):
                    return True
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (OSError, ssl.SSLError):
            return True

    def run(self):
        next_byte = time.monotonic()
        while not self.stopping:
            tick = time.monotonic() >= next_byte
            if tick:
                next_byte += 0.2
            with self.lock:
                for c in self.conns:
                    sock, data, sent, opened, closed_after = c
                    if closed_after is not None:
                        continue
                    if self.closed(sock):
                        c[4] = time.monotonic() - opened
                        continue
                    if tick:
                        i = min(sent, len(data) - 3)
                        try:
                            sock.send(data[i:i + 1])
                            c[2] += 1
                        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                            pass
                        except (OSError, ssl.SSLError):
                            c[4] = time.monotonic() - opened
            time.sleep(0.01)

    def closed_after(self):
        with self.lock:
            return [c[4] for c in self.conns]

    def stop(self):
        self.stopping = True
        self.thread.join()
        for c in self.conns:
            c[0].close()


class MetricsSlowClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="frost_metrics_slow_")
        cls.dir = cls.tmp.name
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                           cwd=cls.dir, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"openssl failed:\n{r.stderr}")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def client_ctx(self):
        ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "cert.pem"))
        return ctx

    def connect(self, port, source, tls):
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        if tls:
            s = self.client_ctx().wrap_socket(s, server_hostname="127.0.0.1")
        return s

    def scrape(self, port, tls):
        """(seconds, HTTP status line, body) of one GET /metrics from 127.0.0.1."""
        t0 = time.monotonic()
        with self.connect(port, "127.0.0.1", tls) as s:
            s.settimeout(5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n")
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (ssl.SSLEOFError, ConnectionResetError):
                    break
                if not chunk:
                    break
                out += chunk
        took = time.monotonic() - t0
        head, _, body = out.decode("utf-8", "replace").partition("\r\n\r\n")
        return took, head.split("\r\n")[0], body

    def refused(self, body, reason):
        m = re.search(r'^frost_metrics_connections_refused_total\{reason="%s"\} (\S+)$' % reason, body, re.M)
        self.assertIsNotNone(m, f"no refused counter for {reason}")
        return float(m.group(1))

    def run_scenario(self, name, tls):
        server_lines = []
        if tls:
            server_lines = ["  tls:", f"    cert_file: {os.path.join(self.dir, 'cert.pem')}",
                            f"    key_file: {os.path.join(self.dir, 'key.pem')}", "    metrics: true"]
        srv = Server(self.dir, name, server_lines)
        try:
            port = srv.metrics_port
            took, status, body = self.scrape(port, tls)
            self.assertEqual(status, "HTTP/1.1 200 OK", srv.log())
            self.assertEqual(self.refused(body, "address_limit"), 0)
            t = Tricklers()
            try:
                for i in range(16):
                    source = "127.0.0.2" if i < 13 else "127.0.0.1"
                    if not tls:
                        t.add(self.connect(port, source, False), SLOW_HEAD)
                    elif i % 2 == 0:  # stalls the handshake
                        t.add(self.connect(port, source, False), TLS_STALL)
                    else:  # completes it, then trickles the request
                        t.add(self.connect(port, source, True), SLOW_HEAD)
                opened = time.monotonic()
                time.sleep(0.5)
                closed = t.closed_after()
                early = [i for i, c in enumerate(closed) if c is not None]
                self.assertEqual(early, list(range(9)), f"closed at once: {closed}")
                # Scrapes from 127.0.0.1 while 7 connections keep trickling.
                for i in range(3):
                    took, status, body = self.scrape(port, tls)
                    self.assertEqual(status, "HTTP/1.1 200 OK")
                    self.assertIn("frost_ready", body)
                    self.assertLess(took, 1.0, f"scrape {i} took {took:.2f} s")
                    time.sleep(0.3)
                self.assertEqual(sum(c is None for c in t.closed_after()), 7, t.closed_after())
                # The head deadline cuts the rest.
                while any(c is None for c in t.closed_after()) and time.monotonic() - opened < HEAD_DEADLINE_S + 3:
                    time.sleep(0.05)
                closed = t.closed_after()
                for i in range(9, 16):
                    self.assertIsNotNone(closed[i], f"connection {i} outlived the head deadline: {closed}")
                    self.assertGreater(closed[i], HEAD_DEADLINE_S - 0.2, closed)
                    self.assertLess(closed[i], HEAD_DEADLINE_S + 1.0, closed)
            finally:
                t.stop()
            took, status, body = self.scrape(port, tls)
            self.assertEqual(status, "HTTP/1.1 200 OK")
            self.assertEqual(self.refused(body, "address_limit"), 9)
            self.assertEqual(self.refused(body, "head_timeout"), 7)
            self.assertEqual(self.refused(body, "connection_limit"), 0)
            self.assertNotIn("slow-loris", srv.log())  # nothing logged per connection
            code = srv.stop()
            self.assertEqual(code, 0, srv.log())
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()

    def test_plaintext(self):
        self.run_scenario("plain", tls=False)

    def test_tls(self):
        self.run_scenario("tls", tls=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
