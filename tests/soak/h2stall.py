"""A minimal HTTP/2 gRPC client (stdlib only) for clients that stop reading: each stream runs on its own
TCP connection, announces a small stream flow-control window (SETTINGS_INITIAL_WINDOW_SIZE) and never
sends a WINDOW_UPDATE, so frostd can send at most `window` bytes of DATA and must then hold the rest.
The socket itself is still read (control frames: SETTINGS, PING, trailers, RST_STREAM are not flow
controlled), so the moment frostd ends the stream (its deadline) is observed. A gRPC library client cannot
do this: its transport keeps reading into a window it grows by itself (BDP probing).

Used by tests/soak/soak_test.py (slow_readers suite).
"""

import selectors
import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4


def frame(ftype, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream_id) + payload


def hpack_int(value, prefix_bits, first_byte=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


class StalledStream:
    """One Generate call on its own connection. `window`: stream window announced (bytes of DATA frostd may
    send before it has to wait); `timeout_s`: the grpc-timeout header (frostd's deadline for the call; None: no
    deadline)."""

    def __init__(self, host, port, request_bytes, window, timeout_s, response_parser=None):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.parse = response_parser
        self.buf = bytearray()
        self.grpc_buf = bytearray()
        self.data_bytes = 0  # DATA payload bytes received on the stream
        self.messages = []   # decoded responses (parse(bytes)), or raw bytes without a parser
        self.tokens = 0
        self.ended = None    # "trailers" | "rst:<code>" | "goaway" | "eof"
        self.t_start = time.monotonic()
        self.t_end = None
        self.deadline_s = timeout_s
        self._lock = threading.Lock()
        headers = b"".join(hpack_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", "/frost.v1.Generation/Generate"),
            (":authority", f"{host}:{port}"), ("te", "trailers"), ("content-type", "application/grpc"),
            *((("grpc-timeout", f"{int(timeout_s * 1000)}m"),) if timeout_s is not None else ())))
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE,
                                                                             window)
        msg = b"\x00" + struct.pack(">I", len(request_bytes)) + request_bytes
        self._send(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(HEADERS, END_HEADERS, 1, headers) +
                   frame(DATA, END_STREAM, 1, msg))

    def _send(self, data):
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    def on_readable(self):
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end("eof")
            return
        self.buf += chunk
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[0:3], "big")
            if len(self.buf) < 9 + length:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = bytes(self.buf[9:9 + length])
            del self.buf[:9 + length]
            self._frame(ftype, flags, sid, payload)

    def _frame(self, ftype, flags, sid, payload):
        if ftype == SETTINGS and not flags & ACK:
            self._send(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            self._send(frame(PING, ACK, 0, payload))
        elif ftype == DATA and sid == 1:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            self.data_bytes += len(payload)
            self.grpc_buf += payload
            while len(self.grpc_buf) >= 5:
                n = int.from_bytes(self.grpc_buf[1:5], "big")
                if len(self.grpc_buf) < 5 + n:
                    break
                body = bytes(self.grpc_buf[5:5 + n])
                del self.grpc_buf[:5 + n]
                m = self.parse(body) if self.parse else body
                self.messages.append(m)
                if self.parse and m.WhichOneof("response") == "chunk":
                    self.tokens += len(m.chunk.token_ids)
            if flags & END_STREAM:
                self._end("data-end")
        elif ftype == HEADERS and sid == 1 and flags & END_STREAM:
            self._end("trailers")
        elif ftype == RST_STREAM and sid == 1:
            self._end(f"rst:{int.from_bytes(payload[:4], 'big')}")
        elif ftype == GOAWAY:
            self._end("goaway")

    def _end(self, how):
        if self.ended is None:
            self.ended = how
            self.t_end = time.monotonic()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class StalledClients:
    """Runs the sockets of many StalledStreams from one thread until all ended or stop()."""

    def __init__(self, streams):
        self.streams = streams
        self.sel = selectors.DefaultSelector()
        for s in streams:
            self.sel.register(s.sock, selectors.EVENT_READ, s)
        self._stop = False
        self.thread = threading.Thread(target=self._loop, name="h2stall", daemon=True)
        self.thread.start()

    def _loop(self):
        while not self._stop:
            if all(s.ended for s in self.streams):
                return
            for key, _ in self.sel.select(timeout=0.05):
                s = key.data
                if s.ended:
                    continue
                s.on_readable()
                if s.ended:
                    try:
                        self.sel.unregister(s.sock)
                    except (KeyError, ValueError):
                        pass

    def wait(self, timeout):
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def stop(self):
        self._stop = True
        self.thread.join(5)
        for s in self.streams:
            s.close()
