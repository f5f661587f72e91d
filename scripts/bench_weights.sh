#!/usr/bin/env bash
# Weight formats (model.dtype fp32 | bf16 | int8 | int4 | w8a8), each figure against fp32 in the same run:
#   1. accuracy on stories260K: perplexity and mean KL vs fp32 on 64 windows sampled from the fp32 model and
#      64 windows of emobank text (frost-bench weights);
#   2. batch-1 decode on builtin:15m at 1 and 2 threads, AVX-512 and AVX2 kernels: tok/s, weight bytes per
#      token, the read bandwidth measured in the same run and the ratio to the limit it sets;
#   3. batched: 32 streams through the batching engine in-process, tok/s per format.
# Writes bench/results/weights.json and prints Markdown tables. Usage: scripts/bench_weights.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bench/frost-bench
out=${OUT:-bench/results/weights.json}
[[ -x $bin ]] || { echo "bench_weights: $bin not found (make bench-weights builds it)" >&2; exit 1; }
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX; kernels=(avx512 avx2); else kernels=(avx2); fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -d ../shared/models/stories260K ]]; then
  "$bin" weights --model ../shared/models/stories260K --data self --eval-windows 64 --threads 2 --json > "$tmp/acc_self.json"
  "$bin" weights --model ../shared/models/stories260K --data ../shared/data/emobank_valence --eval-windows 64 \
    --threads 2 --json > "$tmp/acc_text.json"
fi
: > "$tmp/decode.jsonl"
for k in "${kernels[@]}"; do
  for t in 1 2; do
    for d in fp32 bf16 int8 int4 w8a8; do
      "$bin" decode --model builtin:15m --threads "$t" --dtype "$d" --kernels "$k" --repeat 3 --json >> "$tmp/decode.jsonl"
      echo >> "$tmp/decode.jsonl"
    done
  done
done
: > "$tmp/engine.jsonl"
for d in fp32 int8 int4 w8a8; do
  "$bin" engine --model builtin:15m --threads 2 --dtype "$d" --streams 32 --max-running 64 --repeat 2 --json \
    2>/dev/null >> "$tmp/engine.jsonl"
  echo >> "$tmp/engine.jsonl"
done
mkdir -p "$(dirname "$out")"
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1:3]
load = lambda p: json.load(open(p)) if os.path.exists(p) else None
rows = lambda p: [json.loads(l) for l in open(p) if l.strip()]
acc = {"sampled": load(f"{tmp}/acc_self.json"), "emobank": load(f"{tmp}/acc_text.json")}
dec, eng = rows(f"{tmp}/decode.jsonl"), rows(f"{tmp}/engine.jsonl")
doc = {"bench": "weights", "accuracy": acc, "decode": dec, "engine": eng, "machine": dec[0]["machine"]}
json.dump(doc, open(out, "w"), indent=1)
if acc["sampled"]:
    print("| format | ppl vs fp32 (sampled / emobank) | mean KL (sampled / emobank) | weight bytes per token |")
    print("|---|---|---|---|")
    for a, b in zip(acc["sampled"]["formats"], acc["emobank"]["formats"]):
        print(f"| {a['format']} | {100*a['ppl_vs_fp32']:+.3f}% / {100*b['ppl_vs_fp32']:+.3f}% | "
              f"{a['mean_kl']:.2e} / {b['mean_kl']:.2e} | {a['weight_bytes_per_token']:,} |")
    print()
print("| kernels | threads | format | decode tok/s | × fp32 | MB per token | read GB/s | ÷ bandwidth limit |")
print("|---|---|---|---|---|---|---|---|")
base = {}
for r in dec:
    if r["dtype"] == "fp32": base[(r["kernels"], r["threads"])] = r["decode_tokens_per_s"]
for r in dec:
    b = base[(r["kernels"], r["threads"])]
    print(f"| {r['kernels']} | {r['threads']} | {r['dtype']} | {r['decode_tokens_per_s']:.0f} | "
          f"{r['decode_tokens_per_s']/b:.2f} | {r['bytes_per_token']/1e6:.1f} | {r['read_bandwidth_gb_s']:.1f} | "
          f"{r['ratio_to_bandwidth_limit']:.2f} |")
print()
e32 = [e for e in eng if e["dtype"] == "fp32"][0]["output_tokens_per_s"]
print("| format | 32 streams, in-process tok/s | × fp32 | forward ms per step |")
print("|---|---|---|---|")
for e in eng:
    print(f"| {e['dtype']} | {e['output_tokens_per_s']:.0f} | {e['output_tokens_per_s']/e32:.2f} | {e['step_ms']['forward']:.2f} |")
m = dec[0]["machine"]
print(f"\nbuiltin:15m / stories260K; machine: {m['cpu']} ({m['cores']} cores)")
PY
echo "wrote $out"
