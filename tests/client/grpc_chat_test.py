#!/usr/bin/python3
"""Chat over gRPC equals the OpenAI endpoint: one live frostd on stories260K (frost's default ChatML template,
core/model/chat_prompt.h) gets the same conversations through POST /v1/chat/completions and Generation.Generate
with `messages` (server/generation_chat.h), greedy with a fixed max_tokens, and both answer the same text, the
same tokens (per-token logprobs), prompt and completion token counts, finish reason and tool calls. Covered: a
system message, several turns, a tool definition with tool_choice auto and required (constrained), a tool result
turn, add_generation_prompt false. Then the refusals: prompt and messages together, an unknown role, no
messages, a tool message without tool_call_id, tools without messages, parameters that are not JSON — each
INVALID_ARGUMENT naming the field.

`frostctl generate --message` (FROST_FROSTCTL) sends the same chat as the client.

Environment (ctest sets them): FROST_FROSTD, FROST_FROSTCTL, PYTHONPATH with <build>/client/python. About 5 s.
"""

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

try:
    import grpc
    import frost_testlib  # tests/client
    from frost_client import FrostClient
    from frost.v1 import generation_pb2
except ImportError as e:
    print(f"grpc_chat_test: FAIL: cannot import ({e})", file=sys.stderr)
    sys.exit(1)

MODEL = "stories260K"
MAX_TOKENS = 24
failures = []

WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"]}}}

# Small ones: stories260K's context is 512 tokens of a 512-piece vocabulary, and the tools are in the prompt.
ZONE = {"type": "function", "function": {
    "name": "time", "parameters": {"properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}}}
NO_PARAMETERS = {"type": "function", "function": {"name": "w"}}

# "max_tokens" (popped before sending) where MAX_TOKENS would cut a forced call short.
CONVERSATIONS = {
    "system + user": {"messages": [{"role": "system", "content": "You are a storyteller."},
                                   {"role": "user", "content": "Tell me about a cat."}]},
    "multi-turn": {"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Once upon a time"},
                                {"role": "assistant", "content": "there was a little girl."},
                                {"role": "user", "content": "What did she do?"}]},
    "developer role, name": {"messages": [{"role": "developer", "content": "Answer kindly."},
                                          {"role": "user", "content": "Hi", "name": "tim"}]},
    "tools, auto": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]},
    "tools, required": {"messages": [{"role": "user", "content": "Time?"}], "tools": [ZONE],
                        "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 160},
    "tools, named": {"messages": [{"role": "user", "content": "Time?"}], "tools": [ZONE],
                     "tool_choice": {"type": "function", "function": {"name": "time"}}, "max_tokens": 96},
    "tool result turn": {"messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"c\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees"}], "tools": [NO_PARAMETERS]},
    "continue the last message": {"messages": [{"role": "user", "content": "Tell a story."},
                                               {"role": "assistant", "content": "Once upon"}],
                                  "add_generation_prompt": False},
}

FINISH = {generation_pb2.FINISH_REASON_STOP: "stop", generation_pb2.FINISH_REASON_LENGTH: "length",
          generation_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls"}


def check(name, fn):
    try:
        fn()
        print(f"ok {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - report every check
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def grpc_chat(client, conv, max_tokens):
    """(text, per-token logprobs, final) of Generate with the conversation's chat fields."""
    text, lps, final = [], [], None
    for r in client.generate(temperature=0, max_new_tokens=max_tokens, logprobs=0, **conv):
        if r.WhichOneof("response") == "chunk":
            text.append(r.chunk.text)
            lps.extend(lp.sampled.logprob for lp in r.chunk.logprobs)
        else:
            final = r.final
    assert final is not None, "no final message"
    return "".join(text), lps, final


def same_output(port, client, conv):
    conv = dict(conv)
    max_tokens = conv.pop("max_tokens", MAX_TOKENS)
    status, body = post(port, "/v1/chat/completions", dict(conv, model=MODEL, temperature=0, max_tokens=max_tokens,
                                                           logprobs=True))
    assert status == 200, (status, body)
    choice = body["choices"][0]
    text, lps, final = grpc_chat(client, conv, max_tokens)
    http_lps = [t["logprob"] for t in choice["logprobs"]["content"]]
    assert len(lps) == len(http_lps) == final.completion_tokens == body["usage"]["completion_tokens"], \
        (len(lps), len(http_lps), final.completion_tokens, body["usage"])
    assert all(abs(a - b) <= 1e-5 for a, b in zip(lps, http_lps)), (lps, http_lps)
    assert final.prompt_tokens == body["usage"]["prompt_tokens"], (final.prompt_tokens, body["usage"])
    assert FINISH[final.finish_reason] == choice["finish_reason"], (final.finish_reason, choice["finish_reason"])
    message = choice["message"]
    http_calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    grpc_calls = [(c.function.name, c.function.arguments) for c in final.tool_calls]
    assert grpc_calls == http_calls, (grpc_calls, http_calls)
    if grpc_calls:
        assert final.content == (message["content"] or ""), (final.content, message["content"])
        assert all(c.id.startswith("call_") and c.type == "function" for c in final.tool_calls), final.tool_calls
    else:
        assert text == message["content"], (text, message["content"])
    # The prompt the endpoint renders is the one gRPC ran: /v1/chat/completions/render counts the same ids.
    status, rendered = post(port, "/v1/chat/completions/render", dict(conv, model=MODEL))
    assert status == 200 and rendered["count"] == final.prompt_tokens, (status, rendered, final.prompt_tokens)
    return final


def refused(client, want, **kwargs):
    try:
        for _ in client.generate(**kwargs):
            pass
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        for part in want:
            assert part in e.details(), (part, e.details())
        return
    raise AssertionError(f"not refused: {kwargs}")


def main():
    work = tempfile.mkdtemp(prefix="frost-grpc-chat-")
    server = frost_testlib.Frostd(work, "chat", os.path.join(work, "state"), work,
                                  sections={"server": {"http": {"listen": "127.0.0.1:0"}}}).start()
    port = server.ports["http"]
    client = FrostClient(server.addr, timeout=120)
    finals = {}
    try:
        for name, conv in CONVERSATIONS.items():
            check(f"same output: {name}", lambda c=conv, n=name: finals.__setitem__(n, same_output(port, client, c)))

        def forced_calls():
            for name in ("tools, required", "tools, named"):
                f = finals.get(name)
                assert f is not None and f.tool_calls, (name, f)
                assert f.finish_reason == generation_pb2.FINISH_REASON_TOOL_CALLS, (name, f.finish_reason)
                assert all(c.function.name == "time" for c in f.tool_calls), f.tool_calls
                for c in f.tool_calls:
                    assert json.loads(c.function.arguments) in ({"zone": "utc"}, {"zone": "cet"}), c
        check("a forced tool choice returns calls valid against the schema", forced_calls)

        def frostctl_messages():
            frostctl = os.environ.get("FROST_FROSTCTL")
            if not frostctl:
                print("frostctl_messages: FROST_FROSTCTL unset, skipped", flush=True)
                return
            conv = CONVERSATIONS["multi-turn"]
            text, _, final = grpc_chat(client, conv, MAX_TOKENS)
            argv = [frostctl, "generate", "--addr", server.addr, "--temperature", "0", "--max-tokens", str(MAX_TOKENS)]
            for m in conv["messages"]:
                argv += ["--message", f"{m['role']}={m['content']}"]
            out = subprocess.run(argv, capture_output=True, timeout=120)
            assert out.returncode == 0, (out.returncode, out.stderr)
            assert out.stdout.decode() == text, (out.stdout, text)
            assert f"prompt_tokens={final.prompt_tokens} " in out.stderr.decode(), out.stderr
            bad = subprocess.run(argv + ["--prompt", "x"], capture_output=True, timeout=60)
            assert bad.returncode != 0 and b"--message or a prompt" in bad.stderr, bad
        check("frostctl generate --message sends the chat", frostctl_messages)

        user = [{"role": "user", "content": "Hi"}]
        check("prompt and messages together are refused, naming both",
              lambda: refused(client, ["text and messages", "mutually exclusive"], prompt="Once", messages=user))
        check("token ids and messages together are refused, naming both",
              lambda: refused(client, ["token_ids and messages"], prompt=[1, 2], messages=user))
        check("an unknown role is refused, naming the field and the value",
              lambda: refused(client, ["messages[1].role", '"wizard"'],
                              messages=[{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]))
        check("no prompt and no messages is refused, naming messages",
              lambda: refused(client, ["prompt:", "messages"], messages=[]))
        check("a tool message without tool_call_id is refused, naming the field",
              lambda: refused(client, ["messages[0].tool_call_id", "required"],
                              messages=[{"role": "tool", "content": "4"}]))
        check("tools without messages are refused",
              lambda: refused(client, ["tools: only with messages"], prompt="Once", tools=[WEATHER]))

        def bad_parameters():
            req = FrostClient.build_request(messages=user, tools=[WEATHER])
            req.tools[0].function.parameters = "{not json"
            try:
                list(client._generation.Generate(req, timeout=60))
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
                assert "tools[0].function.parameters" in e.details(), e.details()
                return
            raise AssertionError("not refused")
        check("tool parameters that are not JSON are refused, naming the field", bad_parameters)
        check("a named tool_choice outside tools is refused, naming tool_choice",
              lambda: refused(client, ["tool_choice", '"nope"'], messages=user, tools=[WEATHER],
                              tool_choice={"type": "function", "function": {"name": "nope"}}))
    finally:
        client.close()
        code = server.stop()
        if code != 0:
            failures.append(f"frostd exited with {code}")
    if failures:
        print(f"grpc_chat_test: {len(failures)} failed: {failures}", file=sys.stderr)
        sys.exit(1)
    print("grpc_chat_test: all passed")


if __name__ == "__main__":
    main()
