// The OpenAI client test's HTTPS group (run by openai_client_test.mjs): server.tls on the OpenAI API with a
// test CA, plain HTTP and untrusting clients refused, certificate rotation on SIGHUP, SIGTERM. Returns the
// HTTPS frostd (for the runner's log tail on failure).
import fs from "node:fs";
import https from "node:https";
import path from "node:path";

import {
  assert, check, eq, Frostd, httpsFetch, httpsGet, makeCerts, peerCertificate, plainHttpGet, sleep, TMP, yamlStr,
} from "./openai_client_lib.mjs";

export async function tlsChecks(ctx) {
  const { OpenAI, model, MODEL, client, SAMPLE } = ctx;
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
  return secure;
}
