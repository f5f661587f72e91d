#!/usr/bin/env python3
"""Side-by-side table of frost-cuda-bench and torch_eager_bench.py JSON from one GPU run.

  python3 bench/cuda/compare.py cuda_bench.json torch_eager.json [--json out.json]
Prints Markdown: per shape, decode tok/s at each batch (frost, eager, ratio), batch-1 against the
bandwidth limit (weight bytes / measured copy rate), prefill tok/s. --json writes the merged figures.
"""
import json, sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    if out in args:
        args.remove(out)
    frost, eager = (json.load(open(p)) for p in args[:2])
    merged = {"device": frost["device"], "frost": frost, "torch_eager": eager, "shapes": {}}
    print(f"device: {frost['device']}; weights {frost['weights']}, KV {frost['kv']}, CUDA graphs "
          f"{frost['cuda_graphs']}; torch {eager['torch']} eager ({eager['dtype']}); device copy "
          f"{frost['copy_GBps_read_plus_write']:.0f} GB/s read + write\n")
    for name, fs in frost["shapes"].items():
        es = eager["shapes"].get(name, {})
        ed = {d["batch"]: d for d in es.get("decode", []) if "tok_s" in d}
        lim = fs["limit_tok_s"]
        print(f"### {name}: {fs['n_params'] / 1e6:.0f} M params, {fs['weight_bytes'] / 1e6:.0f} MB of weights, "
              f"batch-1 limit {lim:.0f} tok/s\n")
        print("| batch | frost tok/s | ms/step | PyTorch eager tok/s | frost ÷ eager |")
        print("|---:|---:|---:|---:|---:|")
        rows = []
        for d in fs["decode"]:
            e = ed.get(d["batch"])
            ratio = d["tok_s"] / e["tok_s"] if e else None
            rows.append({"batch": d["batch"], "frost_tok_s": d["tok_s"], "eager_tok_s": e["tok_s"] if e else None,
                         "ratio": ratio})
            print(f"| {d['batch']} | {d['tok_s']:,.0f} | {d['ms_per_step']:.3f} | "
                  f"{e['tok_s']:,.0f} | {ratio:.2f}× |" if e else f"| {d['batch']} | {d['tok_s']:,.0f} | "
                  f"{d['ms_per_step']:.3f} | — | — |")
        b1 = next((d for d in fs["decode"] if d["batch"] == 1), None)
        frac = b1["tok_s"] / lim if b1 else None
        pf, pe = fs["prefill"]["tok_s"], es.get("prefill", {}).get("tok_s")
        print(f"\nbatch-1 decode: {frac:.0%} of the bandwidth limit" if frac else "")
        print(f"prefill {fs['prefill']['tokens']} tokens: frost {pf:,.0f} tok/s"
              + (f", eager {pe:,.0f} tok/s ({pf / pe:.2f}×)" if pe else "") + "\n")
        merged["shapes"][name] = {"decode": rows, "batch1_fraction_of_limit": frac, "limit_tok_s": lim,
                                  "prefill_frost_tok_s": pf, "prefill_eager_tok_s": pe}
    if out:
        json.dump(merged, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
