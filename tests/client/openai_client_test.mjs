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
import { spawn, spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import tls from "node:tls";
import { fileURLToPath } from "node:url";

const SKIP = 77;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const SOURCE_DIR = path.resolve(process.env.FROST_SOURCE_DIR || path.join(HERE, "..", ".."));
const USER_TOKEN = "us3r-0pen41-T0ken-5b2e7c1d";
const ADMIN_TOKEN = "adm1n-0pen41-T0ken-9a4f0e63";
const START_TIMEOUT_MS = 120_000;

function log(...a) { console.log(...a); }
function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// ---- the npm packages (skip when they cannot be had)

function loadPackages() {
  let nm = process.env.FROST_OPENAI_NODE_MODULES;
  if (!nm) {
    const script = path.join(SOURCE_DIR, "scripts", "install_openai_client.sh");
    const r = spawnSync("bash", [script], { encoding: "utf8" });
    if (r.status !== 0) {
      log(`SKIP: scripts/install_openai_client.sh failed (rc ${r.status}): ${(r.stderr || r.stdout || "").trim()}`);
      process.exit(SKIP);
    }
    const m = /^node_modules: (.*)$/m.exec(r.stdout);
    if (!m) {
      log(`SKIP: scripts/install_openai_client.sh printed no node_modules line: ${r.stdout}`);
      process.exit(SKIP);
    }
    nm = m[1].trim();
  }
  try {
    const req = createRequire(path.join(path.dirname(nm), "package.json"));
    const openaiMod = req("openai");
    const OpenAI = openaiMod.default || openaiMod.OpenAI || openaiMod;
    const ajvMod = req("ajv");
    const Ajv = ajvMod.default || ajvMod;
    const version = JSON.parse(fs.readFileSync(path.join(nm, "openai", "package.json"), "utf8")).version;
    return { OpenAI, Ajv, version };
  } catch (e) {
    log(`SKIP: cannot load openai / ajv from ${nm}: ${e.message}`);
    process.exit(SKIP);
  }
}

// ---- frostd

function modelPath() {
  const inTree = path.join(SOURCE_DIR, "models", "stories260K");
  if (fs.existsSync(path.join(inTree, "config.json"))) return inTree;
  return path.resolve(SOURCE_DIR, "..", "shared", "models", "stories260K");
}

function frostctlPath() {
  if (process.env.FROST_FROSTCTL) return process.env.FROST_FROSTCTL;
  const guess = path.resolve(path.dirname(process.env.FROST_FROSTD || "."), "..", "client", "frostctl");
  return fs.existsSync(guess) ? guess : null;
}

const yamlStr = (s) => JSON.stringify(s);

class Frostd {
  // opts.args: extra command-line flags; opts.ca: a PEM CA (the OpenAI API is HTTPS: readiness and base use it).
  constructor(tmp, name, yaml, opts = {}) {
    this.tmp = tmp;
    this.name = name;
    this.args = opts.args || [];
    this.ca = opts.ca || null;
    this.config = path.join(tmp, `${name}.yaml`);
    this.portFile = path.join(tmp, `${name}.ports`);
    this.logPath = path.join(tmp, `${name}.log`);
    fs.writeFileSync(this.config, yaml);
    this.exit = null;
  }

  async start() {
    const env = { ...process.env };
    if (/\bavx512f\b/.test(safeRead("/proc/cpuinfo"))) env.OPENBLAS_CORETYPE = "SkylakeX";
    const out = fs.openSync(this.logPath, "a");
    // Its own state directory: the default (./frost-state) is locked by one frostd at a time.
    const stateDir = path.join(this.tmp, `${this.name}-state`);
    this.proc = spawn(process.env.FROST_FROSTD, ["--config", this.config, "--port-file", this.portFile, "--state-dir", stateDir,
                                                ...this.args],
                      { stdio: ["ignore", out, out], env });
    this.exited = new Promise((resolve) => this.proc.on("exit", (code, signal) => {
      this.exit = { code, signal };
      resolve(this.exit);
    }));
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (true) {
      if (this.exit) throw new Error(`${this.name}: frostd exited (${JSON.stringify(this.exit)}) before writing its ports\n${this.logTail()}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: no port file after ${START_TIMEOUT_MS} ms\n${this.logTail()}`);
      const text = safeRead(this.portFile);
      const ports = Object.fromEntries(text.split("\n").filter((l) => l.includes("=")).map((l) => {
        const [k, v] = l.split("=");
        return [k.trim(), Number(v)];
      }));
      if (ports.grpc && ports.metrics && ports.http) {
        this.ports = ports;
        break;
      }
      await sleep(50);
    }
    this.base = `${this.ca ? "https" : "http"}://127.0.0.1:${this.ports.http}`;
    this.grpcAddr = `127.0.0.1:${this.ports.grpc}`;
    this.metricsUrl = `http://127.0.0.1:${this.ports.metrics}/metrics`;
    while (true) {  // readiness: /health answers 200 once the model is loaded
      if (this.exit) throw new Error(`${this.name}: frostd exited (${JSON.stringify(this.exit)}) while loading\n${this.logTail()}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: /health not 200 after ${START_TIMEOUT_MS} ms\n${this.logTail()}`);
      try {
        const r = this.ca ? await httpsGet(`${this.base}/health`, { ca: this.ca }) : await fetch(`${this.base}/health`);
        if (r.status === 200) break;
      } catch { /* not listening yet */ }
      await sleep(100);
    }
    return this;
  }

  alive() { return this.proc && !this.exit; }

  async stop(timeoutMs = 30_000) {
    if (!this.alive()) return this.exit;
    this.proc.kill("SIGTERM");
    const t = setTimeout(() => { if (this.alive()) this.proc.kill("SIGKILL"); }, timeoutMs);
    const e = await this.exited;
    clearTimeout(t);
    return e;
  }

  kill() { if (this.alive()) this.proc.kill("SIGKILL"); }

  logTail(n = 25) {
    return safeRead(this.logPath).split("\n").slice(-n).map((l) => `    | ${l}`).join("\n");
  }

  async metrics() {
    const r = await fetch(this.metricsUrl);
    const text = await r.text();
    const get = (re) => {
      let sum = null;
      for (const line of text.split("\n")) {
        if (line.startsWith("#")) continue;
        const m = re.exec(line);
        if (m) sum = (sum ?? 0) + Number(m[1]);
      }
      return sum;
    };
    return {
      running: get(/^frost_requests_running(?:\{[^}]*\})? (\S+)$/),
      kvBytesInUse: get(/^frost_kv_cache_bytes_in_use(?:\{[^}]*\})? (\S+)$/),
      kvBlocksUsed: get(/^frost_kv_cache_blocks\{[^}]*state="used"[^}]*\} (\S+)$/),
    };
  }
}

function safeRead(p) { try { return fs.readFileSync(p, "utf8"); } catch { return ""; } }

// ---- TLS: node's https / tls with an explicit trust (the SDK's global fetch cannot be given a CA without undici)

// GET over a NEW TLS connection (agent: false, or `agent`) → {status, body, fingerprint256 of the server's
// certificate, reused: a resumed TLS session}. `ca` undefined: node's default trust store (no test CA there).
function httpsGet(url, { ca, agent = false, timeoutMs = 10_000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, agent, timeout: timeoutMs }, (res) => {
      const fp = res.socket.getPeerCertificate().fingerprint256;
      const reused = res.socket.isSessionReused();
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode, body, fingerprint256: fp, reused }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}

// A plain-HTTP GET → {status, body}, or rejects (connection error, parse error, timeout).
function plainHttpGet(url, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: timeoutMs }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error(`no answer in ${timeoutMs} ms`), { code: "TEST_TIMEOUT" })));
    req.on("error", reject);
  });
}

// The certificate a NEW TLS connection to 127.0.0.1:port presents (verified against `ca`).
function peerCertificate(port, ca, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const sock = tls.connect({ host: "127.0.0.1", port, ca }, () => {
      const c = sock.getPeerCertificate();
      sock.end();
      resolve(c);
    });
    sock.setTimeout(timeoutMs, () => sock.destroy(new Error(`TLS handshake: no answer in ${timeoutMs} ms`)));
    sock.on("error", reject);
  });
}

// A fetch for the OpenAI SDK (its `fetch` option) over node's https with `agent`; `onPeer` gets the
// fingerprint256 of the certificate each response came over, or "resumed" on a resumed TLS session (no
// certificate is sent then: give the agent maxCachedSessions: 0 to see one every time).
function httpsFetch(agent, onPeer = () => {}) {
  return (input, init = {}) => new Promise((resolve, reject) => {
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
    const headers = {};
    new Headers(init.headers || {}).forEach((v, k) => { headers[k] = v; });
    const req = https.request(url, { method: init.method || "GET", headers, agent, signal: init.signal || undefined }, (res) => {
      onPeer(res.socket.isSessionReused() ? "resumed" : res.socket.getPeerCertificate().fingerprint256);
      const h = new Headers();
      for (const [k, v] of Object.entries(res.headers)) {
        for (const x of Array.isArray(v) ? v : [v]) h.append(k, x);
      }
      const noBody = res.statusCode === 204 || res.statusCode === 304 || (init.method || "GET") === "HEAD";
      resolve(new Response(noBody ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: h }));
    });
    req.on("error", reject);
    const body = init.body;
    if (body === undefined || body === null) req.end();
    else if (typeof body === "string" || body instanceof Uint8Array) req.end(body);
    else if (body instanceof ArrayBuffer) req.end(Buffer.from(body));
    else reject(new Error(`httpsFetch: unsupported body ${Object.prototype.toString.call(body)}`));
  });
}

// openssl ARGS... in `cwd`; throws with its stderr on failure.
function openssl(cwd, ...args) {
  const r = spawnSync("openssl", args, { cwd, encoding: "utf8" });
  if (r.error) throw new Error(`openssl: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`openssl ${args.join(" ")} exited ${r.status}: ${r.stderr.trim()}`);
  return r.stdout;
}

// In `dir`: ca.pem/ca.key (a self-signed CA) and, signed by it for localhost / 127.0.0.1, a.pem/a.key
// and b.pem/b.key (different serials). EC P-256 keys: fast.
function makeCerts(dir) {
  fs.mkdirSync(dir, { recursive: true });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl(dir, "req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=frost test CA",
          "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  fs.writeFileSync(path.join(dir, "leaf.ext"), [
    "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    "",
  ].join("\n"));
  const out = { ca: fs.readFileSync(path.join(dir, "ca.pem")) };
  for (const [name, serial] of [["a", "0x0A11CE"], ["b", "0x0B0B0B"]]) {
    openssl(dir, "req", "-new", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=localhost/OU=frost test ${name}`);
    openssl(dir, "x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", serial,
            "-days", "2", "-extfile", "leaf.ext", "-out", `${name}.pem`);
    const pem = fs.readFileSync(path.join(dir, `${name}.pem`));
    out[name] = { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`), pem,
                  fingerprint256: new crypto.X509Certificate(pem).fingerprint256 };
  }
  return out;
}

// ---- the wire: curl (what the SDK hides) and fetch (the fuzz loop)

// curl ARGS... → {status, body, headers}; `data` goes through a file (--data-binary @file) so any byte can be sent.
function curl(url, { method = "POST", token, data, dataFile, headers = {}, stream = false } = {}) {
  const args = ["-sS", "-X", method, "-D", "-", "--max-time", "60", url];
  if (stream) args.push("-N");
  if (token) args.push("-H", `Authorization: Bearer ${token}`);
  for (const [k, v] of Object.entries(headers)) args.push("-H", `${k}: ${v}`);
  if (data !== undefined) {
    dataFile = path.join(TMP, `body-${process.pid}-${Math.random().toString(36).slice(2)}`);
    fs.writeFileSync(dataFile, data);
  }
  if (dataFile) args.push("-H", "Content-Type: application/json", "-H", "Expect:", "--data-binary", `@${dataFile}`);
  const r = spawnSync("curl", args, { encoding: "latin1", maxBuffer: 64 << 20 });
  if (data !== undefined) fs.rmSync(dataFile, { force: true });
  if (r.error) throw new Error(`curl: ${r.error.message}`);
  // A server that answers early (413) may reset the connection while curl still sends: keep what came back.
  if (r.status !== 0 && !/^HTTP\/\S+ \d+/.test(r.stdout || "")) throw new Error(`curl exited ${r.status}: ${r.stderr}`);
  // Headers of the last response (skip "100 Continue").
  let raw = r.stdout;
  let head, body;
  while (true) {
    let i = raw.indexOf("\r\n\r\n");
    if (i < 0) i = raw.length;
    head = raw.slice(0, i);
    body = raw.slice(i + 4);
    if (/^HTTP\/\S+ 100/.test(head)) { raw = body; continue; }
    break;
  }
  const status = Number(/^HTTP\/\S+ (\d+)/.exec(head)[1]);
  const hdrs = {};
  for (const line of head.split("\r\n").slice(1)) {
    const i = line.indexOf(":");
    if (i > 0) hdrs[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers: hdrs, body: Buffer.from(body, "latin1").toString("utf8") };
}

// An OpenAI error object: {"error": {"message": string, "type": string, "param": ..., "code": ...}}.
function errorObject(body) {
  let j;
  try { j = typeof body === "string" ? JSON.parse(body) : body; } catch { throw new Error(`not JSON: ${String(body).slice(0, 200)}`); }
  const e = j && j.error;
  if (!e || typeof e.message !== "string" || typeof e.type !== "string" || !("param" in e) || !("code" in e))
    throw new Error(`not an OpenAI error object: ${JSON.stringify(j).slice(0, 300)}`);
  return e;
}

// ---- checks

const results = [];
async function check(name, fn) {
  const t0 = Date.now();
  try {
    const note = await fn();
    results.push({ name, ok: true });
    log(`ok   ${name}${note ? ` (${note})` : ""} [${((Date.now() - t0) / 1000).toFixed(1)}s]`);
  } catch (e) {
    results.push({ name, ok: false });
    log(`FAIL ${name}: ${e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}
async function expectApiError(OpenAI, promise, status, what) {
  try {
    const r = await promise;
    throw new Error(`${what}: expected HTTP ${status}, got a response ${JSON.stringify(r).slice(0, 200)}`);
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    assert(e.status === status, `${what}: expected HTTP ${status}, got ${e.status}: ${e.message}`);
    return e;
  }
}
function checkUsage(usage, maxTokens) {
  assert(usage && Number.isInteger(usage.prompt_tokens) && Number.isInteger(usage.completion_tokens),
         `usage missing: ${JSON.stringify(usage)}`);
  assert(usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert(usage.completion_tokens >= 1 && usage.completion_tokens <= maxTokens,
         `completion_tokens ${usage.completion_tokens} not in [1, ${maxTokens}]`);
  eq(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, "total_tokens");
}

// "complete" (one whole JSON value, objects only with `object`), "prefix" (a proper prefix of one), or "invalid".
function jsonPrefix(s, object = false) {
  const INC = {}, ERR = {};
  let i = 0;
  const n = s.length;
  const need = () => { if (i >= n) throw INC; };
  const ws = () => { while (i < n && " \t\n\r".includes(s[i])) ++i; };
  const lit = (w) => { for (const ch of w) { need(); if (s[i] !== ch) throw ERR; ++i; } };
  const str = () => {
    ++i;
    for (;;) {
      need();
      const c = s[i];
      if (c === '"') { ++i; return; }
      if (c === "\\") {
        ++i; need();
        if (s[i] === "u") { ++i; for (let k = 0; k < 4; ++k) { need(); if (!/[0-9a-fA-F]/.test(s[i])) throw ERR; ++i; } continue; }
        if (!'"\\/bfnrt'.includes(s[i])) throw ERR;
        ++i; continue;
      }
      if (c < " ") throw ERR;
      ++i;
    }
  };
  const num = () => {
    const m = /^[-+0-9.eE]*/.exec(s.slice(i))[0];
    i += m.length;
    if (i >= n) { if (/^-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][-+]?[0-9]*)?$/.test(m)) throw INC; throw ERR; }
    if (!/^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$/.test(m)) throw ERR;
  };
  const value = () => {
    ws(); need();
    const c = s[i];
    if (c === "{") {
      ++i; ws(); need();
      if (s[i] === "}") { ++i; return; }
      for (;;) {
        ws(); need(); if (s[i] !== '"') throw ERR; str();
        ws(); need(); if (s[i] !== ":") throw ERR; ++i;
        value(); ws(); need();
        if (s[i] === ",") { ++i; continue; }
        if (s[i] === "}") { ++i; return; }
        throw ERR;
      }
    }
    if (c === "[") {
      ++i; ws(); need();
      if (s[i] === "]") { ++i; return; }
      for (;;) {
        value(); ws(); need();
        if (s[i] === ",") { ++i; continue; }
        if (s[i] === "]") { ++i; return; }
        throw ERR;
      }
    }
    if (c === '"') return str();
    if (c === "-" || (c >= "0" && c <= "9")) return num();
    if (c === "t") return lit("true");
    if (c === "f") return lit("false");
    if (c === "n") return lit("null");
    throw ERR;
  };
  try {
    ws(); need();
    if (object && s[i] !== "{") return "invalid";
    value(); ws();
    return i === n ? "complete" : "invalid";
  } catch (e) {
    if (e === INC) return "prefix";
    if (e === ERR) return "invalid";
    throw e;
  }
}

const PERSON_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer" },
    tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 3 },
  },
  required: ["name", "age"],
};

let TMP;

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
  TMP = fs.mkdtempSync(path.join(os.tmpdir(), "frost-openai-"));
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
  const SAMPLE = { model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0.8, seed: 7 };
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
  const CHAT = { model: MODEL, max_tokens: 40, temperature: 0.8, seed: 7,
                 messages: [{ role: "system", content: "You tell short stories." },
                            { role: "user", content: "Tell me a story about a cat." }] };
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

  // 10. HTTPS: server.tls on the OpenAI API (same port, no plaintext), trust only the test CA, then rotation
  // on SIGHUP: replaced certificate files serve new connections. reload_interval_s is long (3600) so that
  // only the SIGHUP can have re-read them.
  let secure = null, certs = null, secureClient = null, lastPeer = null;
  const tlsDir = path.join(TMP, "tls");
  const servedCert = path.join(tlsDir, "served.pem"), servedKey = path.join(tlsDir, "served.key");
  await check("https: start with cert A, /health over HTTPS", async () => {
    certs = makeCerts(tlsDir);
    fs.copyFileSync(certs.a.cert, servedCert);
    fs.copyFileSync(certs.a.key, servedKey);
    secure = new Frostd(TMP, "https", [
      "server:",
      "  drain_timeout_s: 5",
      "  tls:",
      `    cert_file: ${yamlStr(servedCert)}`,
      `    key_file: ${yamlStr(servedKey)}`,
      "    reload_interval_s: 3600",
      "model:",
      `  path: ${yamlStr(model)}`,
      "  threads: 1",
      "",
    ].join("\n"), { ca: certs.ca, args: ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                          "--http-listen", "127.0.0.1:0"] });
    await secure.start();
    const h = await httpsGet(`${secure.base}/health`, { ca: certs.ca });
    eq(h.status, 200, "/health status");
    eq(h.fingerprint256, certs.a.fingerprint256, "served certificate (A)");
    return `http ${secure.ports.http}`;
  });
  await check("https: completions (OpenAI SDK, trusting only the test CA)", async () => {
    assert(secure && secure.alive(), "no HTTPS frostd");
    // No keep-alive and no TLS session cache: each request a new connection with a full handshake.
    const agent = new https.Agent({ ca: certs.ca, keepAlive: false, maxCachedSessions: 0 });
    secureClient = new OpenAI({ baseURL: `${secure.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000,
                                fetch: httpsFetch(agent, (fp) => { lastPeer = fp; }) });
    const r = await secureClient.completions.create({ ...SAMPLE, max_tokens: 16 });
    assert(r.object === "text_completion", `object ${r.object}`);
    assert(typeof r.choices[0].text === "string" && r.choices[0].text.length > 0, `text ${JSON.stringify(r.choices[0].text)}`);
    eq(lastPeer, certs.a.fingerprint256, "certificate the completion came over (A)");
    eq((await secureClient.models.list()).data.map((m) => m.id), [MODEL], "model ids");
    return `${r.usage.completion_tokens} tokens: ${JSON.stringify(r.choices[0].text.slice(0, 40))}...`;
  });
  await check("https: plain HTTP to the HTTPS port fails", async () => {
    assert(secure && secure.alive(), "no HTTPS frostd");
    let r;
    try {
      r = await plainHttpGet(`http://127.0.0.1:${secure.ports.http}/health`);
    } catch (e) {
      assert(e.code !== "TEST_TIMEOUT", `plain HTTP hung instead of failing: ${e.message}`);
      // frostd still serves HTTPS after it.
      eq((await httpsGet(`${secure.base}/health`, { ca: certs.ca })).status, 200, "/health over HTTPS afterwards");
      return `${e.code || ""} ${e.message}`.trim();
    }
    throw new Error(`plain HTTP got an HTTP ${r.status} answer: ${JSON.stringify(r.body.slice(0, 200))}`);
  });
  await check("https: a client without the test CA fails verification", async () => {
    assert(secure && secure.alive(), "no HTTPS frostd");
    let err = null;
    try {
      const r = await httpsGet(`${secure.base}/health`);  // node's default trust store
      throw new Error(`untrusted HTTPS got HTTP ${r.status}`);
    } catch (e) {
      if (e.message.startsWith("untrusted HTTPS got")) throw e;
      err = e;
    }
    const verifyCodes = ["UNABLE_TO_VERIFY_LEAF_SIGNATURE", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
                         "DEPTH_ZERO_SELF_SIGNED_CERT"];
    assert(verifyCodes.includes(err.code), `not a certificate-verification error: ${err.code} ${err.message}`);
    // The SDK with its default fetch (system trust): a connection error, no response.
    const plain = new OpenAI({ baseURL: `${secure.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 10_000 });
    try {
      const r = await plain.completions.create({ ...SAMPLE, max_tokens: 2 });
      throw new Error(`SDK without the CA got a completion: ${JSON.stringify(r).slice(0, 120)}`);
    } catch (e) {
      assert(e instanceof OpenAI.APIConnectionError, `SDK without the CA: ${e.constructor.name}: ${e.message}`);
    }
    return err.code;
  });
  await check("https: SIGHUP rotates to cert B for new connections", async () => {
    assert(secure && secure.alive(), "no HTTPS frostd");
    // (A client that caches TLS sessions, to report whether a session from cert A still resumes after the rotation.)
    const resumer = new https.Agent({ ca: certs.ca, keepAlive: false });
    eq((await httpsGet(`${secure.base}/health`, { agent: resumer })).fingerprint256, certs.a.fingerprint256, "resumer: A");
    // Replace the served files (each by rename: never half-written), check nothing changes without a reload...
    for (const [src, dst] of [[certs.b.cert, servedCert], [certs.b.key, servedKey]]) {
      fs.copyFileSync(src, `${dst}.new`);
      fs.renameSync(`${dst}.new`, dst);
    }
    eq((await peerCertificate(secure.ports.http, certs.ca)).fingerprint256, certs.a.fingerprint256,
       "before SIGHUP: still A");
    // ...then SIGHUP: within 3 s a new connection presents B.
    const t0 = Date.now();
    secure.proc.kill("SIGHUP");
    let peer;
    while (true) {
      peer = await peerCertificate(secure.ports.http, certs.ca);
      if (peer.fingerprint256 === certs.b.fingerprint256) break;
      assert(peer.fingerprint256 === certs.a.fingerprint256, `neither A nor B: serial ${peer.serialNumber}`);
      if (Date.now() - t0 > 3000) throw new Error(`still cert A (serial ${peer.serialNumber}) 3 s after SIGHUP\n${secure.logTail(8)}`);
      await sleep(100);
    }
    const ms = Date.now() - t0;
    assert(/^0*B0B0B$/i.test(peer.serialNumber), `serial ${peer.serialNumber}`);
    // A completion over a new connection: served with B.
    lastPeer = null;
    const r = await secureClient.completions.create({ ...SAMPLE, max_tokens: 16 });
    assert(r.choices[0].text.length > 0, "empty completion after rotation");
    eq(lastPeer, certs.b.fingerprint256, "certificate the completion came over (B)");
    eq((await httpsGet(`${secure.base}/health`, { ca: certs.ca })).status, 200, "/health after rotation");
    const resumed = await httpsGet(`${secure.base}/health`, { agent: resumer });
    eq(resumed.status, 200, "/health with a session cached before the rotation");
    return `B (serial ${peer.serialNumber}) after ${ms} ms; a TLS session cached under A ${resumed.reused ? "still resumes" : "is not resumed (full handshake, " + (resumed.fingerprint256 === certs.b.fingerprint256 ? "B" : "?") + ")"}`;
  });
  await check("https: SIGTERM → exit 0", async () => {
    assert(secure && secure.alive(), `HTTPS frostd not running: ${JSON.stringify(secure && secure.exit)}`);
    eq(await secure.stop(), { code: 0, signal: null }, "exit");
  });
  if (secure) secure.kill();

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
