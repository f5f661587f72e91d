#!/usr/bin/env bash
# "No benchmark regresses": this build against a baseline build (the previous one), alternated in one run (who goes
# first alternates each round; the VMs are noisy, so compare medians of interleaved runs, never figures from
# different days), on builtin:15m with 2 threads:
#   - batch-1 decode tok/s with fp32, int8 and w8a8 weights (frost-bench decode: the Generator, 256 tokens);
#   - the batching engine in-process at 32 streams (frost-bench engine, fp32);
#   - served: frostd under frost-loadgen over gRPC at 1 and 32 streams (a fresh frostd per run; this build's
#     frost-loadgen drives both servers, so only the server differs).
# The first two are scripts/bench_compare.sh (MODES="decode engine"), the last scripts/bench_serve.sh
# (BASELINE_ONLY=1); ROUNDS rounds of each. Each figure passes at median(this) / median(baseline) >= 0.98.
# Usage: scripts/bench_model_ab.sh BUILD_DIR BASELINE_DIR [ROUNDS] [OUT_JSON]   (paths from the repository root)
#   BASELINE_DIR holds the baseline's frost-bench and frostd (as build/bench/ and build/server/ do, or flat).
#   ROUNDS defaults to 3 (about 10 minutes on a 2-core VM), OUT_JSON to bench/results/model_ab.json.
# Prints a Markdown table (benchmark, medians, the ratio of the medians and the median of the per-round ratios);
# exits 0 whatever the ratios.
set -euo pipefail
usage="usage: bench_model_ab.sh BUILD_DIR BASELINE_DIR [ROUNDS] [OUT_JSON]"
cd "$(dirname "$0")/.."  # relative paths are from the repository root, as in the other bench scripts
build=$(realpath "${1:?$usage}")
base_dir=$(realpath "${2:?$usage}")
rounds=${3:-3}
out=$(realpath -m "${4:-bench/results/model_ab.json}")
find_bin() {  # find_bin DIR SUBDIR NAME: DIR/SUBDIR/NAME or DIR/NAME
  local p
  for p in "$1/$2/$3" "$1/$3"; do [[ -x $p ]] && { echo "$p"; return; }; done
  echo "bench_model_ab: no $3 in $1" >&2
  exit 1
}
find_bin "$build" bench frost-bench > /dev/null
find_bin "$build" server frostd > /dev/null
find_bin "$build" bench frost-loadgen > /dev/null
base_bench=$(find_bin "$base_dir" bench frost-bench)
base_frostd=$(find_bin "$base_dir" server frostd)
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "bench_model_ab: in-process decode (fp32, int8, w8a8) and engine at 32 streams, $rounds round(s)" >&2
MODES="decode engine" MODELS=builtin:15m THREADS_LIST=2 DTYPES="fp32 int8 w8a8" ENGINE_STREAMS=32 SETTLE_S=10 \
  scripts/bench_compare.sh "$build" "$base_bench" "$rounds" "$tmp/inproc.json" >&2
echo "bench_model_ab: served at 1 and 32 streams, $rounds round(s)" >&2
env -u ROUNDS BASELINE_ONLY=1 BASELINE_FROSTD="$base_frostd" REPEATS="$rounds" OUT="$tmp/serve.json" \
  scripts/bench_serve.sh "$build" >&2
mkdir -p "$(dirname "$out")"
python3 - "$tmp/inproc.json" "$tmp/serve.json" "$out" "$build" "$base_dir" "$rounds" "$(($(date +%s) - start))" <<'PY'
import json, statistics, sys
inproc, serve = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
out, build, base_dir, rounds, secs = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
rows = []
def add(name, this, base):
    # Two estimates of one ratio: of the medians, and the median of each round's pair (this and the baseline ran
    # back to back): the second is blind to a drift of the machine over the run (seen here: the same binary
    # from 805 to 628 tok/s in 4 minutes). A figure passes when the paired median reaches the bar.
    t, b = statistics.median(this), statistics.median(base)
    paired = statistics.median([x / y for x, y in zip(this, base)])
    rows.append({"benchmark": name, "this_median": t, "baseline_median": b, "ratio": t / b,
                 "paired_ratio_median": paired, "pass": paired >= 0.98, "this": this, "baseline": base})
for r in sorted(inproc["rows"], key=lambda r: r["bench"] != "decode"):  # decode first, in DTYPES order
    name = f"decode batch 1, {r['dtype']} weights" if r["bench"] == "decode" else f"{r['bench']} in-process"
    add(name + " (tok/s)", r["this"], r["baseline"])
for c in (1, 32):
    t = serve["targets"][f"streams{c}_over_baseline_build"]
    add(f"served, {c} stream{'s' if c > 1 else ''} (tok/s)", t["this_tok_s"], t["baseline_tok_s"])
doc = {"bench": "model_ab", "build": build, "baseline": base_dir, "rounds": rounds, "model": "builtin:15m",
       "threads": 2, "bar": 0.98, "all_pass": all(r["pass"] for r in rows), "seconds": secs,
       "machine": inproc["machine"], "rows": rows, "serve_runs": serve["runs"]}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"| benchmark | this build | baseline | ratio of medians | median of paired ratios |")
print("|---|---|---|---|---|")
for r in rows:
    flag = "" if r["pass"] else " ⚠ < 0.98"
    print(f"| {r['benchmark']} | {r['this_median']:.0f} | {r['baseline_median']:.0f} | {r['ratio']:.3f} | "
          f"{r['paired_ratio_median']:.3f}{flag} |")
m = inproc["machine"]
print(f"\nbuiltin:15m, 2 threads, medians of {rounds} alternated round(s), {secs} s; {m['cpu']} ({m['cores']} cores); "
      f"all ≥ 0.98: {'yes' if doc['all_pass'] else 'NO'}")
PY
echo "wrote $out" >&2
