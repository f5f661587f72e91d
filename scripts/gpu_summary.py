#!/usr/bin/env python3
"""The GPU check's summary (scripts/gpu_check.sh): every phase's status, the headline figures against the
targets of the GPU issue, as $OUT/gpu_check.json (printed as a Markdown table)."""
import json, os, sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:  # noqa: BLE001
        return None


def main():
    out = sys.argv[1]
    phases = [json.loads(l) for l in open(os.path.join(out, "phases.jsonl")) if l.strip()]
    s = {"machine": load(os.path.join(out, "machine.json")), "phases": phases, "figures": {}}
    fig = s["figures"]
    cb = load(os.path.join(out, "cuda_bench.json"))
    tc = load(os.path.join(out, "torch_compile.json"))
    if cb and "1b" in cb.get("shapes", {}):
        one = cb["shapes"]["1b"]
        by_b = {d["batch"]: d["tok_s"] for d in one["decode"]}
        fig["1b_batch1_tok_s"] = by_b.get(1)
        fig["1b_batch1_fraction_of_bandwidth_limit"] = by_b.get(1, 0) / one["limit_tok_s"] if one.get("limit_tok_s") else None
        fig["1b_batch64_tok_s"] = by_b.get(64)
        if tc and "1b" in tc.get("shapes", {}):
            tb = {d["batch"]: d.get("tok_s") for d in tc["shapes"]["1b"]["decode"]}
            if tb.get(1):
                fig["1b_batch1_over_torch_compile"] = by_b.get(1, 0) / tb[1]
            if tb.get(64):
                fig["1b_batch64_over_torch_compile"] = by_b.get(64, 0) / tb[64]
    # int8 weights (weight-only) on the 1b shape beside bf16: tok/s, and the ratio at batch 1 and 16
    i8 = load(os.path.join(out, "cuda_bench_int8.json"))
    if i8 and "1b" in i8.get("shapes", {}):
        one8 = i8["shapes"]["1b"]
        by8 = {d["batch"]: d["tok_s"] for d in one8["decode"]}
        bf = {d["batch"]: d["tok_s"] for d in cb["shapes"]["1b"]["decode"]} if cb and "1b" in cb.get("shapes", {}) else {}
        for b in (1, 16):
            fig[f"1b_int8_batch{b}_tok_s"] = by8.get(b)
            if by8.get(b) and bf.get(b):
                fig[f"1b_int8_over_bf16_batch{b}"] = by8[b] / bf[b]
        if one8.get("limit_tok_s"):
            fig["1b_int8_batch1_fraction_of_bandwidth_limit"] = by8.get(1, 0) / one8["limit_tok_s"]
        fig["1b_int8_prefill_tok_s"] = one8.get("prefill", {}).get("tok_s")
    eng = load(os.path.join(out, "engine_inproc.json"))
    srv = load(os.path.join(out, "served_64.json"))
    if eng and srv:
        served = srv.get("output_tokens_per_s") or srv.get("tokens_per_s")
        if served and eng.get("output_tokens_per_s"):
            fig["served_64_over_inprocess"] = served / eng["output_tokens_per_s"]
    sv = load(os.path.join(out, "serve.json"))
    if sv:
        fig["golden_over_grpc"] = all(c["equal"] for c in sv["cases"])
        fig["seeded_reproduces"] = sv.get("seeded_reproduces")
        fig["device_sample_equals_host_sample"] = sv.get("device_sample_equals_host_sample")
        pr = sv.get("prototype")
        if pr:
            fig["prototype_job"] = pr.get("job_state")
            fig["prototype_head_device"] = pr.get("compute_device")
            fig["prototype_train_seconds"] = pr.get("train_seconds")
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(s, f, indent=1)
    print("| phase | status | detail |\n|---|---|---|")
    for p in phases:
        print(f"| {p['phase']} | {p['status']} | {p['detail']} |")
    targets = {"1b_batch1_fraction_of_bandwidth_limit": ">= 0.70", "1b_batch1_over_torch_compile": ">= 1.2",
               "1b_batch64_over_torch_compile": ">= 1.0", "served_64_over_inprocess": ">= 0.85"}
    print("\n| figure | value | target |\n|---|---|---|")
    for k, v in fig.items():
        print(f"| {k} | {v if not isinstance(v, float) else f'{v:.3f}'} | {targets.get(k, '')} |")


if __name__ == "__main__":
    main()
