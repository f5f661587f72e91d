#!/usr/bin/env bash
# Serving benchmark (make bench-serve): frostd on builtin:15m (free ports) under frost-loadgen, client and
# server on this machine. Writes bench/results/serve.json and prints a Markdown table with the issue's targets,
# each a ratio measured in this run:
#   1. throughput and latency at 1 / 4 / 16 / 32 / 64 streams (128-token completions, sampled, ignore_eos);
#   2. the reference figure: a bare LibTorch fp32 step over the same weights at batch 32 (frost-bench
#      bare-step: weight GEMMs and logits only), measured between the 32-stream runs, which are repeated
#      (REPEATS) and paired with it: the target is the median of 32-stream tok/s ÷ bare tok/s; each pair also
#      runs the 32 streams over one connection (--connections 1: an application server's channel or a proxy
#      carrying many users' calls, the usual shape of a gRPC backend's traffic) beside one connection per stream;
#   3. inter-token latency at 32 streams while 1,500-token prompts are prefilled back to back (chunked
#      prefill), against the 1-stream ITL and the 32-stream ITL without them;
#   4. a workload sharing a 512-token system prompt, prefix caching on vs off (frostd restarted): TTFT p50;
#   5. 64 streams of ~100 tokens: peak KV bytes in use ÷ the bytes their positions need (paging overhead);
#   6. with BASELINE_FROSTD=path (a previous build's frostd), the 1-stream and 32-stream tok/s of both builds,
#      alternated REPEATS times in this run (a fresh frostd per run). BASELINE_ONLY=1 runs only this section and
#      writes bench/results/serve_vs_baseline.json (the "no benchmark regresses" check of a refactoring).
# Usage: scripts/bench_serve.sh [BUILD_DIR]   (make bench-serve builds frostd, frost-loadgen, frost-bench)
# Knobs (environment): MODEL, THREADS (model.threads), MAX_TOKENS, ROUNDS (measured requests per stream),
# REPEATS, BASELINE_FROSTD, BASELINE_ONLY, SETTLE_S, QUICK=1 (fewer requests: a smoke run, e.g. in CI), OUT (the JSON path).
#
# SETTLE_S (default 10): seconds to wait after each frost-bench process (the bare step, the in-process engine)
# and each frostd exits, before the next measurement. On the 2-core VMs this runs on, the seconds after a process that held a
# 3.4 GiB KV pool exits are slow for everyone (the guest hands the freed memory back to the host: virtio
# balloon page reporting, DAMON): a served 32-stream run started at once had ITL p99 38-50 ms against 19-23 ms
# ten seconds later (6 of 6 alternated pairs) and lost ~8% of its tokens/s, which the paired ratios charged to
# serving. For the same reason the latency sections run before the pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
frostd=$build/server/frostd
loadgen=$build/bench/frost-loadgen
bench=$build/bench/frost-bench
out=${OUT:-bench/results/serve.json}
MODEL=${MODEL:-builtin:15m}
THREADS=${THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-128}
ROUNDS=${ROUNDS:-3}
REPEATS=${REPEATS:-7}
BASELINE_FROSTD=${BASELINE_FROSTD:-}
SETTLE_S=${SETTLE_S:-10}
if [[ ${QUICK:-0} == 1 ]]; then ROUNDS=1; REPEATS=1; MAX_TOKENS=32; SETTLE_S=0; fi
PROMPT="Once upon a time"

for bin in "$frostd" "$loadgen" "$bench"; do
  [[ -x $bin ]] || { echo "bench_serve: $bin not found (make bench-serve builds it)" >&2; exit 1; }
done
# OpenBLAS reads this when it loads (the bare step's GEMMs). As in the Makefile: these CPUs have AVX-512 but
# the environment says Haswell, and SkylakeX doubles GEMM speed.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX; fi

tmp=$(mktemp -d)
pid=
stop_frostd() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    local rc=0
    wait "$pid" || rc=$?
    pid=
    [[ $rc -eq 0 ]] || fail "frostd exited with status $rc after SIGTERM (expected 0)"
    sleep "$SETTLE_S"  # its KV pool was just freed (SETTLE_S above)
  fi
  pid=
}
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "bench_serve: $*" >&2
  echo "--- frostd log (last 20 lines)" >&2
  tail -n 20 "$tmp/frostd.log" >&2 || true
  exit 1
}

# start_frostd BINARY EXTRA_YAML: frostd with max_running 64 on free ports; sets pid, addr, maddr.
start_frostd() {
  local bin=$1 extra=${2:-}
  cat > "$tmp/frostd.yaml" <<EOF
model:
  threads: $THREADS
engine:
  max_running: 64
  max_waiting: 256
$extra
log:
  level: warn
EOF
  rm -f "$tmp/ports"
  "$bin" --config "$tmp/frostd.yaml" --state-dir "$tmp/state" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --port-file "$tmp/ports" --model "$MODEL" > "$tmp/frostd.log" 2>&1 &
  pid=$!
  for ((i = 0; i < 600; ++i)); do
    [[ -s $tmp/ports ]] && grep -q '^metrics=' "$tmp/ports" && break
    kill -0 "$pid" 2>/dev/null || fail "frostd exited before writing its port file"
    sleep 0.1
  done
  addr=127.0.0.1:$(sed -n 's/^grpc=//p' "$tmp/ports")
  maddr=127.0.0.1:$(sed -n 's/^metrics=//p' "$tmp/ports")
  "$loadgen" --addr "$addr" --wait-ready 60 --requests 1 --max-tokens 1 --prompt "$PROMPT" > /dev/null 2> "$tmp/ready.err" \
    || fail "frostd at $addr not ready: $(cat "$tmp/ready.err")"
}

# run NAME ARGS...: one frost-loadgen run, its JSON appended to runs.jsonl under "name".
run() {
  local name=$1
  shift
  echo "bench_serve: $name" >&2
  local row
  if ! row=$("$loadgen" --addr "$addr" --metrics-addr "$maddr" --temperature 0.8 --seed 1 --json "$@"); then
    echo "$row" >&2
    fail "frost-loadgen failed: $name"
  fi
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["name"]=sys.argv[1]; print(json.dumps(d))' "$name" "$row" >> "$tmp/runs.jsonl"
}
streams() {  # streams C [extra loadgen args]: C streams, ROUNDS requests each, one warm-up round
  local c=$1
  shift
  run "streams_$c${SUFFIX:-}" --concurrency "$c" --requests $((c * ROUNDS > 16 ? c * ROUNDS : 16)) --warmup "$c" \
    --max-tokens "$MAX_TOKENS" --prompt "$PROMPT" "$@"
}
bare_step() {
  "$bench" bare-step --model "$MODEL" --threads "$THREADS" --batch 32 --repeat 30 --json >> "$tmp/bare.jsonl" \
    || fail "frost-bench bare-step failed"
  sleep "$SETTLE_S"
}
engine_inproc() {  # engine_inproc C FILE: the batching engine in-process (no gRPC, no client threads), C streams,
  # sized as frostd is (max_running 64: the same KV pool), so the two differ only by gRPC and the client
  "$bench" engine --model "$MODEL" --threads "$THREADS" --streams "$1" --max-running 64 --new-tokens "$MAX_TOKENS" \
    --repeat "$ROUNDS" --json >> "$2" || fail "frost-bench engine failed"
  sleep "$SETTLE_S"
}

: > "$tmp/runs.jsonl"
: > "$tmp/bare.jsonl"
: > "$tmp/engine.jsonl"
: > "$tmp/engine1.jsonl"
if [[ ${BASELINE_ONLY:-0} != 1 ]]; then
start_frostd "$frostd"
# 1. concurrency sweep
for c in 1 4 16 32 64; do streams "$c"; done
# 3. ITL while 1,500-token prompts are prefilled
run itl_prefill_32 --concurrency 32 --requests $((32 * ROUNDS)) --warmup 32 --max-tokens "$MAX_TOKENS" \
  --prompt "$PROMPT" --background-prompt 1500
run itl_prefill_1 --concurrency 1 --requests $((4 * ROUNDS)) --warmup 1 --max-tokens "$MAX_TOKENS" \
  --prompt "$PROMPT" --background-prompt 1500
# 5. 64 streams of ~100 tokens (17 distinct prompt ids + 84): KV bytes in use vs needed
run kv_64x100 --concurrency 64 --requests 64 --max-tokens 84 --prompt-ids 17
# 4a. shared 512-token system prompt, prefix caching on
run prefix_on --concurrency 8 --requests $((8 * ROUNDS * 2)) --warmup 8 --max-tokens 16 --prompt-ids 16 --shared-prefix 512
# 2. the bare step, paired with repeated 32-stream runs (the VMs are noisy: pairs, then the median ratio), and
#    the same engine in-process (frostd idle meanwhile) to tell the engine's speed from the serving overhead,
#    at 32 streams and at 1 (the serving overhead target: served 1-stream tok/s ≥ 0.9 × in-process)
#    Each pair gets a fresh frostd, as each bare step and in-process engine is a fresh process: on the VMs this
#    runs on the same binary's speed differs by up to ±15% from one process to the next and holds within a
#    process (1-stream tok/s of 6 frostd processes, 4 runs each: 509-582 … 752-756), as if decided by where
#    its memory landed on the host. One frostd for every pair made all seven served figures one draw of that
#    against seven draws for the in-process engine, and the 1-stream ratio swung 0.80-0.93 between runs.
for ((r = 0; r < REPEATS; ++r)); do
  stop_frostd
  start_frostd "$frostd"
  bare_step
  engine_inproc 32 "$tmp/engine.jsonl"
  SUFFIX=_pair$r streams 32
  SUFFIX=_mux$r streams 32 --connections 1
  engine_inproc 1 "$tmp/engine1.jsonl"
  SUFFIX=_pair$r streams 1
done
stop_frostd
# 4b. the same with prefix caching off
start_frostd "$frostd" "  prefix_caching: false"
run prefix_off --concurrency 8 --requests $((8 * ROUNDS * 2)) --warmup 8 --max-tokens 16 --prompt-ids 16 --shared-prefix 512
stop_frostd
fi
# 6. this build against a baseline build at 1 and 32 streams, alternated (which goes first alternates too)
if [[ -n $BASELINE_FROSTD ]]; then
  for ((r = 0; r < REPEATS; ++r)); do
    for which in $( ((r % 2 == 0)) && echo "baseline this" || echo "this baseline"); do
      if [[ $which == baseline ]]; then start_frostd "$BASELINE_FROSTD"; else start_frostd "$frostd"; fi
      SUFFIX=_$which$r streams 1
      SUFFIX=_$which$r streams 32
      stop_frostd
    done
  done
fi
if [[ ${BASELINE_ONLY:-0} == 1 ]]; then
  [[ -n $BASELINE_FROSTD ]] || { echo "bench_serve: BASELINE_ONLY=1 needs BASELINE_FROSTD" >&2; exit 1; }
  out=${OUT:-bench/results/serve_vs_baseline.json}
  mkdir -p "$(dirname "$out")"
  python3 - "$tmp/runs.jsonl" "$out" "$MODEL" "$THREADS" "$BASELINE_FROSTD" <<'PY'
import json, statistics, sys
runs_path, out_path, model, threads, baseline = sys.argv[1:6]
runs = [json.loads(l) for l in open(runs_path) if l.strip()]
tps = lambda r: r["output_tokens_per_s"]
targets = {}
for c in (1, 32):
    this = [tps(r) for r in runs if r["name"].startswith(f"streams_{c}_this")]
    base = [tps(r) for r in runs if r["name"].startswith(f"streams_{c}_baseline")]
    targets[f"streams{c}_over_baseline_build"] = {"value": statistics.median(this) / statistics.median(base),
                                                  "target": 0.95, "this_tok_s": this, "baseline_tok_s": base}
doc = {"bench": "serve_vs_baseline", "model": model, "frostd": {"model.threads": int(threads)}, "baseline": baseline,
       "machine": runs[0]["machine"], "targets": targets, "runs": runs}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
for c in (1, 32):
    t = targets[f"streams{c}_over_baseline_build"]
    print(f"- {c} stream(s), this build ÷ baseline ({baseline}), alternated: **{t['value']:.2f}×** (this "
          f"{statistics.median(t['this_tok_s']):.0f}, baseline {statistics.median(t['baseline_tok_s']):.0f} tok/s; "
          f"this {[round(x) for x in t['this_tok_s']]}, baseline {[round(x) for x in t['baseline_tok_s']]})")
m = runs[0]["machine"]
print(f"\n{model}, model.threads={threads}; machine: {m['cpu']} ({m['cores']} cores)")
PY
  echo "wrote $out"
  exit 0
fi

mkdir -p "$(dirname "$out")"
python3 - "$tmp/runs.jsonl" "$tmp/bare.jsonl" "$out" "$MODEL" "$THREADS" "$BASELINE_FROSTD" "$tmp/engine.jsonl" \
  "$tmp/engine1.jsonl" <<'PY'
import json, statistics, sys
runs_path, bare_path, out_path, model, threads, baseline, engine_path, engine1_path = sys.argv[1:9]
runs = {}
for l in open(runs_path):
    if l.strip():
        d = json.loads(l)
        runs[d["name"]] = d
bare = [json.loads(l) for l in open(bare_path) if l.strip()]
engine = [json.loads(l) for l in open(engine_path) if l.strip()]
engine1 = [json.loads(l) for l in open(engine1_path) if l.strip()]
tps = lambda r: r["output_tokens_per_s"]
ms = lambda s: s * 1e3
# Exact checks, whatever the speed (the CI smoke run relies on them): every measured request of the shared-prompt
# workload hits the 512-token prefix (32 full blocks) with caching on, and nothing hits with it off.
def check(ok, what):
    if not ok:
        sys.exit(f"bench_serve: check failed: {what}")
for name, want in (("prefix_on", runs["prefix_on"]["requests_ok"] * 512), ("prefix_off", 0)):
    got = runs[name]["server_metrics"]["prefix_hits_tokens"]
    check(got == want, f"{name}: prefix cache hits {got:.0f} tokens, expected {want}")
check(runs["kv_64x100"]["server_metrics"]["preemptions"] == 0, "kv_64x100: preemptions in a pool far larger than the load")
pairs = [(tps(runs[f"streams_32_pair{i}"]), b["tokens_per_s"]) for i, b in enumerate(bare)]
ratio32 = statistics.median(a / b for a, b in pairs)
pairs_mux = [(tps(runs[f"streams_32_mux{i}"]), b["tokens_per_s"]) for i, b in enumerate(bare)]
ratio32_mux = statistics.median(a / b for a, b in pairs_mux)
mux_over_engine = statistics.median(tps(runs[f"streams_32_mux{i}"]) / e["output_tokens_per_s"] for i, e in enumerate(engine))
ratio32_linear = statistics.median(tps(runs[f"streams_32_pair{i}"]) / b["tokens_per_s_linear"] for i, b in enumerate(bare))
ratio_engine = statistics.median(e["output_tokens_per_s"] / b["tokens_per_s"] for e, b in zip(engine, bare))
served_over_engine = statistics.median(tps(runs[f"streams_32_pair{i}"]) / e["output_tokens_per_s"] for i, e in enumerate(engine))
pairs1 = [(tps(runs[f"streams_1_pair{i}"]), e["output_tokens_per_s"]) for i, e in enumerate(engine1)]
served1_over_engine = statistics.median(a / b for a, b in pairs1)
one, s32, pre, pre1 = runs["streams_1"], runs["streams_32"], runs["itl_prefill_32"], runs["itl_prefill_1"]
itl1_p99, itl32_p99, itlpre_p99 = one["itl_s"]["p99"], s32["itl_s"]["p99"], pre["itl_s"]["p99"]
itlpre1_p99 = pre1["itl_s"]["p99"]
pon, poff = runs["prefix_on"], runs["prefix_off"]
kv = runs["kv_64x100"]["server_metrics"]
targets = {
    "streams32_over_bare_step": {"value": ratio32, "target": 1.0, "bar": 0.8,
                                 "pairs": [{"streams32_tok_s": a, "bare_step_tok_s": b} for a, b in pairs]},
    "streams32_one_connection_over_bare_step": {"value": ratio32_mux, "target": 1.0, "bar": 0.8,
                                                "pairs": [{"streams32_tok_s": a, "bare_step_tok_s": b}
                                                          for a, b in pairs_mux]},
    "streams32_one_connection_served_over_engine_inprocess": {"value": mux_over_engine},
    "streams32_over_bare_step_linear": {"value": ratio32_linear,
                                        "bare_step_linear_tok_s": [b["tokens_per_s_linear"] for b in bare]},
    "engine_inprocess32_over_bare_step": {"value": ratio_engine,
                                          "engine_tok_s": [e["output_tokens_per_s"] for e in engine]},
    "streams32_served_over_engine_inprocess": {"value": served_over_engine},
    "streams1_served_over_engine_inprocess": {"value": served1_over_engine, "target": 0.9,
                                              "pairs": [{"served_tok_s": a, "engine_tok_s": b} for a, b in pairs1]},
    "itl_p99_32_with_prefill_over_1_stream": {"value": itlpre_p99 / itl1_p99, "target_max": 3.0},
    "itl_p99_32_with_prefill_over_32_without": {"value": itlpre_p99 / itl32_p99},
    "itl_p99_32_with_prefill_over_1_with_prefill": {"value": itlpre_p99 / itlpre1_p99},
    "itl_p99_32_without_prefill_over_1_stream": {"value": itl32_p99 / itl1_p99},
    "prefix_ttft_p50_off_over_on": {"value": poff["ttft_s"]["p50"] / pon["ttft_s"]["p50"], "target": 2.0},
    "kv_bytes_in_use_over_needed_64x100": {"value": kv["kv_bytes_ratio_at_peak"], "target_max": 1.2},
}
if baseline:
    for c in (1, 32):
        this = [tps(runs[k]) for k in sorted(runs) if k.startswith(f"streams_{c}_this")]
        base = [tps(runs[k]) for k in sorted(runs) if k.startswith(f"streams_{c}_baseline")]
        targets[f"streams{c}_over_baseline_build"] = {"value": statistics.median(this) / statistics.median(base),
                                                      "target": 0.95, "this_tok_s": this, "baseline_tok_s": base,
                                                      "baseline": baseline}
doc = {"bench": "serve", "model": model, "frostd": {"model.threads": int(threads), "engine.max_running": 64},
       "machine": one["machine"], "bare_step": bare, "engine_inprocess": engine, "engine_inprocess_1": engine1,
       "targets": targets,
       "runs": list(runs.values())}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print("| streams | output tok/s | stream tok/s p50 | TTFT p50 / p99 ms | ITL p50 / p99 ms | e2e p50 / p99 s |")
print("|---|---|---|---|---|---|")
for c in (1, 4, 16, 32, 64):
    r = runs[f"streams_{c}"]
    t, i, e = r["ttft_s"], r["itl_s"], r["e2e_s"]
    print(f"| {c} | {tps(r):.0f} | {r['stream_decode_tokens_per_s']['p50']:.0f} | {ms(t['p50']):.1f} / {ms(t['p99']):.1f} "
          f"| {ms(i['p50']):.1f} / {ms(i['p99']):.1f} | {e['p50']:.3f} / {e['p99']:.3f} |")
print()
print(f"- 32 streams ÷ bare LibTorch step at batch 32, GEMMs into preallocated outputs (median of {len(pairs)} "
      f"pairs): **{ratio32:.2f}×** (target ≥ 1.0, bar 0.8; pairs: " + ", ".join(f"{a:.0f}/{b:.0f}" for a, b in pairs) + ")")
print(f"- the same 32 streams over one connection (--connections 1) ÷ the bare step (median of {len(pairs_mux)} pairs): "
      f"**{ratio32_mux:.2f}×** (served ÷ in-process: {mux_over_engine:.2f}; pairs: "
      + ", ".join(f"{a:.0f}/{b:.0f}" for a, b in pairs_mux) + ")")
print(f"- the same engine in-process (no gRPC, no client on the cores) ÷ the bare step: **{ratio_engine:.2f}×**; served "
      f"÷ in-process: {served_over_engine:.2f} (in-process: " + ", ".join(f"{e['output_tokens_per_s']:.0f}" for e in engine)
      + f" tok/s; step ms: forward {statistics.median(e['step_ms']['forward'] for e in engine):.2f}, sample "
      f"{statistics.median(e['step_ms']['sample'] for e in engine):.2f})")
print(f"- serving overhead at 1 stream: served ÷ the same engine in-process (median of {len(pairs1)} pairs): "
      f"**{served1_over_engine:.2f}** (target ≥ 0.9; pairs: " + ", ".join(f"{a:.0f}/{b:.0f}" for a, b in pairs1) + ")")
print(f"- 32 streams ÷ the same step written as at::linear layers (outputs allocated, activation between): "
      f"**{ratio32_linear:.2f}×** (bare: " + ", ".join(f"{b['tokens_per_s_linear']:.0f}" for b in bare) + " tok/s)")
if all("tokens_per_s_packed" in b for b in bare):
    print("- the bare step's GEMMs through frost's packed kernel (the weight-GEMM share of a served step): "
          + ", ".join(f"{b['tokens_per_s_packed']:.0f}" for b in bare) + " tok/s ("
          + ", ".join(f"{b['step_ms_packed']['p50']:.2f}" for b in bare) + " ms per step)")
print(f"- ITL p99 at 32 streams while 1,500-token prompts prefill: {ms(itlpre_p99):.1f} ms = "
      f"{itlpre_p99 / itl1_p99:.1f}× the 1-stream ITL p99 ({ms(itl1_p99):.1f} ms), "
      f"{itlpre_p99 / itl32_p99:.2f}× the 32-stream ITL p99 without them ({ms(itl32_p99):.1f} ms; that is itself "
      f"{itl32_p99 / itl1_p99:.1f}× the 1-stream p99), {itlpre_p99 / itlpre1_p99:.2f}× the 1-stream ITL p99 with them "
      f"({ms(itlpre1_p99):.1f} ms); "
      f"{pre['background']['requests']} long prompts, TTFT p50 {pre['background']['ttft_s']['p50']:.2f} s")
print(f"- 512-token shared system prompt, TTFT p50: prefix caching on {ms(pon['ttft_s']['p50']):.1f} ms, "
      f"off {ms(poff['ttft_s']['p50']):.1f} ms: **{poff['ttft_s']['p50'] / pon['ttft_s']['p50']:.1f}×** "
      f"(hits {pon['server_metrics']['prefix_hits_tokens']:.0f} of {pon['server_metrics']['prefix_queries_tokens']:.0f} tokens)")
print(f"- 64 streams of ~100 tokens: peak KV in use {kv['kv_bytes_in_use_peak'] / 2**20:.1f} MiB for "
      f"{kv['kv_bytes_needed_at_peak'] / 2**20:.1f} MiB of positions: **{kv['kv_bytes_ratio_at_peak']:.3f}×**")
if baseline:
    for c in (1, 32):
        t = targets[f"streams{c}_over_baseline_build"]
        print(f"- {c} stream(s), this build ÷ baseline ({baseline}), alternated: **{t['value']:.2f}×** "
              f"(this {statistics.median(t['this_tok_s']):.0f}, baseline {statistics.median(t['baseline_tok_s']):.0f} tok/s)")
m = one["machine"]
print(f"\n{model}, model.threads={threads}, max_running=64; machine: {m['cpu']} ({m['cores']} cores, "
      f"OPENBLAS_CORETYPE={m['openblas_coretype'] or 'unset'})")
PY
echo "wrote $out"
