#!/usr/bin/env bash
# Constrained decoding at 32 streams, this build against another, alternated in one run (issue 48's "constrained
# decoding speed unchanged"): bench/structured_output_bench.mjs --parts throughput on each frostd in turn, PAIRS
# times (B A B A ... so neither always goes first), then the medians of each build's json_schema and unconstrained
# tokens/s and their ratios → OUT (bench/results/structured_ab.json).
#
#   scripts/bench_structured_ab.sh BASE_FROSTD [NEW_FROSTD]   (NEW_FROSTD: build/server/frostd)
# Knobs: PAIRS (3), STREAMS (32), TOKENS (128), ROUNDS (2), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: bench_structured_ab.sh BASE_FROSTD [NEW_FROSTD]}
new=${2:-build/server/frostd}
PAIRS=${PAIRS:-3}; STREAMS=${STREAMS:-32}; TOKENS=${TOKENS:-128}; ROUNDS=${ROUNDS:-2}
OUT=${OUT:-bench/results/structured_ab.json}
bash scripts/install_openai_client.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # label binary index
  node bench/structured_output_bench.mjs --frostd "$2" --parts throughput --tp-streams "$STREAMS" \
    --tp-tokens "$TOKENS" --tp-rounds "$ROUNDS" --out "$tmp/$1-$3.json" | grep -E "throughput|ratio" || true
}
for i in $(seq 1 "$PAIRS"); do
  if (( i % 2 )); then run base "$base" "$i"; run new "$new" "$i"; else run new "$new" "$i"; run base "$base" "$i"; fi
done
node - "$tmp" "$OUT" "$base" "$new" <<'JS'
const fs = require("fs"), path = require("path");
const [dir, out, base, nw] = process.argv.slice(2);
const med = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const load = (who) => fs.readdirSync(dir).filter((f) => f.startsWith(who + "-")).map((f) => JSON.parse(fs.readFileSync(path.join(dir, f))).throughput);
const b = load("base"), n = load("new");
const r3 = (x) => Math.round(x * 1000) / 1000;
const res = {
  bench: "structured_ab", date: new Date().toISOString(), base, new: nw,
  machine: (/model name\s*:\s*(.*)/.exec(fs.readFileSync("/proc/cpuinfo", "utf8")) || [])[1],
  streams: b[0].streams, max_tokens: b[0].max_tokens, runs_each: b.length,
  base_json_schema_tok_s: b.map((x) => x.json_schema_tokens_per_s), new_json_schema_tok_s: n.map((x) => x.json_schema_tokens_per_s),
  base_free_tok_s: b.map((x) => x.unconstrained_tokens_per_s), new_free_tok_s: n.map((x) => x.unconstrained_tokens_per_s),
};
res.json_schema_new_over_base = r3(med(res.new_json_schema_tok_s) / med(res.base_json_schema_tok_s));
res.free_new_over_base = r3(med(res.new_free_tok_s) / med(res.base_free_tok_s));
res.new_constrained_over_free = r3(med(n.map((x) => x.ratio_constrained_over_free)));
res.base_constrained_over_free = r3(med(b.map((x) => x.ratio_constrained_over_free)));
fs.writeFileSync(out, JSON.stringify(res, null, 1) + "\n");
console.log(`json_schema tok/s new/base ${res.json_schema_new_over_base} (medians of ${b.length}), free ${res.free_new_over_base}; constrained/free new ${res.new_constrained_over_free} base ${res.base_constrained_over_free} → ${out}`);
JS
