// Shared by the OpenAI client test's groups (tests/client/openai_client_test.mjs runs them): the npm packages,
// frostd processes, TLS and curl helpers, the check tally and its assertions, and the JSON helpers.
import { spawn, spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import { createRequire } from "node:module";
import path from "node:path";
import { Readable } from "node:stream";
import tls from "node:tls";
import { fileURLToPath } from "node:url";

export const SKIP = 77;
export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SOURCE_DIR = path.resolve(process.env.FROST_SOURCE_DIR || path.join(HERE, "..", ".."));
export const USER_TOKEN = "us3r-0pen41-T0ken-5b2e7c1d";
export const ADMIN_TOKEN = "adm1n-0pen41-T0ken-9a4f0e63";
export const START_TIMEOUT_MS = 120_000;

export function log(...a) { console.log(...a); }
export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// ---- the npm packages (skip when they cannot be had)

export function loadPackages() {
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

export function modelPath() {
  const inTree = path.join(SOURCE_DIR, "models", "stories260K");
  if (fs.existsSync(path.join(inTree, "config.json"))) return inTree;
  return path.resolve(SOURCE_DIR, "..", "shared", "models", "stories260K");
}

export function frostctlPath() {
  if (process.env.FROST_FROSTCTL) return process.env.FROST_FROSTCTL;
  const guess = path.resolve(path.dirname(process.env.FROST_FROSTD || "."), "..", "client", "frostctl");
  return fs.existsSync(guess) ? guess : null;
}

export const yamlStr = (s) => JSON.stringify(s);

export class Frostd {
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

export function safeRead(p) { try { return fs.readFileSync(p, "utf8"); } catch { return ""; } }

// ---- TLS: node's https / tls with an explicit trust (the SDK's global fetch cannot be given a CA without undici)

// GET over a NEW TLS connection (agent: false, or `agent`) → {status, body, fingerprint256 of the server's
// certificate, reused: a resumed TLS session}. `ca` undefined: node's default trust store (no test CA there).
export function httpsGet(url, { ca, agent = false, timeoutMs = 10_000 } = {}) {
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
export function plainHttpGet(url, timeoutMs = 5000) {
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
export function peerCertificate(port, ca, timeoutMs = 5000) {
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
export function httpsFetch(agent, onPeer = () => {}) {
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
export function openssl(cwd, ...args) {
  const r = spawnSync("openssl", args, { cwd, encoding: "utf8" });
  if (r.error) throw new Error(`openssl: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`openssl ${args.join(" ")} exited ${r.status}: ${r.stderr.trim()}`);
  return r.stdout;
}

// In `dir`: ca.pem/ca.key (a self-signed CA) and, signed by it for localhost / 127.0.0.1, a.pem/a.key
// and b.pem/b.key (different serials). EC P-256 keys: fast.
export function makeCerts(dir) {
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
export function curl(url, { method = "POST", token, data, dataFile, headers = {}, stream = false } = {}) {
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
export function errorObject(body) {
  let j;
  try { j = typeof body === "string" ? JSON.parse(body) : body; } catch { throw new Error(`not JSON: ${String(body).slice(0, 200)}`); }
  const e = j && j.error;
  if (!e || typeof e.message !== "string" || typeof e.type !== "string" || !("param" in e) || !("code" in e))
    throw new Error(`not an OpenAI error object: ${JSON.stringify(j).slice(0, 300)}`);
  return e;
}

// ---- checks

export const results = [];
export async function check(name, fn) {
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
export function assert(cond, msg) { if (!cond) throw new Error(msg); }
export function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}
export async function expectApiError(OpenAI, promise, status, what) {
  try {
    const r = await promise;
    throw new Error(`${what}: expected HTTP ${status}, got a response ${JSON.stringify(r).slice(0, 200)}`);
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    assert(e.status === status, `${what}: expected HTTP ${status}, got ${e.status}: ${e.message}`);
    return e;
  }
}
export function checkUsage(usage, maxTokens) {
  assert(usage && Number.isInteger(usage.prompt_tokens) && Number.isInteger(usage.completion_tokens),
         `usage missing: ${JSON.stringify(usage)}`);
  assert(usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert(usage.completion_tokens >= 1 && usage.completion_tokens <= maxTokens,
         `completion_tokens ${usage.completion_tokens} not in [1, ${maxTokens}]`);
  eq(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, "total_tokens");
}

// "complete" (one whole JSON value, objects only with `object`), "prefix" (a proper prefix of one), or "invalid".
export function jsonPrefix(s, object = false) {
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

export const PERSON_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer" },
    tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 3 },
  },
  required: ["name", "age"],
};

// The run's temporary directory (the runner sets it once; curl() writes large bodies there).
export let TMP;
export function setTmp(dir) { TMP = dir; }

// A frostd YAML for one model (no auth, all ports 0).
export function frostdYaml(modelPath, { chatTemplate, threads = 1, maxRunning = 32 } = {}) {
  return [
    "server:",
    '  listen: "127.0.0.1:0"',
    '  metrics_listen: "127.0.0.1:0"',
    "  drain_timeout_s: 5",
    "  http:",
    '    listen: "127.0.0.1:0"',
    "    max_body_bytes: 4194304",
    "model:",
    `  path: ${JSON.stringify(modelPath)}`,
    `  threads: ${threads}`,
    ...(chatTemplate ? [`  chat_template: ${JSON.stringify(chatTemplate)}`] : []),
    "engine:",
    `  max_running: ${maxRunning}`,
    "  max_waiting: 256",
    "  kv_cache_bytes: 128MiB",
    "",
  ].join("\n");
}
