// Lints a Containerfile/Dockerfile offline with the npm package dockerfile-utils (the parser and
// validator of the VS Code Docker language server): unknown instructions, bad flags, malformed
// arguments. Prints each problem as FILE:LINE: message; exit status 1 when there is any.
// Usage: node lint_containerfile.js <tools dir with node_modules> FILE
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [toolsDir, file] = process.argv.slice(2);
if (!toolsDir || !file) {
  console.error("usage: node lint_containerfile.js <tools dir> FILE");
  process.exit(2);
}
const utils = createRequire(path.join(path.resolve(toolsDir), "node_modules", "noop.js"))("dockerfile-utils");
const problems = utils.validate(fs.readFileSync(file, "utf8"));
for (const p of problems) console.log(`${file}:${p.range.start.line + 1}: ${p.message}`);
if (problems.length === 0) console.log(`ok   ${file}`);
process.exit(problems.length > 0 ? 1 : 0);
