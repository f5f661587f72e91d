#!/usr/bin/python3
"""The OpenAI request surface beyond one prompt, against a live frostd on stories260K with NO chat template
configured (frost's default template serves chat, core/model/chat_prompt.h):

  * chat works on a model without its own template, and without max_tokens it may run to the context's
    remainder (ignore_eos: completion_tokens = max_model_len - prompt_tokens, more than the old hidden 256);
  * batched completions: `prompt` as a list of strings and token-id lists, n = 2: choices prompt-major
    (index = prompt * n + j), each equal at temperature 0 to the same prompt sent alone, usage summed per prompt;
  * /tokenize, /detokenize, /v1/completions/render and /v1/chat/completions/render: the ids equal what the
    generating request reports as prompt_tokens, and the completions render equals /tokenize of the text;
  * tools: tool_choice required and named give calls whose arguments validate against the schema (checked
    here by hand: enum, integer range, string length), streamed == non-streamed at temperature 0, a second
    turn with the tool result renders and answers; tool_choice auto never 500s; parse errors are 400 naming
    the field.

Environment (ctest sets them): FROST_FROSTD, PYTHONPATH with <build>/client/python. About 20 s on 2 cores.
"""

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request

try:
    import frost_testlib  # tests/client
except ImportError as e:
    print(f"openai_surface_test: FAIL: cannot import frost_testlib ({e})", file=sys.stderr)
    sys.exit(1)

MODEL = "stories260K"
failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - report every check
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)


def post(port, path, body, want=200):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    if status != want:
        raise AssertionError(f"POST {path} {json.dumps(body)[:300]} -> {status} {text[:500]}")
    if body.get("stream"):
        return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    return json.loads(text)


# Small: stories260K's context is 512 tokens of a 512-piece vocabulary, and the tools are in the prompt.
WEATHER = {"type": "function", "function": {
    "name": "weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["C", "F"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit", "days"]}}}
TIME = {"type": "function", "function": {
    "name": "time", "parameters": {"properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}}}
DATE = {"type": "function", "function": {
    "name": "date", "parameters": {"properties": {"fmt": {"enum": ["iso", "us"]}}, "required": ["fmt"]}}}


def valid_args(name, args):
    a = json.loads(args)
    if name == "weather":
        assert set(a) == {"city", "unit", "days"}, a
        assert isinstance(a["city"], str) and len(a["city"]) <= 8, a
        assert a["unit"] in ("C", "F"), a
        assert isinstance(a["days"], int) and 1 <= a["days"] <= 7, a
    elif name == "time":
        assert a == {"zone": "utc"} or a == {"zone": "cet"}, a
    elif name == "date":
        assert a == {"fmt": "iso"} or a == {"fmt": "us"}, a
    else:
        raise AssertionError(f"unknown function {name}")


def main():
    work = tempfile.mkdtemp(prefix="frost-surface-")
    server = frost_testlib.Frostd(work, "surface", os.path.join(work, "state"), work,
                                  sections={"server": {"http": {"listen": "127.0.0.1:0"}}}).start()
    port = server.ports["http"]
    user = [{"role": "user", "content": "Weather?"}]
    try:
        def default_template_and_no_hidden_cap():
            r = post(port, "/v1/chat/completions", {"model": MODEL, "messages": user, "temperature": 0,
                                                    "ignore_eos": True})
            u = r["usage"]
            tok = post(port, "/tokenize", {"messages": user})
            assert u["prompt_tokens"] == tok["count"], (u, tok["count"])
            assert u["completion_tokens"] == tok["max_model_len"] - tok["count"] > 256, (u, tok)
            assert r["choices"][0]["finish_reason"] == "length", r["choices"][0]
        check("chat on the default template; max_tokens defaults to the context's remainder",
              default_template_and_no_hidden_cap)

        def batched():
            prompts = ["Once upon a time", [1, 403, 407], "The cat"]
            base = {"model": MODEL, "max_tokens": 8, "temperature": 0}
            r = post(port, "/v1/completions", dict(base, prompt=prompts, n=2))
            assert [c["index"] for c in r["choices"]] == list(range(6)), r["choices"]
            total = 0
            for k, p in enumerate(prompts):
                alone = post(port, "/v1/completions", dict(base, prompt=p))
                total += alone["usage"]["prompt_tokens"]
                for j in range(2):
                    got = r["choices"][k * 2 + j]["text"]
                    assert got == alone["choices"][0]["text"], (k, j, got, alone["choices"][0]["text"])
            assert r["usage"]["prompt_tokens"] == total, (r["usage"], total)
            assert r["usage"]["completion_tokens"] == 6 * 8, r["usage"]
        check("batched completions: prompt-major choices equal each prompt alone", batched)

        def render_and_tokenize():
            body = {"model": MODEL, "messages": user, "tools": [WEATHER], "max_tokens": 1}
            rendered = post(port, "/v1/chat/completions/render", body)
            ran = post(port, "/v1/chat/completions", body)
            assert rendered["count"] == ran["usage"]["prompt_tokens"] == len(rendered["token_ids"]), (rendered, ran)
            tok = post(port, "/tokenize", {"messages": user, "tools": [WEATHER]})
            assert tok["tokens"] == rendered["token_ids"]
            assert "<tools>" in rendered["prompt"] and '"weather"' in rendered["prompt"], rendered["prompt"]
            comp = post(port, "/v1/completions/render", {"model": MODEL, "prompt": ["Once upon a time", [5, 6]]})
            assert comp[0]["token_ids"] == post(port, "/tokenize", {"prompt": "Once upon a time"})["tokens"]
            assert comp[1]["token_ids"] == [5, 6]
            text = post(port, "/detokenize", {"tokens": comp[0]["token_ids"]})["prompt"]
            assert text == "Once upon a time", text
            e = post(port, "/detokenize", {"tokens": [10 ** 9]}, want=400)
            assert e["error"]["param"] == "tokens", e
            e = post(port, "/tokenize", {"prompt": "x", "frobnicate": 1}, want=400)
            assert e["error"]["param"] == "frobnicate", e
        check("render, tokenize and detokenize agree with the generating requests", render_and_tokenize)

        def forced_calls():
            # One tool's prompt leaves room for its call in stories260K's 512 tokens; `required` picks among two
            # short ones, one call each (a model that keeps adding calls would run out of context here).
            base = {"model": MODEL, "messages": user, "temperature": 1, "seed": 3, "n": 8}
            n = 0
            for extra in ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "weather"}}},
                          {"tools": [TIME, DATE], "tool_choice": "required", "parallel_tool_calls": False}):
                r = post(port, "/v1/chat/completions", dict(base, **extra))
                for c in r["choices"]:
                    calls = c["message"].get("tool_calls") or []
                    assert calls, c
                    assert c["finish_reason"] == "tool_calls", c
                    for call in calls:
                        assert call["id"].startswith("call_") and call["type"] == "function", call
                        valid_args(call["function"]["name"], call["function"]["arguments"])
                        n += 1
            assert n >= 16, n
        check("tool_choice named / required: every call validates", forced_calls)

        def streamed_equals_whole():
            for choice in ("required", {"type": "function", "function": {"name": "time"}}):
                body = {"model": MODEL, "messages": user, "tools": [TIME, DATE], "temperature": 0,
                        "tool_choice": choice, "parallel_tool_calls": False}
                whole = post(port, "/v1/chat/completions", body)["choices"][0]["message"]["tool_calls"]
                chunks = post(port, "/v1/chat/completions", dict(body, stream=True))
                streamed = [tc for ch in chunks for c in ch["choices"] for tc in c["delta"].get("tool_calls", [])]
                strip = [(c["function"]["name"], c["function"]["arguments"]) for c in whole]
                assert [(c["function"]["name"], c["function"]["arguments"]) for c in streamed] == strip, (streamed, whole)
                assert [c["index"] for c in streamed] == list(range(len(streamed)))
                assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", chunks[-1]
        check("streamed tool calls equal the non-streamed at temperature 0", streamed_equals_whole)

        def tool_loop():
            body = {"model": MODEL, "messages": user, "tools": [TIME], "tool_choice": "required", "temperature": 0,
                    "parallel_tool_calls": False}
            msg = post(port, "/v1/chat/completions", body)["choices"][0]["message"]
            call = msg["tool_calls"][0]
            follow = user + [msg, {"role": "tool", "tool_call_id": call["id"], "content": "12:00"}]
            r = post(port, "/v1/chat/completions", {"model": MODEL, "messages": follow, "tools": [TIME],
                                                    "max_tokens": 8})
            assert r["choices"][0]["message"]["role"] == "assistant", r
            rendered = post(port, "/v1/chat/completions/render", {"model": MODEL, "messages": follow, "tools": [TIME]})
            assert "<tool_response>\n12:00\n</tool_response>" in rendered["prompt"], rendered["prompt"]
            assert '"name": "time"' in rendered["prompt"], rendered["prompt"]
        check("a tool result goes back through the template and is answered", tool_loop)

        def auto_never_500():
            r = post(port, "/v1/chat/completions", {"model": MODEL, "messages": user, "tools": [WEATHER],
                                                    "max_tokens": 24, "n": 4, "temperature": 1, "seed": 1})
            for c in r["choices"]:
                assert c["message"].get("content") is not None or c["message"].get("tool_calls"), c
            none = post(port, "/v1/chat/completions", {"model": MODEL, "messages": user, "tools": [WEATHER],
                                                       "tool_choice": "none", "max_tokens": 8})
            assert "tool_calls" not in none["choices"][0]["message"], none
            e = post(port, "/v1/chat/completions", {"model": MODEL, "messages": user, "tools": [WEATHER],
                                                    "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                     want=400)
            assert e["error"]["param"] == "tool_choice", e
        check("tool_choice auto and none answer 200; a bad tool_choice is a 400 naming it", auto_never_500)

        def speculative_extension():
            # frost's "speculative" object on every generating endpoint: the same greedy output, accepted <= drafted
            # when usage reports them (only when the request speculated), and a 400 naming the field.
            base = {"model": MODEL, "max_tokens": 12, "temperature": 0}
            plain = post(port, "/v1/completions", dict(base, prompt="Once upon a time"))
            for method in ("off", "ngram", "suffix"):
                spec = {"method": method, "num_tokens": 4}
                r = post(port, "/v1/completions", dict(base, prompt="Once upon a time", speculative=spec))
                assert r["choices"][0]["text"] == plain["choices"][0]["text"], (method, r, plain)
                d = r["usage"].get("completion_tokens_details")
                if d is not None:
                    assert d["accepted_prediction_tokens"] >= 0 and d["rejected_prediction_tokens"] >= 0, d
                post(port, "/v1/chat/completions", dict(base, messages=user, speculative=spec))
            post(port, "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 4,
                                         "speculative": {"method": "ngram"}})
            for path, body in (("/v1/completions", dict(base, prompt="x")), ("/v1/chat/completions",
                                                                              dict(base, messages=user))):
                e = post(port, path, dict(body, speculative={"num_tokens": -1}), want=400)
                assert e["error"]["param"] == "speculative.num_tokens", e
                e = post(port, path, dict(body, speculative={"method": "eagle"}), want=400)
                assert e["error"]["param"] == "speculative.method", e
        check("speculative extension: same output, usage details, 400s naming the field", speculative_extension)
    finally:
        server.stop()
    print(f"openai_surface_test: {8 - len(failures)}/8 checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
