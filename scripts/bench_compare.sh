#!/usr/bin/env bash
# This build against a baseline build, alternated in one run (the VMs are noisy: compare medians of interleaved
# runs, never figures from different days): single-stream decode and prefill (the Generator), and the batching
# engine in-process at 1 and 32 streams (builtin:15m, fp32, 2 threads, sampled as frost-loadgen's workload).
# Usage: [MODES="decode prefill engine"] scripts/bench_compare.sh BUILD_DIR BASELINE_FROST_BENCH [ROUNDS] [OUT]
# Writes OUT (default bench/results/single_stream_compare.json) and prints a Markdown table of medians and
# ratios. Who goes first alternates each round. Knobs (environment; defaults as listed): MODELS (builtin:15m, and
# ../shared/models/stories260K where present), THREADS_LIST ("1 2"), DTYPES ("fp32 bf16": weight formats of decode
# and prefill), ENGINE_STREAMS ("32 1"), SETTLE_S (0: seconds to wait after each engine run, whose KV pool the
# guest hands back to the host while the next process starts; see scripts/bench_serve.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
this=${1:?usage: bench_compare.sh BUILD_DIR BASELINE_FROST_BENCH [ROUNDS]}/bench/frost-bench
base=${2:?usage: bench_compare.sh BUILD_DIR BASELINE_FROST_BENCH [ROUNDS]}
rounds=${3:-3}
out_json=${4:-bench/results/single_stream_compare.json}
modes=" ${MODES:-decode prefill engine} "
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX; fi
models=(builtin:15m)
[[ -d ../shared/models/stories260K ]] && models+=(../shared/models/stories260K)
[[ -n ${MODELS:-} ]] && read -ra models <<< "$MODELS"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for ((r = 0; r < rounds; ++r)); do
  if [[ $modes == *" engine "* ]]; then
    for streams in ${ENGINE_STREAMS:-32 1}; do
      for who in this base; do
        [[ $((r % 2)) -eq 1 ]] && who=$([[ $who == this ]] && echo base || echo this)  # alternate who goes first
        bin=$this; [[ $who == base ]] && bin=$base
        row=$("$bin" engine --model builtin:15m --threads 2 --streams "$streams" --max-running 32 --new-tokens 128 \
          --repeat 2 --json 2> /dev/null)
        sleep "${SETTLE_S:-0}"
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["who"]=sys.argv[2]; d["streams"]=int(sys.argv[3]); print(json.dumps(d))' "$row" "$who" "$streams" >> "$tmp"
      done
    done
  fi
  for model in "${models[@]}"; do
    for threads in ${THREADS_LIST:-1 2}; do
      for dtype in ${DTYPES:-fp32 bf16}; do
        for mode in decode prefill; do
          [[ $modes == *" $mode "* ]] || continue
          for who in $( ((r % 2 == 0)) && echo "this base" || echo "base this"); do
            bin=$this; [[ $who == base ]] && bin=$base
            row=$("$bin" "$mode" --model "$model" --threads "$threads" --dtype "$dtype" --repeat 3 --json)
            python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["who"]=sys.argv[2]; print(json.dumps(d))' "$row" "$who" >> "$tmp"
          done
        done
      done
    done
  done
done
python3 - "$tmp" "$out_json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    bench = r["bench"] if r["bench"] != "engine" else f"engine {r['streams']} streams"
    key = (r["model"].split("/")[-1], r["threads"], r["dtype"], bench)
    val = {"decode": r.get("decode_tokens_per_s"), "prefill": r.get("prefill_tokens_per_s")}.get(
        r["bench"], r.get("output_tokens_per_s"))
    by.setdefault(key, {}).setdefault(r["who"], []).append(val)
out = []
print("| model | threads | weights | mode | this build tok/s | baseline tok/s | ratio |")
print("|---|---|---|---|---|---|---|")
for k, v in by.items():
    t, b = statistics.median(v["this"]), statistics.median(v["base"])
    out.append({"model": k[0], "threads": k[1], "dtype": k[2], "bench": k[3], "this": v["this"], "baseline": v["base"],
                "ratio": t / b})
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {t:.0f} | {b:.0f} | {t / b:.2f} |")
json.dump({"bench": "compare", "machine": rows[0]["machine"], "rows": out}, open(sys.argv[2], "w"), indent=1)
print("machine:", rows[0]["machine"]["cpu"], f"({rows[0]['machine']['cores']} cores)")
PY
echo "wrote $out_json"
