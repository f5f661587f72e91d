// The OpenAI client test's generation group (run by openai_client_test.mjs): models, completions and chat
// (whole, streamed, on the wire), structured output (json_schema, json_object, guided_json, guided_regex) and
// logprobs.
import {
  ADMIN_TOKEN, assert, check, checkUsage, curl, eq, jsonPrefix, log, PERSON_SCHEMA, USER_TOKEN,
} from "./openai_client_lib.mjs";

export async function generationChecks(ctx) {
  const { OpenAI, model, MODEL, main, client, ajv, validatePerson, PROMPT, SAMPLE, CHAT } = ctx;
  // 1. models
  await check("models.list", async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    eq(ids, [MODEL], "model ids");
    assert(page.data[0].object === "model", `object ${page.data[0].object}`);
    const admin = new OpenAI({ baseURL: `${main.base}/v1`, apiKey: ADMIN_TOKEN, maxRetries: 0 });
    eq((await admin.models.list()).data.map((m) => m.id), [MODEL], "model ids (admin token)");
    return ids.join(",");
  });

  // 2. completions
  let whole;
  await check("completions", async () => {
    whole = await client.completions.create(SAMPLE);
    assert(whole.object === "text_completion", `object ${whole.object}`);
    eq(whole.model, MODEL, "model");
    eq(whole.choices.length, 1, "choices");
    const c = whole.choices[0];
    assert(typeof c.text === "string" && c.text.length > 0, `text ${JSON.stringify(c.text)}`);
    assert(c.finish_reason === "stop" || c.finish_reason === "length", `finish_reason ${c.finish_reason}`);
    checkUsage(whole.usage, SAMPLE.max_tokens);
    if (c.finish_reason === "length") eq(whole.usage.completion_tokens, SAMPLE.max_tokens, "completion_tokens at length");
    const again = await client.completions.create(SAMPLE);
    eq(again.choices[0].text, c.text, "same seed, same text");
    return `${whole.usage.completion_tokens} tokens, ${c.finish_reason}: ${JSON.stringify(c.text.slice(0, 40))}...`;
  });
  await check("completions stream = non-stream", async () => {
    assert(whole, "no non-streamed response");
    const stream = await client.completions.create({ ...SAMPLE, stream: true });
    let text = "", finish = null, chunks = 0, usageSeen = false;
    for await (const ch of stream) {
      ++chunks;
      if (ch.usage) usageSeen = true;
      for (const c of ch.choices) {
        eq(c.index, 0, "index");
        text += c.text;
        if (c.finish_reason) {
          assert(finish === null, "two finish_reasons");
          finish = c.finish_reason;
        }
      }
    }
    eq(text, whole.choices[0].text, "streamed text");
    eq(finish, whole.choices[0].finish_reason, "finish_reason");
    assert(!usageSeen, "usage without stream_options.include_usage");
    return `${chunks} chunks`;
  });
  await check("completions stream include_usage", async () => {
    assert(whole, "no non-streamed response");
    const stream = await client.completions.create({ ...SAMPLE, stream: true, stream_options: { include_usage: true } });
    const all = [];
    for await (const ch of stream) all.push(ch);
    const last = all[all.length - 1];
    eq(last.choices, [], "the usage chunk's choices");
    eq(last.usage, whole.usage, "usage chunk");
    assert(all.slice(0, -1).every((c) => !c.usage), "usage before the last chunk");
    eq(all.map((c) => c.choices.map((x) => x.text).join("")).join(""), whole.choices[0].text, "text");
    return JSON.stringify(last.usage);
  });
  await check("completions stream wire (SSE, [DONE])", async () => {
    const r = curl(`${main.base}/v1/completions`, { token: USER_TOKEN, stream: true,
                                                    data: JSON.stringify({ ...SAMPLE, stream: true }) });
    eq(r.status, 200, "status");
    assert(r.headers["content-type"].startsWith("text/event-stream"), `content-type ${r.headers["content-type"]}`);
    const events = r.body.split("\n\n").filter((e) => e.trim());
    assert(events.every((e) => e.startsWith("data: ")), `an event without data: ${JSON.stringify(events.find((e) => !e.startsWith("data: ")))}`);
    eq(events[events.length - 1], "data: [DONE]", "last event");
    const text = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices.map((c) => c.text).join("")).join("");
    eq(text, whole.choices[0].text, "text over the wire");
    return `${events.length} events`;
  });

  // 3. chat
  let chatWhole;
  await check("chat.completions", async () => {
    chatWhole = await client.chat.completions.create(CHAT);
    assert(chatWhole.object === "chat.completion", `object ${chatWhole.object}`);
    const c = chatWhole.choices[0];
    eq(c.message.role, "assistant", "role");
    assert(typeof c.message.content === "string" && c.message.content.length > 0, "empty content");
    assert(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    checkUsage(chatWhole.usage, CHAT.max_tokens);
    return `${chatWhole.usage.prompt_tokens}+${chatWhole.usage.completion_tokens} tokens: ${JSON.stringify(c.message.content.slice(0, 40))}...`;
  });
  await check("chat.completions stream", async () => {
    assert(chatWhole, "no non-streamed response");
    const stream = await client.chat.completions.create({ ...CHAT, stream: true, stream_options: { include_usage: true } });
    let content = "", finish = null, first = null, usage = null;
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) {
        if (first === null) first = c.delta;
        if (c.delta.content) content += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert(first && first.role === "assistant", `first delta ${JSON.stringify(first)}`);
    eq(content, chatWhole.choices[0].message.content, "streamed content");
    eq(finish, chatWhole.choices[0].finish_reason, "finish_reason");
    eq(usage, chatWhole.usage, "usage");
  });

  // 4. structured output
  // Runs `make(max_tokens, seed)` until a choice finishes with "stop" (larger max_tokens each time); returns
  // [text, note] of that one. A "length" finish is reported, not validated (the output is cut).
  async function untilStop(make, what) {
    const notes = [];
    for (const [maxTokens, seed] of [[200, 1], [300, 2], [400, 3]]) {
      const r = await make(maxTokens, seed);
      const c = r.choices[0];
      const text = c.message ? c.message.content : c.text;
      if (c.finish_reason === "stop") {
        notes.push(`stop at max_tokens ${maxTokens}, ${r.usage.completion_tokens} tokens`);
        return [text, notes.join("; ")];
      }
      notes.push(`finish ${c.finish_reason} at max_tokens ${maxTokens} (${JSON.stringify(text.slice(0, 60))}...)`);
      log(`     ${what}: ${notes[notes.length - 1]}; retrying larger`);
    }
    throw new Error(`no output finished with "stop": ${notes.join("; ")}`);
  }
  const RF_PERSON = { type: "json_schema", json_schema: { name: "person", schema: PERSON_SCHEMA, strict: true } };
  const validated = (text, validate) => {
    let v;
    try { v = JSON.parse(text); } catch (e) { throw new Error(`not JSON (${e.message}): ${JSON.stringify(text)}`); }
    if (validate && !validate(v)) throw new Error(`invalid: ${ajv.errorsText(validate.errors)}: ${text}`);
    return v;
  };
  await check("chat response_format json_schema", async () => {
    const [text, note] = await untilStop((max_tokens, seed) => client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Describe a person as JSON." }], max_tokens,
      temperature: 0.7, seed, response_format: RF_PERSON }), "chat json_schema");
    validated(text, validatePerson);
    return `${note}: ${text}`;
  });
  await check("completions response_format json_schema", async () => {
    const [text, note] = await untilStop((max_tokens, seed) => client.completions.create({
      model: MODEL, prompt: "A person as JSON:", max_tokens, temperature: 0.7, seed, response_format: RF_PERSON }),
      "completions json_schema");
    validated(text, validatePerson);
    return `${note}: ${text}`;
  });
  await check("completions guided_json", async () => {
    const [text, note] = await untilStop((max_tokens, seed) => client.completions.create({
      model: MODEL, prompt: "A person as JSON:", max_tokens, temperature: 0.7, seed, guided_json: PERSON_SCHEMA }),
      "guided_json");
    validated(text, validatePerson);
    return `${note}: ${text}`;
  });
  // json_object: stories260K writes stories, so inside a JSON string it rarely writes the closing quote, and
  // within its 512-token context an output is often cut ("length"). A finished output must parse as an
  // object; a cut one must be a valid prefix of a JSON object (what the constraint guarantees at every token).
  await check("chat response_format json_object", async () => {
    const notes = [];
    for (const [max_tokens, seed] of [[200, 1], [300, 2], [400, 3], [400, 4], [400, 5], [400, 6]]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: [{ role: "user", content: 'Answer in JSON, e.g. {"a": 1}.' }], max_tokens,
        temperature: 0.7, seed, response_format: { type: "json_object" } });
      const c = r.choices[0], text = c.message.content;
      if (c.finish_reason === "stop") {
        const v = validated(text, null);
        assert(v !== null && typeof v === "object" && !Array.isArray(v), `not an object: ${text}`);
        notes.push(`stop at max_tokens ${max_tokens}: ${text.slice(0, 60)}`);
        return notes.join("; ");
      }
      eq(jsonPrefix(text, true), "prefix", `the cut output (${JSON.stringify(text.slice(0, 200))}) as a JSON-object prefix`);
      notes.push(`length at ${max_tokens} (a valid JSON-object prefix)`);
      log(`     json_object: finish length at max_tokens ${max_tokens}, a valid prefix (${JSON.stringify(text.slice(0, 50))}...); retrying`);
    }
    return `no output finished with "stop" in ${notes.length} tries (the model's strings run on); every cut output a valid JSON-object prefix`;
  });
  await check("guided_regex (completions and chat)", async () => {
    const RE = "[0-9]{3}-[a-z]{2,4}";
    const full = new RegExp(`^(?:${RE})$`);
    const notes = [];
    for (const seed of [1, 2, 3]) {
      const r = await client.completions.create({ model: MODEL, prompt: "The code is", max_tokens: 20,
                                                  temperature: 0.7, seed, guided_regex: RE });
      const c = r.choices[0];
      eq(c.finish_reason, "stop", `finish_reason (seed ${seed}, text ${JSON.stringify(c.text)})`);
      assert(full.test(c.text), `completions text ${JSON.stringify(c.text)} does not match ${RE}`);
      notes.push(c.text);
    }
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "A code?" }],
                                                     max_tokens: 20, temperature: 0.7, seed: 4, guided_regex: RE });
    eq(r.choices[0].finish_reason, "stop", "chat finish_reason");
    assert(full.test(r.choices[0].message.content), `chat content ${JSON.stringify(r.choices[0].message.content)}`);
    notes.push(r.choices[0].message.content);
    return notes.join(" ");
  });
  await check("guided_regex stream", async () => {
    const RE = "(yes|no), [a-z]{3,8}!";
    const stream = await client.completions.create({ model: MODEL, prompt: "Answer:", max_tokens: 30, temperature: 0.7,
                                                     seed: 5, guided_regex: RE, stream: true });
    let text = "", finish = null;
    for await (const ch of stream) for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
    eq(finish, "stop", `finish_reason (${JSON.stringify(text)})`);
    assert(new RegExp(`^(?:${RE})$`).test(text), `${JSON.stringify(text)} does not match ${RE}`);
    return text;
  });

  // 5. logprobs
  await check("completions logprobs", async () => {
    const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 12, temperature: 0.8, seed: 3,
                                                logprobs: 2 });
    const lp = r.choices[0].logprobs;
    const n = r.usage.completion_tokens;
    assert(lp, "no logprobs");
    eq(lp.tokens.length, n, "tokens");
    eq(lp.token_logprobs.length, n, "token_logprobs");
    eq(lp.top_logprobs.length, n, "top_logprobs");
    eq(lp.text_offset.length, n, "text_offset");
    eq(lp.tokens.join(""), r.choices[0].text, "tokens join to the text");
    for (let i = 0; i < n; ++i) {
      assert(lp.token_logprobs[i] <= 0 && Number.isFinite(lp.token_logprobs[i]), `token_logprobs[${i}] ${lp.token_logprobs[i]}`);
      const top = lp.top_logprobs[i];
      const k = Object.keys(top).length;
      assert(k >= 1 && k <= 2, `top_logprobs[${i}] has ${k} entries`);
      assert(Object.values(top).every((x) => x <= 0), `top_logprobs[${i}] ${JSON.stringify(top)}`);
    }
    return `${n} tokens`;
  });
  await check("chat logprobs top_logprobs 2", async () => {
    const r = await client.chat.completions.create({ ...CHAT, max_tokens: 12, logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs && r.choices[0].logprobs.content;
    assert(Array.isArray(content), `logprobs ${JSON.stringify(r.choices[0].logprobs)}`);
    eq(content.length, r.usage.completion_tokens, "logprobs.content entries");
    for (const [i, t] of content.entries()) {
      assert(typeof t.token === "string" && t.logprob <= 0 && Array.isArray(t.bytes), `content[${i}] ${JSON.stringify(t)}`);
      eq(t.top_logprobs.length, 2, `content[${i}].top_logprobs`);
    }
    eq(content.map((t) => t.token).join(""), r.choices[0].message.content, "tokens join to the content");
    return `${content.length} tokens`;
  });
}
