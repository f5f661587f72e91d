#!/usr/bin/python3
"""Integration test (label "integration") of frostd's transport security and transport limits, against real
frostd processes (builtin:tiny) and real clients: the Python client (grpcio) and frostctl.

Certificates are made at test time with the openssl CLI: a CA, a second ("wrong") CA, server certificates
for 127.0.0.1 / localhost (a valid one, a rotated one, an expired one), client certificates (valid, from
the wrong CA, expired).

Covers: TLS serves and plaintext / wrong-CA clients are refused; mTLS refuses a client without a
certificate, with one from another CA and with an expired one; frostd refuses to start on an expired or
mismatched certificate and on auth.require_tls without TLS; rotation on SIGHUP keeps a live stream and
switches new connections to the new certificate; a bad new certificate is refused with a log line and the
old one keeps serving; frostctl --tls/--ca/--cert/--key/--server-name; transport limits
(max_concurrent_streams, max_header_list_bytes, max_connection_age with grace); /metrics over HTTPS
(server.tls.metrics): served with the gRPC certificate, rotated with it, plaintext and wrong-CA scrapers
refused, client certificates required under mTLS, connections bounded.

Environment: FROST_FROSTD (frostd), FROST_FROSTCTL (frostctl, optional), PYTHONPATH with the stubs and
client/python.
"""

import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc
    from frost_client import FrostClient
    from grpc_health.v1 import health_pb2
    from frost.v1 import generation_pb2
    import frost_testlib as lib
except ImportError as e:
    print(f"tls_test: FAIL: cannot import the stubs ({e})", file=sys.stderr)
    sys.exit(1)

Code = grpc.StatusCode
READY = "frost.v1.Generation"


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "30", "-subj", f"/CN=frost test {name}", cwd=d)


def make_cert(d, name, ca, *, server, expired=False):
    """A certificate signed by `ca`; server ones name 127.0.0.1 and localhost. expired: valid in 2020 only."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", cwd=d)
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        if server:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        else:
            f.write("extendedKeyUsage=clientAuth\n")
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-extfile", ext]
    if expired:
        # openssl x509 -req has no start date flag before 3.x's -not_before; `ca` does. A tiny CA config.
        cnf = os.path.join(d, f"{name}.cnf")
        os.makedirs(os.path.join(d, "newcerts"), exist_ok=True)
        open(os.path.join(d, "index.txt"), "a").close()
        with open(cnf, "w") as f:
            f.write(f"[ca]\ndefault_ca=c\n[c]\ndir={d}\ndatabase={d}/index.txt\nnew_certs_dir={d}/newcerts\n"
                    f"serial={d}/{ca}.srl\ndefault_md=sha256\npolicy=p\nunique_subject=no\ncopy_extensions=copy\n"
                    "[p]\ncommonName=supplied\n")
        if not os.path.exists(os.path.join(d, f"{ca}.srl")):
            with open(os.path.join(d, f"{ca}.srl"), "w") as f:
                f.write("1000\n")
        args = ["ca", "-batch", "-config", cnf, "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key", "-in", f"{name}.csr",
                "-out", f"{name}.pem", "-startdate", "20200101000000Z", "-enddate", "20200201000000Z",
                "-extfile", ext, "-notext"]
    openssl(*args, cwd=d)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def served_cert_sha256(port):
    """SHA-256 of the certificate a new TLS handshake (ALPN h2, like gRPC) gets from 127.0.0.1:port."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6


def server_settings(port):
    """The parameters of the server's first HTTP/2 SETTINGS frame on a plaintext connection (h2 with prior
    knowledge, as gRPC speaks it), {identifier: value}."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # preface + SETTINGS
        buf = b""

        def need(n):
            nonlocal buf
            while len(buf) < n:
                chunk = sock.recv(65536)
                if not chunk:
                    raise AssertionError("the server closed the connection before its SETTINGS")
                buf += chunk

        while True:
            need(9)
            length, ftype, flags = int.from_bytes(buf[0:3], "big"), buf[3], buf[4]
            need(9 + length)
            payload, buf = buf[9:9 + length], buf[9 + length:]
            if ftype == 4 and not flags & 1:  # SETTINGS, not an ACK
                return {int.from_bytes(payload[i:i + 2], "big"): int.from_bytes(payload[i + 2:i + 6], "big")
                        for i in range(0, length - length % 6, 6)}


def pem_sha256(path):
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(read(path).decode())).hexdigest()


class Server(lib.FrostdProcess):
    """frostd on builtin:tiny with `server_lines` spliced into its server: section; ready once a client made
    with start()'s client_kwargs (TLS roots, client certificate) gets SERVING."""

    def __init__(self, workdir, name, server_lines=(), auth_lines=()):
        self.config = os.path.join(workdir, f"{name}.yaml")
        super().__init__(workdir, name, ["--config", self.config], start_timeout_s=60)
        lib.write_config(self.config, [
            "server:", '  listen: "127.0.0.1:0"', '  metrics_listen: "127.0.0.1:0"', *server_lines,
            "model:", "  path: builtin:tiny", "  threads: 1", "jobs:", "  enabled: false", "auth:", *auth_lines])

    def start(self, client_kwargs):
        self.spawn()
        ports = self.wait_ports()
        self.port, self.metrics_port = ports["grpc"], ports["metrics"]

        def check():
            with self.client(**client_kwargs) as c:
                r = c._health.Check(health_pb2.HealthCheckRequest(service=READY), timeout=5)
                return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

        self.wait_until_ready(check)
        return self

    def client(self, **kw):
        return FrostClient(self.addr, timeout=30, **kw)


def health_code(client, service="", wait_for_ready=False):
    try:
        r = client._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10,
                                 wait_for_ready=wait_for_ready)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
    except grpc.RpcError as e:
        return e.code()


def serving_soon(client, timeout=15):
    """The health answer once it is SERVING, retrying for `timeout` s: with a 1 s max_connection_age a check can
    race the GOAWAY and fail UNAVAILABLE even with wait_for_ready; the next one reconnects."""
    deadline = time.monotonic() + timeout
    while True:
        code = health_code(client, wait_for_ready=True)
        if code == "SERVING" or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="frost-tls-")
        d = cls.d = cls.tmp
        make_ca(d, "ca")
        make_ca(d, "wrongca")
        make_cert(d, "server", "ca", server=True)
        make_cert(d, "server2", "ca", server=True)
        make_cert(d, "server_expired", "ca", server=True, expired=True)
        make_cert(d, "client", "ca", server=False)
        make_cert(d, "client_wrongca", "wrongca", server=False)
        make_cert(d, "client_expired", "ca", server=False, expired=True)
        # The files frostd is configured with; rotation rewrites them.
        shutil.copy(os.path.join(d, "server.pem"), os.path.join(d, "live.pem"))
        shutil.copy(os.path.join(d, "server.key"), os.path.join(d, "live.key"))
        cls.ca = read(os.path.join(d, "ca.pem"))
        cls.servers = []

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def p(self, name):
        return os.path.join(self.d, name)

    def tls_lines(self, cert="live.pem", key="live.key", client_ca=None, require=False):
        lines = ["  tls:", f'    cert_file: "{self.p(cert)}"', f'    key_file: "{self.p(key)}"',
                 "    reload_interval_s: 3600"]  # rotation in these tests comes from SIGHUP only
        if client_ca:
            lines.append(f'    client_ca_file: "{self.p(client_ca)}"')
        if require:
            lines.append("    require_client_cert: true")
        return lines

    def start(self, name, server_lines=(), auth_lines=(), client_kwargs=None):
        s = Server(self.tmp, name, server_lines, auth_lines)
        self.servers.append(s)
        return s.start(client_kwargs if client_kwargs is not None else {"root_certificates": self.ca})

    def refused_start(self, name, server_lines=(), auth_lines=()):
        s = Server(self.tmp, name, server_lines, auth_lines).spawn()
        code = s.wait_exit(60)
        if code is None:
            s.stop()
            self.fail(f"frostd {name} kept running\n{s.log()}")
        self.assertNotEqual(code, 0)
        self.assertFalse(os.path.exists(s.port_file))
        return s.log()

    # -- TLS ---------------------------------------------------------------------------------------

    def test_01_tls_serves_and_refuses_plaintext_and_wrong_ca(self):
        s = self.start("tls", self.tls_lines(), auth_lines=["  require_tls: true"])
        with s.client(root_certificates=self.ca) as c:
            self.assertEqual(health_code(c), "SERVING")
            text, final = c.generate_text("hello", max_new_tokens=8, temperature=0)
            self.assertEqual(final.completion_tokens, 8)
        with s.client() as c:  # plaintext to a TLS port
            self.assertEqual(health_code(c), Code.UNAVAILABLE)
        with s.client(root_certificates=read(self.p("wrongca.pem"))) as c:
            self.assertEqual(health_code(c), Code.UNAVAILABLE)
        with s.client(root_certificates=self.ca, server_name="not-the-name.example") as c:
            self.assertEqual(health_code(c), Code.UNAVAILABLE)

        frostctl = os.environ.get("FROST_FROSTCTL")
        if frostctl:
            ok = subprocess.run([frostctl, "--addr", s.addr, "--ca", self.p("ca.pem"), "--server-name", "localhost",
                                 "health"], capture_output=True, text=True, timeout=60)
            self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
            plain = subprocess.run([frostctl, "--addr", s.addr, "--timeout", "5", "health"], capture_output=True,
                                   text=True, timeout=60)
            self.assertEqual(plain.returncode, 2, plain.stdout + plain.stderr)
            bad = subprocess.run([frostctl, "--addr", s.addr, "--ca", self.p("nope.pem"), "health"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(bad.returncode, 1, bad.stderr)
            self.assertIn("--ca", bad.stderr)

    def test_02_mtls(self):
        s = self.start("mtls", self.tls_lines(client_ca="ca.pem", require=True),
                       client_kwargs={"root_certificates": self.ca, "certificate_chain": read(self.p("client.pem")),
                                      "private_key": read(self.p("client.key"))})

        def code(cert=None):
            kw = {"root_certificates": self.ca}
            if cert:
                kw.update(certificate_chain=read(self.p(cert + ".pem")), private_key=read(self.p(cert + ".key")))
            with s.client(**kw) as c:
                return health_code(c)

        self.assertEqual(code("client"), "SERVING")
        self.assertEqual(code(None), Code.UNAVAILABLE, "no client certificate")
        self.assertEqual(code("client_wrongca"), Code.UNAVAILABLE, "client certificate from another CA")
        self.assertEqual(code("client_expired"), Code.UNAVAILABLE, "expired client certificate")
        frostctl = os.environ.get("FROST_FROSTCTL")
        if frostctl:
            r = subprocess.run([frostctl, "--addr", s.addr, "--ca", self.p("ca.pem"), "--cert", self.p("client.pem"),
                                "--key", self.p("client.key"), "--server-name", "localhost", "health"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_03_refused_at_start(self):
        log = self.refused_start("expired", self.tls_lines(cert="server_expired.pem", key="server_expired.key"))
        self.assertIn("server.tls.cert_file", log)
        self.assertIn("expired", log)
        log = self.refused_start("mismatch", self.tls_lines(cert="server.pem", key="server2.key"))
        self.assertIn("server.tls.key_file", log)
        self.assertIn("does not match", log)
        log = self.refused_start("plain_require_tls", auth_lines=["  require_tls: true"])
        self.assertIn("auth.require_tls", log)

    def test_04_rotation_keeps_live_streams_and_refuses_a_bad_certificate(self):
        s = self.start("rotate", self.tls_lines())
        self.assertEqual(served_cert_sha256(s.port), pem_sha256(self.p("server.pem")))
        with s.client(root_certificates=self.ca) as c:
            stream = c.generate("Once", max_new_tokens=200, ignore_eos=True, temperature=0)
            first = next(stream)
            self.assertEqual(first.WhichOneof("response"), "chunk")
            # Rotate to server2 while the stream is open.
            shutil.copy(self.p("server2.key"), self.p("live.key"))
            shutil.copy(self.p("server2.pem"), self.p("live.pem"))
            s.proc.send_signal(signal.SIGHUP)
            want = pem_sha256(self.p("server2.pem"))
            deadline = time.monotonic() + 15
            while served_cert_sha256(s.port) != want:
                self.assertLess(time.monotonic(), deadline, "new connections never got the rotated certificate\n"
                                + s.log())
                time.sleep(0.2)
            rest = list(stream)
            final = rest[-1]
            self.assertEqual(final.WhichOneof("response"), "final")
            self.assertEqual(final.final.completion_tokens, 200, "the live stream did not finish intact")
        with s.client(root_certificates=self.ca) as c:
            self.assertEqual(health_code(c), "SERVING")

        # A bad new pair (key of another certificate): refused with a log line; server2 keeps serving.
        shutil.copy(self.p("server.key"), self.p("live.key"))
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while "new certificate files refused" not in s.log():
            self.assertLess(time.monotonic(), deadline, s.log())
            time.sleep(0.1)
        self.assertIn("does not match", s.log())
        time.sleep(2.5)  # longer than the staged files' refresh (1 s)
        self.assertEqual(served_cert_sha256(s.port), want)
        with s.client(root_certificates=self.ca) as c:
            self.assertEqual(health_code(c), "SERVING")
        # An expired one too.
        shutil.copy(self.p("server_expired.key"), self.p("live.key"))
        shutil.copy(self.p("server_expired.pem"), self.p("live.pem"))
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while "expired on" not in s.log():
            self.assertLess(time.monotonic(), deadline, s.log())
            time.sleep(0.1)
        time.sleep(2.5)
        self.assertEqual(served_cert_sha256(s.port), want)
        self.assertEqual(s.stop(), 0, s.log())

    # -- /metrics over HTTPS (server.tls.metrics) ---------------------------------------------------

    def scrape(self, port, path="/metrics", cafile="ca.pem", cert=None, method="GET"):
        """(status, body) of an HTTPS request to 127.0.0.1:port, verifying the server against `cafile`."""
        ctx = ssl.create_default_context(cafile=self.p(cafile))
        if cert:
            ctx.load_cert_chain(self.p(cert + ".pem"), self.p(cert + ".key"))
        req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method=method)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=15) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def test_06_metrics_over_https(self):
        shutil.copy(self.p("server.key"), self.p("live.key"))  # test_04 leaves an expired pair there
        shutil.copy(self.p("server.pem"), self.p("live.pem"))
        s = self.start("metrics_tls", self.tls_lines() + ["    metrics: true"])
        self.assertIn("metrics on https://", s.log())
        status, body = self.scrape(s.metrics_port)
        self.assertEqual(status, 200)
        self.assertIn("frost_ready 1", body)
        self.assertIn("frost_requests_running", body)
        self.assertEqual(self.scrape(s.metrics_port, "/")[0], 200)
        self.assertEqual(self.scrape(s.metrics_port, "/admin")[0], 404)
        self.assertEqual(self.scrape(s.metrics_port, method="POST")[0], 405)
        # Plaintext HTTP to the TLS port gets no metrics.
        with self.assertRaises(Exception):
            with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=15) as r:
                r.read()
        # A scraper that trusts another CA refuses the server.
        with self.assertRaises(urllib.error.URLError) as ctx:
            self.scrape(s.metrics_port, cafile="wrongca.pem")
        self.assertIsInstance(ctx.exception.reason, ssl.SSLCertVerificationError)
        # Rotation (SIGHUP) reaches /metrics like gRPC: new connections get the new certificate.
        shutil.copy(self.p("server2.key"), self.p("live.key"))
        shutil.copy(self.p("server2.pem"), self.p("live.pem"))
        s.proc.send_signal(signal.SIGHUP)
        want = pem_sha256(self.p("server2.pem"))
        deadline = time.monotonic() + 15
        while served_cert_sha256(s.metrics_port) != want:
            self.assertLess(time.monotonic(), deadline, "/metrics never served the rotated certificate\n" + s.log())
            time.sleep(0.2)
        self.assertEqual(self.scrape(s.metrics_port)[0], 200)
        shutil.copy(self.p("server.key"), self.p("live.key"))
        shutil.copy(self.p("server.pem"), self.p("live.pem"))
        # Connections beyond the bound are closed at once, and the endpoint serves again once they go.
        idle = [socket.create_connection(("127.0.0.1", s.metrics_port), timeout=10) for _ in range(6)]
        try:
            time.sleep(0.5)
            closed = 0
            for c in idle:
                c.settimeout(0.5)
                try:
                    closed += c.recv(1) == b""
                except (socket.timeout, ConnectionResetError):
                    pass
            self.assertGreaterEqual(closed, 2, "more than 4 idle connections were all held open")
        finally:
            for c in idle:
                c.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                if self.scrape(s.metrics_port)[0] == 200:
                    break
            except (OSError, ssl.SSLError):
                pass
            self.assertLess(time.monotonic(), deadline, "/metrics did not recover after idle connections closed")
            time.sleep(0.2)
        self.assertEqual(s.stop(), 0, s.log())

        # mTLS: /metrics asks for a client certificate from client_ca_file, like the gRPC port.
        m = self.start("metrics_mtls", self.tls_lines(client_ca="ca.pem", require=True) + ["    metrics: true"],
                       client_kwargs={"root_certificates": self.ca, "certificate_chain": read(self.p("client.pem")),
                                      "private_key": read(self.p("client.key"))})
        self.assertEqual(self.scrape(m.metrics_port, cert="client")[0], 200)
        for cert in (None, "client_wrongca", "client_expired"):
            with self.assertRaises((ssl.SSLError, ConnectionResetError, urllib.error.URLError), msg=str(cert)):
                self.scrape(m.metrics_port, cert=cert)
        self.assertEqual(m.stop(), 0, m.log())

        log = self.refused_start("metrics_plain", ["  tls:", "    metrics: true"])
        self.assertIn("server.tls.metrics", log)

    # -- transport limits ---------------------------------------------------------------------------

    def test_05_transport_limits(self):
        s = self.start("limits", ["  max_concurrent_streams: 1", "  max_header_list_bytes: 4096",
                                  "  max_connection_age_s: 1", "  max_connection_age_grace_s: 30"],
                       client_kwargs={})
        with s.client() as c:
            # Request metadata over max_header_list_bytes is refused for that call alone (frostd checks it per
            # call), and the connection still serves.
            with self.assertRaises(grpc.RpcError) as ctx:
                c._generation.Tokenize(generation_pb2.TokenizeRequest(text="hello"), metadata=[("x-big", "a" * 8192)],
                                       timeout=10)
            self.assertEqual(ctx.exception.code(), Code.RESOURCE_EXHAUSTED, ctx.exception.details())
            self.assertIn("server.max_header_list_bytes=4096", ctx.exception.details())
            # The server still serves (the client may have to reconnect: wait_for_ready).
            self.assertEqual(serving_soon(c), "SERVING")

            # The limits a client sees: the server's HTTP/2 SETTINGS frame.
            settings = server_settings(s.port)
            self.assertEqual(settings.get(SETTINGS_MAX_CONCURRENT_STREAMS), 1, settings)
            # The transport's limit sits above the per-call one (4x, at least 64 KiB): over it gRPC would end every
            # call of the connection.
            self.assertEqual(settings.get(SETTINGS_MAX_HEADER_LIST_SIZE), 65536, settings)

            # max_connection_age 1 s with 30 s grace: a call running past the age completes, and later calls
            # reconnect transparently.
            t0 = time.monotonic()
            responses = []
            for r in c.generate("Once", max_new_tokens=64, ignore_eos=True, temperature=0):
                if not responses:
                    time.sleep(2.0)  # hold the call open past the connection's age (chunks coalesce meanwhile)
                responses.append(r)
            self.assertGreater(time.monotonic() - t0, 2.0)
            self.assertEqual(responses[-1].final.completion_tokens, 64)
            self.assertEqual(serving_soon(c), "SERVING")
        self.assertEqual(s.stop(), 0, s.log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
