// The agents client test's framework group (run by openai_agents_test.mjs): LangChain.js (ChatOpenAI with
// configuration.baseURL at frostd: bindTools with a forced tool_choice, withStructuredOutput over a zod schema by
// its default method (json_schema response_format) and by "functionCalling") and the Vercel AI SDK
// (createOpenAI({baseURL}).chat(model): generateText with tools and toolChoice "required", generateObject with a
// zod schema, streamText, and embed / embedMany over /v1/embeddings).
import { assert, check, eq } from "./openai_client_lib.mjs";
import { l2, TOOLS, validators } from "./openai_agents_lib.mjs";

// A zod schema with the bounds a random model cannot escape (maxLength, integer ranges, enum, maxItems).
function personZod(z) {
  return z.object({
    name: z.string().max(12).describe("the person's name"),
    age: z.number().int().min(0).max(120),
    tags: z.array(z.enum(["a", "b"])).max(3),
  });
}

// srv: {label, base, MODEL} (a real-template checkpoint).
export async function langchainChecks(ctx, srv) {
  const { lc, lcMessages, z, ajv } = ctx;
  const { label, base, MODEL } = srv;
  const validate = validators(ajv);
  // No maxTokens: forced output is bounded by its constraint, and a forced call list cut at max_tokens is no call.
  const make = (extra = {}) => new lc.ChatOpenAI({ model: MODEL, apiKey: "unused", temperature: 0, maxRetries: 0,
                                                    configuration: { baseURL: `${base}/v1` }, ...extra });
  const prompt = [new lcMessages.SystemMessage("Use the tools."), new lcMessages.HumanMessage("Book a table for 3 at noon.")];

  await check(`${label}: LangChain ChatOpenAI.bindTools, tool_choice named → AIMessage.tool_calls validate`, async () => {
    const msg = await make().bindTools(TOOLS, { tool_choice: "book_table" }).invoke(prompt);
    assert(Array.isArray(msg.tool_calls) && msg.tool_calls.length === 1,
           `tool_calls ${JSON.stringify(msg.tool_calls)} (invalid: ${JSON.stringify(msg.invalid_tool_calls)})`);
    eq(msg.invalid_tool_calls || [], [], "invalid_tool_calls");
    const c = msg.tool_calls[0];
    eq(c.name, "book_table", "name");
    assert(typeof c.id === "string" && c.id, `id ${c.id}`);
    assert(validate.book_table(c.args), `args ${JSON.stringify(c.args)}: ${JSON.stringify(validate.book_table.errors)}`);
    return JSON.stringify(c.args);
  });
  await check(`${label}: LangChain bindTools, tool_choice "any" (required), temperature 1 → every call validates`, async () => {
    const msg = await make({ temperature: 1 }).bindTools(TOOLS, { tool_choice: "any" }).invoke(prompt, { seed: 3 });
    eq(msg.invalid_tool_calls || [], [], "invalid_tool_calls");
    assert(msg.tool_calls.length >= 1, `no tool_calls: ${JSON.stringify(msg)}`);
    for (const c of msg.tool_calls) {
      assert(validate[c.name], `unknown tool ${c.name}`);
      assert(validate[c.name](c.args), `${c.name} args ${JSON.stringify(c.args)}: ${JSON.stringify(validate[c.name].errors)}`);
    }
    return msg.tool_calls.map((c) => c.name).join(",");
  });
  await check(`${label}: LangChain bindTools(...).stream(), tool_choice "any" → chunks concatenate to valid tool_calls`, async () => {
    let acc = null, chunks = 0;
    for await (const ch of await make({ temperature: 1 }).bindTools(TOOLS, { tool_choice: "any" }).stream(prompt, { seed: 5 })) {
      acc = acc ? acc.concat(ch) : ch;
      ++chunks;
    }
    eq(acc.invalid_tool_calls || [], [], "invalid_tool_calls");
    assert(acc.tool_calls.length >= 1, `no tool_calls after ${chunks} chunks: ${JSON.stringify(acc.tool_call_chunks)}`);
    for (const c of acc.tool_calls) {
      assert(validate[c.name] && validate[c.name](c.args), `${c.name}(${JSON.stringify(c.args)}) does not validate`);
    }
    return `${acc.tool_calls.length} call(s) in ${chunks} chunks`;
  });
  for (const method of [undefined, "functionCalling"]) {
    await check(`${label}: LangChain withStructuredOutput(zod, method ${method || "default (jsonSchema)"}) validates`, async () => {
      const schema = personZod(z);
      const model = make({ temperature: 1 }).withStructuredOutput(schema, { name: "person", ...(method ? { method } : {}) });
      const notes = [];
      for (const seed of [1, 2, 3]) {
        const obj = await model.invoke("Describe a person.", { seed });
        const r = schema.safeParse(obj);
        assert(r.success, `seed ${seed}: ${JSON.stringify(obj)} does not validate: ${r.success || r.error.message}`);
        notes.push(JSON.stringify(obj));
      }
      return notes[0];
    });
  }
  await check(`${label}: LangChain ChatOpenAI useResponsesApi → text`, async () => {
    const msg = await make({ useResponsesApi: true, maxTokens: 24 }).invoke("Say hello.");
    const text = typeof msg.content === "string" ? msg.content : msg.content.map((p) => p.text || "").join("");
    assert(typeof text === "string", `content ${JSON.stringify(msg.content)}`);
    return `${text.length} chars`;
  });
}

export async function aiSdkChecks(ctx, srv) {
  const { ai, aiOpenai, z } = ctx;
  const { label, base, MODEL } = srv;
  const provider = aiOpenai.createOpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
  const model = provider.chat(MODEL);
  const tools = {
    get_weather: ai.tool({ description: "Current weather in a city.",
                           inputSchema: z.object({ city: z.string().max(16), unit: z.enum(["celsius", "fahrenheit"]) }) }),
    book_table: ai.tool({ description: "Book a restaurant table.",
                          inputSchema: z.object({ party: z.number().int().min(1).max(12),
                                                  time: z.object({ hour: z.number().int().min(0).max(23),
                                                                   minute: z.number().int().min(0).max(59) }) }) }),
  };

  await check(`${label}: AI SDK generateText, tools + toolChoice required → toolCalls validate`, async () => {
    const notes = [];
    for (const seed of [1, 2]) {
      const r = await ai.generateText({ model, tools, toolChoice: "required", temperature: 1, seed, maxRetries: 0, prompt: "Weather in Rome, and a table for two at eight." });
      assert(r.toolCalls.length >= 1, `seed ${seed}: no toolCalls (finishReason ${r.finishReason}, text ${JSON.stringify(r.text)})`);
      for (const c of r.toolCalls) {
        assert(tools[c.toolName], `unknown tool ${c.toolName}`);
        assert(!c.invalid, `seed ${seed}: invalid tool call ${JSON.stringify(c)}`);
        const v = tools[c.toolName].inputSchema.safeParse(c.input);
        assert(v.success, `seed ${seed}: ${c.toolName} input ${JSON.stringify(c.input)}: ${v.success || v.error.message}`);
      }
      eq(r.finishReason, "tool-calls", "finishReason");
      notes.push(r.toolCalls.map((c) => c.toolName).join("+"));
    }
    return notes.join(", ");
  });
  await check(`${label}: AI SDK generateText, toolChoice {toolName} → that tool`, async () => {
    const r = await ai.generateText({ model, tools, toolChoice: { type: "tool", toolName: "book_table" }, temperature: 0,
                                      maxRetries: 0, prompt: "Dinner for 5 at 7pm please." });
    eq(r.toolCalls.map((c) => c.toolName), ["book_table"], "toolCalls");
    const v = tools.book_table.inputSchema.safeParse(r.toolCalls[0].input);
    assert(v.success, `input ${JSON.stringify(r.toolCalls[0].input)}`);
    return JSON.stringify(r.toolCalls[0].input);
  });
  await check(`${label}: AI SDK streamText, tools + toolChoice required → tool-call parts validate`, async () => {
    const r = ai.streamText({ model, tools, toolChoice: "required", temperature: 1, seed: 6, maxRetries: 0,
                              prompt: "Weather in Lima, and a table for six." });
    const calls = [];
    for await (const part of r.fullStream) {
      if (part.type === "tool-call") calls.push(part);
      if (part.type === "error") throw new Error(`stream error part: ${part.error && part.error.message}`);
    }
    assert(calls.length >= 1, `no tool-call parts (finishReason ${await r.finishReason})`);
    for (const c of calls) {
      assert(!c.invalid, `invalid tool call ${JSON.stringify(c)}`);
      const v = tools[c.toolName].inputSchema.safeParse(c.input);
      assert(v.success, `${c.toolName} input ${JSON.stringify(c.input)}`);
    }
    eq(await r.finishReason, "tool-calls", "finishReason");
    return calls.map((c) => c.toolName).join("+");
  });
  await check(`${label}: AI SDK generateObject(zod) validates`, async () => {
    const schema = personZod(z);
    const r = await ai.generateObject({ model, schema, temperature: 1, seed: 4, maxRetries: 0,
                                        prompt: "Describe a person." });
    const v = schema.safeParse(r.object);
    assert(v.success, `object ${JSON.stringify(r.object)}`);
    return JSON.stringify(r.object);
  });
  await check(`${label}: AI SDK streamText collects text`, async () => {
    const r = ai.streamText({ model, prompt: "Tell me a story.", temperature: 0, maxOutputTokens: 24, maxRetries: 0 });
    let text = "", parts = 0;
    for await (const d of r.textStream) { text += d; ++parts; }
    eq(await r.text, text, "text");
    const fr = await r.finishReason;
    assert(fr === "stop" || fr === "length", `finishReason ${fr}`);
    const g = await ai.generateText({ model, prompt: "Tell me a story.", temperature: 0, maxOutputTokens: 24, maxRetries: 0 });
    eq(g.text, text, "generateText == streamText at temperature 0");
    return `${parts} parts, ${text.length} chars, ${fr}`;
  });
  await check(`${label}: AI SDK embed / embedMany`, async () => {
    const em = (provider.embedding || provider.textEmbeddingModel).call(provider, MODEL);
    const one = await ai.embed({ model: em, value: "hello world", maxRetries: 0 });
    assert(Array.isArray(one.embedding) && one.embedding.length > 0, `embedding ${JSON.stringify(one.embedding).slice(0, 80)}`);
    assert(Math.abs(l2(one.embedding) - 1) < 1e-4, `norm ${l2(one.embedding)}`);
    const many = await ai.embedMany({ model: em, values: ["hello world", "goodbye", "tool calls"], maxRetries: 0 });
    eq(many.embeddings.length, 3, "embeddings");
    const d = Math.max(...many.embeddings[0].map((x, i) => Math.abs(x - one.embedding[i])));
    assert(d < 1e-5, `embedMany[0] differs from embed by ${d}`);
    return `dim ${one.embedding.length}`;
  });
}
