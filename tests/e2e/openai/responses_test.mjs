// OpenAI's Responses API (POST/GET/DELETE /v1/responses) through the official `openai` npm
// client, against a running Pagoda (scripts/check-responses-api.sh starts it). One MODE per run:
//  * stories (the trained stories260K, served as "stories" with a template that writes BOS and
//    the messages' contents): a whole answer (shape, usage, greedy text equal to chat
//    completions' for the same messages, "incomplete" at max_output_tokens), streamed (the
//    event order, sequence numbers 0, 1, 2, ..., the deltas joining to the text, the terminal
//    object equal to what GET returns), previous_response_id (the stored input and output go
//    before the new input, the earlier instructions do not, the repeated prefix hits the prefix
//    cache), GET, DELETE, 404s in OpenAI's error shape (deleted, store false, another tenant's
//    response), text.format json_schema (whole and through responses.stream), 400s for what is
//    not served (built-in tools, background, conversation, image input, unknown fields);
//  * tools (a random-weight Qwen3 model with the real Qwen3 template, "qwen3-random"): function
//    calls forced by tool_choice "required" or a named function with finite schemas, whole and
//    streamed (argument deltas joining to the arguments), and the round trip of the call's
//    output: by previous_response_id, by item_reference, and with store false sending the call
//    and its output explicitly, all three rendering the same conversation (the same prompt
//    length and the same greedy answer, JSON by a finite json_schema);
//  * before-restart STATE_FILE / after-restart STATE_FILE: stores a response (and deletes
//    another), writes them to STATE_FILE; after the scheduler restarts on the same
//    --responses-db, GET returns the same object, the deleted one stays gone, another tenant
//    still gets 404, and previous_response_id continues the stored conversation;
//  * limits: on a scheduler started with --responses-max-rows 2 --responses-max-age-s 2, the
//    oldest of three stored responses is gone, and all are gone after 2 seconds.
// KEY and SAME_TENANT_KEY belong to one tenant (--api-key-file "KEY tenant=NAME");
// OTHER_TENANT_KEY to another. Prints one line per check and exits 1 on the first failure.
//
//   node responses_test.mjs BASE_URL KEY SAME_TENANT_KEY OTHER_TENANT_KEY MODEL MODE [STATE_FILE]
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import { check, expectApiError } from './checks.mjs';

const [baseURL, apiKey, sameTenantKey, otherTenantKey, model, mode, stateFile] =
  process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const sameTenant = new OpenAI({ baseURL, apiKey: sameTenantKey, maxRetries: 0 });
const otherTenant = new OpenAI({ baseURL, apiKey: otherTenantKey, maxRetries: 0 });

// A prompt of well over one KV page (16 tokens) for the prefix-cache check.
const LONG = 'Once upon a time, there was a little girl named Lily. She loved to play outside in ' +
  'the park with her big red ball. One day, she saw a small dog sitting under a tall tree. The ' +
  'dog was sad because it was lost. Lily wanted to help the dog find its home, so she asked her ' +
  'mom. Her mom said yes, and they walked around the park together.';

// ---- helpers ----

// The text of the message items of a response object.
function messageText(r) {
  return r.output.filter((i) => i.type === 'message')
    .flatMap((i) => i.content).filter((c) => c.type === 'output_text')
    .map((c) => c.text).join('');
}

// A response object without what the client adds to it (output_text).
function plain(r) {
  const copy = { ...r };
  delete copy.output_text;
  return copy;
}

function checkUsage(u) {
  for (const k of ['input_tokens', 'output_tokens', 'total_tokens']) {
    assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `usage.${k}: ${u[k]}`);
  }
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.ok(Number.isInteger(u.input_tokens_details.cached_tokens));
  assert.ok(u.input_tokens_details.cached_tokens <= u.input_tokens);
  assert.ok(Number.isInteger(u.output_tokens_details.reasoning_tokens));
}

// The response object's shape; `status` the expected status.
function checkResponse(r, status) {
  assert.match(r.id, /^resp_[A-Za-z0-9_-]+$/);
  assert.equal(r.object, 'response');
  assert.ok(Number.isInteger(r.created_at), `created_at ${r.created_at}`);
  assert.ok(Math.abs(r.created_at - Date.now() / 1000) < 600, `created_at ${r.created_at}`);
  assert.equal(r.status, status, JSON.stringify(r));
  assert.equal(r.model, model);
  assert.ok(Array.isArray(r.output));
  if (status === 'incomplete') {
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  } else {
    assert.ok(r.incomplete_details == null, JSON.stringify(r.incomplete_details));
  }
  assert.ok(r.error == null, JSON.stringify(r.error));
  for (const item of r.output) {
    if (item.type === 'message') {
      assert.match(item.id, /^msg_/);
      assert.equal(item.role, 'assistant');
      assert.ok(['completed', 'incomplete'].includes(item.status), item.status);
      for (const c of item.content) {
        assert.equal(c.type, 'output_text');
        assert.equal(typeof c.text, 'string');
        assert.deepEqual(c.annotations, []);
      }
    } else if (item.type === 'function_call') {
      assert.match(item.id, /^fc_/);
      assert.ok(typeof item.call_id === 'string' && item.call_id.length > 0, item.call_id);
      assert.equal(typeof item.name, 'string');
      assert.equal(typeof item.arguments, 'string');
      assert.ok(['completed', 'incomplete'].includes(item.status), item.status);
    } else {
      assert.equal(item.type, 'reasoning', `unexpected item ${JSON.stringify(item)}`);
      assert.match(item.id, /^rs_/);
      assert.deepEqual(item.summary, []);
      for (const c of item.content) assert.equal(c.type, 'reasoning_text');
    }
  }
  checkUsage(r.usage);
}

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
}

const TERMINAL = ['response.completed', 'response.incomplete', 'response.failed'];

// Checks a streamed answer's events against the contract: response.created and
// response.in_progress, then per output item its added / deltas / done events, then one terminal
// event carrying the whole response, whose items equal the output_item.done ones and whose texts
// equal the deltas joined; sequence numbers 0, 1, 2, ... Returns the terminal event.
function checkEvents(events, terminalType) {
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const types = events.map((e) => e.type);
  const order = types.join(' ');
  assert.equal(types[0], 'response.created', order);
  assert.equal(types[1], 'response.in_progress', order);
  assert.equal(types.filter((t) => TERMINAL.includes(t)).length, 1, order);
  const terminal = events[events.length - 1];
  assert.equal(terminal.type, terminalType, order);
  const final = terminal.response;
  for (const e of events.slice(0, 2)) {
    assert.equal(e.response.id, final.id);
    assert.equal(e.response.object, 'response');
    assert.equal(e.response.status, 'in_progress');
    assert.deepEqual(e.response.output, []);
  }
  let i = 2;
  const next = (type) => {
    assert.ok(i < events.length - 1, `stream ended where ${type} was due: ${order}`);
    assert.equal(events[i].type, type, `event ${i} of: ${order}`);
    return events[i++];
  };
  // Deltas of `type` until another event; returns them joined, checking their indexes.
  const deltas = (type, outputIndex, itemId, contentIndex) => {
    let text = '';
    while (i < events.length - 1 && events[i].type === type) {
      const e = events[i++];
      assert.equal(e.output_index, outputIndex);
      assert.equal(e.item_id, itemId);
      if (contentIndex !== undefined) assert.equal(e.content_index, contentIndex);
      assert.equal(typeof e.delta, 'string');
      text += e.delta;
    }
    return text;
  };
  const doneItems = [];
  for (let k = 0; i < events.length - 1; k++) {
    const added = next('response.output_item.added');
    assert.equal(added.output_index, k);
    const item = added.item;
    const id = item.id;
    if (item.type === 'message') {
      const part = next('response.content_part.added');
      assert.equal(part.output_index, k);
      assert.equal(part.item_id, id);
      assert.equal(part.content_index, 0);
      assert.equal(part.part.type, 'output_text');
      assert.equal(part.part.text, '');
      const text = deltas('response.output_text.delta', k, id, 0);
      const done = next('response.output_text.done');
      assert.equal(done.text, text);
      assert.equal(done.item_id, id);
      const partDone = next('response.content_part.done');
      assert.equal(partDone.part.text, text);
      assert.equal(partDone.item_id, id);
    } else if (item.type === 'function_call') {
      assert.equal(item.arguments, '');
      assert.equal(typeof item.name, 'string');
      const args = deltas('response.function_call_arguments.delta', k, id);
      assert.ok(args.length > 0, 'no argument deltas');
      const done = next('response.function_call_arguments.done');
      assert.equal(done.arguments, args);
      assert.equal(done.item_id, id);
      assert.equal(done.output_index, k);
    } else {
      assert.equal(item.type, 'reasoning', JSON.stringify(item));
      const text = deltas('response.reasoning_text.delta', k, id);
      const done = next('response.reasoning_text.done');
      assert.equal(done.text, text);
    }
    const itemDone = next('response.output_item.done');
    assert.equal(itemDone.output_index, k);
    assert.equal(itemDone.item.id, id);
    doneItems.push(itemDone.item);
  }
  assert.deepEqual(final.output, doneItems);
  return terminal;
}

async function chatText(messages, maxTokens, extra = {}) {
  const c = await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 0, ...extra,
  });
  return { text: c.choices[0].message.content ?? '', usage: c.usage };
}

// Expects a 404 response_not_found in OpenAI's error shape.
async function expectNotFound(promise, param) {
  const e = await expectApiError(promise, 404, '');
  assert.equal(e.code, 'response_not_found', JSON.stringify(e.error));
  assert.equal(e.type, 'invalid_request_error');
  assert.ok(typeof e.error.message === 'string' && e.error.message.length > 0);
  assert.deepEqual(Object.keys(e.error).sort(), ['code', 'message', 'param', 'type']);
  if (param !== undefined) assert.equal(e.param, param);
  return e;
}

async function expectBadRequest(body, param) {
  const e = await expectApiError(client.responses.create({ model, ...body }), 400, '');
  assert.equal(e.type, 'invalid_request_error');
  if (param !== undefined) assert.equal(e.param, param, e.message);
  return e;
}

// DELETE /v1/responses/{id}: the client returns nothing, so the body is read raw.
async function deleteResponse(c, id) {
  const raw = await c.responses.delete(id).asResponse();
  assert.equal(raw.status, 200);
  assert.deepEqual(await raw.json(), { id, object: 'response', deleted: true });
}

// ---- stories ----

async function storiesChecks() {
  const prompt = 'Once upon a time';
  const base = { model, max_output_tokens: 16, temperature: 0 };
  let whole;

  await check('whole: shape, usage, echoes; greedy text equals chat completions', async () => {
    whole = await client.responses.create({
      ...base, input: [{ role: 'user', content: prompt }], metadata: { case: 'whole' },
    });
    checkResponse(whole, 'incomplete');
    assert.deepEqual(whole.output.map((i) => i.type), ['message']);
    const chat = await chatText([{ role: 'user', content: prompt }], 16);
    assert.ok(chat.text.length > 0);
    assert.equal(messageText(whole), chat.text);
    assert.equal(whole.output_text, chat.text);
    assert.equal(whole.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(whole.usage.output_tokens, 16);
    assert.equal(whole.usage.output_tokens_details.reasoning_tokens, 0);
    assert.equal(whole.temperature, 0);
    assert.equal(whole.max_output_tokens, 16);
    assert.equal(whole.store, true);
    assert.ok(whole.previous_response_id == null);
    assert.ok(whole.instructions == null);
    assert.deepEqual(whole.metadata, { case: 'whole' });
    assert.deepEqual(whole.tools, []);
  });

  await check('whole: a string input is one user message; GET returns the same object', async () => {
    const r = await client.responses.create({ ...base, input: prompt });
    checkResponse(r, 'incomplete');
    assert.equal(r.output_text, whole.output_text);
    assert.deepEqual(plain(await client.responses.retrieve(whole.id)), plain(whole));
    assert.deepEqual(plain(await sameTenant.responses.retrieve(whole.id)), plain(whole));
  });

  await check('whole: a stop by the grammar is "completed"; json_schema output obeys it', async () => {
    const schema = {
      type: 'object',
      properties: {
        mood: { type: 'string', enum: ['happy', 'sad', 'angry'] },
        count: { type: 'integer', minimum: 1, maximum: 9 },
        done: { type: 'boolean' },
      },
      required: ['mood', 'count', 'done'],
      additionalProperties: false,
    };
    const format = { type: 'json_schema', name: 'pick', schema, strict: true };
    const r = await client.responses.create({
      ...base, input: prompt, max_output_tokens: 64, text: { format },
    });
    checkResponse(r, 'completed');
    assert.equal(r.output[0].status, 'completed');
    const value = JSON.parse(r.output_text);
    assert.deepEqual(Object.keys(value).sort(), ['count', 'done', 'mood']);
    assert.ok(['happy', 'sad', 'angry'].includes(value.mood), r.output_text);
    assert.ok(Number.isInteger(value.count) && value.count >= 1 && value.count <= 9, r.output_text);
    assert.equal(typeof value.done, 'boolean');
    assert.equal(r.text.format.type, 'json_schema');
    assert.equal(r.text.format.name, 'pick');
    const chat = await chatText([{ role: 'user', content: prompt }], 64, {
      response_format: { type: 'json_schema', json_schema: { name: 'pick', schema, strict: true } },
    });
    assert.equal(r.output_text, chat.text);
    // The client's stream helper accumulates the events into the same answer.
    // (It changes the events it accumulates into: they are copied as they come.)
    const stream = client.responses.stream({
      ...base, input: prompt, max_output_tokens: 64, text: { format },
    });
    const events = [];
    stream.on('event', (e) => events.push(structuredClone(e)));
    const final = await stream.finalResponse();
    const terminal = checkEvents(events, 'response.completed');
    assert.equal(final.id, terminal.response.id);
    assert.equal(messageText(final), r.output_text);
    assert.deepEqual(plain(await client.responses.retrieve(final.id)), terminal.response);
  });

  await check('streamed: event order, sequence numbers, deltas join to the whole text', async () => {
    const events = await collect(await client.responses.create({
      ...base, input: [{ role: 'user', content: prompt }], stream: true,
    }));
    const terminal = checkEvents(events, 'response.incomplete');
    const final = terminal.response;
    checkResponse(final, 'incomplete');
    assert.equal(messageText(final), whole.output_text);
    assert.ok(events.filter((e) => e.type === 'response.output_text.delta').length >= 2);
    assert.equal(final.usage.output_tokens, 16);
    assert.deepEqual(plain(await client.responses.retrieve(final.id)), final);
  });

  await check('streamed: SSE framing (event lines name the events), no [DONE]', async () => {
    const res = await fetch(`${baseURL}/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ ...base, input: prompt, stream: true }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const body = await res.text();
    assert.ok(!body.includes('[DONE]'), 'a [DONE] line');
    const blocks = body.split(/\r?\n\r?\n/).filter((b) => b.trim() !== '');
    const events = blocks.map((block) => {
      const lines = block.split(/\r?\n/);
      const data = JSON.parse(lines.filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart()).join('\n'));
      const named = lines.find((l) => l.startsWith('event:'));
      if (named) assert.equal(named.slice(6).trim(), data.type);
      return data;
    });
    const terminal = checkEvents(events, 'response.incomplete');
    assert.equal(messageText(terminal.response), whole.output_text);
  });

  let first;
  await check('previous_response_id: continues the stored conversation, prefix cached', async () => {
    const instructions = 'Tell a story.';
    first = await client.responses.create({ ...base, instructions, input: LONG });
    checkResponse(first, 'incomplete');
    assert.equal(first.instructions, instructions);
    assert.ok(first.usage.input_tokens >= 64, `${first.usage.input_tokens} input tokens`);
    const next = await client.responses.create({
      ...base, instructions, previous_response_id: first.id, input: 'Then',
    });
    checkResponse(next, 'incomplete');
    assert.equal(next.previous_response_id, first.id);
    assert.ok(next.usage.input_tokens_details.cached_tokens > 0,
      `cached_tokens ${next.usage.input_tokens_details.cached_tokens} of ${next.usage.input_tokens}`);
    const chat = await chatText([
      { role: 'system', content: instructions }, { role: 'user', content: LONG },
      { role: 'assistant', content: first.output_text }, { role: 'user', content: 'Then' },
    ], 16);
    assert.equal(next.output_text, chat.text);
    assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
    // A continuation of a continuation carries both earlier turns.
    const third = await client.responses.create({
      ...base, previous_response_id: next.id, input: [{ role: 'user', content: 'The end' }],
    });
    const chat3 = await chatText([
      { role: 'user', content: LONG }, { role: 'assistant', content: first.output_text },
      { role: 'user', content: 'Then' }, { role: 'assistant', content: next.output_text },
      { role: 'user', content: 'The end' },
    ], 16);
    assert.equal(third.output_text, chat3.text);
    assert.equal(third.usage.input_tokens, chat3.usage.prompt_tokens);
  });

  await check('previous_response_id: the earlier instructions are not carried over', async () => {
    const next = await client.responses.create({
      ...base, previous_response_id: first.id, input: 'Then',
    });
    checkResponse(next, 'incomplete');
    assert.ok(next.instructions == null);
    const chat = await chatText([
      { role: 'user', content: LONG }, { role: 'assistant', content: first.output_text },
      { role: 'user', content: 'Then' },
    ], 16);
    assert.equal(next.output_text, chat.text);
    assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
  });

  await check('another tenant: 404 for GET, DELETE and previous_response_id', async () => {
    await expectNotFound(otherTenant.responses.retrieve(first.id));
    await expectNotFound(otherTenant.responses.delete(first.id));
    await expectNotFound(otherTenant.responses.create({
      ...base, previous_response_id: first.id, input: 'Then',
    }), 'previous_response_id');
    assert.deepEqual(plain(await client.responses.retrieve(first.id)), plain(first));
  });

  await check('DELETE: the deleted object, then 404 in OpenAI\'s error shape', async () => {
    const r = await client.responses.create({ ...base, input: prompt });
    await deleteResponse(sameTenant, r.id);
    await expectNotFound(client.responses.retrieve(r.id));
    await expectNotFound(client.responses.delete(r.id));
    await expectNotFound(client.responses.create({
      ...base, previous_response_id: r.id, input: 'Then',
    }), 'previous_response_id');
    await expectNotFound(client.responses.retrieve('resp_doesnotexist'));
  });

  await check('store false: answered, not retrievable, not continuable', async () => {
    const r = await client.responses.create({ ...base, input: prompt, store: false });
    checkResponse(r, 'incomplete');
    assert.equal(r.store, false);
    assert.equal(r.output_text, whole.output_text);
    await expectNotFound(client.responses.retrieve(r.id));
    await expectNotFound(client.responses.create({
      ...base, previous_response_id: r.id, input: 'Then',
    }), 'previous_response_id');
    const events = await collect(await client.responses.create({
      ...base, input: prompt, store: false, stream: true,
    }));
    const terminal = checkEvents(events, 'response.incomplete');
    assert.equal(terminal.response.store, false);
    await expectNotFound(client.responses.retrieve(terminal.response.id));
  });

  await check('400 naming the field: built-in tool, background, conversation, unknown field', async () => {
    await expectBadRequest({ input: prompt, tools: [{ type: 'web_search' }] }, 'tools');
    await expectBadRequest({ input: prompt, background: true }, 'background');
    await expectBadRequest({ input: prompt, conversation: 'conv_123' }, 'conversation');
    await expectBadRequest({ input: prompt, prompt: { id: 'pmpt_123' } }, 'prompt');
    await expectBadRequest({ input: prompt, frobnicate: 1 }, 'frobnicate');
    await expectBadRequest({
      input: [{
        role: 'user',
        content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }],
      }],
    });
    await expectBadRequest({
      input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file_123' }] }],
    });
  });
}

// ---- tools (qwen3-random) ----

const weatherParameters = {
  type: 'object',
  properties: {
    city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'days'],
  additionalProperties: false,
};
const tools = [
  {
    type: 'function', name: 'get_weather', description: 'The weather of a city',
    parameters: weatherParameters, strict: true,
  },
  {
    type: 'function', name: 'get_time', description: 'The time in a zone',
    parameters: {
      type: 'object',
      properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } },
      required: ['zone'],
      additionalProperties: false,
    },
    strict: true,
  },
];
const question = 'What is the weather in Paris?';

function checkCall(item, onlyName) {
  assert.equal(item.type, 'function_call');
  assert.equal(item.status, 'completed');
  if (onlyName) assert.equal(item.name, onlyName);
  const args = JSON.parse(item.arguments);
  if (item.name === 'get_weather') {
    assert.ok(['Paris', 'Tokyo', 'Lima'].includes(args.city), item.arguments);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, item.arguments);
  } else {
    assert.equal(item.name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(args.zone), item.arguments);
  }
}

async function toolsChecks() {
  const base = { model, tools, temperature: 0, max_output_tokens: 200 };
  await check('tool_choice required: one function_call item, arguments valid', async () => {
    const r = await client.responses.create({
      ...base, input: question, tool_choice: 'required', parallel_tool_calls: false,
    });
    checkResponse(r, 'completed');
    assert.deepEqual(r.output.map((i) => i.type), ['function_call'], JSON.stringify(r.output));
    checkCall(r.output[0]);
    assert.equal(r.output_text, '');
    assert.equal(r.tool_choice, 'required');
    assert.equal(r.parallel_tool_calls, false);
    assert.deepEqual(r.tools.map((t) => [t.type, t.name]),
      [['function', 'get_weather'], ['function', 'get_time']]);
  });

  await check('named function: one call of that function', async () => {
    const r = await client.responses.create({
      ...base, input: question, tool_choice: { type: 'function', name: 'get_time' },
      parallel_tool_calls: false,
    });
    checkResponse(r, 'completed');
    assert.deepEqual(r.output.map((i) => i.type), ['function_call'], JSON.stringify(r.output));
    checkCall(r.output[0], 'get_time');
    assert.deepEqual(r.tool_choice, { type: 'function', name: 'get_time' });
  });

  const named = {
    ...base, input: question, parallel_tool_calls: false,
    tool_choice: { type: 'function', name: 'get_weather' },
  };
  let first;
  await check('streamed call: argument deltas join to the whole answer\'s arguments', async () => {
    first = await client.responses.create(named);
    checkResponse(first, 'completed');
    assert.deepEqual(first.output.map((i) => i.type), ['function_call']);
    checkCall(first.output[0], 'get_weather');
    const events = await collect(await client.responses.create({ ...named, stream: true }));
    const terminal = checkEvents(events, 'response.completed');
    const final = terminal.response;
    checkResponse(final, 'completed');
    assert.deepEqual(final.output.map((i) => i.type), ['function_call']);
    assert.equal(final.output[0].arguments, first.output[0].arguments);
    assert.equal(final.output[0].name, 'get_weather');
    assert.equal(events.filter((e) => e.type === 'response.function_call_arguments.done').length, 1);
    assert.deepEqual(plain(await client.responses.retrieve(final.id)), final);
  });

  const output = JSON.stringify({ city: 'Paris', forecast: 'sunny', celsius: 21 });
  // The answer after the call's output: JSON by a finite schema, so that a random model writes
  // a non-empty text that ends (tool_choice none: the tools are still rendered, so the earlier
  // prompt is a prefix of this one).
  const report = {
    type: 'object',
    properties: {
      sky: { type: 'string', enum: ['sunny', 'rainy'] },
      celsius: { type: 'integer', minimum: -20, maximum: 40 },
    },
    required: ['sky', 'celsius'],
    additionalProperties: false,
  };
  const after = {
    model, tools, tool_choice: 'none', temperature: 0, max_output_tokens: 64,
    text: { format: { type: 'json_schema', name: 'report', schema: report, strict: true } },
  };
  let continued;
  await check('round trip: the call\'s output by previous_response_id', async () => {
    const call = first.output[0];
    continued = await client.responses.create({
      ...after, previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output }],
    });
    checkResponse(continued, 'completed');
    assert.deepEqual(continued.output.map((i) => i.type), ['message']);
    const value = JSON.parse(continued.output_text);
    assert.ok(['sunny', 'rainy'].includes(value.sky), continued.output_text);
    assert.ok(Number.isInteger(value.celsius) && value.celsius >= -20 && value.celsius <= 40,
      continued.output_text);
    assert.equal(continued.previous_response_id, first.id);
    assert.ok(continued.usage.input_tokens > first.usage.input_tokens);
    assert.ok(continued.usage.input_tokens_details.cached_tokens > 0);
  });

  await check('round trip: store false with the call and its output sent explicitly', async () => {
    const call = first.output[0];
    const r = await client.responses.create({
      ...after, store: false,
      input: [
        { role: 'user', content: question },
        { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output },
      ],
    });
    checkResponse(r, 'completed');
    assert.equal(r.usage.input_tokens, continued.usage.input_tokens);
    assert.equal(r.output_text, continued.output_text);
    await expectNotFound(client.responses.retrieve(r.id));
  });

  await check('round trip: the call as an item_reference to the stored output item', async () => {
    const call = first.output[0];
    const r = await client.responses.create({
      ...after,
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: question }] },
        { type: 'item_reference', id: call.id },
        { type: 'function_call_output', call_id: call.call_id, output },
      ],
    });
    checkResponse(r, 'completed');
    assert.equal(r.usage.input_tokens, continued.usage.input_tokens);
    assert.equal(r.output_text, continued.output_text);
    // Another tenant cannot reference it (the contract names no status: 400 or 404).
    try {
      await otherTenant.responses.create({
        ...after,
        input: [{ role: 'user', content: question }, { type: 'item_reference', id: call.id }],
      });
      assert.fail('another tenant\'s item_reference was taken');
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError && [400, 404].includes(e.status), String(e));
    }
  });
}

// ---- restart ----

async function beforeRestart() {
  const base = { model, max_output_tokens: 16, temperature: 0 };
  await check('before restart: store a response, delete another', async () => {
    const kept = await client.responses.create({
      ...base, input: LONG, metadata: { phase: 'before-restart' },
    });
    checkResponse(kept, 'incomplete');
    const gone = await client.responses.create({ ...base, input: 'Once upon a time' });
    await deleteResponse(client, gone.id);
    writeFileSync(stateFile, JSON.stringify({
      kept: plain(await client.responses.retrieve(kept.id)), goneId: gone.id,
    }));
  });
}

async function afterRestart() {
  const { kept, goneId } = JSON.parse(readFileSync(stateFile, 'utf8'));
  await check('after restart: GET returns the stored object; deleted and foreign stay 404', async () => {
    assert.deepEqual(plain(await client.responses.retrieve(kept.id)), kept);
    assert.deepEqual(plain(await sameTenant.responses.retrieve(kept.id)), kept);
    await expectNotFound(client.responses.retrieve(goneId));
    await expectNotFound(otherTenant.responses.retrieve(kept.id));
  });
  await check('after restart: previous_response_id continues the stored conversation', async () => {
    const next = await client.responses.create({
      model, max_output_tokens: 16, temperature: 0, previous_response_id: kept.id, input: 'Then',
    });
    checkResponse(next, 'incomplete');
    assert.equal(next.previous_response_id, kept.id);
    const chat = await chatText([
      { role: 'user', content: LONG }, { role: 'assistant', content: messageText(kept) },
      { role: 'user', content: 'Then' },
    ], 16);
    assert.equal(next.output_text, chat.text);
    assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal((await client.responses.retrieve(next.id)).previous_response_id, kept.id);
  });
}

// ---- limits (--responses-max-rows 2 --responses-max-age-s 2) ----

async function limitsChecks() {
  await check('limits: the oldest of three goes past max rows; all go past max age', async () => {
    const ids = [];
    for (let k = 0; k < 3; k++) {
      ids.push((await client.responses.create({
        model, input: 'Once upon a time', max_output_tokens: 16, temperature: 0,
      })).id);
    }
    await expectNotFound(client.responses.retrieve(ids[0]));
    for (const id of ids.slice(1)) assert.equal((await client.responses.retrieve(id)).id, id);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    for (const id of ids) await expectNotFound(client.responses.retrieve(id));
  });
}

const modes = {
  stories: storiesChecks,
  tools: toolsChecks,
  'before-restart': beforeRestart,
  'after-restart': afterRestart,
  limits: limitsChecks,
};
if (!modes[mode]) {
  console.log(`unknown MODE ${mode}: one of ${Object.keys(modes).join(', ')}`);
  process.exit(2);
}
await modes[mode]();
