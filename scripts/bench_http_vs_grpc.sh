#!/usr/bin/env bash
# The OpenAI HTTP API against gRPC on the same frostd and the same load, alternated in one run (medians of
# interleaved rounds; the VMs are noisy): frost-loadgen at 1 and 32 streams, streamed, ignore_eos, seeded
# sampling, once over gRPC Generate and once over POST /v1/completions (--http).
# Usage: scripts/bench_http_vs_grpc.sh BUILD_DIR [ROUNDS] [MODEL]
# Writes bench/results/http_vs_grpc.json and prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench_http_vs_grpc.sh BUILD_DIR [ROUNDS] [MODEL]}
rounds=${2:-3}
model=${3:-builtin:15m}
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$build/server/frostd" --model "$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --port-file "$tmp/ports" --state-dir "$tmp/state" > "$tmp/frostd.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do [[ -s $tmp/ports ]] && grep -q '^http=' "$tmp/ports" && break; sleep 0.1; done
grpc=127.0.0.1:$(sed -n 's/^grpc=//p' "$tmp/ports")
http=127.0.0.1:$(sed -n 's/^http=//p' "$tmp/ports")
lg=(--addr "$grpc" --max-tokens 64 --temperature 0.8 --seed 1 --wait-ready 120 --json)
"$build/bench/frost-loadgen" "${lg[@]}" --concurrency 4 --requests 8 > /dev/null  # warm the server
: > "$tmp/rows"
for ((r = 0; r < rounds; ++r)); do
  for streams in 1 32; do
    requests=$((streams == 1 ? 12 : 96))
    order="grpc http"
    ((r % 2 == 1)) && order="http grpc"
    for proto in $order; do
      extra=()
      [[ $proto == http ]] && extra=(--http "$http")
      "$build/bench/frost-loadgen" "${lg[@]}" --concurrency "$streams" --requests "$requests" --warmup "$streams" \
        "${extra[@]}" > "$tmp/out.json"
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["proto"]=sys.argv[2]; d["streams"]=int(sys.argv[3]); print(json.dumps(d))' \
        "$tmp/out.json" "$proto" "$streams" >> "$tmp/rows"
    done
  done
done
python3 - "$tmp/rows" "$model" <<'PY'
import json, platform, statistics, sys, os
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def key(r, *path):
    for p in path:
        r = r.get(p, {}) if isinstance(r, dict) else {}
    return r if isinstance(r, (int, float)) else None
out = []
print("| streams | gRPC tok/s | HTTP tok/s | HTTP / gRPC | TTFT p50 gRPC / HTTP (ms) |")
print("|---|---|---|---|---|")
for s in (1, 32):
    g = [r for r in rows if r["streams"] == s and r["proto"] == "grpc"]
    h = [r for r in rows if r["streams"] == s and r["proto"] == "http"]
    gt = statistics.median(r["output_tokens_per_s"] for r in g)
    ht = statistics.median(r["output_tokens_per_s"] for r in h)
    gf = statistics.median(key(r, "ttft_s", "p50") or 0 for r in g) * 1e3
    hf = statistics.median(key(r, "ttft_s", "p50") or 0 for r in h) * 1e3
    bad = sum(r.get("requests_failed", 0) for r in g + h)
    out.append({"streams": s, "grpc_tokens_per_s": [r["output_tokens_per_s"] for r in g],
                "http_tokens_per_s": [r["output_tokens_per_s"] for r in h], "ratio": ht / gt,
                "ttft_p50_ms": {"grpc": gf, "http": hf}, "requests_failed": bad})
    print(f"| {s} | {gt:.0f} | {ht:.0f} | {ht / gt:.3f} | {gf:.1f} / {hf:.1f} |")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
json.dump({"bench": "http_vs_grpc", "model": sys.argv[2], "machine": {"cpu": cpu, "cores": os.cpu_count()},
           "load": "frost-loadgen, 64 tokens, ignore_eos, temperature 0.8, seeded; rounds alternate the order",
           "rows": out}, open("bench/results/http_vs_grpc.json", "w"), indent=1)
print("machine:", cpu, f"({os.cpu_count()} cores)")
PY
echo "wrote bench/results/http_vs_grpc.json"
