#!/usr/bin/env node
// Structured-output benchmark of frostd's OpenAI-compatible HTTP API (not run in CI): `make bench-structured`.
//
//  1. Validity: >= 200 random JSON Schemas (seeded PRNG: object / array / enum / const / anyOf / $ref / string
//     bounds and patterns / integer ranges / number / boolean / null, nesting <= 3), >= 20 regexes and >= 10
//     GBNF grammars, each sent with a random prompt to POST /v1/completions (guided_json / guided_regex /
//     guided_grammar). Every output that finished with "stop" is checked: JSON.parse + ajv for schemas, a full
//     match of the same regex in JS for regexes, and for grammars a JS checker of the same language (a regex,
//     or a small parser for the non-regular ones). Outputs cut by max_tokens ("length") are counted apart.
//  2. "compile + first mask": request latency with max_tokens 1, constrained (a fresh schema each time, so no
//     cache can answer) minus unconstrained, interleaved pairs → p50 / p99 of the difference.
//  3. Throughput: C concurrent requests x max_tokens T, unconstrained vs guided_json with a schema whose
//     outputs are long (an array of 20..50 objects) → tokens/s of each and the ratio.
//  4. HTTP vs gRPC: streaming over HTTP (this script's SSE client) vs frost-loadgen (gRPC) at 1 and 32
//     streams, same prompt, max_tokens and ignore_eos → tokens/s, TTFT and end-to-end latency. Left out (and
//     said so in the results) when no frost-loadgen binary is found.
//
// Usage: node bench/structured_output_bench.mjs [flags]
//   --frostd PATH         frostd binary (default build/server/frostd); it is started on free ports
//   --url URL             use a running frostd's HTTP API instead (http://127.0.0.1:PORT); --grpc HOST:PORT
//                         for part 4
//   --loadgen PATH        frost-loadgen binary (default build/bench/frost-loadgen; "" = leave part 4 out)
//   --model M             builtin:15m (default) or a checkpoint directory
//   --threads N           model.threads (default 2)
//   --schemas N --regexes N --grammars N   (defaults 200, 24, 12; at least 200 / 20 / 10 unless --quick)
//   --max-tokens N        per validity request (default 192)   --concurrency N (validity, default 8)
//   --latency-pairs N     (default 40)   --tp-streams N (default 32)   --tp-tokens N (default 128)
//   --tp-rounds N         (default 2)    --overhead-tokens N (default 64)
//   --seed N              PRNG seed (default 1)
//   --out PATH            (default bench/results/structured_output.json)
//   --quick               a small run (40 schemas, 20 regexes, 10 grammars, fewer samples) for a smoke test
//   --parts LIST          which parts to run (default validity,compile,throughput,grpc): e.g. --parts throughput
//                         for the constrained-vs-free figure alone (A/B runs of two builds)
// Needs the npm packages of scripts/install_openai_client.sh (ajv), which it runs (instant once cached).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = path.resolve(HERE, "..");

// ---- flags
const argv = process.argv.slice(2);
const opt = {
  frostd: path.join(SRC, "build/server/frostd"), url: "", grpc: "", loadgen: path.join(SRC, "build/bench/frost-loadgen"),
  model: "builtin:15m", threads: 2, schemas: 200, regexes: 24, grammars: 12, "max-tokens": 192, concurrency: 8,
  "latency-pairs": 40, "tp-streams": 32, "tp-tokens": 128, "tp-rounds": 2, "overhead-tokens": 64, seed: 1,
  out: path.join(SRC, "bench/results/structured_output.json"), quick: false, parts: "validity,compile,throughput,grpc",
};
for (let i = 0; i < argv.length; ++i) {
  const a = argv[i];
  if (a === "--quick") { opt.quick = true; continue; }
  if (a === "--help" || a === "-h") {
    console.log(fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").filter((l) => l.startsWith("//")).map((l) => l.slice(3)).join("\n"));
    process.exit(0);
  }
  const k = a.replace(/^--/, "");
  if (!a.startsWith("--") || !(k in opt) || i + 1 >= argv.length) { console.error(`structured_output_bench: unknown or incomplete flag ${a} (--help)`); process.exit(2); }
  opt[k] = typeof opt[k] === "number" ? Number(argv[++i]) : argv[++i];
}
const explicit = (k) => argv.includes(`--${k}`);
if (opt.quick) {
  for (const [k, v] of [["schemas", 40], ["regexes", 20], ["grammars", 10], ["latency-pairs", 16], ["tp-rounds", 1], ["max-tokens", 128]]) {
    if (!explicit(k)) opt[k] = v;
  }
}

const log = (...a) => console.log(...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- packages
function loadAjv() {
  let nm = process.env.FROST_OPENAI_NODE_MODULES;
  if (!nm) {
    const r = spawnSync("bash", [path.join(SRC, "scripts/install_openai_client.sh")], { encoding: "utf8" });
    const m = /^node_modules: (.*)$/m.exec(r.stdout || "");
    if (r.status !== 0 || !m) { console.error(`scripts/install_openai_client.sh failed: ${r.stderr}`); process.exit(1); }
    nm = m[1].trim();
  }
  const req = createRequire(path.join(path.dirname(nm), "package.json"));
  const m = req("ajv");
  return m.default || m;
}
const Ajv = loadAjv();
const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });

// ---- PRNG (mulberry32)
function prng(seed) {
  let s = seed >>> 0;
  const f = () => { s = (s + 0x6d2b79f5) >>> 0; let t = s; t = Math.imul(t ^ (t >>> 15), t | 1);
                    t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
  f.int = (lo, hi) => lo + Math.floor(f() * (hi - lo + 1));  // inclusive
  f.pick = (a) => a[Math.floor(f() * a.length)];
  f.chance = (p) => f() < p;
  return f;
}

// ---- schemas: what core/constrain/json_schema.h enforces exactly (integer ranges <= 1000 values or sign-only
// bounds, number minimum 0, anyOf not oneOf, additionalProperties false), so ajv judges the same language.
const NAMES = ["id", "name", "title", "age", "score", "tags", "items", "kind", "ok", "note", "count", "value", "city",
               "color", "size", "level", "user", "meta", "flag", "code"];
const WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "a", "b", "x", "yes", "no"];
const PATTERNS = ["[a-z]{2,6}", "[A-Z][a-z]{1,5}", "[0-9]{3}-[0-9]{2}", "(ab|cd)+x?", "[a-f0-9]{4}"];

function genSchema(r) {
  const defs = {};
  let nDefs = 0;
  const kinds = { leaf: ["string", "string", "integer", "number", "boolean", "null", "enum", "const"],
                  node: ["object", "object", "array", "array", "anyOf", "ref"] };
  function gen(depth) {
    const kind = depth < 3 && r.chance(0.45) ? r.pick(kinds.node) : r.pick(kinds.leaf);
    switch (kind) {
      case "string": {
        if (r.chance(0.15)) return { type: "string", pattern: r.pick(PATTERNS) };
        if (r.chance(0.1)) return { type: "string" };
        const max = r.int(1, 16);
        const s = { type: "string", maxLength: max };
        if (r.chance(0.4)) s.minLength = r.int(0, Math.min(3, max));
        return s;
      }
      case "integer": {
        const c = r.int(0, 2);
        if (c === 0) return { type: "integer" };
        if (c === 1) return { type: "integer", minimum: r.pick([0, 1]) };
        const lo = r.int(-500, 500);
        return { type: "integer", minimum: lo, maximum: lo + r.int(0, 999) };
      }
      case "number": return r.chance(0.5) ? { type: "number" } : { type: "number", minimum: 0 };
      case "boolean": return { type: "boolean" };
      case "null": return { type: "null" };
      case "enum": {
        const vals = new Set();
        const n = r.int(2, 5);
        while (vals.size < n) vals.add(JSON.stringify(r.chance(0.6) ? r.pick(WORDS) : r.chance(0.7) ? r.int(-9, 99) : r.pick([true, false, null])));
        return { enum: [...vals].map((v) => JSON.parse(v)) };
      }
      case "const": return { const: r.pick([r.pick(WORDS), r.int(0, 100), true, null, { k: r.pick(WORDS) }, [1, 2]]) };
      case "object": {
        const n = r.int(1, 4);
        const props = {};
        const names = [...NAMES].sort(() => r() - 0.5).slice(0, n);
        for (const nm of names) props[nm] = gen(depth + 1);
        const s = { type: "object", properties: props, additionalProperties: false };
        const req = names.filter(() => r.chance(0.6));
        if (req.length) s.required = req;
        return s;
      }
      case "array": {
        const max = r.int(1, 5);
        const s = { type: "array", items: gen(depth + 1), maxItems: max };
        if (r.chance(0.5)) s.minItems = r.int(0, Math.min(2, max));
        return s;
      }
      case "anyOf": return { anyOf: Array.from({ length: r.int(2, 3) }, () => gen(depth + 1)) };
      case "ref": {
        const name = `d${nDefs++}`;
        defs[name] = gen(depth + 1);
        return { $ref: `#/$defs/${name}` };
      }
    }
  }
  let root;
  if (r.chance(0.7)) {  // most structured-output schemas are objects
    const n = r.int(1, 4);
    const props = {};
    for (const nm of [...NAMES].sort(() => r() - 0.5).slice(0, n)) props[nm] = gen(1);
    root = { type: "object", properties: props, required: Object.keys(props).filter(() => r.chance(0.7)),
             additionalProperties: false };
    if (!root.required.length) delete root.required;
  } else {
    root = gen(0);
  }
  if (nDefs) root.$defs = defs;
  return root;
}

// ---- regexes (the subset of core/constrain/regex.h, written so that JS's `u` regexes mean the same)
const REGEXES = [
  "[0-9]{3}-[a-z]{2,4}", "(yes|no)", "[A-Z][a-z]{2,8}", "[0-9]{4}-[0-9]{2}-[0-9]{2}", "\\d{1,3}(\\.\\d{1,3}){3}",
  "[a-z]{1,8}@[a-z]{1,8}\\.(com|org|net)", "#[0-9a-fA-F]{6}", "(\\+|-)?[0-9]{1,5}", "[a-z]+( [a-z]+){0,3}",
  "(true|false)", "[A-Z]{2}[0-9]{2} [A-Z]{3}", "\\w{3,10}", "(ab)*c", "a{2,3}b{0,2}c?", "[^,\\n]{1,10},[^,\\n]{1,10}",
  "(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?", "(red|green|blue)-(small|large)", "\\(\\d{3}\\) \\d{3}-\\d{4}",
  "v[0-9]\\.[0-9]{1,2}\\.[0-9]{1,2}", "[a-z]{2,5}(_[a-z]{2,5}){1,3}", "(?:x|y|z){3,6}", "\\[[0-9]{1,2}(, [0-9]{1,2}){0,4}\\]",
  "[A-Za-z]{1,4}\\s[0-9]{1,4}", "(?<word>[a-z]{3})-(?<num>[0-9]{2})", "[0-9a-f]{8}-[0-9a-f]{4}",
  "(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{1,2} (Jan|Feb|Mar)",
];

// ---- GBNF grammars, each with a JS check of the same language
const fullRe = (re) => (s) => new RegExp(`^(?:${re})$`, "u").test(s);
function balancedList(s) {  // list ::= "[" ( item ( "," item ){0,3} )? "]"; item ::= [0-9] | list
  let i = 0;
  const list = (d) => {
    if (d > 64 || s[i] !== "[") return false;
    ++i;
    if (s[i] === "]") { ++i; return true; }
    for (let items = 1; ; ++items) {
      if (s[i] === "[") { if (!list(d + 1)) return false; } else if (/[0-9]/.test(s[i] || "")) ++i; else return false;
      if (s[i] === "," && items < 4) { ++i; continue; }
      if (s[i] === "]") { ++i; return true; }
      return false;
    }
  };
  return list(0) && i === s.length;
}
function arith(s) {  // expr ::= term (("+"|"-") term){0,3}; term ::= num | "(" expr ")"; num ::= [0-9]{1,3}
  let i = 0;
  const num = () => { const m = /^[0-9]{1,3}/.exec(s.slice(i)); if (!m) return false; i += m[0].length; return true; };
  const term = (d) => {
    if (s[i] === "(") { ++i; if (d > 64 || !expr(d + 1) || s[i] !== ")") return false; ++i; return true; }
    return num();
  };
  const expr = (d) => {
    if (!term(d)) return false;
    for (let k = 0; k < 3 && (s[i] === "+" || s[i] === "-"); ++k) { ++i; if (!term(d)) return false; }
    return true;
  };
  return expr(0) && i === s.length;
}
const GRAMMARS = [
  { gbnf: 'root ::= "yes" | "no" | "maybe"', check: fullRe("yes|no|maybe") },
  { gbnf: 'root ::= [0-9]{1,4} "-" [0-9]{1,4}', check: fullRe("[0-9]{1,4}-[0-9]{1,4}") },
  { gbnf: 'root ::= "(" num ( "," num ){0,3} ")"\nnum ::= [1-9] [0-9]{0,2}', check: fullRe("\\([1-9][0-9]{0,2}(,[1-9][0-9]{0,2}){0,3}\\)") },
  { gbnf: 'root ::= word ( " " word ){0,4} "."\nword ::= [a-z]{1,8}', check: fullRe("[a-z]{1,8}( [a-z]{1,8}){0,4}\\.") },
  { gbnf: 'root ::= pair ( ";" pair ){0,3}\npair ::= [a-z]{1,6} "=" [0-9]{1,3}', check: fullRe("[a-z]{1,6}=[0-9]{1,3}(;[a-z]{1,6}=[0-9]{1,3}){0,3}") },
  { gbnf: 'root ::= "#" hex hex hex hex hex hex\nhex ::= [0-9a-fA-F]', check: fullRe("#[0-9a-fA-F]{6}") },
  { gbnf: 'root ::= year "-" month "-" day\nyear ::= "19" [0-9] [0-9] | "20" [0-2] [0-9]\nmonth ::= "0" [1-9] | "1" [0-2]\nday ::= "0" [1-9] | [12] [0-9] | "3" [01]',
    check: fullRe("(19[0-9]{2}|20[0-2][0-9])-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])") },
  { gbnf: 'root ::= oct "." oct "." oct "." oct\noct ::= [0-9] | [1-9] [0-9] | "1" [0-9] [0-9] | "2" [0-4] [0-9] | "25" [0-5]',
    check: fullRe("((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])") },
  { gbnf: 'root ::= "{\\"ok\\": " ( "true" | "false" ) ", \\"n\\": " [0-9]{1,3} "}"', check: fullRe('\\{"ok": (true|false), "n": [0-9]{1,3}\\}') },
  { gbnf: 'root ::= user "@" host "." tld\nuser ::= [a-z] [a-z0-9]{0,7}\nhost ::= [a-z]{1,8}\ntld ::= "com" | "org" | "net"', check: fullRe("[a-z][a-z0-9]{0,7}@[a-z]{1,8}\\.(com|org|net)") },
  { gbnf: 'root ::= list\nlist ::= "[" ( item ( "," item ){0,3} )? "]"\nitem ::= [0-9] | list', check: balancedList, nonRegular: true },
  { gbnf: 'root ::= expr\nexpr ::= term ( ( "+" | "-" ) term ){0,3}\nterm ::= num | "(" expr ")"\nnum ::= [0-9]{1,3}', check: arith, nonRegular: true },
  { gbnf: '# a comment\nroot ::= greeting " " name "!"\ngreeting ::= "Hello" | "Hi" | "Hey"\nname ::= [A-Z] [a-z]{1,7}', check: fullRe("(Hello|Hi|Hey) [A-Z][a-z]{1,7}!") },
  { gbnf: 'root ::= ( "a" | "b" ){2,5} "c"{0,2}', check: fullRe("[ab]{2,5}c{0,2}") },
];

const PROMPTS = ["Answer in the requested format:", "Output:", "Here is the result:", "JSON:", "Once upon a time",
                 "The data is", "Reply:", "Fill in the form:", "Q: what is it? A:", "Result ="];

// ---- stats
function pct(a, p) {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i];
}
const r3 = (x) => (x === null || x === undefined ? null : Math.round(x * 1000) / 1000);
const summary = (a) => ({ n: a.length, p50: r3(pct(a, 50)), p90: r3(pct(a, 90)), p99: r3(pct(a, 99)),
                          mean: a.length ? r3(a.reduce((x, y) => x + y, 0) / a.length) : null });

// ---- frostd
let frostd = null, tmp = null;
function safeRead(p) { try { return fs.readFileSync(p, "utf8"); } catch { return ""; } }
async function startFrostd() {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "frost-sobench-"));
  const cfg = path.join(tmp, "frostd.yaml"), ports = path.join(tmp, "ports"), logf = path.join(tmp, "frostd.log");
  fs.writeFileSync(cfg, [
    "server:", '  listen: "127.0.0.1:0"', '  metrics_listen: "127.0.0.1:0"', "  drain_timeout_s: 5", "  http:",
    '    listen: "127.0.0.1:0"', "    max_connections: 128",
    "model:", `  path: ${JSON.stringify(opt.model)}`, `  threads: ${opt.threads}`,
    "engine:", `  max_running: ${Math.max(32, opt["tp-streams"])}`, "  max_waiting: 256",
    "log:", "  level: warn", ""].join("\n"));
  const env = { ...process.env };
  if (/\bavx512f\b/.test(safeRead("/proc/cpuinfo"))) env.OPENBLAS_CORETYPE = "SkylakeX";
  const out = fs.openSync(logf, "a");
  const proc = spawn(opt.frostd, ["--config", cfg, "--port-file", ports, "--state-dir", path.join(tmp, "state")],
                     { stdio: ["ignore", out, out], env });
  let exit = null;
  const exited = new Promise((res) => proc.on("exit", (code, signal) => { exit = { code, signal }; res(exit); }));
  const deadline = Date.now() + 180_000;
  let p = {};
  while (!(p.http && p.grpc)) {
    if (exit || Date.now() > deadline) throw new Error(`frostd did not start (${JSON.stringify(exit)}):\n${safeRead(logf).slice(-2000)}`);
    p = Object.fromEntries(safeRead(ports).split("\n").filter((l) => l.includes("=")).map((l) => l.split("=")).map(([k, v]) => [k, Number(v)]));
    await sleep(50);
  }
  const url = `http://127.0.0.1:${p.http}`;
  for (;;) {
    if (exit || Date.now() > deadline) throw new Error(`frostd not healthy (${JSON.stringify(exit)}):\n${safeRead(logf).slice(-2000)}`);
    try { if ((await fetch(`${url}/health`)).status === 200) break; } catch { /* loading */ }
    await sleep(100);
  }
  frostd = { proc, exited, url, grpc: `127.0.0.1:${p.grpc}`, log: logf, alive: () => !exit };
  return frostd;
}

// ---- requests
let URL_, MODEL_;
async function completion(body) {
  const t0 = performance.now();
  const r = await fetch(`${URL_}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                  body: JSON.stringify({ model: MODEL_, ...body }) });
  const text = await r.text();
  const ms = performance.now() - t0;
  let j = null;
  try { j = JSON.parse(text); } catch { /* reported below */ }
  return { status: r.status, json: j, raw: text, ms };
}
async function pool(items, n, fn) {
  let next = 0;
  const out = new Array(items.length);
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, async () => {
    while (next < items.length) { const i = next++; out[i] = await fn(items[i], i); }
  }));
  return out;
}

// Streaming over HTTP: TTFT (first chunk with text), end-to-end, tokens (usage).
async function streamOnce(body) {
  const t0 = performance.now();
  const r = await fetch(`${URL_}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: MODEL_, ...body, stream: true, stream_options: { include_usage: true } }) });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = "", ttft = null, tokens = 0, done = false;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ")) continue;
      const d = ev.slice(6);
      if (d === "[DONE]") { done = true; continue; }
      const j = JSON.parse(d);
      if (j.error) throw new Error(JSON.stringify(j.error));
      if (ttft === null && j.choices.length && j.choices[0].text) ttft = performance.now() - t0;
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  if (!done) throw new Error("stream without [DONE]");
  return { ttft_s: ttft / 1000, e2e_s: (performance.now() - t0) / 1000, tokens };
}

// ---- the parts
async function validity() {
  const r = prng(opt.seed);
  const cases = [];
  for (let i = 0; i < opt.schemas; ++i) cases.push({ kind: "json_schema", schema: genSchema(r) });
  for (let i = 0; i < opt.regexes; ++i) cases.push({ kind: "regex", pattern: REGEXES[i % REGEXES.length] });
  for (let i = 0; i < opt.grammars; ++i) cases.push({ kind: "grammar", ...GRAMMARS[i % GRAMMARS.length] });
  const depthOf = (s) => (s && typeof s === "object" ? 1 + Math.max(0, ...Object.values(s).map(depthOf)) : 0);
  const stats = {};
  const bucket = (k) => (stats[k] ||= { total: 0, stop: 0, length: 0, rejected: 0, parsed: 0, valid: 0, invalid: 0,
                                          invalid_examples: [], rejected_examples: [], completion_tokens: 0 });
  const t0 = performance.now();
  let done = 0;
  await pool(cases, opt.concurrency, async (c, i) => {
    const body = { prompt: `${r.pick(PROMPTS)} ${r.pick(WORDS)}`, max_tokens: opt["max-tokens"], temperature: 0.8, seed: opt.seed * 1000 + i };
    if (c.kind === "json_schema") body.guided_json = c.schema;
    if (c.kind === "regex") body.guided_regex = c.pattern;
    if (c.kind === "grammar") body.guided_grammar = c.gbnf;
    const res = await completion(body);
    for (const b of [bucket(c.kind), bucket("all")]) {
      ++b.total;
      if (res.status !== 200) {
        ++b.rejected;
        if (b.rejected_examples.length < 5) b.rejected_examples.push({ case: c.schema || c.pattern || c.gbnf, status: res.status, error: res.json?.error?.message || res.raw.slice(0, 300) });
        continue;
      }
      const ch = res.json.choices[0];
      b.completion_tokens += res.json.usage.completion_tokens;
      if (ch.finish_reason !== "stop") { ++b.length; continue; }
      ++b.stop;
      let ok = false, why = "";
      if (c.kind === "json_schema") {
        let v;
        try { v = JSON.parse(ch.text); ++b.parsed; } catch (e) { why = `JSON.parse: ${e.message}`; }
        if (!why) {
          const validate = (c.validate ||= ajv.compile(c.schema));
          ok = validate(v);
          if (!ok) why = ajv.errorsText(validate.errors);
        }
      } else if (c.kind === "regex") {
        ok = new RegExp(`^(?:${c.pattern})$`, "u").test(ch.text);
        if (!ok) why = "no full match";
      } else {
        ok = c.check(ch.text);
        if (!ok) why = "not in the grammar's language (JS check)";
      }
      if (ok) ++b.valid;
      else {
        ++b.invalid;
        if (b.invalid_examples.length < 10) b.invalid_examples.push({ case: c.schema || c.pattern || c.gbnf, text: ch.text, why });
      }
    }
    if (++done % 50 === 0) log(`  validity: ${done}/${cases.length} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  });
  for (const b of Object.values(stats)) b.validity_pct = b.stop ? Math.round((10000 * b.valid) / b.stop) / 100 : null;
  const schemaDepths = cases.filter((c) => c.kind === "json_schema").map((c) => depthOf(c.schema));
  return { cases: cases.length, wall_s: r3((performance.now() - t0) / 1000), max_tokens: opt["max-tokens"],
           temperature: 0.8, concurrency: opt.concurrency,
           schema_keywords: Object.fromEntries(["anyOf", "$ref", "enum", "const", "pattern", "maxLength", "minimum", "items", "null", "boolean", "number"].map(
             (k) => [k, cases.filter((c) => c.kind === "json_schema" && JSON.stringify(c.schema).includes(`"${k}"`)).length])),
           schema_document_json_depth_max: Math.max(...schemaDepths), by_kind: stats };
}

async function compileLatency() {
  const r = prng(opt.seed + 77);
  const diffs = [], free = [], constrained = [], rejected = [];
  const objectDiffs = [];
  for (let i = 0; i < opt["latency-pairs"]; ++i) {
    const schema = genSchema(r);
    schema.description = `nonce-${opt.seed}-${i}-${Math.floor(r() * 1e9)}`;  // a fresh text each time: no cache hit
    const prompt = `${r.pick(PROMPTS)} ${r.pick(WORDS)}`;
    const a = await completion({ prompt, max_tokens: 1, temperature: 0 });
    const b = await completion({ prompt, max_tokens: 1, temperature: 0, guided_json: schema });
    if (a.status !== 200 || b.status !== 200) { rejected.push({ status: [a.status, b.status], error: b.raw.slice(0, 200) }); continue; }
    free.push(a.ms); constrained.push(b.ms); diffs.push(b.ms - a.ms);
    if (i < 8) {  // json_object (a fixed grammar) for comparison
      const c = await completion({ prompt, max_tokens: 1, temperature: 0, response_format: { type: "json_object" } });
      if (c.status === 200) objectDiffs.push(c.ms - a.ms);
    }
  }
  return { pairs: diffs.length, unit: "ms", method: "request latency with max_tokens 1: guided_json (fresh schema) minus unconstrained, interleaved, sequential",
           compile_plus_first_mask_ms: summary(diffs), unconstrained_ms: summary(free), constrained_ms: summary(constrained),
           json_object_minus_unconstrained_ms: summary(objectDiffs), rejected };
}

const LONG_SCHEMA = { type: "array", minItems: 20, maxItems: 50,
  items: { type: "object", additionalProperties: false, required: ["id", "name", "ok"],
           properties: { id: { type: "integer", minimum: 0, maximum: 999 }, name: { type: "string", maxLength: 8 }, ok: { type: "boolean" } } } };

async function throughput() {
  const n = opt["tp-streams"], T = opt["tp-tokens"];
  const validate = ajv.compile(LONG_SCHEMA);
  const rounds = [];
  for (let round = 0; round < opt["tp-rounds"]; ++round) {
    for (const mode of ["unconstrained", "json_schema"]) {
      const t0 = performance.now();
      const res = await Promise.all(Array.from({ length: n }, (_, i) => completion({
        prompt: `${PROMPTS[i % PROMPTS.length]} ${WORDS[i % WORDS.length]}`, max_tokens: T, temperature: 0.8, seed: 100 * round + i,
        ...(mode === "json_schema" ? { guided_json: LONG_SCHEMA } : {}) })));
      const wall = (performance.now() - t0) / 1000;
      const bad = res.filter((x) => x.status !== 200);
      const tokens = res.filter((x) => x.status === 200).reduce((s, x) => s + x.json.usage.completion_tokens, 0);
      const fin = {};
      for (const x of res) if (x.status === 200) fin[x.json.choices[0].finish_reason] = (fin[x.json.choices[0].finish_reason] || 0) + 1;
      let validStops = 0, invalidStops = 0;
      if (mode === "json_schema") for (const x of res) {
        if (x.status !== 200 || x.json.choices[0].finish_reason !== "stop") continue;
        try { if (validate(JSON.parse(x.json.choices[0].text))) ++validStops; else ++invalidStops; } catch { ++invalidStops; }
      }
      rounds.push({ round, mode, wall_s: r3(wall), completion_tokens: tokens, tokens_per_s: r3(tokens / wall), finish: fin,
                    failed: bad.length, ...(bad.length ? { error: bad[0].raw.slice(0, 200) } : {}),
                    ...(mode === "json_schema" ? { stop_valid: validStops, stop_invalid: invalidStops } : {}) });
      log(`  throughput round ${round} ${mode}: ${tokens} tokens in ${wall.toFixed(2)} s = ${(tokens / wall).toFixed(1)} tok/s ${JSON.stringify(fin)}`);
    }
  }
  const best = (m) => Math.max(...rounds.filter((x) => x.mode === m).map((x) => x.tokens_per_s));
  const mean = (m) => { const a = rounds.filter((x) => x.mode === m).map((x) => x.tokens_per_s); return r3(a.reduce((s, x) => s + x, 0) / a.length); };
  return { streams: n, max_tokens: T, ignore_eos: false, schema: LONG_SCHEMA, rounds,
           unconstrained_tokens_per_s: mean("unconstrained"), json_schema_tokens_per_s: mean("json_schema"),
           ratio_constrained_over_free: r3(mean("json_schema") / mean("unconstrained")),
           best_ratio: r3(best("json_schema") / best("unconstrained")) };
}

async function httpVsGrpc(grpcAddr) {
  const lg = opt.loadgen;
  if (!lg || !fs.existsSync(lg)) return { skipped: `no frost-loadgen at ${JSON.stringify(lg)}: the gRPC side has no load generator here` };
  if (!grpcAddr) return { skipped: "no gRPC address (--grpc) for a frostd given by --url" };
  const T = opt["overhead-tokens"], prompt = "Once upon a time";
  const out = [];
  for (const [streams, requests] of [[1, opt.quick ? 4 : 8], [32, opt.quick ? 32 : 64]]) {
    // gRPC: frost-loadgen (ignore_eos, exactly T tokens a request).
    const g = spawnSync(lg, ["--addr", grpcAddr, "--concurrency", String(streams), "--requests", String(requests), "--warmup", "1",
                             "--max-tokens", String(T), "--prompt", prompt, "--temperature", "0.8", "--seed", "1"], { encoding: "utf8", maxBuffer: 64 << 20 });
    let grpc = null;
    if (g.status === 0) {
      const j = JSON.parse(g.stdout);
      grpc = { requests_ok: j.requests_ok, output_tokens_per_s: r3(j.output_tokens_per_s), ttft_s: j.ttft_s && { p50: r3(j.ttft_s.p50), p99: r3(j.ttft_s.p99) },
               e2e_s: j.e2e_s && { p50: r3(j.e2e_s.p50), p99: r3(j.e2e_s.p99) }, wall_s: r3(j.wall_s) };
    } else {
      grpc = { error: `frost-loadgen exited ${g.status}: ${(g.stderr || "").slice(0, 300)}` };
    }
    // HTTP: the same shape of load from this script (N lanes of back-to-back streaming requests).
    // Cold burst: N requests on N new connections at once (TTFT includes connection setup; a listen backlog
    // smaller than the burst shows as ~1 s SYN retransmits). It also opens the keep-alive connections that
    // the measured run below reuses (steady state, comparable with frost-loadgen's long-lived channels).
    const cold = await Promise.all(Array.from({ length: streams }, (_, i) =>
      streamOnce({ prompt, max_tokens: 1, ignore_eos: true, temperature: 0.8, seed: 1000 + i })));
    let next = 0;
    const rs = [];
    const t0 = performance.now();
    await Promise.all(Array.from({ length: streams }, async () => {
      while (next < requests) { const i = next++; rs.push(await streamOnce({ prompt, max_tokens: T, ignore_eos: true, temperature: 0.8, seed: 1 + i })); }
    }));
    const wall = (performance.now() - t0) / 1000;
    const tokens = rs.reduce((s, x) => s + x.tokens, 0);
    const http = { requests_ok: rs.length, output_tokens_per_s: r3(tokens / wall), ttft_s: { p50: r3(pct(rs.map((x) => x.ttft_s), 50)), p99: r3(pct(rs.map((x) => x.ttft_s), 99)) },
                   e2e_s: { p50: r3(pct(rs.map((x) => x.e2e_s), 50)), p99: r3(pct(rs.map((x) => x.e2e_s), 99)) }, wall_s: r3(wall),
                   wrong_token_counts: rs.filter((x) => x.tokens !== T).length,
                   cold_burst_new_connections_ttft_s: { p50: r3(pct(cold.map((x) => x.ttft_s), 50)), max: r3(Math.max(...cold.map((x) => x.ttft_s))) } };
    const row = { streams, requests, max_tokens: T, grpc, http };
    if (grpc.output_tokens_per_s) row.http_over_grpc_tokens_per_s = r3(http.output_tokens_per_s / grpc.output_tokens_per_s);
    if (grpc.ttft_s) row.ttft_p50_http_minus_grpc_ms = r3((http.ttft_s.p50 - grpc.ttft_s.p50) * 1000);
    out.push(row);
    log(`  ${streams} stream(s): gRPC ${grpc.output_tokens_per_s} tok/s ttft p50 ${grpc.ttft_s?.p50} s | HTTP ${http.output_tokens_per_s} tok/s ttft p50 ${http.ttft_s.p50} s (cold burst of ${streams} new connections: ttft p50 ${http.cold_burst_new_connections_ttft_s.p50} s, max ${http.cold_burst_new_connections_ttft_s.max} s)`);
  }
  return { note: "gRPC: frost-loadgen (C++); HTTP: this script's fetch + SSE client in one node process (its own parsing cost is included)", runs: out };
}

// ---- main
async function main() {
  const t0 = performance.now();
  let grpcAddr = opt.grpc;
  if (opt.url) {
    URL_ = opt.url.replace(/\/$/, "");
  } else {
    if (!fs.existsSync(opt.frostd)) { console.error(`structured_output_bench: no frostd at ${opt.frostd} (--frostd)`); process.exit(1); }
    const f = await startFrostd();
    URL_ = f.url;
    grpcAddr = f.grpc;
    log(`frostd ${opt.frostd} (${opt.model}, threads ${opt.threads}): http ${URL_}, grpc ${grpcAddr}`);
  }
  MODEL_ = (await (await fetch(`${URL_}/v1/models`)).json()).data[0].id;
  const result = { bench: "structured_output", date: new Date().toISOString(), model: MODEL_,
                   machine: { cpu: (/model name\s*:\s*(.*)/.exec(safeRead("/proc/cpuinfo")) || [])[1] || os.cpus()[0]?.model, cores: os.cpus().length },
                   settings: { ...opt, frostd: opt.url ? null : opt.frostd } };
  const parts = new Set(opt.parts.split(","));
  if (parts.has("validity")) {
    log("== validity");
    result.validity = await validity();
    const all = result.validity.by_kind.all;
    log(`  ${all.total} requests: ${all.stop} stop, ${all.length} length, ${all.rejected} rejected; valid ${all.valid}/${all.stop} = ${all.validity_pct}%`);
    for (const k of ["json_schema", "regex", "grammar"]) {
      const b = result.validity.by_kind[k];
      if (b) log(`    ${k}: ${b.total} total, ${b.stop} stop, ${b.length} length, ${b.rejected} rejected, ${b.valid} valid, ${b.invalid} invalid (${b.validity_pct}%)`);
    }
  }
  if (parts.has("compile")) {
    log("== compile + first mask");
    result.compile_latency = await compileLatency();
    const cl = result.compile_latency;
    log(`  ${cl.pairs} pairs: constrained - unconstrained p50 ${cl.compile_plus_first_mask_ms.p50} ms, p99 ${cl.compile_plus_first_mask_ms.p99} ms (unconstrained p50 ${cl.unconstrained_ms.p50} ms)`);
  }
  if (parts.has("throughput")) {
    log("== throughput");
    result.throughput = await throughput();
    log(`  unconstrained ${result.throughput.unconstrained_tokens_per_s} tok/s, json_schema ${result.throughput.json_schema_tokens_per_s} tok/s, ratio ${result.throughput.ratio_constrained_over_free}`);
  }
  if (parts.has("grpc")) {
    log("== HTTP vs gRPC");
    result.http_vs_grpc = await httpVsGrpc(grpcAddr);
    if (result.http_vs_grpc.skipped) log(`  left out: ${result.http_vs_grpc.skipped}`);
  }
  result.wall_s = r3((performance.now() - t0) / 1000);
  fs.mkdirSync(path.dirname(opt.out), { recursive: true });
  fs.writeFileSync(opt.out, JSON.stringify(result, (k, v) => (k === "validate" ? undefined : v), 1) + "\n");
  log(`wrote ${opt.out} (${result.wall_s} s)`);
  if (frostd) {
    frostd.proc.kill("SIGTERM");
    const e = await frostd.exited;
    if (e.code !== 0) log(`frostd exited ${JSON.stringify(e)} after SIGTERM`);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`structured_output_bench: ${e.stack || e}`);
  if (frostd) { console.error(safeRead(frostd.log).slice(-2000)); frostd.proc.kill("SIGKILL"); }
  process.exit(1);
});
