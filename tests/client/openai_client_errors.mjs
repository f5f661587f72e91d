// The OpenAI client test's error group (run by openai_client_test.mjs): each bad request's status and error
// object, n: 2, gRPC (frostctl) equivalence and the fuzz loop over bad bodies.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

import {
  assert, check, checkUsage, curl, eq, errorObject, expectApiError, frostctlPath, log, TMP, USER_TOKEN,
} from "./openai_client_lib.mjs";

export async function errorChecks(ctx) {
  const { OpenAI, model, MODEL, MAX_BODY, main, client, PROMPT, SAMPLE, CHAT } = ctx;
  // 6. errors
  const post = (p, body, token = USER_TOKEN) => curl(`${main.base}${p}`, { token, data: body });
  await check("error: temperature 5 → 400", async () => {
    const e = await expectApiError(OpenAI, client.completions.create({ ...SAMPLE, temperature: 5 }), 400, "temperature 5");
    assert(e instanceof OpenAI.BadRequestError, `${e.constructor.name}`);
    eq(e.param, "temperature", "param");
    return e.message;
  });
  await check("error: unknown field → 400 naming it (curl)", async () => {
    const r = post("/v1/completions", JSON.stringify({ model: MODEL, prompt: "x", max_tokns: 3 }));
    eq(r.status, 400, "status");
    const e = errorObject(r.body);
    eq(e.param, "max_tokns", "param");
    assert(e.message.includes("max_tokns"), `message ${e.message}`);
    const c = post("/v1/chat/completions", JSON.stringify({ ...CHAT, toolz: [] }));
    eq(c.status, 400, "chat status");
    eq(errorObject(c.body).param, "toolz", "chat param");
    return e.message;
  });
  await check("error: malformed JSON → 400 (curl)", async () => {
    for (const body of ['{"model": "x", "prompt": ', "not json", "", "[1,2]"]) {
      const r = post("/v1/completions", body);
      eq(r.status, 400, `status for ${JSON.stringify(body)}`);
      errorObject(r.body);
    }
  });
  await check("error: invalid UTF-8 → 400 (curl)", async () => {
    const body = Buffer.concat([Buffer.from(`{"model":"${MODEL}","prompt":"a`), Buffer.from([0xff, 0xfe]), Buffer.from('b"}')]);
    const r = post("/v1/completions", body);
    eq(r.status, 400, "status");
    return errorObject(r.body).message;
  });
  await check("error: wrong model → 404", async () => {
    const e = await expectApiError(OpenAI, client.completions.create({ ...SAMPLE, model: "gpt-4o" }), 404, "wrong model");
    assert(e instanceof OpenAI.NotFoundError, `${e.constructor.name}`);
    eq(e.code, "model_not_found", "code");
    const c = await expectApiError(OpenAI, client.chat.completions.create({ ...CHAT, model: "nope" }), 404, "chat wrong model");
    return `${e.message} / ${c.message}`;
  });
  await check("error: auth → 401", async () => {
    const bad = new OpenAI({ baseURL: `${main.base}/v1`, apiKey: "wrong-key", maxRetries: 0 });
    const e = await expectApiError(OpenAI, bad.completions.create(SAMPLE), 401, "wrong key");
    assert(e instanceof OpenAI.AuthenticationError, `${e.constructor.name}`);
    await expectApiError(OpenAI, bad.models.list(), 401, "wrong key, models");
    await expectApiError(OpenAI, bad.chat.completions.create(CHAT), 401, "wrong key, chat");
    for (const p of ["/v1/completions", "/v1/chat/completions"]) {
      const r = post(p, JSON.stringify(p.includes("chat") ? CHAT : SAMPLE), null);
      eq(r.status, 401, `no key ${p}`);
      eq(errorObject(r.body).type, "authentication_error", "type");
    }
    const m = curl(`${main.base}/v1/models`, { method: "GET" });
    eq(m.status, 401, "no key /v1/models");
    errorObject(m.body);
    const h = curl(`${main.base}/health`, { method: "GET" });
    eq(h.status, 200, "/health is open");
    return e.message;
  });
  await check("error: body over max_body_bytes → 413", async () => {
    const body = JSON.stringify({ model: MODEL, prompt: "a".repeat(8192), max_tokens: 1 });
    assert(body.length > MAX_BODY, "body too small");
    const r = post("/v1/completions", body);
    eq(r.status, 413, "status");
    return errorObject(r.body).message;
  });
  await check("error: invalid JSON schema → 400 naming response_format.json_schema.schema", async () => {
    const e = await expectApiError(OpenAI, client.chat.completions.create({
      ...CHAT, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "strng" } } } }),
      400, "invalid schema");
    assert(e.message.includes("response_format.json_schema.schema"), `message ${e.message}`);
    const g = await expectApiError(OpenAI, client.completions.create({ ...SAMPLE, guided_json: { type: "strng" } }), 400,
                                   "invalid guided_json");
    assert(g.message.includes("guided_json"), `guided_json message ${g.message}`);
    const rx = await expectApiError(OpenAI, client.completions.create({ ...SAMPLE, guided_regex: "(" }), 400, "invalid regex");
    assert(rx.message.includes("guided_regex"), `guided_regex message ${rx.message}`);
    return e.message;
  });
  await check("n: 2 → two choices", async () => {
    const r = await client.completions.create({ ...SAMPLE, n: 2, max_tokens: 16 });
    eq(r.choices.map((c) => c.index).sort(), [0, 1], "indexes");
    checkUsage(r.usage, 32);
    // Choice i runs with seed + i: each equals the single request with that seed.
    for (const c of r.choices) {
      const one = await client.completions.create({ ...SAMPLE, max_tokens: 16, seed: SAMPLE.seed + c.index });
      eq(c.text, one.choices[0].text, `choice ${c.index} vs seed ${SAMPLE.seed + c.index}`);
    }
    const c = await client.chat.completions.create({ ...CHAT, n: 2, max_tokens: 16 });
    eq(c.choices.map((x) => x.index).sort(), [0, 1], "chat indexes");
    return r.choices.map((x) => JSON.stringify(x.text.slice(0, 20))).join(" | ");
  });

  // 8. gRPC equivalence (frostctl generate --json) with /v1/completions: greedy and seeded sampling.
  await check("gRPC (frostctl) = /v1/completions", async () => {
    const frostctl = frostctlPath();
    assert(frostctl && fs.existsSync(frostctl), `no frostctl (FROST_FROSTCTL=${process.env.FROST_FROSTCTL})`);
    const notes = [];
    for (const [temperature, seed] of [[0, 11], [0.8, 7], [1.0, 123]]) {
      const max_tokens = 40;
      const r = spawnSync(frostctl, ["--addr", main.grpcAddr, "--token-file", path.join(TMP, "user.token"), "--timeout", "60",
                                     "generate", "--prompt", PROMPT, "--max-tokens", String(max_tokens),
                                     "--temperature", String(temperature), "--seed", String(seed), "--json"],
                          { encoding: "utf8" });
      assert(r.status === 0, `frostctl exited ${r.status}: ${r.stderr}`);
      let text = "", ids = [], final = null;
      for (const line of r.stdout.split("\n").filter((l) => l.trim())) {
        const m = JSON.parse(line);
        if (m.chunk) { text += m.chunk.text || ""; ids.push(...(m.chunk.token_ids || m.chunk.tokenIds || [])); }
        if (m.final) final = m.final;
      }
      assert(final, `no final message: ${r.stdout.slice(-300)}`);
      const h = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens, temperature, seed });
      eq(h.choices[0].text, text, `text (temperature ${temperature}, seed ${seed})`);
      eq(h.usage.completion_tokens, ids.length, `completion tokens (temperature ${temperature})`);
      notes.push(`T=${temperature}: ${ids.length} tokens equal`);
    }
    return notes.join(", ");
  });

  // 9. bad bodies in a loop: always a 4xx with an OpenAI error object; the server keeps serving.
  await check("fuzz: bad bodies → 4xx error objects", async () => {
    let s = 0x9e3779b9;
    const rnd = () => { s = (s + 0x6d2b79f5) >>> 0; let t = s; t = Math.imul(t ^ (t >>> 15), t | 1);
                        t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
    const pick = (a) => a[Math.floor(rnd() * a.length)];
    const valid = [JSON.stringify({ ...SAMPLE, max_tokens: 2 }), JSON.stringify({ ...CHAT, max_tokens: 2 })];
    const wrong = [
      ["max_tokens", "x"], ["max_tokens", -1], ["max_tokens", 0], ["max_tokens", 1.5], ["max_tokens", 1e12],
      ["prompt", 5], ["prompt", {}], ["prompt", []], ["prompt", [1, "a"]], ["prompt", ""], ["temperature", "hot"],
      ["temperature", -1], ["temperature", []], ["top_p", "x"], ["stream", "yes"], ["n", 0], ["n", 100], ["n", "2"],
      ["stop", 3], ["stop", [1]], ["logprobs", -1], ["logprobs", 1000], ["seed", "a"], ["messages", {}],
      ["messages", []], ["messages", [{ role: "robot", content: "x" }]], ["messages", [{ content: "x" }]],
      ["messages", [{ role: "user", content: 5 }]], ["response_format", { type: "yaml" }], ["response_format", "json"],
      ["response_format", { type: "json_schema" }], ["guided_regex", 5], ["guided_regex", "(("], ["guided_json", 7],
      ["guided_grammar", "root ::= ("], ["stream_options", { include_usage: true }], ["model", 3], ["model", null],
      ["echo", true], ["logit_bias", { "5": 100 }], ["presence_penalty", 9], ["top_k", "k"], ["best_of", 3],
      ["guided_json", { type: "object" }, "guided_regex", "a"], ["max_completion_tokens", 0], ["user", 1],
    ];
    const bad = [];
    const N = 240;
    for (let i = 0; i < N; ++i) {
      const chat = rnd() < 0.5;
      const p = chat ? "/v1/chat/completions" : "/v1/completions";
      const kind = i % 4;
      let body;
      if (kind === 0) {  // random bytes
        body = Buffer.from(Array.from({ length: 1 + Math.floor(rnd() * 300) }, () => Math.floor(rnd() * 256)));
      } else if (kind === 1) {  // valid JSON, truncated
        const v = valid[chat ? 1 : 0];
        body = v.slice(0, Math.floor(rnd() * (v.length - 1)));
      } else if (kind === 2) {  // a wrong type or value
        const b = JSON.parse(valid[chat ? 1 : 0]);
        const w = pick(wrong);
        // (messages on completions and prompt on chat are unknown fields there)
        for (let j = 0; j < w.length; j += 2) b[w[j]] = w[j + 1];
        body = JSON.stringify(b);
      } else {  // structure: not an object, duplicate-ish, deep nesting, huge numbers
        body = pick(["null", "1", '"str"', "[]", "{}", `{"model":"${MODEL}"}`, '{"prompt":"x"}',
                     "[".repeat(2000), `{"model":"${MODEL}","prompt":"x","max_tokens":1e400}`,
                     `{"model":"${MODEL}","prompt":"\\ud800"}`, `{"model":"${MODEL}","prompt":"x",}`]);
      }
      let status, text;
      try {
        const r = await fetch(`${main.base}${p}`, { method: "POST", body,
                                                    headers: { Authorization: `Bearer ${USER_TOKEN}`, "Content-Type": "application/json" } });
        status = r.status;
        text = await r.text();
      } catch (e) {
        bad.push(`#${i} ${p}: fetch failed: ${e.message} (body ${JSON.stringify(String(body).slice(0, 80))})`);
        continue;
      }
      if (status < 400 || status >= 500) {
        bad.push(`#${i} ${p}: HTTP ${status} for ${JSON.stringify(String(body).slice(0, 120))}: ${text.slice(0, 120)}`);
        continue;
      }
      try { errorObject(text); } catch (e) { bad.push(`#${i} ${p}: HTTP ${status}: ${e.message}`); }
    }
    if (bad.length) {
      // Grouped by what was sent and answered (the "#i" index dropped).
      const groups = new Map();
      for (const b of bad) { const k = b.replace(/^#\d+ /, ""); groups.set(k, (groups.get(k) || 0) + 1); }
      for (const [k, n] of groups) log(`     fuzz: ${n}x ${k}`);
      throw new Error(`${bad.length}/${N} bad answers (${groups.size} distinct, listed above)`);
    }
    const h = await fetch(`${main.base}/health`);
    eq(h.status, 200, "/health after the loop");
    assert(main.alive(), "frostd died");
    const ok = await client.completions.create({ ...SAMPLE, max_tokens: 4 });
    assert(ok.choices[0].text.length > 0, "no completion after the loop");
    return `${N} bodies`;
  });
}
