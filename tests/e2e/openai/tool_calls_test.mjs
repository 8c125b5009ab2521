// Tool calls and reasoning through the official `openai` npm client, against a running Pagoda
// serving a random-weight Qwen3-shaped model with the real Qwen3 tokenizer and chat template
// (scripts/check-openai-client.sh makes it and starts it, served as "qwen3-random"). Random
// weights write no calls of their own: tool_choice "required" or a named function makes the
// constraint force one, so the checks are that the forced call is parsed into message.tool_calls
// (whole and streamed, the deltas joining to the same arguments), valid JSON for the schema,
// with finish_reason "tool_calls" and no markup in content; a grammar forcing "<think>...</think>"
// checks the reasoning split. The same checks run once per tool-call format the server is told
// to use (--tool-call-parser): the Qwen3 template's own Hermes one, Llama 3's JSON, Mistral's.
// Prints one line per check and exits 1 on the first failure.
//
//   node tool_calls_test.mjs BASE_URL API_KEY [MODEL [FORMAT]]   (qwen3-random, hermes)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check, expectApiError } from './checks.mjs';

const [baseURL, apiKey, model = 'qwen3-random', format = 'hermes'] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
// Mistral's template takes only 9-character ids back in the history.
const idPattern = format === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/;

// Finite schemas, so that a random model's arguments always end within max_tokens.
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] },
          days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'The time in a zone',
      parameters: {
        type: 'object',
        properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } },
        required: ['zone'],
        additionalProperties: false,
      },
    },
  },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkArguments(name, args) {
  const parsed = JSON.parse(args);
  if (name === 'get_weather') {
    assert.ok(['Paris', 'Tokyo', 'Lima'].includes(parsed.city), args);
    assert.ok(Number.isInteger(parsed.days) && parsed.days >= 1 && parsed.days <= 7, args);
  } else {
    assert.equal(name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(parsed.zone), args);
  }
}

function checkMessage(choice, onlyName) {
  assert.equal(choice.finish_reason, 'tool_calls');
  const m = choice.message;
  assert.ok(m.tool_calls.length >= 1);
  assert.equal(m.content, null, `content: ${m.content}`);
  for (const call of m.tool_calls) {
    assert.equal(call.type, 'function');
    assert.match(call.id, idPattern);
    if (onlyName) assert.equal(call.function.name, onlyName);
    checkArguments(call.function.name, call.function.arguments);
  }
}

// parallel_tool_calls false: the grammar ends after one call (with parallel calls a random
// model may go on writing calls until max_tokens).
await check('tool_choice required: a parsed call, arguments valid for the schema', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: 'required', parallel_tool_calls: false,
      max_tokens: 200, seed,
    });
    checkMessage(r.choices[0]);
    assert.equal(r.choices[0].message.tool_calls.length, 1);
  }
});

await check('named function, parallel_tool_calls false: one call of that function', async () => {
  const r = await client.chat.completions.create({
    model, messages, tools, max_tokens: 200, parallel_tool_calls: false,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
  });
  checkMessage(r.choices[0], 'get_time');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
});

await check('streamed: name first, arguments in pieces joining to the whole answer', async () => {
  const body = {
    model, messages, tools, max_tokens: 200, seed: 7, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  };
  const whole = await client.chat.completions.create(body);
  checkMessage(whole.choices[0], 'get_weather');
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let content = '';
  let finish = null;
  let argumentChunks = 0;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice.finish_reason) finish = choice.finish_reason;
    if (choice.delta.content) content += choice.delta.content;
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id !== undefined) {
        assert.equal(calls[d.index], undefined, 'a second start for one call');
        assert.equal(d.type, 'function');
        calls[d.index] = { id: d.id, name: d.function.name, arguments: d.function.arguments };
      } else {
        assert.ok(calls[d.index], 'arguments before the name');
        calls[d.index].arguments += d.function.arguments;
        argumentChunks++;
      }
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, '');
  assert.equal(calls.length, 1);
  assert.ok(argumentChunks >= 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(calls[0].arguments, whole.choices[0].message.tool_calls[0].function.arguments);
  checkArguments('get_weather', calls[0].arguments);
});

await check('auto without a call: content, finish_reason stop or length', async () => {
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: 'auto', max_tokens: 8, seed: 1,
  });
  const c = r.choices[0];
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.equal(c.message.tool_calls, undefined);
  assert.equal(typeof c.message.content, 'string');
});

await check('reasoning: <think> goes to reasoning_content, whole and streamed', async () => {
  const body = {
    model, messages, max_tokens: 100,
    grammar: 'root ::= "<think>" [a-z]{3,8} "</think>" [a-z]{2,6}',
  };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.match(m.reasoning_content, /^[a-z]{3,8}$/);
  assert.match(m.content, /^[a-z]{2,6}$/);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = '';
  let content = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0].delta;
    reasoning += d.reasoning_content ?? '';
    content += d.content ?? '';
  }
  assert.match(reasoning, /^[a-z]{3,8}$/);
  assert.match(content, /^[a-z]{2,6}$/);
});

// Two calls in the format's own markup, forced by a grammar (the llama.cpp `grammar` field) with
// tool_choice auto: both come back, or only the first with parallel_tool_calls false.
const twoCalls = {
  hermes: String.raw`root ::= "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>"`,
  llama3_json: String.raw`root ::= "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}; {\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}"`,
  mistral: String.raw`root ::= "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}]"`,
}[format];

await check(`auto, ${format} markup: parallel_tool_calls false keeps the first of two calls`, async () => {
  const body = { model, messages, tools, tool_choice: 'auto', max_tokens: 200, grammar: twoCalls };
  const both = await client.chat.completions.create(body);
  checkMessage(both.choices[0], 'get_time');
  assert.deepEqual(both.choices[0].message.tool_calls.map((c) => JSON.parse(c.function.arguments).zone),
    ['UTC', 'CET']);
  const one = await client.chat.completions.create({ ...body, parallel_tool_calls: false });
  checkMessage(one.choices[0], 'get_time');
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  assert.equal(one.choices[0].message.tool_calls[0].function.arguments, '{"zone": "UTC"}');
  const stream = await client.chat.completions.create(
    { ...body, parallel_tool_calls: false, stream: true });
  const indexes = new Set();
  let content = '';
  for await (const chunk of stream) {
    content += chunk.choices[0].delta.content ?? '';
    for (const d of chunk.choices[0].delta.tool_calls ?? []) indexes.add(d.index);
  }
  assert.deepEqual([...indexes], [0]);
  assert.equal(content, '');
});

await check('errors: unknown tool_choice function, bad schema keyword', async () => {
  await expectApiError(
    client.chat.completions.create({
      model, messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    400, 'nope');
  const bad = [{
    type: 'function',
    function: { name: 'odd', parameters: { type: 'object', patternProperties: { a: {} } } },
  }];
  await expectApiError(
    client.chat.completions.create({ model, messages, tools: bad, tool_choice: 'required' }),
    400, 'patternProperties');
});
