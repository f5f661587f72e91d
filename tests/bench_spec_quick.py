#!/usr/bin/python3
"""bench_spec_quick: `frost-bench spec --quick` (issue 52's benchmark scaled down, ~2 s on stories260K).

Fails when the bench exits non-zero (it does when any output differs between speculation on and off), when the
JSON it printed and the one it wrote differ or do not parse, or when a workload, variant or target is missing.
No timing is asserted: a 2-second run on shared cores says nothing about speed.

Usage: bench_spec_quick.py FROST_BENCH OUT_JSON   (run from the source root: the model is models/stories260K)
"""

import json
import subprocess
import sys


def main():
    bench, out = sys.argv[1:3]
    p = subprocess.run([bench, "spec", "--quick", "--out", out, "--json"], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        sys.exit(f"frost-bench spec --quick exited {p.returncode}\n{p.stderr[-4000:]}")
    printed = json.loads(p.stdout)
    with open(out) as f:
        written = json.load(f)
    errors = []
    if printed != written:
        errors.append("the JSON written to --out differs from the one printed")
    d = written
    if d.get("bench") != "spec" or d.get("outputs_identical") is not True:
        errors.append(f"bench {d.get('bench')!r}, outputs_identical {d.get('outputs_identical')!r}")
    for key in ("machine", "commit", "date", "threads", "targets"):
        if key not in d:
            errors.append(f"missing {key}")
    variants = {"reuse": ("off", "ngram", "suffix"), "no_reuse": ("off", "ngram", "suffix"),
                "schema": ("off", "jump_forward")}
    for w, vs in variants.items():
        rows = d.get("workloads", {}).get(w, [])
        if [r["streams"] for r in rows] != [1, 4]:
            errors.append(f"{w}: streams {[r.get('streams') for r in rows]}, expected [1, 4]")
        for r in rows:
            for v in vs:
                c = r.get(v)
                if c is None:
                    errors.append(f"{w} at {r['streams']} streams: no {v}")
                    continue
                if not c["outputs_identical_to_off"] or c["tokens_per_s"] <= 0:
                    errors.append(f"{w} {v} at {r['streams']} streams: {c}")
                if c["accepted_tokens"] > c["draft_tokens"] or sum(c["accepted_per_pos"]) != c["accepted_tokens"]:
                    errors.append(f"{w} {v}: counters do not add up: {c}")
    # Something was drafted and accepted where it should be: the drafters on reuse, jump-forward on the schema.
    for w, v in (("reuse", "ngram"), ("reuse", "suffix"), ("schema", "jump_forward")):
        if not any(r[v]["accepted_tokens"] > 0 for r in d["workloads"][w]):
            errors.append(f"{w} {v}: nothing accepted")
    if errors:
        sys.exit("\n".join(errors))
    print("bench_spec_quick: ok")


if __name__ == "__main__":
    main()
