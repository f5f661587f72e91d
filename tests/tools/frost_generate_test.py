#!/usr/bin/python3
"""frost-generate (tools/frost_generate.cc) as a user runs it, on the repository's stories260K:

  - greedy, each prompt of the golden (../shared/models/stories260K/reference.json, Hugging Face transformers'
    greedy continuation) prints exactly the prompt and the golden's continuation on stdout, and the timing line
    on stderr says finish=length with the golden's number of tokens: the model and engine frost-generate
    assembles (core/serving/serving.h, as frostd does) compute the reference model;
  - the same seed at temperature 0.8 prints the same text twice;
  - a missing model exits 1 naming the path; a bad --kv or --dtype exits 2 naming the flag and the value.

Usage: frost_generate_test.py <frost-generate>. Exit 77 (skipped) without the shared golden.
"""

import json
import os
import re
import subprocess
import sys

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("FROST_SHARED") or os.path.join(os.path.dirname(SOURCE_DIR), "shared")
REFERENCE = os.path.join(SHARED, "models", "stories260K", "reference.json")
MODEL = os.path.join(SOURCE_DIR, "models", "stories260K")


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def main():
    binary = sys.argv[1]
    if not os.path.exists(REFERENCE):
        print(f"SKIP: no golden at {REFERENCE}")
        return 77
    errors = []

    def check(ok, what, detail=""):
        if not ok:
            errors.append(f"{what}\n{detail}")

    with open(REFERENCE, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for c in cases:
        n = len(c["greedy_new_ids"])
        r = run(binary, "--model", MODEL, "--prompt", c["prompt"], "--max-new-tokens", str(n), "--temperature", "0")
        check(r.returncode == 0, f"{c['prompt']!r}: exit {r.returncode}", r.stderr)
        check(r.stdout == c["prompt_plus_greedy_text"] + "\n", f"{c['prompt']!r}: stdout is not the golden's text",
              f"got  {r.stdout!r}\nwant {c['prompt_plus_greedy_text']!r}")
        check(re.search(rf"^finish=length prompt_tokens=\d+ completion_tokens={n} ", r.stderr, re.M) is not None,
              f"{c['prompt']!r}: no timing line with finish=length completion_tokens={n}", r.stderr)

    sampled = [run(binary, "--model", MODEL, "--temperature", "0.8", "--seed", "7", "--max-new-tokens", "24").stdout
               for _ in range(2)]
    check(sampled[0] == sampled[1] and len(sampled[0]) > len("Once upon a time\n"),
          "the same seed does not print the same text", repr(sampled))

    r = run(binary, "--model", "/nonexistent/model")
    check(r.returncode == 1 and "/nonexistent/model" in r.stderr, "a missing model: not exit 1 naming the path",
          f"exit {r.returncode}\n{r.stderr}")
    r = run(binary, "--kv", "int3")
    check(r.returncode == 2 and "int3" in r.stderr, "--kv int3: not exit 2 naming the value",
          f"exit {r.returncode}\n{r.stderr}")
    r = run(binary, "--dtype", "fp8")
    check(r.returncode == 2 and "--dtype" in r.stderr and "fp8" in r.stderr,
          "--dtype fp8: not exit 2 naming the flag and the value", f"exit {r.returncode}\n{r.stderr}")

    for e in errors:
        print(f"FAIL: {e}", file=sys.stderr)
    print(f"frost_generate_test: {len(cases)} golden prompts, {len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
