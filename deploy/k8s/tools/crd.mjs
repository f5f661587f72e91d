// Custom resources for validate.mjs: objects whose kind a CustomResourceDefinition defines (InferencePool,
// Gateway, HTTPRoute, ...) are checked against that CRD's openAPIV3Schema, the way the API server judges them
// once the CRD is installed, with `kubectl apply --validate=strict`:
//   1. the schema proper (types, formats, required fields, enums, patterns, lengths, min/max), compiled with
//      Ajv (the JSON Schema validator the kubernetes-models packages already bring, pinned by
//      package-lock.json);
//   2. unknown fields: a CRD schema is structural, so every key at every depth must be a property of the
//      schema at that position, unless the schema says x-kubernetes-preserve-unknown-fields or gives
//      additionalProperties (a map). The API server rejects the others under strict field validation.
// Not checked offline: the CRD's CEL rules (x-kubernetes-validations) and metadata beyond its type; a cluster
// with the CRD installed checks both.
//
// The CRDs come from files the caller names (--crds FILE|DIR): upstream's own YAML, kept verbatim as test
// data (tests/deploy/data/crds/README.md says where from). Only GA versions the CRD serves are accepted
// (vN, not vNalphaM / vNbetaM, and not marked deprecated), as for built-in kinds.

import fs from "node:fs";
import path from "node:path";

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const joinPath = (p, key) => (/^[A-Za-z_$][\w$]*$/.test(key) ? `${p}.${key}` : `${p}[${JSON.stringify(key)}]`);

// CRD files: a file, or every *.yaml / *.yml / *.json in a directory.
function crdFiles(p) {
  const st = fs.statSync(p);
  if (!st.isDirectory()) return [p];
  return fs.readdirSync(p).filter((f) => /\.(ya?ml|json)$/.test(f)).sort().map((f) => path.join(p, f));
}

export class CrdSchemas {
  // require: the createRequire of the tools' node_modules (ajv, ajv-formats, yaml come from there).
  constructor(require, sources) {
    const Ajv = require("ajv").default || require("ajv");
    const addFormats = require("ajv-formats").default || require("ajv-formats");
    const YAML = require("yaml");
    // strict off: CRD schemas carry OpenAPI and Kubernetes keywords (x-kubernetes-*, nullable) that are not
    // JSON Schema. unicodeRegExp off: the patterns are Go RE2, which Unicode-mode JS regexps reject in places
    // (escaped punctuation) where the plain mode reads them as RE2 does.
    this.ajv = new Ajv({ strict: false, allErrors: true, unicodeRegExp: false, validateFormats: true });
    addFormats(this.ajv, ["date-time", "ipv4", "ipv6", "uri", "hostname"]);
    const inRange = (lo, hi) => ({ type: "number", validate: (n) => Number.isInteger(n) && n >= lo && n <= hi });
    this.ajv.addFormat("int32", inRange(-(2 ** 31), 2 ** 31 - 1));
    this.ajv.addFormat("int64", inRange(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER));
    this.kinds = new Map();  // "group/version Kind" -> {schema, validate, crd, deprecated}
    this.files = [];
    for (const src of sources) {
      for (const f of crdFiles(src)) {
        this.files.push(f);
        for (const doc of YAML.parseAllDocuments(fs.readFileSync(f, "utf8"))) {
          const crd = doc.toJS();
          if (!isPlainObject(crd) || crd.kind !== "CustomResourceDefinition") continue;
          const { group, names, versions } = crd.spec || {};
          for (const v of versions || []) {
            if (!v.served || !v.schema || !v.schema.openAPIV3Schema) continue;
            this.kinds.set(`${group}/${v.name} ${names.kind}`,
                           { schema: v.schema.openAPIV3Schema, validate: null, crd: crd.metadata.name,
                             deprecated: v.deprecated === true });
          }
        }
      }
    }
  }

  describe() {
    return this.files.map((f) => path.basename(f)).join(", ");
  }

  has(apiVersion, kind) {
    return this.kinds.has(`${apiVersion} ${kind}`);
  }

  // Errors of one object of a CRD-defined kind (has() is true), as strings "path: message".
  validate(obj) {
    const entry = this.kinds.get(`${obj.apiVersion} ${obj.kind}`);
    const version = obj.apiVersion.slice(obj.apiVersion.indexOf("/") + 1);
    if (!/^v[0-9]+$/.test(version) || entry.deprecated)
      return [`apiVersion "${obj.apiVersion}" of ${entry.crd} is not a GA version (alpha, beta or deprecated); use a GA one`];
    if (!entry.validate) entry.validate = this.ajv.compile(entry.schema);
    const errs = [];
    if (!entry.validate(obj)) {
      for (const x of entry.validate.errors) {
        const where = x.instancePath ? x.instancePath.slice(1).split("/").map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~")) : [];
        let p = "";
        for (const s of where) p = /^\d+$/.test(s) ? `${p}[${s}]` : joinPath(p, s);
        const params = x.params && Object.keys(x.params).length ? ` ${JSON.stringify(x.params)}` : "";
        errs.push(`${p.replace(/^\./, "") || "(object)"}: ${x.message}${params}`);
      }
    }
    unknownFields(obj, entry.schema, "", errs);
    return errs;
  }
}

// Keys a structural schema does not declare, appended to errs.
function unknownFields(value, schema, p, errs) {
  if (!isPlainObject(schema)) return;
  if (Array.isArray(value)) {
    if (schema.items) value.forEach((v, i) => unknownFields(v, schema.items, `${p}[${i}]`, errs));
    return;
  }
  if (!isPlainObject(value) || schema["x-kubernetes-preserve-unknown-fields"] === true) return;
  const props = schema.properties;
  for (const [key, v] of Object.entries(value)) {
    if (props && Object.hasOwn(props, key)) {
      // metadata is the API server's ObjectMeta whatever the schema says (usually just `type: object`).
      if (!(p === "" && key === "metadata")) unknownFields(v, props[key], joinPath(p, key), errs);
    } else if (isPlainObject(schema.additionalProperties)) {
      unknownFields(v, schema.additionalProperties, joinPath(p, key), errs);
    } else if (schema.additionalProperties === true) {
      continue;
    } else if (p === "" && (key === "apiVersion" || key === "kind" || key === "metadata")) {
      continue;
    } else {
      const names = props ? Object.keys(props) : [];
      const near = names.find((n) => n.toLowerCase() === key.toLowerCase());
      errs.push(`${joinPath(p, key).replace(/^\./, "")}: unknown field "${key}"${near ? ` (did you mean "${near}"?)` : ""}`);
    }
  }
}
