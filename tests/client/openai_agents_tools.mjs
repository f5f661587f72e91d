// The agents client test's tool-calling group (run by openai_agents_test.mjs) with the official openai SDK, per
// real-template checkpoint (Qwen3: Hermes <tool_call>; Llama 3.2: Llama 3.1 JSON calls): tool_choice named and
// required, non-streamed and streamed (each call whole in one delta, streamed == non-streamed at temperature 0),
// parallel_tool_calls false, a manual tool loop (assistant tool_calls + role "tool" results), the SDK's runTools
// helper, tool_choice "none" and "auto"; and the bulk check: hundreds of forced calls at temperature 1 that must
// all parse and validate.
import { assert, check, eq, expectApiError } from "./openai_client_lib.mjs";
import {
  callKeys, collectStream, pool, TOOL_BY_NAME, TOOL_MESSAGES, TOOLS, validateCall, validateChoice, validators,
} from "./openai_agents_lib.mjs";

const NAMES = TOOLS.map((t) => t.function.name);

// ctx: {OpenAI, ajv}; srv: {label, client, MODEL}.
export async function toolChecks(ctx, srv) {
  const { OpenAI, ajv } = ctx;
  const { label, client, MODEL } = srv;
  const validate = validators(ajv);
  // Llama 3.1's template renders one tool call per assistant message (it raises on more): its tool loops
  // (which send the calls back) ask for one call.
  const LOOP = srv.singleCall ? { parallel_tool_calls: false } : {};
  // Forced requests leave max_tokens to the server (the context's remainder): the constraint bounds the output
  // (bounded strings, integers and whitespace; at most 8 calls), but a forced call list can take hundreds of
  // tokens, and one cut at max_tokens is no call at all.
  const BASE = { model: MODEL, messages: TOOL_MESSAGES, tools: TOOLS, temperature: 0, seed: 1 };
  const NAMED = { ...BASE, tool_choice: { type: "function", function: { name: "book_table" } } };
  const REQUIRED = { ...BASE, tool_choice: "required" };

  let named = null, required = null;
  await check(`${label}: tool_choice named`, async () => {
    const r = await client.chat.completions.create(NAMED);
    eq(r.choices.length, 1, "choices");
    const calls = validateChoice(r.choices[0], validate, ["book_table"], "named", { max: 1 });
    named = r.choices[0].message.tool_calls;
    return `${calls[0].name}(${JSON.stringify(calls[0].args)}), ${r.usage.completion_tokens} tokens`;
  });
  await check(`${label}: tool_choice named, streamed == non-streamed`, async () => {
    assert(named, "no non-streamed answer");
    const s = await collectStream(await client.chat.completions.create({ ...NAMED, stream: true }), "named stream");
    const c = s.choices[0];
    assert(c, "no choice 0 in the stream");
    eq(c.finish, "tool_calls", "finish_reason");
    c.calls.forEach((call) => validateCall(call, validate, ["book_table"], "named stream"));
    eq(callKeys(c.calls), callKeys(named), "streamed calls");
    // The SDK's stream helper assembles the same message.
    const fin = await client.chat.completions.stream(NAMED).finalChatCompletion();
    eq(callKeys(fin.choices[0].message.tool_calls || []), callKeys(named), "chat.completions.stream().finalChatCompletion()");
    return `${s.chunks} chunks`;
  });
  await check(`${label}: tool_choice required`, async () => {
    const r = await client.chat.completions.create(REQUIRED);
    const calls = validateChoice(r.choices[0], validate, NAMES, "required");
    required = r.choices[0].message.tool_calls;
    return calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ").slice(0, 160);
  });
  await check(`${label}: tool_choice required, streamed == non-streamed`, async () => {
    assert(required, "no non-streamed answer");
    const s = await collectStream(await client.chat.completions.create({ ...REQUIRED, stream: true }), "required stream");
    const c = s.choices[0];
    eq(c.finish, "tool_calls", "finish_reason");
    c.calls.forEach((call) => validateCall(call, validate, NAMES, "required stream"));
    eq(callKeys(c.calls), callKeys(required), "streamed calls");
    return `${c.calls.length} call(s), ${s.chunks} chunks`;
  });
  await check(`${label}: required, n=4 at temperature 1 with a seed: streamed == non-streamed per choice`, async () => {
    const req = { ...REQUIRED, ...LOOP, n: 4, temperature: 1, seed: 21 };
    const r = await client.chat.completions.create(req);
    const s = await collectStream(await client.chat.completions.create({ ...req, stream: true }), "n=4 stream");
    eq(Object.keys(s.choices).map(Number).sort(), [0, 1, 2, 3], "streamed choice indices");
    for (const ch of r.choices) {
      validateChoice(ch, validate, NAMES, `choice ${ch.index}`);
      eq(s.choices[ch.index].finish, "tool_calls", `choice ${ch.index}: streamed finish_reason`);
      eq(callKeys(s.choices[ch.index].calls), callKeys(ch.message.tool_calls), `choice ${ch.index}: streamed calls`);
    }
    return r.choices.map((ch) => ch.message.tool_calls.length).join(",") + " calls";
  });
  await check(`${label}: required + parallel_tool_calls false → one call (n=4, temperature 1)`, async () => {
    const r = await client.chat.completions.create({ ...REQUIRED, parallel_tool_calls: false, n: 4, temperature: 1, seed: 5 });
    eq(r.choices.length, 4, "choices");
    for (const ch of r.choices) validateChoice(ch, validate, NAMES, `choice ${ch.index}`, { max: 1 });
    return r.choices.map((ch) => ch.message.tool_calls[0].function.name).join(",");
  });

  // OpenAI: "Omitting parameters defines a function with an empty parameter list": the arguments are {} (an
  // unconstrained object would let random weights write up to max_tokens).
  await check(`${label}: a tool without parameters, named → {} (an empty parameter list)`, async () => {
    const ping = { type: "function", function: { name: "ping", description: "Ping." } };
    const r = await client.chat.completions.create({ ...BASE, tools: [...TOOLS, ping], temperature: 1, seed: 9, max_tokens: 64,
                                                     tool_choice: { type: "function", function: { name: "ping" } } });
    const m = r.choices[0].message;
    eq((m.tool_calls || []).map((c) => c.function.name), ["ping"], `calls (${JSON.stringify(m)})`);
    eq(JSON.parse(m.tool_calls[0].function.arguments), {}, "arguments");
    return m.tool_calls[0].function.arguments.slice(0, 80);
  });
  await check(`${label}: bad tool requests → 400`, async () => {
    const bad = [
      [{ tool_choice: { type: "function", function: { name: "nope" } } }, "a named function not in tools"],
      [{ tools: undefined, tool_choice: "required" }, "required without tools"],
      [{ tool_choice: "sometimes" }, "an unknown tool_choice"],
      [{ tools: [{ type: "function", function: { description: "no name" } }] }, "a tool without a name"],
      [{ tools: [{ type: "function", function: { name: "x", parameters: { type: "object", properties: { a: { type: "nonsense" } } } } }],
         tool_choice: "required" }, "an invalid parameters schema"],
      [{ parallel_tool_calls: "yes" }, "parallel_tool_calls not a boolean"],
    ];
    for (const [extra, what] of bad) await expectApiError(OpenAI, client.chat.completions.create({ ...BASE, max_tokens: 4, ...extra }), 400, what);
    return `${bad.length} requests`;
  });

  await check(`${label}: manual tool loop (assistant tool_calls + tool results → second request)`, async () => {
    const first = await client.chat.completions.create({ ...REQUIRED, ...LOOP });
    const calls = validateChoice(first.choices[0], validate, NAMES, "first", srv.singleCall ? { max: 1 } : {});
    const messages = [...TOOL_MESSAGES, { role: "assistant", content: null, tool_calls: first.choices[0].message.tool_calls }];
    for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ ok: true, tool: c.name }) });
    const SECOND = { ...BASE, messages, tool_choice: "none", max_tokens: 24 };
    let second;
    try { second = await client.chat.completions.create(SECOND); } catch (e) {
      if (!(e instanceof OpenAI.APIError)) throw e;
      // Diagnose: does the same history render with content "" in place of null (what vLLM passes templates)?
      const alt = messages.map((m) => (m.role === "assistant" && m.content === null ? { ...m, content: "" } : m));
      const ok = await client.chat.completions.create({ ...SECOND, messages: alt }).then(() => "200", (e2) => `${e2.status}`);
      throw new Error(`HTTP ${e.status} ${e.message} (the assistant message with content null; with content "" instead: ${ok})`);
    }
    const m = second.choices[0].message;
    assert(!m.tool_calls || m.tool_calls.length === 0, `tool_calls with tool_choice none: ${JSON.stringify(m.tool_calls)}`);
    assert(second.usage.prompt_tokens > first.usage.prompt_tokens,
           `the tool results are not in the prompt: ${second.usage.prompt_tokens} <= ${first.usage.prompt_tokens} prompt tokens`);
    // And once more with tools still on offer (required): the history with tool results renders and constrains.
    const third = await client.chat.completions.create({ ...REQUIRED, ...LOOP, messages });
    validateChoice(third.choices[0], validate, NAMES, "third");
    return `${calls.length} call(s); prompt ${first.usage.prompt_tokens} → ${second.usage.prompt_tokens} tokens`;
  });

  await check(`${label}: openai runTools (named: runs once; required: 3 rounds fed back; auto: completes)`, async () => {
    const run = client.chat.completions.runTools || (client.beta && client.beta.chat.completions.runTools);
    assert(run, "the SDK has no runTools");
    const invoked = [];
    const runnable = TOOLS.map((t) => ({ type: "function", function: {
      name: t.function.name, description: t.function.description, parameters: t.function.parameters,
      parse: JSON.parse,
      function: (args) => {
        invoked.push({ name: t.function.name, args });
        return JSON.stringify({ ok: true });
      } } }));
    const runner = run.call(client.chat.completions, { ...BASE, tools: runnable, tool_choice: NAMED.tool_choice });
    await runner.done();
    eq(invoked.length, 1, `invocations (${JSON.stringify(invoked)})`);
    eq(invoked[0].name, "book_table", "invoked");
    assert(validate.book_table(invoked[0].args), `runTools args do not validate: ${JSON.stringify(invoked[0].args)}`);
    const msgs = runner.messages;
    assert(msgs.some((m) => m.role === "tool"), `no tool message in the runner's messages: ${JSON.stringify(msgs).slice(0, 300)}`);
    const first = invoked[0];
    // required: every round calls tools; the runner feeds the results back until maxChatCompletions.
    invoked.length = 0;
    const loop = run.call(client.chat.completions, { ...REQUIRED, ...LOOP, tools: runnable }, { maxChatCompletions: 3 });
    await loop.done();
    eq(loop.allChatCompletions().length, 3, "required: chat completions");
    assert(invoked.length >= 3, `required: ${invoked.length} invocations in 3 rounds`);
    for (const c of invoked) assert(validate[c.name](c.args), `required: ${c.name}(${JSON.stringify(c.args)}) does not validate`);
    const rounds = invoked.length;
    // auto: random weights rarely call; the run ends with text (the SDK's parser refuses a "length" finish).
    const auto = run.call(client.chat.completions, { ...BASE, max_tokens: 48, tools: runnable }, { maxChatCompletions: 3 });
    let autoEnd = "done";
    try { await auto.done(); } catch (e) {
      if (!e || e.constructor.name !== "LengthFinishReasonError") throw e;
      autoEnd = "ended at the length limit";
    }
    return `named args ${JSON.stringify(first.args)}; required: ${rounds} calls in 3 rounds; auto: ` +
           `${auto.allChatCompletions().length} completion(s), ${autoEnd}`;
  });

  await check(`${label}: tool_choice none → no tool_calls`, async () => {
    const r = await client.chat.completions.create({ ...BASE, tool_choice: "none", max_tokens: 32, n: 2, temperature: 1 });
    for (const ch of r.choices) {
      assert(!ch.message.tool_calls || ch.message.tool_calls.length === 0, `tool_calls: ${JSON.stringify(ch.message)}`);
      assert(ch.finish_reason === "stop" || ch.finish_reason === "length", `finish_reason ${ch.finish_reason}`);
      assert(typeof ch.message.content === "string", `content ${JSON.stringify(ch.message.content)}`);
    }
    return r.choices.map((c) => c.finish_reason).join(",");
  });

  // auto: random weights never write a call by themselves, so guided_regex steers the output into the template's
  // own call format (Hermes <tool_call> blocks for Qwen3, bare JSON {"name", "parameters"} for Llama 3.2): the
  // server must parse it into tool_calls, whole and streamed; a broken call stays text.
  const esc = (t) => t.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
  const W = '{"name": "get_weather", "ARGS": {"city": "Oslo", "unit": "celsius"}}';
  const T = '{"name": "tag_items", "ARGS": {"tags": ["red"], "priority": 2}}';
  const steer = srv.callFormat === "json"
    ? { one: esc(W.replace("ARGS", "parameters")), two: esc(`${W.replace("ARGS", "parameters")}; ${T.replace("ARGS", "parameters")}`),
        broken: esc('{"name": "get_weather", "parameters": {"city": "Oslo"') }
    : srv.callFormat === "mistral"
    ? { one: esc(`[TOOL_CALLS][${W.replace("ARGS", "arguments")}]`),
        two: esc(`[TOOL_CALLS][${W.replace("ARGS", "arguments")}, ${T.replace("ARGS", "arguments")}]`),
        broken: esc('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}') }
    : { one: esc(`Sure. <tool_call>\n${W.replace("ARGS", "arguments")}\n</tool_call>`),
        two: esc(`<tool_call>\n${W.replace("ARGS", "arguments")}\n</tool_call>\n<tool_call>\n${T.replace("ARGS", "arguments")}\n</tool_call>`),
        broken: esc('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}\n</tool_call>') };
  await check(`${label}: auto parses the template's call format (${srv.callFormat || "hermes"}; output steered by guided_regex)`, async () => {
    const want = { one: [["get_weather", '{"city":"Oslo","unit":"celsius"}']],
                   two: [["get_weather", '{"city":"Oslo","unit":"celsius"}'], ["tag_items", '{"tags":["red"],"priority":2}']] };
    for (const k of ["one", "two"]) {
      const req = { ...BASE, max_tokens: 120, guided_regex: steer[k] };
      const r = await client.chat.completions.create(req);
      const calls = validateChoice(r.choices[0], validate, NAMES, `auto ${k}`);
      eq(callKeys(r.choices[0].message.tool_calls), want[k], `auto ${k}: calls`);
      if (k === "one" && !srv.callFormat) eq(r.choices[0].message.content, "Sure.", "content around the call");
      const st = await collectStream(await client.chat.completions.create({ ...req, stream: true }), `auto ${k} stream`);
      eq(st.choices[0].finish, "tool_calls", `auto ${k} stream: finish_reason`);
      eq(callKeys(st.choices[0].calls), want[k], `auto ${k} stream: calls`);
      eq(st.choices[0].content || null, r.choices[0].message.content || null, `auto ${k} stream: content`);
      assert(calls.length === want[k].length, "calls");
    }
    const b = await client.chat.completions.create({ ...BASE, max_tokens: 120, guided_regex: steer.broken });
    const m = b.choices[0].message;
    assert(!m.tool_calls || !m.tool_calls.length, `a broken call parsed: ${JSON.stringify(m)}`);
    assert(typeof m.content === "string" && m.content.includes("get_weather"), `broken call not returned as text: ${JSON.stringify(m)}`);
    assert(b.choices[0].finish_reason !== "tool_calls", `finish_reason ${b.choices[0].finish_reason}`);
    return "one call, two calls, a broken call as text";
  });

  await check(`${label}: tool_choice auto never 500s (6 seeds, temperature 1, whole and streamed)`, async () => {
    const kinds = [];
    for (let seed = 1; seed <= 6; ++seed) {
      const req = { ...BASE, tool_choice: seed % 2 ? "auto" : undefined, temperature: 1, seed, max_tokens: 64 };
      let msg;
      try {
        if (seed <= 4) {
          const r = await client.chat.completions.create(req);
          msg = r.choices[0].message;
          assert(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
          if (r.choices[0].finish_reason === "tool_calls") assert(msg.tool_calls && msg.tool_calls.length, "tool_calls finish without calls");
        } else {
          const s = await collectStream(await client.chat.completions.create({ ...req, stream: true }), `auto stream ${seed}`);
          msg = { content: s.choices[0].content, tool_calls: s.choices[0].calls };
        }
      } catch (e) {
        if (e instanceof OpenAI.APIError) throw new Error(`seed ${seed}: HTTP ${e.status}: ${e.message}`);
        throw e;
      }
      // A parsed call names one of the tools and carries JSON arguments (malformed output stays text).
      for (const c of msg.tool_calls || []) {
        assert(TOOL_BY_NAME[c.function.name], `auto: unknown tool ${JSON.stringify(c.function.name)}`);
        JSON.parse(c.function.arguments);
      }
      kinds.push(msg.tool_calls && msg.tool_calls.length ? `${msg.tool_calls.length}call` : "text");
    }
    return kinds.join(",");
  });
}

// ≥ 500 forced calls at temperature 1 over varied seeds: every call parses and validates. → the count.
// mode "required" (any of TOOLS) or a tool name (named).
export async function bulkCheck(ctx, srv, { mode, requests, n, concurrency = 4 }) {
  const { ajv } = ctx;
  const { label, client, MODEL } = srv;
  const validate = validators(ajv);
  const tool_choice = mode === "required" ? "required" : { type: "function", function: { name: mode } };
  const allowed = mode === "required" ? TOOLS.map((t) => t.function.name) : [mode];
  const prompts = ["Plan my evening.", "Weather in Oslo?", "Tag these as urgent.", "Book dinner for two at 8pm.",
                   "Do whatever tool you like.", "¿Qué tiempo hace en Madrid?", "Use a tool now."];
  await check(`${label}: bulk ${requests} × n=${n} tool_choice ${mode}, temperature 1 → every call parses and validates`, async () => {
    const stats = { calls: 0, choices: 0, byName: {}, maxCalls: 0, failures: [], tokens: 0, maxArgChars: 0 };
    await pool(Array.from({ length: requests }, (_, i) => i), concurrency, async (i) => {
      const req = { model: MODEL, tools: TOOLS, tool_choice, n, temperature: 1, seed: 1000 + 17 * i,
                    parallel_tool_calls: i % 2 === 0,  // up to 8 calls (~280 tokens a choice here) or one
                    messages: [{ role: "user", content: prompts[i % prompts.length] }] };
      const r = await client.chat.completions.create(req);
      eq(r.choices.length, n, `request ${i}: choices`);
      stats.tokens += r.usage.completion_tokens;
      for (const ch of r.choices) {
        ++stats.choices;
        try {
          const calls = validateChoice(ch, validate, allowed, `request ${i} (seed ${req.seed}) choice ${ch.index}`,
                                       { max: req.parallel_tool_calls ? Infinity : 1 });
          stats.calls += calls.length;
          stats.maxCalls = Math.max(stats.maxCalls, calls.length);
          stats.maxArgChars = Math.max(stats.maxArgChars, (ch.message.tool_calls.map((c) => c.function.arguments).join("").length));
          for (const c of calls) stats.byName[c.name] = (stats.byName[c.name] || 0) + 1;
        } catch (e) {
          stats.failures.push(e.message);
        }
      }
    });
    const note = `${stats.calls} calls in ${stats.choices} choices (max ${stats.maxCalls} per choice; ` +
      `${JSON.stringify(stats.byName)}; ${stats.tokens} completion tokens, longest arguments ${stats.maxArgChars} chars)`;
    assert(!stats.failures.length, `${stats.failures.length} of ${stats.choices} choices failed (${note}); first: ${stats.failures[0]}`);
    assert(stats.calls >= requests * n, `only ${stats.calls} calls`);
    ctx.bulkCalls = (ctx.bulkCalls || 0) + stats.calls;
    return note;
  });
}
