// Validates Kubernetes objects offline against the Kubernetes OpenAPI schema, as compiled into
// the npm package kubernetes-models (4.x), and refuses fields the schema does not know.
// Usage: node validate_k8s.js <tools dir with node_modules> FILE.yaml...   (multi-document YAML)
// Prints one line per object; exit status 1 when any object is invalid.
//
// kubernetes-models checks types, required fields, enums and formats, but ignores fields its
// schema does not declare (a misspelled `imagePullPolicy` or `volumeMount` would pass). So each
// object is validated through a Proxy that records which properties the validator reads: every
// declared property is read (at least to test for presence), so a property it never read is one
// the schema does not know. Objects the validator enumerates (maps: labels, ConfigMap data) count
// as fully known.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
  console.error("usage: node validate_k8s.js <tools dir> FILE.yaml...");
  process.exit(2);
}
const toolsRequire = createRequire(path.join(path.resolve(toolsDir), "node_modules", "noop.js"));
const YAML = toolsRequire("yaml");

// apiVersion "apps/v1" -> kubernetes-models/apps/v1; "v1" -> kubernetes-models/v1.
function modelClass(apiVersion, kind) {
  let models;
  try {
    models = toolsRequire(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    return null;
  }
  return models[kind] || null;
}

// Wraps `target` so that reads are recorded per object; `seen` maps each object to its read keys
// (or to "all" when the object was enumerated).
function track(target, seen) {
  if (target === null || typeof target !== "object") return target;
  if (!seen.has(target)) seen.set(target, new Set());
  return new Proxy(target, {
    get(obj, key) {
      const keys = seen.get(obj);
      if (keys !== "all" && typeof key === "string") keys.add(key);
      return track(obj[key], seen);
    },
    ownKeys(obj) {
      seen.set(obj, "all");
      return Reflect.ownKeys(obj);
    },
  });
}

function unknownFields(value, seen, where, out) {
  if (value === null || typeof value !== "object") return;
  const keys = seen.get(value);
  if (keys === undefined) return;  // never reached by the validator (it stopped on an error)
  for (const [key, child] of Object.entries(value)) {
    const childWhere = Array.isArray(value) ? `${where}[${key}]` : `${where}.${key}`;
    if (!Array.isArray(value) && keys !== "all" && !keys.has(key)) out.push(childWhere);
    unknownFields(child, seen, childWhere, out);
  }
}

let failures = 0;
let count = 0;
for (const file of files) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length > 0) {
      console.log(`FAIL ${file}: YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
      failures++;
      continue;
    }
    const object = doc.toJS();
    if (object === null) continue;
    count++;
    const name = `${object.kind}/${object.metadata && object.metadata.name} (${object.apiVersion}) in ${file}`;
    const Model = modelClass(object.apiVersion, object.kind);
    if (Model === null) {
      console.log(`FAIL ${name}: no such kind in the Kubernetes schema`);
      failures++;
      continue;
    }
    const seen = new Map();
    try {
      Model.prototype.validate.call(track(object, seen));
    } catch (e) {
      console.log(`FAIL ${name}: ${e.message}`);
      failures++;
      continue;
    }
    const unknown = [];
    unknownFields(object, seen, object.kind, unknown);
    if (unknown.length > 0) {
      console.log(`FAIL ${name}: fields the schema does not declare: ${unknown.join(", ")}`);
      failures++;
      continue;
    }
    console.log(`ok   ${name}`);
  }
}
if (count === 0) {
  console.log("FAIL: no Kubernetes objects in the input");
  failures++;
}
process.exit(failures > 0 ? 1 : 0);
