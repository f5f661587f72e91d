#!/usr/bin/python3
"""The model families through the serving paths, against the independent float64 reference.

tests/reference/hf_families.py writes 13 tiny random Hugging Face checkpoints (LLaMA 3.2, SmolLM2, TinyLlama
linear, dynamic, Mistral with sliding windows (fp32 and stored as BF16), Qwen2.5 (+ YaRN), Qwen3, Gemma 2 with
soft caps, Gemma 3 local/global, Phi-3.5, Phi-4-mini) with expected.json's greedy continuation (20 ids after a
5-token prompt) and each greedy id's float64 logprob. For every case one frostd serves the checkpoint on the CPU
(model.dtype fp32, engine.kv_codec fp32; gRPC, and the OpenAI API on server.http.listen, all on port 0), and:

  * gRPC Generate with the token-id prompt, temperature 0, 20 new tokens, ignore_eos, repetition_penalty 1
    (qwen2_5's generation_config.json asks for 1.1), logprobs 1: the ids equal greedy.new_ids, the stream ends
    LENGTH with 20 completion tokens, each sampled logprob is within 1e-4 of the reference and is the top-1;
  * POST /v1/completions with the same prompt as a list of token ids and the same sampling, logprobs 1: the same
    ids (the checkpoints have no tokenizer, so the tokens come back named "token_id:N", vLLM's
    --return-tokens-as-token-ids form) and token_logprobs within 1e-4; /v1/chat/completions answers 400
    naming the missing tokenizer.

Prints one line per case with the largest logprob difference on each path. Exit 77 (skipped, with the reason)
when /usr/bin/python3 has no torch (hf_families.py needs it). About 30 s on 2 cores.

Environment (ctest sets them, tests/CMakeLists.txt): FROST_FROSTD (frostd binary), PYTHONPATH with
<build>/client/python (generated stubs). By hand:
  PYTHONPATH=build/client/python:client/python FROST_FROSTD=build/server/frostd \\
      /usr/bin/python3 tests/client/hf_families_serving_test.py [case ...]
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
LOGPROB_TOL = 1e-4  # fp32 CPU logits against the float64 reference (the stated tolerance)
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import torch  # noqa: F401  (hf_families.py's dependency: skip visibly without it)
except ImportError:
    print("SKIP: /usr/bin/python3 has no torch (tests/reference/hf_families.py needs it)")
    sys.exit(SKIP)

try:
    import grpc
    from frost.v1 import generation_pb2

    import frost_testlib  # tests/client: frostd process helpers
except ImportError as e:
    print(f"hf_families_serving_test: FAIL: cannot import the stubs ({e}); build frost_python_stubs and put "
          "<build>/client/python on PYTHONPATH", file=sys.stderr)
    sys.exit(1)


def generate_cases(out_dir, only):
    cmd = [sys.executable, os.path.join(SOURCE_DIR, "tests", "reference", "hf_families.py"), "--out", out_dir]
    if only:
        cmd += ["--only", ",".join(only)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == SKIP:
        print("SKIP: " + r.stdout.strip())
        sys.exit(SKIP)
    if r.returncode != 0:
        raise RuntimeError(f"hf_families.py failed ({r.returncode}):\n{r.stdout}")
    return only or sorted(n for n in os.listdir(out_dir) if os.path.isdir(os.path.join(out_dir, n)))


def grpc_generate(server, prompt, n_new):
    req = generation_pb2.GenerateRequest(
        token_ids=generation_pb2.TokenIds(ids=prompt),
        sampling=generation_pb2.SamplingParams(temperature=0.0, max_new_tokens=n_new, ignore_eos=True,
                                               repetition_penalty=1.0, logprobs=1),
        kv=generation_pb2.KvOptions(codec="fp32"))
    ids, lps, final = [], [], None
    for resp in server.generation.Generate(req, timeout=120):
        kind = resp.WhichOneof("response")
        if kind == "chunk":
            ids += list(resp.chunk.token_ids)
            for t in resp.chunk.logprobs:
                lps.append(t.sampled.logprob)
                if not t.top or t.top[0].token_id != t.sampled.token_id:
                    raise AssertionError(f"gRPC: greedy token {t.sampled.token_id} is not the top-1 of {t.top}")
        elif kind == "final":
            final = resp.final
    return ids, lps, final


def openai_complete(port, model, prompt, n_new):
    body = {"model": model, "prompt": prompt, "max_tokens": n_new, "temperature": 0, "ignore_eos": True,
            "repetition_penalty": 1.0, "logprobs": 1}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        doc = json.loads(r.read())
    choice = doc["choices"][0]
    lp = choice["logprobs"]
    ids = []
    for tok, top in zip(lp["tokens"], lp["top_logprobs"]):
        if not tok.startswith("token_id:"):
            raise AssertionError(f"OpenAI: token {tok!r} is not named token_id:N (the checkpoint has no tokenizer)")
        ids.append(int(tok[len("token_id:"):]))
        if list(top) != [tok]:
            raise AssertionError(f"OpenAI: greedy token {tok} is not the top-1 of {top}")
    return ids, lp["token_logprobs"], choice["finish_reason"], doc["usage"]


def chat_refused(port, model):
    """Chat renders text, which only a tokenizer can turn into ids: a 400 saying so (not a crash)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raise AssertionError(f"chat on a checkpoint without a tokenizer answered {r.status}")
    except urllib.error.HTTPError as e:
        msg = json.loads(e.read())["error"]["message"]
        if e.code != 400 or "no tokenizer" not in msg:
            raise AssertionError(f"chat without a tokenizer: {e.code} {msg!r} (want 400 naming the tokenizer)")


def check_case(work, model_dir, name):
    """Returns (grpc max |dlogprob|, openai max |dlogprob|); raises on any mismatch."""
    with open(os.path.join(model_dir, "expected.json")) as f:
        g = json.load(f)["greedy"]
    prompt, want, want_lp = g["prompt_ids"], g["new_ids"], g["logprobs"]
    n = len(want)
    server = frost_testlib.Frostd(
        work, name, os.path.join(work, name + "-state"), work, model=model_dir,
        sections={"server": {"http": {"listen": "127.0.0.1:0"}},
                  "engine": {"kv_codec": "fp32", "prefix_caching": False}}).start()
    try:
        ids, lps, final = grpc_generate(server, prompt, n)
        if ids != want:
            raise AssertionError(f"{name}: gRPC greedy ids\n  want {want}\n  got  {ids}")
        if final is None or final.completion_tokens != n or \
                final.finish_reason != generation_pb2.FINISH_REASON_LENGTH:
            raise AssertionError(f"{name}: gRPC final {final}")
        d_grpc = max(abs(a - b) for a, b in zip(lps, want_lp))
        if len(lps) != n or d_grpc > LOGPROB_TOL:
            raise AssertionError(f"{name}: gRPC logprobs off by {d_grpc:.2e} (> {LOGPROB_TOL})\n  want {want_lp}\n"
                                 f"  got  {lps}")
        ids, lps, finish, usage = openai_complete(server.ports["http"], name, prompt, n)
        if ids != want:
            raise AssertionError(f"{name}: OpenAI greedy ids\n  want {want}\n  got  {ids}")
        if finish != "length" or usage["completion_tokens"] != n or usage["prompt_tokens"] != len(prompt):
            raise AssertionError(f"{name}: OpenAI finish_reason {finish}, usage {usage}")
        chat_refused(server.ports["http"], name)
        d_http = max(abs(a - b) for a, b in zip(lps, want_lp))
        if len(lps) != n or d_http > LOGPROB_TOL:
            raise AssertionError(f"{name}: OpenAI logprobs off by {d_http:.2e} (> {LOGPROB_TOL})\n  want {want_lp}"
                                 f"\n  got  {lps}")
    except BaseException:
        print(server.log()[-4000:], file=sys.stderr)
        raise
    finally:
        code = server.stop()
    if code != 0:
        raise AssertionError(f"{name}: frostd exited with {code} after SIGTERM\n{server.log()[-4000:]}")
    return d_grpc, d_http


def main():
    frost_testlib.frostd_binary()  # raises naming FROST_FROSTD
    t0 = time.monotonic()
    failures = []
    with tempfile.TemporaryDirectory(prefix="frost-hf-serving-") as work:
        cases = generate_cases(os.path.join(work, "models"), sys.argv[1:])
        print(f"{len(cases)} checkpoints written in {time.monotonic() - t0:.1f} s; tolerance {LOGPROB_TOL:g}")
        for name in cases:
            t = time.monotonic()
            try:
                d_grpc, d_http = check_case(work, os.path.join(work, "models", name), name)
                print(f"  ok    {name:18s} 20 greedy ids equal; max |logprob - ref|: gRPC {d_grpc:.2e}, "
                      f"OpenAI {d_http:.2e} ({time.monotonic() - t:.1f} s)", flush=True)
            except (AssertionError, RuntimeError, grpc.RpcError, OSError) as e:
                failures.append(name)
                print(f"  FAIL  {name}: {e}", flush=True)
    print(f"{len(cases) - len(failures)}/{len(cases)} cases passed in {time.monotonic() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
