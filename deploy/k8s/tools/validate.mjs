#!/usr/bin/env node
// Strict offline validation of Kubernetes manifests, as `kubectl apply --validate=strict` would judge
// them, without a cluster:
//
//   kubectl kustomize deploy/k8s/overlays/cpu | node deploy/k8s/tools/validate.mjs
//   node deploy/k8s/tools/validate.mjs rendered.yaml [more.yaml ...]
//
// Every object is checked against the OpenAPI schema of its apiVersion/kind from the npm packages
// that scripts/install_k8s_tools.sh installs (versions pinned in package-lock.json beside this file):
//   kubernetes-models                       built-in kinds, Kubernetes v1.36 OpenAPI
//   @kubernetes-models/prometheus-operator  ServiceMonitor and the other monitoring.coreos.com kinds
// in two passes:
//   1. the schema proper (types, formats, required fields, enums), with the validators those
//      packages compile from the OpenAPI definitions;
//   2. unknown fields, which those validators let through (the OpenAPI schemas do not close their
//      objects; the API server's strict field validation does): every key at every depth must be a
//      field of the type the schema gives that position. The field sets come from the packages'
//      type declarations (*.d.ts), generated from the same definitions, read with the TypeScript
//      parser.
// Plus what the API server's YAML decoding rejects: duplicate keys. YAML is read with YAML 1.1 rules
// (yes/no/on/off are booleans, 0440 is octal), as Kubernetes reads it.
//
// Custom resources (Gateway API, the inference extension's InferencePool, ...): --crds FILE|DIR (repeatable)
// names CustomResourceDefinition YAMLs, and objects of their kinds are checked against the CRD's schema
// (crd.mjs beside this file), strictly as well.
//
// An object whose apiVersion/kind no package and no CRD describes is an error, never skipped. Exit status: 0
// when every object is valid, 1 when any is not (or the input has no object), 2 on a usage or setup
// error. Options: --modules DIR (the node_modules the tools were installed into; default
// $FROST_K8S_TOOLS/node_modules, else ~/.cache/frost/k8s-tools/node_modules), --quiet (print only
// failures and the summary).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

// Packages holding models, searched in order: "<package>/<group>/<version>/<Kind>" (core group: "v1/<Kind>").
const MODEL_PACKAGES = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

// kubernetes-models also keeps the models of API versions that Kubernetes has since removed
// (extensions/v1beta1, policy/v1beta1, apps/v1beta2, ...), so a schema alone would accept them. A
// deployment should use the stable (GA) versions a cluster always serves: these are the GA group
// versions of Kubernetes v1.36 (beta versions are off by default or removed), plus the Prometheus
// Operator's monitoring.coreos.com/v1.
const GA_API_VERSIONS = new Set([
  "v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1",
  "apps/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2",
  "batch/v1", "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1", "events.k8s.io/v1",
  "flowcontrol.apiserver.k8s.io/v1", "networking.k8s.io/v1", "node.k8s.io/v1", "policy/v1",
  "rbac.authorization.k8s.io/v1", "resource.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1",
  "monitoring.coreos.com/v1",
]);

function usage(msg) {
  process.stderr.write(`validate.mjs: ${msg}\nusage: node validate.mjs [--modules DIR] [--crds FILE|DIR ...] [--quiet] [FILE|- ...]\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { modules: null, quiet: false, files: [], crds: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--modules") {
      if (i + 1 >= argv.length) usage("--modules needs a directory");
      opts.modules = argv[++i];
    } else if (a === "--crds") {
      if (i + 1 >= argv.length) usage("--crds needs a file or directory");
      opts.crds.push(argv[++i]);
    } else if (a === "--quiet") opts.quiet = true;
    else if (a === "--help" || a === "-h") usage("help");
    else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else opts.files.push(a);
  }
  if (!opts.modules) {
    const root = process.env.FROST_K8S_TOOLS || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "frost", "k8s-tools");
    opts.modules = path.join(root, "node_modules");
  }
  if (opts.files.length === 0) opts.files.push("-");
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const modulesDir = path.resolve(opts.modules);
for (const p of ["typescript", "yaml", ...MODEL_PACKAGES]) {
  if (!fs.existsSync(path.join(modulesDir, p, "package.json")))
    usage(`${path.join(modulesDir, p)} is missing: run scripts/install_k8s_tools.sh (or pass --modules)`);
}
const require = createRequire(path.join(modulesDir, "_resolve.js"));
const ts = require("typescript");
const YAML = require("yaml");
// The OpenAPI format "byte" (Secret data and the like) is base64. The API server decodes it with Go's
// encoding/base64, which skips line breaks, and kustomize wraps long values at 70 columns: accept
// line breaks too (the packages' own check would reject every wrapped value). Patched on the shared
// formats object before any schema runs, so every compiled validator sees it.
{
  const validateEntry = path.join(modulesDir, "@kubernetes-models", "validate", "dist", "index.js");
  const { formats } = await import(pathToFileURL(validateEntry).href);
  const strictBase64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
  if (!formats || !formats.byte) usage(`${validateEntry} has no "byte" format to adjust`);
  formats.byte.validate = (v) => typeof v === "string" && strictBase64.test(v.replace(/[\r\n]/g, ""));
}
const { CrdSchemas } = await import(pathToFileURL(path.join(path.dirname(new URL(import.meta.url).pathname), "crd.mjs")).href);
let crds = null;
try {
  crds = opts.crds.length ? new CrdSchemas(require, opts.crds) : null;
} catch (e) {
  usage(`cannot read the CRDs (${opts.crds.join(", ")}): ${e.message}`);
}
const pkgVersion = (p) => JSON.parse(fs.readFileSync(path.join(modulesDir, p, "package.json"), "utf8")).version;

// ---------------------------------------------------------------------------------------------------
// Field sets from the type declarations.

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

class Declarations {
  constructor() {
    this.files = new Map();
    this.propsCache = new Map();
  }

  // Parsed *.d.ts: local declarations, imports, exported aliases and re-exports.
  file(p) {
    let info = this.files.get(p);
    if (info) return info;
    const text = fs.readFileSync(p, "utf8");
    const sf = ts.createSourceFile(p, text, ts.ScriptTarget.Latest, false);
    info = { path: p, decls: new Map(), imports: new Map(), exports: new Map(), reexports: new Map(), star: [] };
    for (const st of sf.statements) {
      if (ts.isInterfaceDeclaration(st) || ts.isTypeAliasDeclaration(st)) {
        if (!info.decls.has(st.name.text)) info.decls.set(st.name.text, []);
        info.decls.get(st.name.text).push(st);
      } else if (ts.isImportDeclaration(st)) {
        const nb = st.importClause && st.importClause.namedBindings;
        if (nb && ts.isNamedImports(nb)) {
          for (const el of nb.elements)
            info.imports.set(el.name.text, { spec: st.moduleSpecifier.text, name: (el.propertyName || el.name).text });
        }
      } else if (ts.isExportDeclaration(st)) {
        const spec = st.moduleSpecifier ? st.moduleSpecifier.text : null;
        if (!st.exportClause) {
          if (spec) info.star.push(spec);
        } else if (ts.isNamedExports(st.exportClause)) {
          for (const el of st.exportClause.elements) {
            const local = (el.propertyName || el.name).text;
            if (spec) info.reexports.set(el.name.text, { spec, name: local });
            else info.exports.set(el.name.text, local);
          }
        }
      }
    }
    this.files.set(p, info);
    return info;
  }

  resolveModule(from, spec) {
    const tryFiles = (base) => {
      for (const c of [base.replace(/\.js$/, "") + ".d.ts", path.join(base, "index.d.ts")]) if (fs.existsSync(c)) return c;
      return null;
    };
    if (spec.startsWith(".")) return tryFiles(path.resolve(path.dirname(from), spec));
    const parts = spec.split("/");
    const pkg = spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
    const sub = parts.slice(spec.startsWith("@") ? 2 : 1).join("/");
    const pkgDir = path.join(modulesDir, pkg);
    if (sub) return tryFiles(path.join(pkgDir, sub));
    const pj = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
    let types = pj.types || pj.typings;
    if (!types && pj.exports) {
      const root = pj.exports["."] || pj.exports;
      types = root && (root.types || (root.import && root.import.types));
    }
    return types ? path.join(pkgDir, types) : tryFiles(path.join(pkgDir, "index"));
  }

  // The declarations (interface or type alias) that `name` means in file `p`.
  lookup(p, name, depth = 0) {
    if (depth > 20) return null;
    const info = this.file(p);
    const local = info.exports.get(name) || name;
    if (info.decls.has(local)) return { nodes: info.decls.get(local), file: p, name: local };
    const imp = info.imports.get(local) || info.reexports.get(name);
    if (imp) {
      const target = this.resolveModule(p, imp.spec);
      return target ? this.lookup(target, imp.name, depth + 1) : null;
    }
    for (const spec of info.star) {
      const target = this.resolveModule(p, spec);
      const r = target && this.lookup(target, name, depth + 1);
      if (r) return r;
    }
    return null;
  }

  // Fields of an interface (with those it extends) or of an inline object type:
  // { fields: Map(name -> {type, file}), index: {type, file} | null, name }.
  props(nodes, file, name) {
    const key = nodes[0];
    if (this.propsCache.has(key)) return this.propsCache.get(key);
    const out = { fields: new Map(), index: null, name };
    for (const node of nodes) {
      for (const m of node.members) {
        if (ts.isPropertySignature(m) && m.type) {
          const n = m.name;
          const fname = ts.isIdentifier(n) || ts.isStringLiteral(n) ? n.text : null;
          if (fname !== null) out.fields.set(fname, { type: m.type, file });
        } else if (ts.isIndexSignatureDeclaration(m) && m.type) {
          out.index = { type: m.type, file };
        }
      }
      for (const hc of node.heritageClauses || []) {
        for (const t of hc.types) {
          if (!ts.isIdentifier(t.expression)) throw new Error(`${file}: unsupported heritage clause in ${name}`);
          const base = this.lookup(file, t.expression.text);
          if (!base) throw new Error(`${file}: cannot resolve ${t.expression.text}, which ${name} extends`);
          const bp = this.props(base.nodes, base.file, base.name);
          for (const [k, v] of bp.fields) if (!out.fields.has(k)) out.fields.set(k, v);
          if (!out.index) out.index = bp.index;
        }
      }
    }
    this.propsCache.set(key, out);
    return out;
  }
}

const decls = new Declarations();

function editDistance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1].toLowerCase() === b[j - 1].toLowerCase() ? 0 : 1));
  return d[a.length][b.length];
}

const joinPath = (p, key) => (/^[A-Za-z_$][\w$]*$/.test(key) ? `${p}.${key}` : `${p}[${JSON.stringify(key)}]`);

// Does a union member describe objects (so that an object value must fit it)?
function describesObjects(t, file) {
  while (ts.isParenthesizedTypeNode(t)) t = t.type;
  if (ts.isTypeLiteralNode(t) || ts.isArrayTypeNode(t)) return true;
  if (t.kind === ts.SyntaxKind.AnyKeyword || t.kind === ts.SyntaxKind.UnknownKeyword || t.kind === ts.SyntaxKind.ObjectKeyword) return true;
  if (ts.isTypeReferenceNode(t) && ts.isIdentifier(t.typeName)) {
    if (t.typeName.text === "Array") return true;
    const r = decls.lookup(file, t.typeName.text);
    if (!r) return true;  // reported when checked
    const n = r.nodes[0];
    return ts.isInterfaceDeclaration(n) || describesObjects(n.type, r.file);
  }
  return false;
}

// Unknown fields in `value`, which the schema types as `t` (a type node of `file`), appended to errs.
function checkFields(value, t, file, p, errs) {
  while (ts.isParenthesizedTypeNode(t)) t = t.type;
  switch (t.kind) {
    case ts.SyntaxKind.AnyKeyword:
    case ts.SyntaxKind.UnknownKeyword:
    case ts.SyntaxKind.ObjectKeyword:
      return;  // free-form (e.g. RawExtension, JSON): any field goes
    default:
      break;
  }
  if (ts.isArrayTypeNode(t)) {
    if (Array.isArray(value)) value.forEach((v, i) => checkFields(v, t.elementType, file, `${p}[${i}]`, errs));
    return;
  }
  if (ts.isTypeLiteralNode(t)) {
    checkObject(value, decls.props([t], file, "object"), p, errs);
    return;
  }
  if (ts.isUnionTypeNode(t)) {
    if (!isPlainObject(value) && !Array.isArray(value)) return;  // scalars: pass 1 checks them
    const candidates = t.types.filter((m) => describesObjects(m, file));
    if (candidates.length === 0) return;  // pass 1 reports the wrong type
    let best = null;
    for (const m of candidates) {
      const e = [];
      checkFields(value, m, file, p, e);
      if (e.length === 0) return;
      if (!best || e.length < best.length) best = e;
    }
    errs.push(...best);
    return;
  }
  if (ts.isTypeReferenceNode(t)) {
    if (!ts.isIdentifier(t.typeName)) throw new Error(`${file}: unsupported type reference at ${p}`);
    const name = t.typeName.text;
    if (name === "Array" || name === "ReadonlyArray") {
      if (Array.isArray(value) && t.typeArguments) value.forEach((v, i) => checkFields(v, t.typeArguments[0], file, `${p}[${i}]`, errs));
      return;
    }
    const r = decls.lookup(file, name);
    if (!r) throw new Error(`${file}: cannot resolve type ${name} (at ${p}); the schema packages are incomplete`);
    const n = r.nodes[0];
    if (ts.isInterfaceDeclaration(n)) checkObject(value, decls.props(r.nodes, r.file, r.name), p, errs);
    else checkFields(value, n.type, r.file, p, errs);
    return;
  }
  // string, number, boolean, literals, indexed access: scalars, checked in pass 1.
}

function checkObject(value, props, p, errs) {
  if (!isPlainObject(value)) return;  // pass 1 reports the wrong type
  for (const [key, v] of Object.entries(value)) {
    const f = props.fields.get(key);
    if (f) {
      checkFields(v, f.type, f.file, joinPath(p, key), errs);
    } else if (props.index) {
      checkFields(v, props.index.type, props.index.file, joinPath(p, key), errs);
    } else {
      const names = [...props.fields.keys()];
      const near = names
        .map((n) => [editDistance(key, n), n])
        .filter(([d, n]) => d <= Math.max(2, Math.floor(n.length / 4)))
        .sort((a, b) => a[0] - b[0]);
      const hint = near.length ? ` (did you mean "${near[0][1]}"?)` : "";
      const type = props.name.replace(/^I(IoK8sApi|IoK8sApimachineryPkgApis|ComGithubPrometheusOperatorPrometheusOperatorPkgApis)?/, "");
      errs.push(`${joinPath(p, key)}: unknown field "${key}" in ${type}${hint}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// One object.

async function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z][A-Za-z0-9]*$/.test(kind))
    return { error: "apiVersion and kind must be strings" };
  const slash = apiVersion.indexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  if (!/^[a-z0-9.-]*$/.test(group) || !/^v[0-9a-z]+$/.test(version)) return { error: `malformed apiVersion "${apiVersion}"` };
  if (!GA_API_VERSIONS.has(apiVersion))
    return { error: `apiVersion "${apiVersion}" is not a stable API of Kubernetes v1.36 (removed, beta or unknown); use a GA version` };
  for (const pkg of MODEL_PACKAGES) {
    const base = path.join(modulesDir, pkg, group, version, kind);
    if (fs.existsSync(`${base}.js`) && fs.existsSync(`${base}.d.ts`)) {
      const mod = await import(pathToFileURL(`${base}.js`).href);
      const cls = mod[kind];
      if (typeof cls !== "function") return { error: `${pkg} has no model class ${kind}` };
      return { cls, dts: `${base}.d.ts`, pkg };
    }
  }
  return { error: `no schema for apiVersion "${apiVersion}", kind "${kind}" in ${MODEL_PACKAGES.join(", ")} (a typo, a removed API version, or a CRD these packages do not cover)` };
}

async function validateObject(obj) {
  if (!isPlainObject(obj)) return ["the document is not a mapping"];
  if (crds && crds.has(obj.apiVersion, obj.kind)) return crds.validate(obj);
  const m = await modelFor(obj.apiVersion, obj.kind);
  if (m.error) return [m.error];
  const errs = [];
  // Pass 1: the compiled OpenAPI schema.
  try {
    new m.cls(obj).validate();
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    for (const x of e.errors) {
      const where = x.instancePath ? x.instancePath.slice(1).split("/").map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~")) : [];
      let p = "";
      for (const s of where) p = /^\d+$/.test(s) ? `${p}[${s}]` : joinPath(p, s);
      const params = x.params && Object.keys(x.params).length ? ` ${JSON.stringify(x.params)}` : "";
      errs.push(`${p.replace(/^\./, "") || "(object)"}: ${x.message}${params}`);
    }
  }
  // Pass 2: unknown fields, from the type declared for the kind.
  const info = decls.file(m.dts);
  const iface = [...info.decls.values()].flat().find((d) => ts.isInterfaceDeclaration(d) && d.name.text === `I${obj.kind}`);
  if (!iface) throw new Error(`${m.dts}: no interface I${obj.kind}`);
  const ferrs = [];
  checkObject(obj, decls.props([iface], m.dts, `I${obj.kind}`), "", ferrs);
  errs.push(...ferrs.map((e) => e.replace(/^\./, "")));
  return errs;
}

// ---------------------------------------------------------------------------------------------------

function readInput(f) {
  return f === "-" ? fs.readFileSync(0, "utf8") : fs.readFileSync(f, "utf8");
}

let nObjects = 0;
let nBad = 0;
for (const f of opts.files) {
  const label = f === "-" ? "<stdin>" : f;
  let text;
  try {
    text = readInput(f);
  } catch (e) {
    usage(`cannot read ${label}: ${e.message}`);
  }
  const docs = YAML.parseAllDocuments(text, { version: "1.1", uniqueKeys: true, prettyErrors: true });
  const list = Array.isArray(docs) ? docs : [docs];
  for (const [i, doc] of list.entries()) {
    if (doc.errors && doc.errors.length) {
      nObjects++;
      nBad++;
      process.stdout.write(`FAIL ${label} document ${i + 1}: not valid YAML\n`);
      for (const e of doc.errors) process.stdout.write(`       ${e.message.split("\n")[0]}\n`);
      continue;
    }
    const obj = doc.toJS({ maxAliasCount: 100 });
    if (obj === null || obj === undefined) continue;  // empty document (a trailing ---)
    const objects = isPlainObject(obj) && typeof obj.kind === "string" && obj.kind.endsWith("List") && Array.isArray(obj.items) ? obj.items : [obj];
    for (const o of objects) {
      nObjects++;
      const md = isPlainObject(o) && isPlainObject(o.metadata) ? o.metadata : {};
      const name = `${isPlainObject(o) ? o.apiVersion : "?"} ${isPlainObject(o) ? o.kind : "?"} ${md.namespace ? md.namespace + "/" : ""}${md.name || "(no name)"}`;
      const errs = await validateObject(o);
      if (errs.length) {
        nBad++;
        process.stdout.write(`FAIL ${name}\n`);
        for (const e of errs) process.stdout.write(`       ${e}\n`);
      } else if (!opts.quiet) {
        process.stdout.write(`ok   ${name}\n`);
      }
    }
  }
}

const schemas = MODEL_PACKAGES.map((p) => `${p} ${pkgVersion(p)}`).join(", ") + (crds ? `; CRDs: ${crds.describe()}` : "");
if (nObjects === 0) {
  process.stdout.write(`validate: no Kubernetes object in the input (schemas: ${schemas})\n`);
  process.exit(1);
}
process.stdout.write(`validate: ${nObjects - nBad} of ${nObjects} objects valid, strict (schemas: ${schemas})\n`);
process.exit(nBad ? 1 : 0);
