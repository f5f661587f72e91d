// POST /v1/responses end to end: a frostd on stories260K (frost's default chat template) driven by the official
// OpenAI Node SDK — string and item inputs, forced function calls whose arguments validate against their schema,
// text.format json_schema, the event stream (types, order, sequence numbers, final response equal to the whole one
// at temperature 0), and the refusals of the stateful fields. Env: FROST_FROSTD, FROST_OPENAI_NODE_MODULES
// (optional). Exit 0 pass, 1 fail, 77 skip.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { Frostd, frostdYaml, loadPackages, log, modelPath, SKIP } from "./openai_client_lib.mjs";

if (!process.env.FROST_FROSTD || !fs.existsSync(process.env.FROST_FROSTD)) {
  log("SKIP: FROST_FROSTD is not set to a frostd binary");
  process.exit(SKIP);
}
const { OpenAI, Ajv } = loadPackages();
const model = modelPath();
if (!fs.existsSync(path.join(model, "config.json"))) {
  log(`SKIP: no model at ${model}`);
  process.exit(SKIP);
}
const MODEL = path.basename(model);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "frost-responses-"));
let failures = 0;
function check(ok, what, detail = "") {
  if (ok) {
    log(`ok   ${what}`);
  } else {
    failures++;
    log(`FAIL ${what} ${detail}`);
  }
}
const ajv = new Ajv({ strict: false });
// The items without their random ids (and the SDK's client-side parsed_arguments).
const shape = (r) => JSON.stringify(r.output.map((it) => ({ ...it, id: undefined, call_id: undefined,
                                                                  parsed_arguments: undefined })));

// Tools go to a second frostd with a compact template: frost's default template describes the tools at a length
// stories260K's 512-token context cannot hold (forced calls run under their schema whatever the template).
const compact = path.join(tmp, "compact.jinja");
fs.writeFileSync(compact, "{% if tools %}<|tools|>{% for t in tools %}{{ t.function.name }} {% endfor %}\n{% endif %}" +
  "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}");
const dt = new Frostd(tmp, "tools", frostdYaml(model, { chatTemplate: compact }));
const d = new Frostd(tmp, "responses", frostdYaml(model));
try {
  await d.start();
  await dt.start();
  const client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: "unused", maxRetries: 0 });
  const tclient = new OpenAI({ baseURL: `${dt.base}/v1`, apiKey: "unused", maxRetries: 0 });

  // String input + instructions.
  const base = { model: MODEL, instructions: "Be brief.", input: "Once upon a time", max_output_tokens: 24,
                 temperature: 0 };
  const r1 = await client.responses.create(base);
  check(r1.object === "response" && r1.id.startsWith("resp_"), "response object", JSON.stringify(r1).slice(0, 200));
  check(["completed", "incomplete"].includes(r1.status), `status ${r1.status}`);
  check(r1.output.length === 1 && r1.output[0].type === "message" && r1.output[0].role === "assistant" &&
        r1.output[0].content[0].type === "output_text", "one message item", shape(r1));
  check(typeof r1.output_text === "string" && r1.output_text.length > 0 &&
        r1.output_text === r1.output[0].content[0].text, "output_text", r1.output_text);
  check(r1.usage.input_tokens > 0 && r1.usage.output_tokens > 0 &&
        r1.usage.total_tokens === r1.usage.input_tokens + r1.usage.output_tokens, "usage", JSON.stringify(r1.usage));
  check(r1.store === false && r1.previous_response_id === null && r1.instructions === "Be brief." &&
        r1.max_output_tokens === 24, "echo fields");
  if (r1.status === "incomplete") check(r1.incomplete_details?.reason === "max_output_tokens", "incomplete_details");

  // Message items (system/developer, user parts, assistant output) and a function call round trip.
  const r2 = await client.responses.create({
    model: MODEL, temperature: 0, max_output_tokens: 16, store: false,
    input: [
      { role: "developer", content: "Tell stories." },
      { type: "message", role: "user", content: [{ type: "input_text", text: "Lily had a cat." }] },
      { type: "function_call", call_id: "call_1", name: "f", arguments: '{"q":1}' },
      { type: "function_call_output", call_id: "call_1", output: "red" },
      { role: "assistant", content: [{ type: "output_text", text: "The cat" }] },
      { role: "user", content: "Go on." },
    ],
  });
  check(r2.status !== "failed" && r2.output.length >= 1, "message items accepted", shape(r2));

  // Forced calls: every function_call's arguments validate against the function's schema.
  const weather = { type: "object", properties: { city: { enum: ["Paris", "Rome"] }, unit: { enum: ["c", "f"] } },
                    required: ["city", "unit"], additionalProperties: false };
  const tools = [{ type: "function", name: "get_weather", parameters: weather, strict: true },
                 { type: "function", name: "get_time", parameters: { type: "object", properties: {} }, strict: false }];
  const validate = ajv.compile(weather);
  for (const [what, extra] of [["required", { tool_choice: "required", parallel_tool_calls: false }],
                               ["named", { tool_choice: { type: "function", name: "get_weather" } }]]) {
    const r = await tclient.responses.create({ model: MODEL, input: "Weather?", tools, temperature: 0,
                                              max_output_tokens: 200, seed: 3, ...extra });
    const calls = r.output.filter((it) => it.type === "function_call");
    check(r.status === "completed" && calls.length >= 1 && calls.length === r.output.length,
          `tool_choice ${what}: function_call items`, shape(r));
    for (const c of calls) {
      check(c.call_id.startsWith("call_") && c.id.startsWith("fc_") && c.status === "completed", `${what}: call ids`);
      if (c.name === "get_weather") {
        check(validate(JSON.parse(c.arguments)), `${what}: arguments validate`, c.arguments);
      } else {
        check(what === "required" && c.name === "get_time", `${what}: a declared tool`, c.name);
      }
    }
    // Streamed: the same output at temperature 0 with the seed.
    const stream = tclient.responses.stream({ model: MODEL, input: "Weather?", tools, temperature: 0,
                                             max_output_tokens: 200, seed: 3, ...extra });
    const types = [];
    for await (const ev of stream) types.push(ev.type);
    const fin = await stream.finalResponse();
    check(shape(fin) === shape(r), `${what}: streamed == whole`, `${shape(fin)} vs ${shape(r)}`);
    check(types.includes("response.function_call_arguments.done") && types.at(-1) === "response.completed",
          `${what}: stream events`, types.join(","));
  }

  // text.format json_schema: output_text parses and validates.
  const person = { type: "object", properties: { name: { type: "string", maxLength: 12 },
                                                 age: { type: "integer", minimum: 0, maximum: 99 } },
                   required: ["name", "age"], additionalProperties: false };
  const rj = await client.responses.create({ model: MODEL, input: "A person as JSON", temperature: 0, max_output_tokens: 100,
    text: { format: { type: "json_schema", name: "person", schema: person, strict: true } } });
  let parsed = null;
  try { parsed = JSON.parse(rj.output_text); } catch { /* checked below */ }
  check(rj.status === "completed" && parsed !== null && ajv.compile(person)(parsed), "json_schema output validates",
        rj.output_text);

  // Streaming text: events in order, numbered, and the final response equal to the whole one.
  const whole = await client.responses.create({ ...base, seed: 11 });
  const s = await client.responses.create({ ...base, seed: 11, stream: true });
  const evs = [];
  for await (const ev of s) evs.push(ev);
  const types = evs.map((e) => e.type);
  const expect = ["response.created", "response.in_progress", "response.output_item.added",
                  "response.content_part.added", "response.output_text.delta"];
  check(JSON.stringify(types.slice(0, 5)) === JSON.stringify(expect), "stream starts", types.join(","));
  const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
  check(JSON.stringify(types.slice(-4, -1)) === JSON.stringify(tail) &&
        ["response.completed", "response.incomplete"].includes(types.at(-1)), "stream ends", types.join(","));
  check(evs.every((e, i) => e.sequence_number === i), "sequence numbers");
  const final = evs.at(-1).response;
  const deltas = evs.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  check(deltas === whole.output_text && final.output_text === whole.output_text && shape(final) === shape(whole) &&
        final.status === whole.status && JSON.stringify(final.usage) === JSON.stringify(whole.usage),
        "streamed == whole", `${JSON.stringify(deltas)} vs ${JSON.stringify(whole.output_text)}`);
  const raw = await (await fetch(`${d.base}/v1/responses`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...base, stream: true }) })).text();
  check(!raw.includes("[DONE]") && raw.startsWith("event: response.created\ndata: "), "raw SSE framing", raw.slice(0, 80));

  // Refusals.
  for (const [body, param] of [[{ previous_response_id: "resp_x" }, "previous_response_id"],
                               [{ conversation: "conv_x" }, "conversation"], [{ background: true }, "background"],
                               [{ frobnicate: 1 }, "frobnicate"]]) {
    try {
      await client.responses.create({ model: MODEL, input: "hi", ...body });
      check(false, `${param} refused`);
    } catch (e) {
      check(e.status === 400 && e.param === param, `${param} refused`, `${e.status} ${e.param} ${e.message}`);
    }
  }
  try {
    await client.responses.create({ model: "nope", input: "hi" });
    check(false, "unknown model refused");
  } catch (e) {
    check(e.status === 404, "unknown model refused", `${e.status} ${e.message}`);
  }
} catch (e) {
  failures++;
  log(`FAIL: ${e.stack || e}\n${d.logTail()}`);
} finally {
  await d.stop();
  await dt.stop();
}
log(failures ? `openai_responses_check: ${failures} failure(s)` : "openai_responses_check: all passed");
process.exit(failures ? 1 : 0);
