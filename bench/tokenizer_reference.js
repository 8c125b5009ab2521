// The transformers.js side of bench/tokenizer.sh: encodes TEXT_FILE with the package's
// tokenizer (special tokens parsed, none added), best of REPEATS runs, one JSON line.
//   node bench/tokenizer_reference.js PACKAGE TEXT_FILE [REPEATS]
'use strict';
const fs = require('fs');
const [pkg, file, repeatsArg] = process.argv.slice(2);
const text = fs.readFileSync(file, 'utf8');
const tokenizer = require(pkg).fromPreTrained();
let best = Infinity;
let tokens = 0;
for (let r = 0; r < Number(repeatsArg || 3); ++r) {
  const start = process.hrtime.bigint();
  tokens = tokenizer.encode(text, {add_special_tokens: false}).length;
  best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
}
console.log(JSON.stringify({bytes: Buffer.byteLength(text), tokens, seconds: best}));
