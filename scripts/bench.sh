#!/usr/bin/env bash
# Runs the frost-bench matrix of the README (decode + prefill; builtin:15m and stories260K;
# 1 and 2 threads; fp32 and bf16 weights) and writes one JSON array to
# bench/results/latest.json, plus a Markdown table on stdout.
# Usage: scripts/bench.sh [BUILD_DIR]   (make bench sets OPENBLAS_CORETYPE first)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bench/frost-bench
out=bench/results/latest.json
mkdir -p bench/results
models=(builtin:15m)
[[ -d ../shared/models/stories260K ]] && models+=(../shared/models/stories260K)
REPEAT=${REPEAT:-5}
rows=()
for model in "${models[@]}"; do
  for threads in 1 2; do
    for dtype in fp32 bf16; do
      for mode in decode prefill; do
        rows+=("$("$bin" "$mode" --model "$model" --threads "$threads" --dtype "$dtype" --repeat "$REPEAT" --json)")
      done
    done
  done
done
printf '%s\n' "${rows[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("| model | threads | weights | decode tok/s (p50 ms/token) | prefill tok/s (128-token prompt) |")
print("|---|---|---|---|---|")
key = lambda r: (r["model"], r["threads"], r["dtype"])
by = {}
for r in rows: by.setdefault(key(r), {})[r["bench"]] = r
for k, v in by.items():
    d, p = v.get("decode"), v.get("prefill")
    name = k[0].split("/")[-1]
    print(f"| {name} | {k[1]} | {k[2]} | {d['"'"'decode_tokens_per_s'"'"']:.0f} ({d['"'"'token_latency_ms'"'"']['"'"'p50'"'"']:.2f}) | {p['"'"'prefill_tokens_per_s'"'"']:.0f} |")
print("machine:", rows[0]["machine"]["cpu"], f"({rows[0]['"'"'machine'"'"']['"'"'cores'"'"']} cores)")
' "$out"
echo "wrote $out"
