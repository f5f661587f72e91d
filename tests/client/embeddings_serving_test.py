#!/usr/bin/python3
"""Embeddings end to end: POST /v1/embeddings (float and base64) and gRPC Generation.Embed against a real
frostd serving stories260K (../shared/models/stories260K, or FROST_SHARED/models/stories260K).

Checks that the same texts give the same vectors (within 1e-5) over both protocols, both encodings and
batch sizes 1, 3 and 8; that token-id inputs equal the text inputs they were tokenized from; that every
vector has norm 1 and d_model values and different texts differ; and that refusals are 400s (gRPC:
INVALID_ARGUMENT) naming the field.

Environment (ctest sets both; see tests/CMakeLists.txt):
  FROST_FROSTD    path of the frostd binary (required)
  PYTHONPATH      <build>/client/python (generated stubs) and <src>/client/python
Exit 77 (skipped) when the model is absent.
"""

import base64
import json
import math
import os
import struct
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

try:
    import grpc
    from frost.v1 import generation_pb2

    import frost_testlib
except ImportError as e:
    print(f"embeddings_serving_test: FAIL: cannot import the stubs ({e}); needs python3-grpcio, python3-protobuf "
          "and the frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

TOL = 1e-5
TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "She liked to play in the park with her red ball.",
    "One day, a big dog came to the park.",
    "The dog was very friendly and wanted to play.",
    "Tom and Sam went to the beach to build a sandcastle.",
    "The sun was hot and the water was blue.",
    "a",
    "Mom said, \"Time for bed!\" and turned off the light.",
]


def http_post(port, path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def decode_b64(s):
    raw = base64.b64decode(s)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def f32(v):
    """JSON numbers as the float32 values they were written from (the server writes each float's shortest form)."""
    return list(struct.unpack(f"<{len(v)}f", struct.pack(f"<{len(v)}f", *v)))


def max_diff(a, b):
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b))


class EmbeddingsServing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory(prefix="frost-embed-")
        w = cls.work.name
        cls.server = frost_testlib.Frostd(w, "embed", os.path.join(w, "state"), w,
                                          sections={"server": {"http": {"listen": "127.0.0.1:0"}}}).start()
        cls.port = cls.server.ports["http"]
        cls.model = os.path.basename(frost_testlib.model_path())

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.work.cleanup()
        if code != 0:
            raise AssertionError(f"frostd exited with {code} after SIGTERM")

    def http_embed(self, inputs, fmt="float", **extra):
        status, body = http_post(self.port, "/v1/embeddings",
                                 {"model": self.model, "input": inputs, "encoding_format": fmt, **extra})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "list")
        self.assertEqual(body["model"], self.model)
        self.assertEqual([d["index"] for d in body["data"]], list(range(len(body["data"]))))
        self.assertTrue(all(d["object"] == "embedding" for d in body["data"]))
        vecs = [decode_b64(d["embedding"]) if fmt == "base64" else f32(d["embedding"]) for d in body["data"]]
        self.assertEqual(body["usage"]["prompt_tokens"], body["usage"]["total_tokens"])
        return vecs, body["usage"]["prompt_tokens"]

    def grpc_embed(self, texts=None, ids=None):
        req = generation_pb2.EmbedRequest(texts=texts or [],
                                          token_ids=[generation_pb2.TokenIds(ids=i) for i in (ids or [])])
        r = self.server.generation.Embed(req, timeout=120)
        return [list(e.values) for e in r.embeddings], [e.n_tokens for e in r.embeddings], r.prompt_tokens

    def reference(self):
        if not hasattr(self, "_ref"):
            type(self)._ref = [self.http_embed(t)[0][0] for t in TEXTS]  # one text per request, float
        return self._ref

    def test_protocols_encodings_and_batch_sizes_agree(self):
        ref = self.reference()
        worst = 0.0
        for size in (1, 3, 8):
            for start in range(0, len(TEXTS), size):
                chunk = TEXTS[start:start + size]
                want = ref[start:start + size]
                got_f, tok_f = self.http_embed(chunk)
                got_b, tok_b = self.http_embed(chunk, "base64")
                got_g, n_tokens, tok_g = self.grpc_embed(texts=chunk)
                self.assertEqual(tok_f, tok_b)
                self.assertEqual(tok_f, tok_g)
                self.assertEqual(sum(n_tokens), tok_g)
                for got in (got_f, got_b, got_g):
                    self.assertEqual(len(got), len(chunk))
                    for g, w in zip(got, want):
                        worst = max(worst, max_diff(g, w))
        self.assertLessEqual(worst, TOL)
        # each input is computed alone: in practice the vectors are the same floats
        print(f"\n  batch sizes 1/3/8, HTTP float/base64, gRPC: max |diff| {worst:.2e}", file=sys.stderr)

    def test_vectors_are_unit_and_distinct(self):
        ref = self.reference()
        info = self.server.generation.GetModelInfo(generation_pb2.ModelInfoRequest(), timeout=30)
        for v in ref:
            self.assertEqual(len(v), 64)  # stories260K's hidden size
            self.assertAlmostEqual(math.sqrt(sum(x * x for x in v)), 1.0, delta=1e-5)
        for i in range(len(ref)):
            for j in range(i + 1, len(ref)):
                self.assertGreater(max_diff(ref[i], ref[j]), 1e-3, (TEXTS[i], TEXTS[j]))
        self.assertTrue(info.name)
        # dimensions equal to d_model is accepted and changes nothing
        self.assertLessEqual(max_diff(self.http_embed(TEXTS[0], dimensions=64)[0][0], ref[0]), TOL)

    def test_token_ids_equal_their_text(self):
        ref = self.reference()
        ids = [list(self.server.generation.Tokenize(generation_pb2.TokenizeRequest(text=t), timeout=30).token_ids)
               for t in TEXTS[:3]]
        self.assertEqual(ids[0][0], 1)  # BOS, as texts are embedded
        got_h, tokens = self.http_embed(ids)
        self.assertEqual(tokens, sum(len(i) for i in ids))
        one, _ = self.http_embed(ids[1])  # a flat list of ids is one input
        got_g, n_tokens, _ = self.grpc_embed(ids=ids)
        self.assertEqual(n_tokens, [len(i) for i in ids])
        for k in range(3):
            self.assertLessEqual(max_diff(got_h[k], ref[k]), TOL)
            self.assertLessEqual(max_diff(got_g[k], ref[k]), TOL)
        self.assertLessEqual(max_diff(one[0], ref[1]), TOL)
        # without the BOS the ids are a different input, used exactly as given
        no_bos, _ = self.http_embed([ids[0][1:]])
        self.assertGreater(max_diff(no_bos[0], ref[0]), 1e-4)

    def assert_refused(self, body, http, param, *words):
        status, resp = http_post(self.port, "/v1/embeddings", body)
        self.assertEqual(status, http, resp)
        err = resp["error"]
        self.assertEqual(err["param"], param, err)
        for w in words:
            self.assertIn(w, err["message"], err)
        return err

    def test_http_refusals_name_the_field(self):
        m = self.model
        self.assert_refused({"model": m, "input": "x", "foo": 1}, 400, "foo", "foo")
        self.assert_refused({"model": m, "input": "x", "dimensions": 32}, 400, "dimensions", "64")
        self.assert_refused({"model": m, "input": "x", "encoding_format": "int8"}, 400, "encoding_format")
        long_text = "the cat sat on the mat and " * 200
        self.assert_refused({"model": m, "input": ["ok", long_text]}, 400, "input", "input[1]", "512")
        self.assert_refused({"model": m, "input": [[1, 2], [1, 9999]]}, 400, "input", "input[1]", "out of range")
        self.assert_refused({"model": m, "input": [list(range(3, 3 + 513))]}, 400, "input", "513 tokens", "512")
        self.assert_refused({"model": m, "input": ["a", ""]}, 400, "input", "input[1]")
        self.assert_refused({"model": m, "input": []}, 400, "input")
        self.assert_refused({"input": "x"}, 400, "model")
        err = self.assert_refused({"model": "gpt-4", "input": "x"}, 404, "model")
        self.assertEqual(err["code"], "model_not_found")

    def test_grpc_refusals_name_the_field(self):
        def refused(req, *words):
            with self.assertRaises(grpc.RpcError) as cm:
                self.server.generation.Embed(req, timeout=60)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, cm.exception.details())
            for w in words:
                self.assertIn(w, cm.exception.details())

        refused(generation_pb2.EmbedRequest(), "exactly one")
        refused(generation_pb2.EmbedRequest(texts=["a"], token_ids=[generation_pb2.TokenIds(ids=[1])]),
                "exactly one")
        refused(generation_pb2.EmbedRequest(texts=["a", "b", ""]), "texts[2]")
        refused(generation_pb2.EmbedRequest(texts=["a", "word " * 200]), "texts[1]", "512")
        refused(generation_pb2.EmbedRequest(token_ids=[generation_pb2.TokenIds(ids=[1, -3])]), "token_ids[0]")
        refused(generation_pb2.EmbedRequest(texts=["a"] * 2049), "2049", "2048")

    def test_metrics_count_both_protocols(self):
        self.reference()
        self.grpc_embed(texts=["x"])
        text = self.server.metrics_text()
        self.assertRegex(text, r'frost_requests_total\{[^}]*rpc="embeddings"')
        self.assertRegex(text, r'frost_requests_total\{[^}]*rpc="Embed"')


if __name__ == "__main__":
    if not os.path.isdir(frost_testlib.model_path()):
        print(f"embeddings_serving_test: SKIP: no model at {frost_testlib.model_path()}")
        sys.exit(77)
    frost_testlib.frostd_binary()
    unittest.main(verbosity=2)
