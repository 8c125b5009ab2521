// The official `openai` npm client against a running Pagoda (scripts/check-openai-client.sh
// starts it with the trained test model, served as "stories"): completions and chat, whole and
// streamed, n > 1, logprobs, errors as the client's APIError. Prints one line per check and
// exits 1 on the first failure.
//
//   node client_test.mjs BASE_URL GOLDEN_JSON API_KEY
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { check, expectApiError } from './checks.mjs';

const [baseURL, goldenPath, apiKey] = process.argv.slice(2);
const golden = JSON.parse(readFileSync(goldenPath, 'utf8')).cases;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const model = 'stories';

await check('models.list names the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
  assert.equal((await client.models.retrieve(model)).id, model);
  await expectApiError(client.models.retrieve('other'), 404, 'other');
});

await check('completions: greedy text equals golden.json', async () => {
  for (const c of golden) {
    const r = await client.completions.create({
      model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, c.expected_text);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.prompt_tokens, c.prompt_token_ids.length);
    assert.equal(r.usage.completion_tokens, c.max_tokens);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  }
});

await check('completions: streamed text equals golden.json, usage chunk last', async () => {
  const c = golden[1];
  const stream = await client.completions.create({
    model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, c.expected_text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, c.max_tokens);
});

await check('completions: n = 3 with a seed, whole and streamed agree', async () => {
  const request = { model, prompt: golden[0].prompt, max_tokens: 10, temperature: 0.8, seed: 11, n: 3 };
  const whole = await client.completions.create(request);
  assert.equal(whole.choices.length, 3);
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  const texts = ['', '', ''];
  for await (const chunk of await client.completions.create({ ...request, stream: true })) {
    for (const choice of chunk.choices) texts[choice.index] += choice.text;
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.text));
  assert.equal(whole.usage.completion_tokens, 30);
});

await check('completions: a stop string ends the text before it', async () => {
  const c = golden[0];
  const r = await client.completions.create({
    model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stop: ['Lily'],
  });
  assert.equal(r.choices[0].text, c.expected_text.slice(0, c.expected_text.indexOf('Lily')));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await check('errors arrive as APIError with OpenAI fields', async () => {
  const e = await expectApiError(
    client.completions.create({ model, prompt: 'x', temperature: 1000 }), 400, 'temperature');
  assert.equal(e.type, 'invalid_request_error');
  await expectApiError(client.completions.create({ model: 'gpt-4o', prompt: 'x' }), 404, 'gpt-4o');
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await expectApiError(bad.completions.create({ model, prompt: 'x' }), 401, 'API key');
});

// The server's template renders BOS + the messages' contents: one user message holding a golden
// prompt is that prompt.
await check('chat: greedy content equals golden.json, whole and streamed', async () => {
  const c = golden[2];
  const request = {
    model, messages: [{ role: 'user', content: c.prompt }], max_completion_tokens: c.max_tokens,
    temperature: 0,
  };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.choices[0].message.content, c.expected_text);
  assert.equal(whole.usage.prompt_tokens, c.prompt_token_ids.length);
  let content = '';
  let role = null;
  let chunks = 0;
  for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const delta = chunk.choices[0].delta;
    if (chunks++ === 0) role = delta.role;
    content += delta.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(content, c.expected_text);
});

await check('chat: n = 2 streams both choices to their ends', async () => {
  const ends = [null, null];
  const texts = ['', ''];
  for await (const chunk of await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8,
    temperature: 1, seed: 3, n: 2, stream: true,
  })) {
    for (const choice of chunk.choices) {
      texts[choice.index] += choice.delta.content ?? '';
      if (choice.finish_reason) ends[choice.index] = choice.finish_reason;
    }
  }
  assert.deepEqual(ends, ['length', 'length']);
  assert.ok(texts[0].length > 0 && texts[1].length > 0);
});

await check('completions: logprobs with 2 alternatives, whole and streamed', async () => {
  const c = golden[0];
  const request = { model, prompt: c.prompt, max_tokens: 12, temperature: 0, logprobs: 2 };
  const whole = await client.completions.create(request);
  const l = whole.choices[0].logprobs;
  assert.equal(l.tokens.length, 12);
  assert.equal(l.tokens.join(''), whole.choices[0].text);
  assert.equal(whole.choices[0].text, c.expected_text.slice(0, whole.choices[0].text.length));
  for (let i = 0; i < 12; ++i) {
    assert.ok(l.token_logprobs[i] <= 0);
    const alternatives = Object.values(l.top_logprobs[i]);
    assert.ok(alternatives.length >= 2 && alternatives.length <= 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...alternatives) - l.token_logprobs[i]) < 1e-6);
    if (i > 0) assert.equal(l.text_offset[i], l.text_offset[i - 1] + l.tokens[i - 1].length);
  }
  const streamed = [];
  for await (const chunk of await client.completions.create({ ...request, stream: true })) {
    for (const choice of chunk.choices) streamed.push(...(choice.logprobs?.token_logprobs ?? []));
  }
  assert.deepEqual(streamed, l.token_logprobs);
});

await check('chat: logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: golden[0].prompt }], max_tokens: 6,
    temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
});

await check('sampling surface: logit_bias bans a token, penalties are accepted', async () => {
  const c = golden[0];
  const base = { model, prompt: c.prompt, max_tokens: 12, temperature: 0 };
  const plain = await client.completions.create(base);
  assert.ok(plain.choices[0].text.startsWith(','));
  const comma = c.expected_token_ids[0];
  const banned = await client.completions.create({ ...base, logit_bias: { [comma]: -100 } });
  assert.ok(!banned.choices[0].text.startsWith(','), banned.choices[0].text);
  const penalized = await client.completions.create({
    ...base, presence_penalty: 1, frequency_penalty: 1, repetition_penalty: 1.3, min_p: 0.05,
    top_k: 40, top_p: 0.9,
  });
  assert.equal(penalized.choices[0].finish_reason, 'length');
  await expectApiError(client.completions.create({ ...base, frequency_penalty: 3 }), 400,
    'frequency_penalty must be in [-2, 2]');
});
