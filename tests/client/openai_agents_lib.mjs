// Shared by the agents client test's groups (tests/client/openai_agents_test.mjs runs them): the npm packages
// (openai + ajv as CommonJS, LangChain.js / the AI SDK / zod with import()), the tiny real-tokenizer checkpoints,
// the tools and their JSON Schemas, tool-call validation, streamed tool-call assembly and raw JSON POSTs.
// frostd processes, check() and the assertions come from openai_client_lib.mjs.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { assert, eq, jsonPrefix, log, SKIP, SOURCE_DIR } from "./openai_client_lib.mjs";

// ---- the npm packages

export async function loadAgentPackages() {
  let nm = process.env.FROST_OPENAI_NODE_MODULES;
  if (!nm) {
    // Its own cache directory (same script, same pins): a checkout whose package.json pins only openai + ajv
    // (an older branch) reinstalls the shared one with npm ci, removing these packages under a running test.
    const dest = process.env.FROST_OPENAI_AGENTS_CLIENT ||
      path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "frost", "openai-agents-client");
    const r = spawnSync("bash", [path.join(SOURCE_DIR, "scripts", "install_openai_client.sh"), dest], { encoding: "utf8" });
    const m = r.status === 0 && /^node_modules: (.*)$/m.exec(r.stdout);
    if (!m) {
      log(`SKIP: scripts/install_openai_client.sh failed (rc ${r.status}): ${(r.stderr || r.stdout || "").trim()}`);
      process.exit(SKIP);
    }
    nm = m[1].trim();
  }
  const req = createRequire(path.join(path.dirname(nm), "package.json"));
  const imp = (p) => import(pathToFileURL(req.resolve(p)).href);
  const version = (p) => JSON.parse(fs.readFileSync(path.join(nm, p, "package.json"), "utf8")).version;
  try {
    const openaiMod = req("openai");
    const ajvMod = req("ajv");
    const pk = {
      OpenAI: openaiMod.default || openaiMod.OpenAI || openaiMod,
      Ajv: ajvMod.default || ajvMod,
      lc: await imp("@langchain/openai"),
      lcMessages: await imp("@langchain/core/messages"),
      ai: await imp("ai"),
      aiOpenai: await imp("@ai-sdk/openai"),
      z: (await imp("zod")).z,
    };
    pk.versions = ["openai", "ajv", "@langchain/openai", "@langchain/core", "ai", "@ai-sdk/openai", "zod"]
      .map((n) => `${n} ${version(n)}`).join(", ");
    return pk;
  } catch (e) {
    log(`SKIP: cannot load the npm packages from ${nm}: ${e.message}`);
    process.exit(SKIP);
  }
}

// ---- the checkpoints: tiny random weights, real tokenizers and chat templates (openai_agents_models.py)

export function tokenizerRefs() {
  if (process.env.FROST_TOKENIZER_REFS_NODE_MODULES) return process.env.FROST_TOKENIZER_REFS_NODE_MODULES;
  const base = process.env.FROST_TOKENIZER_REFS || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"),
                                                             "frost", "tokenizer-refs");
  return path.join(base, "node_modules");
}

// → {dirs: {qwen3, llama3_2, mistral_nemo}} or {skip: why}.
export function writeCheckpoints(tmp) {
  const refs = tokenizerRefs();
  const out = path.join(tmp, "models");
  const r = spawnSync("/usr/bin/python3", [path.join(SOURCE_DIR, "tests", "client", "openai_agents_models.py"),
                                           "--out", out, "--refs", refs], { encoding: "utf8" });
  if (r.status === 77 || r.error) {
    return { skip: (r.stdout || String(r.error)).trim().split("\n").pop().replace(/^SKIP: /, "") };
  }
  if (r.status !== 0) throw new Error(`openai_agents_models.py exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return { dirs: Object.fromEntries(["qwen3", "llama3_2", "mistral_nemo"].map((n) => [n, path.join(out, n)])) };
}

// ---- tools: varied, bounded schemas (enum, integer ranges, a nested object, an array with maxItems, strings with
// maxLength; additionalProperties false) so that constrained output cannot run to max_tokens on random weights

export const TOOLS = [
  { type: "function", function: {
    name: "get_weather", description: "Current weather in a city.",
    parameters: { type: "object", additionalProperties: false, required: ["city", "unit"], properties: {
      city: { type: "string", maxLength: 16 },
      unit: { type: "string", enum: ["celsius", "fahrenheit"] } } } } },
  { type: "function", function: {
    name: "book_table", description: "Book a restaurant table.",
    parameters: { type: "object", additionalProperties: false, required: ["party", "time"], properties: {
      party: { type: "integer", minimum: 1, maximum: 12 },
      time: { type: "object", additionalProperties: false, required: ["hour", "minute"], properties: {
        hour: { type: "integer", minimum: 0, maximum: 23 }, minute: { type: "integer", minimum: 0, maximum: 59 } } },
      notes: { type: "string", maxLength: 24 } } } } },
  { type: "function", function: {
    name: "tag_items", description: "Tag items with labels and a priority.",
    parameters: { type: "object", additionalProperties: false, required: ["tags", "priority"], properties: {
      tags: { type: "array", items: { type: "string", enum: ["red", "green", "blue", "urgent"] }, minItems: 1, maxItems: 4 },
      priority: { type: "integer", minimum: 1, maximum: 5 },
      done: { type: "boolean" } } } } },
];
export const TOOL_BY_NAME = Object.fromEntries(TOOLS.map((t) => [t.function.name, t]));

export const TOOL_MESSAGES = [
  { role: "system", content: "You are a helpful assistant. Use the tools when they help." },
  { role: "user", content: "What is the weather in Paris, and book a table for 4 at 19:30." },
];

// ajv validators, one per tool: validators(ajv)[name](args) → true / false (errors in .errors).
export function validators(ajv) {
  return Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
}

// Checks one OpenAI tool call {id, type, function: {name, arguments}}: the name is one of `allowed`, the
// arguments parse and validate against its schema. → {name, args}; throws with the call on any failure.
export function validateCall(call, validate, allowed, what) {
  const show = () => JSON.stringify(call).slice(0, 400);
  assert(call && typeof call.id === "string" && call.id.length > 0, `${what}: no id: ${show()}`);
  eq(call.type, "function", `${what}: type`);
  const name = call.function && call.function.name;
  assert(allowed.includes(name), `${what}: name ${JSON.stringify(name)} not in ${allowed.join("/")}: ${show()}`);
  let args;
  try { args = JSON.parse(call.function.arguments); } catch (e) {
    throw new Error(`${what}: arguments do not parse (${e.message}): ${show()}`);
  }
  assert(validate[name](args), `${what}: arguments do not validate against ${name}'s schema: ` +
         `${JSON.stringify(validate[name].errors)}: ${show()}`);
  return { name, args };
}

// Checks a non-streamed chat choice that must carry tool calls (1 ≤ count ≤ max); → [{name, args, id}].
export function validateChoice(choice, validate, allowed, what, { max = Infinity } = {}) {
  const m = choice.message;
  const show = () => JSON.stringify(choice).slice(0, 500);
  eq(m.role, "assistant", `${what}: role`);
  assert(Array.isArray(m.tool_calls) && m.tool_calls.length >= 1, `${what}: no tool_calls: ${show()}`);
  assert(m.tool_calls.length <= max, `${what}: ${m.tool_calls.length} tool calls, at most ${max} wanted: ${show()}`);
  assert(m.content === null || typeof m.content === "string", `${what}: content ${JSON.stringify(m.content)}`);
  eq(choice.finish_reason, "tool_calls", `${what}: finish_reason`);
  const ids = new Set(m.tool_calls.map((c) => c.id));
  eq(ids.size, m.tool_calls.length, `${what}: distinct tool call ids`);
  return m.tool_calls.map((c) => ({ ...validateCall(c, validate, allowed, what), id: c.id }));
}

// Reads a streamed chat completion (the openai SDK's async iterable) → {choices: {index: {content, calls: [call],
// finish}}, chunks}. Each tool call must arrive whole in one delta (id, type, name and complete JSON arguments).
export async function collectStream(stream, what) {
  const choices = {};
  let chunks = 0;
  for await (const ch of stream) {
    ++chunks;
    for (const c of ch.choices) {
      const st = choices[c.index] ??= { content: "", calls: [], finish: null };
      assert(st.finish === null, `${what}: a delta after choice ${c.index}'s finish_reason`);
      if (c.delta && typeof c.delta.content === "string") st.content += c.delta.content;
      for (const tc of (c.delta && c.delta.tool_calls) || []) {
        const show = JSON.stringify(tc);
        assert(Number.isInteger(tc.index) && tc.index === st.calls.length,
               `${what}: tool call delta index ${tc.index}, expected ${st.calls.length} (a call in pieces?): ${show}`);
        assert(tc.id && tc.type === "function" && tc.function && typeof tc.function.name === "string" &&
               typeof tc.function.arguments === "string", `${what}: tool call delta not whole: ${show}`);
        assert(jsonPrefix(tc.function.arguments) === "complete", `${what}: arguments not one whole JSON value: ${show}`);
        st.calls.push({ id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: tc.function.arguments } });
      }
      if (c.finish_reason) st.finish = c.finish_reason;
    }
  }
  return { choices, chunks };
}

// The (name, canonical arguments) pairs of tool calls, for stream == non-stream comparisons.
export function callKeys(calls) {
  return calls.map((c) => [c.function.name, JSON.stringify(JSON.parse(c.function.arguments))]);
}

// ---- the wire

// POST JSON → {status, json (or null), text}.
export async function postJson(base, p, body) {
  const r = await fetch(`${base}${p}`, { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

// The token ids in a render / tokenize answer: the first array of integers at the top level or one level down
// (prompt_token_ids, tokens, token_ids, ...). → {key, ids} or null.
export function findIds(obj, depth = 0) {
  if (Array.isArray(obj) && obj.length && obj.every(Number.isInteger)) return { key: "", ids: obj };
  if (!obj || typeof obj !== "object" || depth > 2) return null;
  for (const [k, v] of Object.entries(obj)) {
    if (Array.isArray(v) && v.length && v.every(Number.isInteger)) return { key: k, ids: v };
  }
  for (const [k, v] of Object.entries(obj)) {
    const f = findIds(Array.isArray(v) ? v[0] : v, depth + 1);
    if (f) return { key: `${k}.${f.key}`, ids: f.ids };
  }
  return null;
}

// Runs async fn over items with at most `limit` in flight; → results in order.
export async function pool(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

export function l2(v) { return Math.sqrt(v.reduce((s, x) => s + x * x, 0)); }
export function decodeBase64Floats(b64) {
  const buf = Buffer.from(b64, "base64");
  return Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4));
}
