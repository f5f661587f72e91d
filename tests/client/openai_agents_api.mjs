// The agents client test's API group (run by openai_agents_test.mjs): /v1/embeddings through the openai SDK
// (float vs base64), /v1/responses through the openai SDK (instructions, text.format json_schema, streamed
// events, previous_response_id refused), /tokenize + /detokenize + the render endpoints against the usage of the
// same request, max_completion_tokens, and batched completions prompts (prompt-major choice indices).
import { assert, check, eq, expectApiError } from "./openai_client_lib.mjs";
import { decodeBase64Floats, findIds, l2, postJson, TOOL_MESSAGES, TOOLS } from "./openai_agents_lib.mjs";

const PERSON = {
  type: "object", additionalProperties: false, required: ["name", "age"],
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 120 },
                tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 3 } },
};

export async function embeddingChecks(ctx, srv) {
  const { label, client, base, MODEL } = srv;
  const INPUT = ["hello world", "tool calling agents", "x"];
  let floats = null;
  await check(`${label}: embeddings float: shape, norm 1`, async () => {
    const r = await client.embeddings.create({ model: MODEL, input: INPUT, encoding_format: "float" });
    eq(r.object, "list", "object");
    eq(r.data.map((d) => d.index), [0, 1, 2], "indices");
    for (const d of r.data) {
      eq(d.object, "embedding", "data object");
      assert(Array.isArray(d.embedding) && d.embedding.length > 0, `embedding ${JSON.stringify(d.embedding).slice(0, 60)}`);
      assert(Math.abs(l2(d.embedding) - 1) < 1e-4, `norm ${l2(d.embedding)}`);
    }
    assert(r.usage && r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens, `usage ${JSON.stringify(r.usage)}`);
    floats = r.data.map((d) => d.embedding);
    return `dim ${floats[0].length}, usage ${JSON.stringify(r.usage)}`;
  });
  await check(`${label}: embeddings base64 (SDK default and raw) == float within 1e-6`, async () => {
    assert(floats, "no float embeddings");
    const sdk = await client.embeddings.create({ model: MODEL, input: INPUT });  // the SDK asks for base64, decodes
    const raw = await postJson(base, "/v1/embeddings", { model: MODEL, input: INPUT, encoding_format: "base64" });
    eq(raw.status, 200, `raw base64 status (${raw.text.slice(0, 200)})`);
    let worst = 0;
    for (let i = 0; i < INPUT.length; ++i) {
      const b64 = raw.json.data[i].embedding;
      assert(typeof b64 === "string", `raw base64 embedding is ${typeof b64}`);
      for (const v of [sdk.data[i].embedding, decodeBase64Floats(b64)]) {
        eq(v.length, floats[i].length, "dimension");
        for (let k = 0; k < v.length; ++k) worst = Math.max(worst, Math.abs(v[k] - floats[i][k]));
      }
    }
    assert(worst <= 1e-6, `max |base64 - float| = ${worst}`);
    return `max diff ${worst}`;
  });
  await check(`${label}: embeddings input forms (string, [ids], [[ids]])`, async () => {
    const one = await client.embeddings.create({ model: MODEL, input: "hello world", encoding_format: "float" });
    eq(one.data.length, 1, "string input");
    const tok = await postJson(base, "/tokenize", { model: MODEL, prompt: "hello world" });
    eq(tok.status, 200, `/tokenize status (${tok.text.slice(0, 200)})`);
    const ids = tok.json.tokens;
    const flat = await client.embeddings.create({ model: MODEL, input: ids, encoding_format: "float" });
    eq(flat.data.length, 1, "[ids] input");
    const nested = await client.embeddings.create({ model: MODEL, input: [ids, ids.slice(0, 1)], encoding_format: "float" });
    eq(nested.data.length, 2, "[[ids]] input");
    const d = Math.max(...flat.data[0].embedding.map((x, k) => Math.abs(x - nested.data[0].embedding[k])));
    assert(d < 1e-6, `[ids] and [[ids]][0] differ by ${d}`);
    // The string and its /tokenize ids are the same tokens: the same vector.
    const ds = Math.max(...flat.data[0].embedding.map((x, k) => Math.abs(x - one.data[0].embedding[k])));
    assert(ds < 1e-5, `"hello world" and its /tokenize ids ${JSON.stringify(ids)} differ by ${ds} ` +
           `(usage ${one.usage.prompt_tokens} vs ${flat.usage.prompt_tokens} tokens)`);
    return `${ids.length} ids`;
  });
}

export async function responsesChecks(ctx, srv) {
  const { OpenAI, ajv } = ctx;
  const { label, client, MODEL } = srv;
  const validatePerson = ajv.compile(PERSON);
  let whole = null;
  await check(`${label}: responses.create (input + instructions)`, async () => {
    const r = await client.responses.create({ model: MODEL, input: "Tell me a story.", instructions: "You tell stories.",
                                              max_output_tokens: 32, temperature: 0 });
    eq(r.object, "response", "object");
    assert(["completed", "incomplete"].includes(r.status), `status ${r.status}`);
    assert(typeof r.output_text === "string", `output_text ${JSON.stringify(r.output_text)}`);
    const msg = r.output.find((o) => o.type === "message");
    assert(msg && msg.role === "assistant", `no assistant message item: ${JSON.stringify(r.output).slice(0, 300)}`);
    assert(r.usage && r.usage.input_tokens > 0 && r.usage.output_tokens > 0, `usage ${JSON.stringify(r.usage)}`);
    whole = r;
    return `${r.status}, ${r.usage.output_tokens} tokens`;
  });
  await check(`${label}: responses text.format json_schema validates`, async () => {
    for (const seed of [1, 2]) {  // (the Responses API has no seed: two draws at temperature 1)
      const r = await client.responses.create({
        model: MODEL, input: [{ role: "user", content: "A person as JSON." }], temperature: 1,
        text: { format: { type: "json_schema", name: "person", schema: PERSON, strict: true } } });
      let obj;
      try { obj = JSON.parse(r.output_text); } catch (e) { throw new Error(`seed ${seed}: output_text not JSON: ${JSON.stringify(r.output_text)}`); }
      assert(validatePerson(obj), `seed ${seed}: ${r.output_text}: ${JSON.stringify(validatePerson.errors)}`);
    }
    return "2 seeds";
  });
  await check(`${label}: responses stream: events, deltas == output_text`, async () => {
    assert(whole, "no non-streamed response");
    const stream = await client.responses.create({ model: MODEL, input: "Tell me a story.", instructions: "You tell stories.",
                                                   max_output_tokens: 32, temperature: 0, stream: true });
    const types = [];
    let text = "", final = null;
    for await (const ev of stream) {
      if (types[types.length - 1] !== ev.type) types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
    }
    eq(types[0], "response.created", "first event");
    assert(types.includes("response.output_text.delta"), `no text deltas: ${types.join(" ")}`);
    assert(["response.completed", "response.incomplete"].includes(types[types.length - 1]), `last event: ${types.join(" ")}`);
    assert(final, "no final response");
    const finalText = final.output.filter((o) => o.type === "message").flatMap((o) => o.content)
      .filter((c) => c.type === "output_text").map((c) => c.text).join("");
    eq(text, finalText, "deltas vs the final response's text");
    eq(text, whole.output_text, "streamed vs non-streamed at temperature 0");
    return types.join(" ");
  });
  await check(`${label}: responses with tools + tool_choice required → function_call items`, async () => {
    const tools = TOOLS.map((t) => ({ type: "function", name: t.function.name, description: t.function.description,
                                      parameters: t.function.parameters, strict: false }));
    const r = await client.responses.create({ model: MODEL, input: "Weather in Paris?", tools, tool_choice: "required",
                                              max_output_tokens: 200, temperature: 0 });
    const calls = r.output.filter((o) => o.type === "function_call");
    assert(calls.length >= 1, `no function_call items: ${JSON.stringify(r.output).slice(0, 300)}`);
    const v = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
    for (const c of calls) {
      assert(v[c.name], `unknown tool ${c.name}`);
      assert(v[c.name](JSON.parse(c.arguments)), `${c.name}(${c.arguments}): ${JSON.stringify(v[c.name].errors)}`);
      assert(c.call_id, `no call_id: ${JSON.stringify(c)}`);
    }
    return calls.map((c) => c.name).join(",");
  });
  await check(`${label}: responses stream with tools + tool_choice required → function_call events and items`, async () => {
    const tools = TOOLS.map((t) => ({ type: "function", name: t.function.name, description: t.function.description,
                                      parameters: t.function.parameters, strict: false }));
    const stream = await client.responses.create({ model: MODEL, input: "Weather in Paris?", tools, tool_choice: "required",
                                                   temperature: 0, stream: true });
    const types = new Set();
    let final = null;
    const argsDone = [];
    for await (const ev of stream) {
      types.add(ev.type);
      if (ev.type === "response.function_call_arguments.done") argsDone.push(ev.arguments);
      if (ev.type === "response.completed") final = ev.response;
    }
    assert(final, `no response.completed: ${[...types].join(" ")}`);
    const calls = final.output.filter((o) => o.type === "function_call");
    assert(calls.length >= 1, `no function_call items: ${JSON.stringify(final.output).slice(0, 300)}`);
    const v = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
    for (const c of calls) assert(v[c.name] && v[c.name](JSON.parse(c.arguments)), `${c.name}(${c.arguments}) does not validate`);
    eq(argsDone, calls.map((c) => c.arguments), "function_call_arguments.done vs the final items");
    return [...types].join(" ");
  });
  await check(`${label}: responses previous_response_id → 400`, async () => {
    const e = await expectApiError(OpenAI, client.responses.create({
      model: MODEL, input: "And then?", previous_response_id: whole ? whole.id : "resp_123", max_output_tokens: 8 }),
                                   400, "previous_response_id");
    return e.message.slice(0, 80);
  });
}

// /tokenize, /detokenize and the render endpoints against the usage of the same requests.
export async function tokenizeChecks(ctx, srv) {
  const { label, client, base, MODEL } = srv;
  await check(`${label}: /tokenize + /detokenize round trip`, async () => {
    const text = "Hello world, tool calls!";
    const t = await postJson(base, "/tokenize", { model: MODEL, prompt: text, add_special_tokens: false });
    eq(t.status, 200, `/tokenize (${t.text.slice(0, 200)})`);
    assert(Array.isArray(t.json.tokens) && t.json.tokens.every(Number.isInteger), `tokens ${JSON.stringify(t.json.tokens)}`);
    eq(t.json.count, t.json.tokens.length, "count");
    assert(Number.isInteger(t.json.max_model_len) && t.json.max_model_len > 0, `max_model_len ${t.json.max_model_len}`);
    const d = await postJson(base, "/detokenize", { model: MODEL, tokens: t.json.tokens });
    eq(d.status, 200, `/detokenize (${d.text.slice(0, 200)})`);
    eq(d.json.prompt, text, "detokenized");
    const c = await client.completions.create({ model: MODEL, prompt: text, max_tokens: 1 });
    const withSpecial = await postJson(base, "/tokenize", { model: MODEL, prompt: text });
    eq(withSpecial.json.count, c.usage.prompt_tokens, "/tokenize (default add_special_tokens) count vs completions prompt_tokens");
    return `${t.json.count} tokens (${withSpecial.json.count} with special), max_model_len ${t.json.max_model_len}`;
  });
  // stories260K's 512-token context cannot hold the three tools: the tool checks run on the real templates.
  for (const withTools of srv.smallContext ? [false] : [false, true]) {
    await check(`${label}: /tokenize messages == chat render == chat prompt_tokens${withTools ? " (with tools)" : ""}`, async () => {
      const extra = withTools ? { tools: TOOLS } : {};
      const chat = await client.chat.completions.create({ model: MODEL, messages: TOOL_MESSAGES, max_tokens: 1, ...extra,
                                                          ...(withTools ? { tool_choice: "none" } : {}) });
      const t = await postJson(base, "/tokenize", { model: MODEL, messages: TOOL_MESSAGES, add_generation_prompt: true, ...extra });
      eq(t.status, 200, `/tokenize (${t.text.slice(0, 200)})`);
      const r = await postJson(base, "/v1/chat/completions/render", { model: MODEL, messages: TOOL_MESSAGES, max_tokens: 1, ...extra });
      eq(r.status, 200, `/v1/chat/completions/render (${r.text.slice(0, 200)})`);
      const f = findIds(r.json);
      assert(f, `no token ids in the render answer: ${r.text.slice(0, 300)}`);
      eq(f.ids, t.json.tokens, `render ${f.key} vs /tokenize tokens`);
      eq(t.json.count, chat.usage.prompt_tokens, "/tokenize count vs chat usage.prompt_tokens");
      return `${chat.usage.prompt_tokens} tokens (render key ${JSON.stringify(f.key)})`;
    });
  }
  if (!srv.smallContext) await check(`${label}: a tool-call history renders (arguments as an object, the tool result) and runs`, async () => {
    const messages = [...TOOL_MESSAGES,
      { role: "assistant", content: null, tool_calls: [{ id: "callW1abc", type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' } }] },
      { role: "tool", tool_call_id: "callW1abc", content: "sunny, 21 degrees" }];
    const t = await postJson(base, "/tokenize", { model: MODEL, messages, tools: TOOLS, add_generation_prompt: true });
    eq(t.status, 200, `/tokenize (${t.text.slice(0, 300)})`);
    const d = await postJson(base, "/detokenize", { model: MODEL, tokens: t.json.tokens });
    eq(d.status, 200, `/detokenize (${d.text.slice(0, 200)})`);
    const text = d.json.prompt;
    assert(text.includes("sunny, 21 degrees"), `the tool result is not in the prompt: ${JSON.stringify(text.slice(-400))}`);
    assert(/"city": ?"Paris"/.test(text) && !text.includes('\\"city\\"'),
           `the call's arguments are not rendered as an object: ${JSON.stringify(text.slice(-500))}`);
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, max_tokens: 8 });
    eq(r.usage.prompt_tokens, t.json.count, "chat prompt_tokens vs /tokenize");
    return `${t.json.count} tokens`;
  });
  await check(`${label}: /v1/completions/render == completions prompt_tokens`, async () => {
    const prompt = "Once upon a time";
    const c = await client.completions.create({ model: MODEL, prompt, max_tokens: 1 });
    const r = await postJson(base, "/v1/completions/render", { model: MODEL, prompt, max_tokens: 1 });
    eq(r.status, 200, `/v1/completions/render (${r.text.slice(0, 200)})`);
    const f = findIds(r.json);
    assert(f, `no token ids: ${r.text.slice(0, 300)}`);
    eq(f.ids.length, c.usage.prompt_tokens, "render length vs prompt_tokens");
    return `${f.ids.length} tokens`;
  });
}

// max_completion_tokens, chat's default max_tokens, and batched completions prompts.
export async function requestShapeChecks(ctx, srv) {
  const { label, client, MODEL } = srv;
  await check(`${label}: chat max_completion_tokens bounds the completion`, async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Talk." }],
                                                     max_completion_tokens: 5, temperature: 1, seed: 2 });
    assert(r.usage.completion_tokens <= 5, `completion_tokens ${r.usage.completion_tokens} > 5`);
    return `${r.usage.completion_tokens} tokens, ${r.choices[0].finish_reason}`;
  });
  await check(`${label}: completions prompt list × n → prompt-major indices`, async () => {
    const prompts = ["Once upon a time", "The cat"];
    const r = await client.completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 4, temperature: 0 });
    eq(r.choices.map((c) => c.index).sort((a, b) => a - b), [0, 1, 2, 3], "indices");
    const byIndex = Object.fromEntries(r.choices.map((c) => [c.index, c.text]));
    for (let p = 0; p < 2; ++p) {
      const one = await client.completions.create({ model: MODEL, prompt: prompts[p], max_tokens: 4, temperature: 0 });
      eq(byIndex[p * 2], one.choices[0].text, `choice ${p * 2} (prompt ${p})`);
      eq(byIndex[p * 2 + 1], one.choices[0].text, `choice ${p * 2 + 1} (prompt ${p}, temperature 0)`);
    }
    const ids = await client.completions.create({ model: MODEL, prompt: [[1, 2, 3], [4, 5]], max_tokens: 2 });
    eq(ids.choices.length, 2, "token-id prompt list");
    return JSON.stringify(r.usage);
  });
}
