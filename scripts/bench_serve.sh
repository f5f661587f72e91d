#!/usr/bin/env bash
# Serving benchmark: starts frostd (builtin:15m) on free ports, runs frost-loadgen against it at
# concurrency 1, 4 and 16 (128-token completions, ignore_eos), stops frostd with SIGTERM (it must
# exit 0), writes the combined results to bench/results/serve.json and prints a Markdown table.
# Usage: scripts/bench_serve.sh [BUILD_DIR]   (make bench-serve builds frostd + frost-loadgen first)
# Knobs (environment): MODEL, MAX_TOKENS, CONCURRENCY ("1 4 16"), ROUNDS (measured requests per
# client stream), MIN_REQUESTS, THREADS (model.threads), MAX_RUNNING (engine.max_running; default:
# the largest concurrency, so every client stream is decoding rather than queued).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
frostd=$build/server/frostd
loadgen=$build/bench/frost-loadgen
out=bench/results/serve.json
MODEL=${MODEL:-builtin:15m}
MAX_TOKENS=${MAX_TOKENS:-128}
CONCURRENCY=${CONCURRENCY:-1 4 16}
ROUNDS=${ROUNDS:-12}
MIN_REQUESTS=${MIN_REQUESTS:-64}
THREADS=${THREADS:-2}
max_c=0
for c in $CONCURRENCY; do ((c > max_c)) && max_c=$c; done
MAX_RUNNING=${MAX_RUNNING:-$max_c}
PROMPT=${PROMPT:-Once upon a time}

for bin in "$frostd" "$loadgen"; do
  [[ -x $bin ]] || { echo "bench_serve: $bin not found (build frostd and frost-loadgen first)" >&2; exit 1; }
done
# OpenBLAS reads this when it loads; frostd's prefill GEMMs use it. As in the Makefile: these CPUs
# have AVX-512 but the environment says Haswell, and SkylakeX doubles GEMM speed.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi

tmp=$(mktemp -d)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "bench_serve: $*" >&2
  echo "--- frostd log (last 20 lines)" >&2
  tail -n 20 "$tmp/frostd.log" >&2 || true
  exit 1
}

# configs/default.yaml documents the keys; the rest keep their defaults. max_waiting stays at
# least the concurrency so that no client request is refused with RESOURCE_EXHAUSTED.
cat > "$tmp/frostd.yaml" <<EOF
model:
  threads: $THREADS
engine:
  max_running: $MAX_RUNNING
  max_waiting: $((max_c > 16 ? max_c : 16))
log:
  level: warn
EOF
"$frostd" --config "$tmp/frostd.yaml" --state-dir "$tmp/state" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --port-file "$tmp/ports" --model "$MODEL" > "$tmp/frostd.log" 2>&1 &
pid=$!

# Ports first (written once both listeners are bound), then a one-token Generate until it succeeds:
# frostd answers UNAVAILABLE while the model loads.
for ((i = 0; i < 600; ++i)); do
  [[ -s $tmp/ports ]] && break
  kill -0 "$pid" 2>/dev/null || fail "frostd exited before writing its port file"
  sleep 0.1
done
port=$(sed -n 's/^grpc=//p' "$tmp/ports" 2>/dev/null || true)
[[ -n $port ]] || fail "no port file from frostd within 60 s"
addr=127.0.0.1:$port
# Short --wait-ready rounds, so that a frostd that died while loading is noticed at once.
deadline=$((SECONDS + 60))
until "$loadgen" --addr "$addr" --wait-ready 1 --requests 1 --max-tokens 1 --prompt "$PROMPT" \
    > /dev/null 2> "$tmp/ready.err"; do
  kill -0 "$pid" 2>/dev/null || fail "frostd exited before answering a Generate: $(cat "$tmp/ready.err")"
  ((SECONDS < deadline)) || fail "frostd at $addr not ready within 60 s: $(cat "$tmp/ready.err")"
done

rows=()
for c in $CONCURRENCY; do
  n=$((c * ROUNDS > MIN_REQUESTS ? c * ROUNDS : MIN_REQUESTS))
  echo "bench_serve: concurrency $c, $n requests of $MAX_TOKENS tokens" >&2
  # The seed makes the sampled streams repeatable; with ignore_eos the length never depends on it.
  if ! row=$("$loadgen" --addr "$addr" --concurrency "$c" --requests "$n" --warmup "$c" \
      --max-tokens "$MAX_TOKENS" --prompt "$PROMPT" --temperature 0.8 --seed 1 --json); then
    echo "$row" >&2
    fail "frost-loadgen failed at concurrency $c"
  fi
  rows+=("$row")
done

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[[ $rc -eq 0 ]] || fail "frostd exited with status $rc after SIGTERM (expected 0)"

mkdir -p bench/results
printf '%s\n' "${rows[@]}" > "$tmp/runs.jsonl"
python3 - "$tmp/runs.jsonl" "$out" "$MODEL" "$THREADS" "$MAX_RUNNING" <<'PY'
import json, sys
rows_path, out_path, model = sys.argv[1:4]
threads, max_running = int(sys.argv[4]), int(sys.argv[5])
runs = [json.loads(l) for l in open(rows_path) if l.strip()]
doc = {"bench": "serve", "model": model,
       "frostd": {"model.threads": threads, "engine.max_running": max_running},
       "machine": runs[0]["machine"], "runs": runs}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
ms = lambda s: f"{s * 1e3:.1f}"
print("| concurrency | req/s | output tok/s | stream tok/s p50 | TTFT p50 / p99 ms | ITL p50 / p99 ms "
      "| e2e p50 / p99 s |")
print("|---|---|---|---|---|---|---|")
codes = {}
for r in runs:
    t, i, e = r["ttft_s"], r["itl_s"], r["e2e_s"]
    print(f"| {r['settings']['concurrency']} | {r['requests_per_s']:.2f} | {r['output_tokens_per_s']:.0f} "
          f"| {r['stream_decode_tokens_per_s']['p50']:.0f} | {ms(t['p50'])} / {ms(t['p99'])} "
          f"| {ms(i['p50'])} / {ms(i['p99'])} | {e['p50']:.3f} / {e['p99']:.3f} |")
    for k, v in r["status_counts"].items():
        codes[k] = codes.get(k, 0) + v
m = runs[0]["machine"]
print(f"{model}, {runs[0]['settings']['max_tokens']}-token completions, model.threads={threads}, "
      f"engine.max_running={max_running}; status codes: {codes}")
print(f"machine: {m['cpu']} ({m['cores']} cores, OPENBLAS_CORETYPE={m['openblas_coretype'] or 'unset'})")
PY
echo "wrote $out"
