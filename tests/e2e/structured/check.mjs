// Structured outputs through the official `openai` npm client, every finished answer checked by
// a JSON Schema validator that is not Pagoda's (ajv with ajv-formats). Run by
// scripts/check-structured-outputs.sh against one running cluster per model.
//
// For every schema of schemas.json and every seed in [0, SEEDS) it sends one request at
// temperature 1 (chat.completions.create with response_format json_schema on a chat model,
// completions.create with the same response_format on a base model), plus, on chat models,
// client.chat.completions.parse with zodResponseFormat for the zod schemas below. An answer that
// ends with finish_reason "stop" must parse and validate; "length" answers are counted. Writes
// one JSON line of totals to RESULT_FILE and prints failures (schema, seed, answer, ajv errors).
//
//   node check.mjs BASE_URL API_KEY MODEL chat|completions SEEDS CONCURRENCY MAX_TOKENS RESULT_FILE
import { readFileSync, writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [baseURL, apiKey, model, mode, seedsArg, concurrencyArg, maxTokensArg, resultFile] =
  process.argv.slice(2);
const seeds = Number(seedsArg);
const concurrency = Number(concurrencyArg);
const maxTokens = Number(maxTokensArg);
const corpus = JSON.parse(readFileSync(new URL('./schemas.json', import.meta.url), 'utf8'));
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

// Draft 2020-12 (prefixItems, $defs; definitions is still known). strict: unknown keywords and
// formats are errors; union types and tuples with an open tail are what the corpus means.
const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true, strictTuples: false });
addFormats(ajv);
// zodResponseFormat's schemas declare draft-07.
const ajv7 = new Ajv({ strict: true, allErrors: true, allowUnionTypes: true });
addFormats(ajv7);

// zod schemas for chat.completions.parse (zodResponseFormat turns them into strict JSON Schema).
const zodSchemas = {
  zod_person: z.object({
    name: z.string().min(1).max(30),
    age: z.number().int().min(0).max(120),
    nickname: z.string().max(12).nullable(),
  }),
  zod_order: z.object({
    id: z.string().regex(/^ORD-[0-9]{4}$/),
    status: z.enum(['open', 'paid', 'shipped']),
    items: z.array(z.object({ sku: z.string().max(8), qty: z.number().int().min(1).max(9) })).max(3),
    total: z.number().min(0).max(10000),
  }),
  zod_event: z.object({
    title: z.string().max(40),
    kind: z.union([z.literal('meeting'), z.literal('call')]),
    when: z.object({ day: z.string().regex(/^2026-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])$/), hour: z.number().int().min(0).max(23) }),
    remote: z.boolean(),
  }),
  zod_shape: z.object({
    shape: z.discriminatedUnion('type', [
      z.object({ type: z.literal('circle'), radius: z.number().gt(0).lte(10) }),
      z.object({ type: z.literal('square'), side: z.number().gt(0).lte(10) }),
    ]),
  }),
  zod_tags: z.object({ tags: z.array(z.string().min(1).max(10)).min(1).max(4), score: z.number().min(-1).max(1) }),
};

const jobs = [];
for (const s of corpus.schemas) {
  for (let seed = 0; seed < seeds; ++seed) jobs.push({ kind: 'schema', entry: s, seed });
}
if (mode === 'chat') {
  for (const name of Object.keys(zodSchemas)) {
    for (let seed = 0; seed < seeds; ++seed) jobs.push({ kind: 'zod', name, seed });
  }
}

const validators = new Map();
function validatorFor(entry) {
  if (!validators.has(entry.name)) validators.set(entry.name, ajv.compile(entry.schema));
  return validators.get(entry.name);
}

const totals = {
  model, answers: 0, stop: 0, length: 0, failures: 0, errors: 0,
  bounded: { answers: 0, stop: 0 }, unbounded: { answers: 0, stop: 0 }, zod: { answers: 0, stop: 0 },
  schemas: 0, max_completion_tokens: 0, zod_utf16: 0,
};
const perSchema = new Map();
const failures = [];

function record(name, bounded, finish, tokens) {
  totals.answers += 1;
  totals.max_completion_tokens = Math.max(totals.max_completion_tokens, tokens ?? 0);
  const group = bounded === 'zod' ? totals.zod : bounded ? totals.bounded : totals.unbounded;
  group.answers += 1;
  if (finish === 'stop') {
    totals.stop += 1;
    group.stop += 1;
  } else {
    totals.length += 1;
  }
  const p = perSchema.get(name) ?? { answers: 0, stop: 0 };
  p.answers += 1;
  if (finish === 'stop') p.stop += 1;
  perSchema.set(name, p);
}

function fail(what) {
  totals.failures += 1;
  failures.push(what);
  console.log(`FAIL ${JSON.stringify(what)}`);
}

async function runSchema({ entry, seed }) {
  const response_format = {
    type: 'json_schema',
    json_schema: { name: entry.name, strict: true, schema: entry.schema },
  };
  let text;
  let finish;
  let tokens;
  if (mode === 'chat') {
    const r = await client.chat.completions.create({
      model, temperature: 1, seed, max_tokens: maxTokens, response_format,
      messages: [
        { role: 'system', content: 'You answer with JSON only.' },
        { role: 'user', content: entry.prompt },
      ],
    });
    text = r.choices[0].message.content;
    finish = r.choices[0].finish_reason;
    tokens = r.usage?.completion_tokens;
  } else {
    // A base model: completions, with the same response_format (Pagoda accepts it there too).
    const r = await client.completions.create({
      model, prompt: 'Once', temperature: 1, seed, max_tokens: maxTokens, response_format,
    });
    text = r.choices[0].text;
    finish = r.choices[0].finish_reason;
    tokens = r.usage?.completion_tokens;
  }
  record(entry.name, entry.bounded, finish, tokens);
  if (finish !== 'stop') {
    if (finish !== 'length') fail({ schema: entry.name, seed, finish, text });
    return;
  }
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    fail({ schema: entry.name, seed, text, error: `JSON.parse: ${e.message}` });
    return;
  }
  const validate = validatorFor(entry);
  if (!validate(value)) fail({ schema: entry.name, seed, text, ajv: validate.errors });
}

function validatorFor7(name, schema) {
  const key = `zod:${name}`;
  if (!validators.has(key)) validators.set(key, ajv7.compile(schema));
  return validators.get(key);
}

async function runZod({ name, seed }) {
  const schema = zodSchemas[name];
  const format = zodResponseFormat(schema, name);
  let r;
  try {
    r = await client.chat.completions.parse({
      model, temperature: 1, seed, max_tokens: maxTokens, response_format: format,
      messages: [{ role: 'user', content: `Fill in a ${name.slice(4)} as JSON.` }],
    });
  } catch (e) {
    if (e?.constructor?.name === 'LengthFinishReasonError') {
      record(name, 'zod', 'length', maxTokens);
      return;
    }
    if (!Array.isArray(e?.issues)) throw e;
    // zod refused the answer. Fetch it again (same seed, same answer) to tell a real failure
    // from zod's own reading of lengths: z.string().max(n) counts UTF-16 code units while the
    // maxLength it becomes counts characters (code points), as JSON Schema defines it; an
    // answer with characters outside the BMP can satisfy the schema and still fail zod.
    const again = await client.chat.completions.create({
      model, temperature: 1, seed, max_tokens: maxTokens,
      response_format: { type: 'json_schema', json_schema: format.json_schema },
      messages: [{ role: 'user', content: `Fill in a ${name.slice(4)} as JSON.` }],
    });
    const text = again.choices[0].message.content;
    record(name, 'zod', again.choices[0].finish_reason, again.usage?.completion_tokens);
    const value = JSON.parse(text);
    const validate = validatorFor7(name, format.json_schema.schema);
    const utf16Only = e.issues.every((i) => {
      if (i.code !== 'too_big' || i.type !== 'string') return false;
      const s = i.path.reduce((v, k) => v?.[k], value);
      return typeof s === 'string' && s.length > i.maximum && [...s].length <= i.maximum;
    });
    if (validate(value) && utf16Only) {
      totals.zod_utf16 += 1;
      console.log(`NOTE ${name} seed ${seed}: valid JSON Schema, zod counts UTF-16 units: ${text}`);
    } else {
      fail({ schema: name, seed, text, zod: e.issues, ajv: validate.errors });
    }
    return;
  }
  const choice = r.choices[0];
  record(name, 'zod', choice.finish_reason, r.usage?.completion_tokens);
  if (choice.finish_reason !== 'stop') return;
  const text = choice.message.content;
  const checked = schema.safeParse(choice.message.parsed);
  if (!checked.success) {
    fail({ schema: name, seed, text, zod: checked.error.issues });
    return;
  }
  // The JSON Schema the SDK sent, checked by ajv too.
  const validate = validatorFor7(name, format.json_schema.schema);
  if (!validate(JSON.parse(text))) fail({ schema: name, seed, text, ajv: validate.errors });
}

let next = 0;
async function worker() {
  while (next < jobs.length) {
    const job = jobs[next++];
    try {
      if (job.kind === 'schema') await runSchema(job);
      else await runZod(job);
    } catch (e) {
      totals.errors += 1;
      failures.push({ job: job.entry?.name ?? job.name, seed: job.seed, error: String(e) });
      console.log(`ERROR ${job.entry?.name ?? job.name} seed ${job.seed}: ${e.stack || e}`);
    }
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));

totals.schemas = perSchema.size;
totals.low_stop_schemas = [...perSchema]
  .filter(([, p]) => p.stop < p.answers)
  .map(([name, p]) => `${name} ${p.stop}/${p.answers}`);
writeFileSync(resultFile, JSON.stringify(totals) + '\n');
process.exit(totals.failures + totals.errors > 0 ? 1 : 0);
