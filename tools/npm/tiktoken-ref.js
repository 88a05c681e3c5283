#!/usr/bin/env node
// tiktoken-ref.js -- OpenAI's tiktoken ("gpt2" encoding; the npm package's
// WASM build of the Rust original), the reference autoloco's tokenizer is held
// to. Run by tests/test_tokenizer.py and `autoloco bench tokenizer`.
//   node tiktoken-ref.js ids FILE.jsonl    one JSON string (a document) per line in,
//                                          its ids space-separated per line out
//   node tiktoken-ref.js bench FILE RUNS   encode FILE's text (UTF-8) RUNS times;
//                                          one JSON line: seconds of each run, tokens, bytes
"use strict";
const fs = require("fs");
const path = require("path");
const { get_encoding } = require(path.join(__dirname, "node_modules", "tiktoken"));

const [mode, file, runs] = process.argv.slice(2);
const enc = get_encoding("gpt2");
if (mode === "ids") {
  const out = [];
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    if (line === "") continue;
    out.push(Array.from(enc.encode_ordinary(JSON.parse(line))).join(" "));
  }
  fs.writeSync(1, out.join("\n") + "\n");
} else if (mode === "bench") {
  const buf = fs.readFileSync(file);
  const text = buf.toString("utf8");
  enc.encode_ordinary(text.slice(0, 100000)); // warm up (WASM compiled, caches filled)
  const seconds = [];
  let tokens = 0;
  for (let r = 0; r < Number(runs || 5); r++) {
    const t0 = process.hrtime.bigint();
    tokens = enc.encode_ordinary(text).length;
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  console.log(JSON.stringify({ seconds, tokens, bytes: buf.length }));
} else {
  console.error("usage: node tiktoken-ref.js ids FILE.jsonl | bench FILE RUNS");
  process.exit(2);
}
enc.free();
