#!/usr/bin/python3
"""Integration test of the Python client (client/python/frost_client), and of frostctl when
FROST_FROSTCTL is set, against a real frostd serving builtin:tiny on ephemeral ports.

Environment (ctest sets both; see tests/CMakeLists.txt):
  FROST_FROSTD    path of the frostd binary (required)
  FROST_FROSTCTL  path of the frostctl binary (optional: its tests are skipped without it)
  PYTHONPATH      <build>/client/python (generated stubs) and <src>/client/python

Run by hand:
  PYTHONPATH=build/client/python:client/python FROST_FROSTD=build/server/frostd \
      FROST_FROSTCTL=build/client/frostctl /usr/bin/python3 tests/client/python_client_test.py
"""

import os
import subprocess
import sys
import tempfile
import unittest

# grpcio and protobuf are installed by scripts/install_deps.sh, so a missing module is a
# broken setup, not a reason to skip.
try:
    import grpc
    from frost.v1 import generation_pb2
    from frost_client import FrostClient

    import frost_testlib  # tests/client: frostd process helpers shared with jobs_test.py
except ImportError as e:
    print(f"python_client_test: FAIL: cannot import the client ({e}); needs python3-grpcio, "
          "python3-protobuf and the frost_python_stubs build target on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READINESS_SERVICE = frost_testlib.READINESS_SERVICE


class FrostdProcess(frost_testlib.FrostdProcess):
    """frostd on configs/default.yaml with builtin:tiny, 127.0.0.1 port 0 (gRPC and metrics) and its state
    under workdir, given as flags over the shipped config (which this test thereby checks starts)."""

    def __init__(self, workdir):
        super().__init__(workdir, "frostd", [
            "--config", os.path.join(SOURCE_DIR, "configs", "default.yaml"),
            "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
            "--model", "builtin:tiny", "--state-dir", os.path.join(workdir, "state")], start_timeout_s=60)

    def start_with_client(self):
        """Starts it and returns a FrostClient on it, once readiness (asked through that client) is SERVING."""
        self.spawn()
        self.wait_ports()
        client = FrostClient(self.addr, timeout=60)
        self.wait_until_ready(lambda: client.health(READINESS_SERVICE, timeout=5))
        return client


class PythonClientTest(unittest.TestCase):
    """One frostd for the whole class; tearDownClass checks that SIGTERM exits it with 0."""

    @classmethod
    def setUpClass(cls):
        frost_testlib.frostd_binary()  # raises naming FROST_FROSTD
        cls.tmp = tempfile.TemporaryDirectory(prefix="frost-pyclient-")
        cls.server = FrostdProcess(cls.tmp.name)
        cls.client = cls.server.start_with_client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        log = cls.server.log()
        cls.tmp.cleanup()
        if code != 0:
            raise AssertionError(f"frostd exited with {code} after SIGTERM (expected 0)\n"
                                 f"--- frostd output ---\n{log}")

    def generate_collect(self, prompt, **kwargs):
        """Runs one generation; returns (text, token ids, final)."""
        text, ids, final = [], [], None
        for response in self.client.generate(prompt, **kwargs):
            kind = response.WhichOneof("response")
            if kind == "chunk":
                self.assertIsNone(final, "chunk after final")
                text.append(response.chunk.text)
                ids.extend(response.chunk.token_ids)
            else:
                self.assertEqual(kind, "final")
                self.assertIsNone(final, "two final messages")
                final = response.final
        self.assertIsNotNone(final, "stream without a final message")
        return "".join(text), ids, final

    def test_health(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health(READINESS_SERVICE), "SERVING")

    def test_open_inference_protocol_without_a_head(self):
        """The Open Inference Protocol endpoint (proto/inference/open_inference.proto) on a server with no
        prototype head: the server is live and ready, the model 'prototype' is not, and ModelInfer says why."""
        from inference import open_inference_pb2 as oip
        from inference import open_inference_pb2_grpc as oip_grpc
        with grpc.insecure_channel(self.server.addr) as channel:
            stub = oip_grpc.GRPCInferenceServiceStub(channel)
            self.assertTrue(stub.ServerLive(oip.ServerLiveRequest(), timeout=10).live)
            self.assertTrue(stub.ServerReady(oip.ServerReadyRequest(), timeout=10).ready)
            self.assertFalse(stub.ModelReady(oip.ModelReadyRequest(name="prototype"), timeout=10).ready)
            req = oip.ModelInferRequest(model_name="prototype")
            req.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"hello")
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.ModelInfer(req, timeout=30)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, ctx.exception.details())
            with self.assertRaises(grpc.RpcError) as ctx:
                stub.ModelMetadata(oip.ModelMetadataRequest(name="llama"), timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("llama", ctx.exception.details())

    def test_model_info(self):
        info = self.client.model_info()
        self.assertEqual(info.name, "builtin:tiny")
        self.assertEqual(info.architecture, "llama")
        self.assertGreater(info.vocab_size, 0)
        self.assertGreater(info.context_length, 0)
        self.assertGreater(info.n_params, 0)
        # the batching engine's KV block pool
        self.assertGreater(info.kv_blocks, 0)
        self.assertEqual(info.kv_cache_bytes, info.kv_blocks * info.kv_block_bytes)
        self.assertEqual(info.kv_block_tokens, 16)
        self.assertGreater(info.max_running, 0)

    def test_tokenize(self):
        vocab_size = self.client.model_info().vocab_size
        ids = self.client.tokenize("hello")
        self.assertGreater(len(ids), 0)
        self.assertTrue(all(0 <= i < vocab_size for i in ids), ids)
        # Without BOS the ids are the same or one shorter (when the tokenizer has a BOS).
        no_bos = self.client.tokenize("hello", add_bos=False)
        self.assertIn(len(ids) - len(no_bos), (0, 1))
        self.assertEqual(ids[len(ids) - len(no_bos):], no_bos)

    def test_generate_greedy_is_deterministic(self):
        params = dict(temperature=0, max_new_tokens=8, seed=1234)
        text1, ids1, final1 = self.generate_collect("Once upon a time", **params)
        text2, ids2, final2 = self.generate_collect("Once upon a time", **params)
        self.assertEqual(ids1, ids2)
        self.assertEqual(text1, text2)
        self.assertEqual(final1.completion_tokens, len(ids1))
        self.assertIn(final1.finish_reason, (generation_pb2.FINISH_REASON_LENGTH, generation_pb2.FINISH_REASON_STOP))
        if final1.finish_reason == generation_pb2.FINISH_REASON_LENGTH:
            self.assertEqual(len(ids1), 8)
        self.assertEqual(final1.prompt_tokens, len(self.client.tokenize("Once upon a time")))
        # generate_text() gives the same completion.
        text3, final3 = self.client.generate_text("Once upon a time", **params)
        self.assertEqual(text3, text1)
        self.assertEqual(final3.completion_tokens, final1.completion_tokens)

    def test_invalid_top_p_is_invalid_argument(self):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.generate_collect("hello", top_p=1.5, max_new_tokens=4)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("top_p", ctx.exception.details())

    def test_unknown_sampling_parameter_is_type_error(self):
        with self.assertRaises(TypeError):
            self.client.generate("hello", top_q=0.5)

    def test_speculative_fields(self):
        # Only what is given is set; "server" is the unset value.
        req = FrostClient.build_request("hi", spec_method="ngram", spec_tokens=3)
        self.assertEqual((req.speculative.method, req.speculative.num_tokens), (generation_pb2.SPEC_METHOD_NGRAM, 3))
        self.assertFalse(FrostClient.build_request("hi").HasField("speculative"))
        self.assertEqual(FrostClient.build_request("hi", spec_method="server").speculative.method,
                         generation_pb2.SPEC_METHOD_UNSPECIFIED)
        with self.assertRaises(ValueError):
            FrostClient.build_request("hi", spec_method="eagle")
        # Speculation never changes a greedy output, only its speed.
        params = dict(temperature=0, max_new_tokens=8)
        text, _ = self.client.generate_text("Once upon a time", **params)
        for method in ("off", "ngram", "suffix"):
            spec_text, final = self.client.generate_text("Once upon a time", spec_method=method, spec_tokens=4,
                                                         **params)
            self.assertEqual(spec_text, text, method)
            self.assertLessEqual(final.accepted_tokens, final.draft_tokens)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.generate_collect("hello", spec_tokens=-1, max_new_tokens=4)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("speculative.num_tokens: must be >= 0, got -1", ctx.exception.details())


class FrostctlTest(unittest.TestCase):
    """frostctl against the same kind of server (its own frostd, so both classes stay
    independent)."""

    @classmethod
    def setUpClass(cls):
        cls.frostctl = os.environ.get("FROST_FROSTCTL")
        if not cls.frostctl:
            raise unittest.SkipTest("FROST_FROSTCTL not set")
        frost_testlib.frostd_binary()  # raises naming FROST_FROSTD
        cls.tmp = tempfile.TemporaryDirectory(prefix="frost-frostctl-")
        cls.server = FrostdProcess(cls.tmp.name)
        cls.client = cls.server.start_with_client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        cls.tmp.cleanup()
        if code != 0:
            raise AssertionError(f"frostd exited with {code} after SIGTERM (expected 0)")

    def run_ctl(self, *args, input=None):
        return subprocess.run([self.frostctl, "--addr", self.server.addr, *args], input=input,
                              capture_output=True, text=True, timeout=120)

    def test_health(self):
        r = self.run_ctl("health", "--service", READINESS_SERVICE)
        self.assertEqual((r.returncode, r.stdout), (0, "SERVING\n"), r.stderr)
        r = self.run_ctl("health", "--service", "no.such.Service")
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith("frostctl: NOT_FOUND: "), r.stderr)

    def test_info(self):
        r = self.run_ctl("info")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("name: builtin:tiny\n", r.stdout)
        self.assertIn("architecture: llama\n", r.stdout)
        self.assertRegex(r.stdout, r"kv_cache: \d+ blocks × \d+ bytes = [0-9.]+ MiB \(16 positions per block at fp32\)\n")
        self.assertIn("prefix_caching: on\n", r.stdout)

    def test_tokenize_matches_python_client(self):
        r = self.run_ctl("tokenize", "hello")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([int(x) for x in r.stdout.split()], self.client.tokenize("hello"))

    def test_generate_matches_python_client(self):
        r = self.run_ctl("generate", "--temperature", "0", "--max-new-tokens", "8", "--seed", "3",
                         "Once upon a time")
        self.assertEqual(r.returncode, 0, r.stderr)
        text, final = self.client.generate_text("Once upon a time", temperature=0, max_new_tokens=8, seed=3)
        self.assertEqual(r.stdout, text)  # stdout is a pipe: exactly the completion
        self.assertIn(f"completion_tokens={final.completion_tokens} ", r.stderr)
        self.assertRegex(r.stderr, r"finish=(STOP|LENGTH)")

    def test_generate_json_lines(self):
        r = self.run_ctl("generate", "--json", "--temperature", "0", "--max-new-tokens", "4", "hi")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines and lines[-1].startswith('{"final":'), r.stdout)

    def test_generate_logprobs_to_stderr(self):
        r = self.run_ctl("generate", "--temperature", "0", "--max-new-tokens", "3", "--ignore-eos",
                         "--logprobs", "2", "hi")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("[logprob] token "), 3, r.stderr)

    def test_invalid_argument_exit_code(self):
        r = self.run_ctl("generate", "--top-p", "1.5", "hi")
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith("frostctl: INVALID_ARGUMENT: "), r.stderr)
        self.assertIn("top_p", r.stderr)

    def test_generate_speculative_flags(self):
        plain = self.run_ctl("generate", "--temperature", "0", "--max-new-tokens", "8", "Once upon a time")
        r = self.run_ctl("generate", "--temperature", "0", "--max-new-tokens", "8", "--spec-method", "ngram",
                         "--spec-tokens", "3", "Once upon a time")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)  # the same output, only faster
        r = self.run_ctl("generate", "--spec-tokens", "-1", "hi")
        self.assertEqual(r.returncode, 2)
        self.assertIn("speculative.num_tokens: must be >= 0, got -1", r.stderr)
        r = self.run_ctl("generate", "--spec-method", "eagle", "hi")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--spec-method", r.stderr)

    def test_usage_error_exit_code(self):
        r = self.run_ctl("generate", "--top-k", "many", "hi")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--top-k", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
