// The OpenAI client test's lifecycle group (run by openai_client_test.mjs): a client disconnect frees its
// sequence and KV, and draining refuses new requests while the running stream finishes.
import fs from "node:fs";

import {
  assert, check, curl, eq, errorObject, Frostd, sleep, TMP,
} from "./openai_client_lib.mjs";

export async function lifecycleChecks(ctx) {
  const { OpenAI, slow } = ctx;
  // 7. disconnect: a long stream aborted after its first chunk frees its sequence and KV within 2 s.
  await check("disconnect frees the KV", async () => {
    await slow.start();
    const sc = new OpenAI({ baseURL: `${slow.base}/v1`, apiKey: "unused", maxRetries: 0 });
    const idle = await slow.metrics();
    assert(idle.running !== null && idle.kvBytesInUse !== null,
           `metrics without frost_requests_running / frost_kv_cache_bytes_in_use: ${JSON.stringify(idle)}`);
    const ac = new AbortController();
    const stream = await sc.completions.create({ model: "builtin:15m", prompt: "Once upon a time", max_tokens: 2000,
                                                 ignore_eos: true, temperature: 0.8, seed: 1, stream: true },
                                               { signal: ac.signal });
    let chunks = 0, during = null;
    try {
      for await (const ch of stream) {
        if (ch.choices.length && ch.choices[0].text !== undefined) ++chunks;
        if (chunks === 1) {
          during = await slow.metrics();
          ac.abort();
        }
      }
    } catch (e) {
      if (!(e instanceof OpenAI.APIUserAbortError) && e.name !== "AbortError") throw e;
    }
    const t0 = Date.now();
    assert(during && during.running >= 1, `not running after the first chunk: ${JSON.stringify(during)}`);
    let now;
    while (true) {
      now = await slow.metrics();
      if (now.running === idle.running && now.kvBytesInUse === idle.kvBytesInUse &&
          (idle.kvBlocksUsed === null || now.kvBlocksUsed === idle.kvBlocksUsed)) break;
      if (Date.now() - t0 > 2000) throw new Error(`not back to idle 2 s after the abort: idle ${JSON.stringify(idle)}, now ${JSON.stringify(now)}`);
      await sleep(25);
    }
    const ms = Date.now() - t0;
    // The server still serves, and a finished stream ends with [DONE].
    const r = curl(`${slow.base}/v1/completions`, { stream: true, data: JSON.stringify({ model: "builtin:15m", prompt: "Hi",
                                                                                          max_tokens: 3, stream: true }) });
    eq(r.status, 200, "status after the abort");
    assert(r.body.trimEnd().endsWith("data: [DONE]"), "no [DONE] after the abort");
    const e = await slow.stop();
    eq(e, { code: 0, signal: null }, "builtin:15m frostd exit after SIGTERM");
    return `during: running ${during.running}, kv ${during.kvBytesInUse} B; idle again after ${ms} ms`;
  });
  slow.kill();

  // 7b. drain: SIGTERM while a stream runs — new requests get 503 with an error object, the running stream
  // still ends with all its tokens and [DONE], and frostd exits 0.
  await check("drain: 503 for new requests, the running stream finishes, exit 0", async () => {
    const d = new Frostd(TMP, "drain", fs.readFileSync(slow.config, "utf8"));
    await d.start();
    try {
      const res = await fetch(`${d.base}/v1/completions`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: "builtin:15m", prompt: "Once", max_tokens: 150, ignore_eos: true, stream: true,
                               stream_options: { include_usage: true } }) });
      eq(res.status, 200, "stream status");
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let text = "";
      const first = await reader.read();
      text += dec.decode(first.value || new Uint8Array());
      d.proc.kill("SIGTERM");
      let refused = null;
      for (let i = 0; i < 40 && refused === null; ++i) {
        await sleep(25);
        const r = curl(`${d.base}/v1/completions`, { data: JSON.stringify({ model: "builtin:15m", prompt: "x", max_tokens: 2 }) });
        if (r.status === 503) refused = r;
      }
      assert(refused, "no 503 for a new request during the drain");
      assert(errorObject(refused.body), `503 without an error object: ${refused.body}`);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value);
      }
      assert(text.trimEnd().endsWith("data: [DONE]"), "the running stream did not end with [DONE]");
      const usage = text.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)))
        .find((c) => c.usage);
      eq(usage && usage.usage.completion_tokens, 150, "tokens of the stream that was running");
      const e = await d.exited;
      eq(e, { code: 0, signal: null }, "exit after the drain");
      return "503 during the drain, 150/150 tokens then [DONE], exit 0";
    } finally {
      d.kill();
    }
  });
}
