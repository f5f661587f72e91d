#!/usr/bin/env node
// The OpenAI-compatible HTTP API of frostd (server/http_server.h, server/openai_api.h) driven by the official
// OpenAI Node SDK (`openai`), with curl where the SDK hides the wire, and ajv to validate structured output.
//
// It starts its own frostd processes on port 0: stories260K with auth (a user and an admin token file), a
// ChatML-style chat template and a small server.http.max_body_bytes; and, for the disconnect check only,
// builtin:15m without auth (slow enough that a 2000-token stream is still running when the client goes); and
// for the "https:" checks, stories260K with server.tls (certificates made with the openssl CLI: a test CA and two
// leaves for localhost / 127.0.0.1), rotated from cert A to cert B on SIGHUP.
// One line per check ("ok NAME" / "FAIL NAME: why"); exit 1 on any failure, 77 (ctest: skipped) only when
// node, curl, openssl or the npm packages are unavailable.
//
//   FROST_FROSTD=build/server/frostd FROST_FROSTCTL=build/client/frostctl node tests/client/openai_client_test.mjs
//
// Environment:
//   FROST_FROSTD               frostd binary (required)
//   FROST_FROSTCTL             frostctl binary, for the gRPC equivalence check (default: beside frostd's build)
//   FROST_SOURCE_DIR           the source tree (default: two levels above this file); the model is
//                              $FROST_SOURCE_DIR/models/stories260K, else ../shared/models/stories260K
//   FROST_OPENAI_NODE_MODULES  a node_modules with `openai` and `ajv`; default: what
//                              scripts/install_openai_client.sh installs (run here; instant once cached)
//   FROST_KEEP_TMP=1           keep the temp directory (configs, frostd logs)

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {
  ADMIN_TOKEN, assert, check, eq, Frostd, loadPackages, log, modelPath, PERSON_SCHEMA, results, setTmp, SKIP, TMP,
  USER_TOKEN, yamlStr,
} from "./openai_client_lib.mjs";

// The checks live in groups (openai_client_{generate,errors,lifecycle,tls}.mjs) over the helpers of
// openai_client_lib.mjs; this file sets up the frostd processes and runs the groups in order.
import { errorChecks } from "./openai_client_errors.mjs";
import { generationChecks } from "./openai_client_generate.mjs";
import { lifecycleChecks } from "./openai_client_lifecycle.mjs";
import { tlsChecks } from "./openai_client_tls.mjs";

async function main() {
  if (!process.env.FROST_FROSTD || !fs.existsSync(process.env.FROST_FROSTD)) {
    log(`FAIL setup: FROST_FROSTD must name the frostd binary (got ${JSON.stringify(process.env.FROST_FROSTD)})`);
    return 1;
  }
  const { OpenAI, Ajv, version } = loadPackages();
  if (spawnSync("curl", ["--version"]).status !== 0) {
    log("SKIP: curl is not installed");
    return SKIP;
  }
  if (spawnSync("openssl", ["version"]).status !== 0) {
    log("SKIP: openssl is not installed");
    return SKIP;
  }
  const model = modelPath();
  if (!fs.existsSync(path.join(model, "config.json"))) {
    log(`FAIL setup: no stories260K at ${model}`);
    return 1;
  }
  const MODEL = path.basename(model);
  setTmp(fs.mkdtempSync(path.join(os.tmpdir(), "frost-openai-")));
  log(`openai_client_test: openai ${version}, node ${process.version}, frostd ${process.env.FROST_FROSTD}, model ${model}, tmp ${TMP}`);

  fs.writeFileSync(path.join(TMP, "user.token"), `${USER_TOKEN}\n`);
  fs.writeFileSync(path.join(TMP, "admin.token"), `${ADMIN_TOKEN}\n`);
  const template = path.join(TMP, "chat.jinja");
  fs.writeFileSync(template,
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}");
  const MAX_BODY = 4096;
  const main = new Frostd(TMP, "main", [
    "server:",
    '  listen: "127.0.0.1:0"',
    '  metrics_listen: "127.0.0.1:0"',
    "  drain_timeout_s: 5",
    "  http:",
    '    listen: "127.0.0.1:0"',
    `    max_body_bytes: ${MAX_BODY}`,
    "model:",
    `  path: ${yamlStr(model)}`,
    "  threads: 1",
    `  chat_template: ${yamlStr(template)}`,
    "auth:",
    `  user_token_file: ${yamlStr(path.join(TMP, "user.token"))}`,
    `  admin_token_file: ${yamlStr(path.join(TMP, "admin.token"))}`,
    "  require_for_inference: true",
    "",
  ].join("\n"));
  const slow = new Frostd(TMP, "slow", [
    "server:",
    '  listen: "127.0.0.1:0"',
    '  metrics_listen: "127.0.0.1:0"',
    "  drain_timeout_s: 5",
    "  http:",
    '    listen: "127.0.0.1:0"',
    "model:",
    '  path: "builtin:15m"',
    "  threads: 1",
    "engine:",
    "  max_running: 4",
    "  kv_cache_bytes: 64MiB",
    "",
  ].join("\n"));

  try {
    await main.start();
  } catch (e) {
    log(`FAIL start: ${e.message}`);
    main.kill();
    return 1;
  }
  log(`frostd (stories260K): grpc ${main.ports.grpc}, http ${main.ports.http}, metrics ${main.ports.metrics}`);
  const client = new OpenAI({ baseURL: `${main.base}/v1`, apiKey: USER_TOKEN, maxRetries: 0, timeout: 120_000 });
  const ajv = new Ajv({ allErrors: true, strict: false });
  const validatePerson = ajv.compile(PERSON_SCHEMA);
  const PROMPT = "Once upon a time, there was a little";

  // Shared by the groups: the completions and chat requests they repeat.
  const SAMPLE = { model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0.8, seed: 7 };
  const CHAT = { model: MODEL, max_tokens: 40, temperature: 0.8, seed: 7,
                 messages: [{ role: "system", content: "You tell short stories." },
                            { role: "user", content: "Tell me a story about a cat." }] };
  const ctx = { OpenAI, Ajv, model, MODEL, template, MAX_BODY, main, slow, client, ajv, validatePerson, PROMPT, SAMPLE,
    CHAT };

  await generationChecks(ctx);
  await errorChecks(ctx);
  await lifecycleChecks(ctx);
  const secure = await tlsChecks(ctx);
  // The end: still alive, then SIGTERM → exit 0.
  await check("frostd alive, SIGTERM → exit 0", async () => {
    assert(main.alive(), `frostd exited early: ${JSON.stringify(main.exit)}`);
    eq((await fetch(`${main.base}/health`)).status, 200, "/health");
    const e = await main.stop();
    eq(e, { code: 0, signal: null }, "exit");
  });
  main.kill();

  const failed = results.filter((r) => !r.ok);
  log(`openai_client_test: ${results.length - failed.length}/${results.length} checks ok`);
  if (failed.length) {
    log(`failed: ${failed.map((r) => r.name).join("; ")}`);
    log(`--- frostd (stories260K) log tail\n${main.logTail(30)}`);
    if (failed.some((r) => r.name.startsWith("https:")) && secure) log(`--- frostd (HTTPS) log tail\n${secure.logTail(30)}`);
  }
  if (!failed.length && !process.env.FROST_KEEP_TMP) fs.rmSync(TMP, { recursive: true, force: true });
  else log(`kept ${TMP}`);
  return failed.length ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => {
  log(`FAIL (unexpected): ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
