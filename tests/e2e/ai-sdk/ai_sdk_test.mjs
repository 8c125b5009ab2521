// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) against a running Pagoda
// (scripts/check-responses-api.sh starts it): the provider's default model, openai(MODEL), speaks
// OpenAI's Responses API, which a fetch wrapper confirms by recording every request's URL and
// body. MODE text (the trained stories260K, "stories"): generateText at temperature 0 gives the
// greedy text of chat completions for the same prompt, streamText the same text in pieces, and
// generateObject with a finite zod schema an object that the schema accepts (text.format
// json_schema, enforced by the server's grammar). MODE tools (a random-weight Qwen3 model,
// "qwen3-random"): a two-step tool loop, the call forced by toolChoice "required", the tool run
// by the SDK, and the second step sending the stored call back as an item_reference with the
// function_call_output, answered with toolChoice "none". Prints one line per check and exits 1
// on the first failure.
//
//   node ai_sdk_test.mjs BASE_URL API_KEY MODEL MODE      (MODE: text or tools)
import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const [baseURL, apiKey, modelName, mode = 'text'] = process.argv.slice(2);

// Every request the provider makes: URL, method and JSON body.
const requests = [];
async function recordingFetch(url, init) {
  requests.push({
    url: String(url), method: init?.method,
    body: typeof init?.body === 'string' ? JSON.parse(init.body) : undefined,
  });
  return fetch(url, init);
}
const openai = createOpenAI({ baseURL, apiKey, fetch: recordingFetch });
const model = openai(modelName);

// Runs `body`; prints "ok   name", or "FAIL name: ..." and exits 1.
async function check(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    if (e.responseBody) console.log(`response body: ${e.responseBody}`);
    if (e.cause) console.log(`cause: ${e.cause.stack || e.cause}`);
    process.exit(1);
  }
}

// The requests made by `body`, which must all be POSTs to /responses.
async function responsesRequests(body) {
  const from = requests.length;
  const result = await body();
  const made = requests.slice(from);
  assert.ok(made.length >= 1, 'no request made');
  for (const r of made) {
    assert.equal(r.url, `${baseURL}/responses`);
    assert.equal(r.method, 'POST');
    assert.equal(r.body.model, modelName);
  }
  return { result, made };
}

async function chatContent(prompt, maxTokens) {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({
      model: modelName, messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens,
      temperature: 0,
    }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).choices[0].message.content;
}

async function textChecks() {
  const prompt = 'Once upon a time';
  const settings = { model, prompt, temperature: 0, maxOutputTokens: 16, maxRetries: 0 };
  let text;
  await check('generateText: Responses API, greedy text equals chat completions', async () => {
    const { result, made } = await responsesRequests(() => generateText(settings));
    assert.equal(made.length, 1);
    assert.equal(made[0].body.max_output_tokens, 16);
    text = result.text;
    assert.ok(text.length > 0);
    assert.equal(text, await chatContent(prompt, 16));
    assert.equal(result.finishReason, 'length');
    assert.match(result.response.id, /^resp_/);
    assert.ok(result.usage.inputTokens > 0);
    assert.equal(result.usage.outputTokens, 16);
  });

  await check('streamText: the pieces join to generateText\'s text', async () => {
    let error = null;
    const { result, made } = await responsesRequests(async () => {
      const s = streamText({ ...settings, onError: ({ error: e }) => { error = e; } });
      const pieces = [];
      for await (const piece of s.textStream) pieces.push(piece);
      return { pieces, finishReason: await s.finishReason, usage: await s.usage };
    });
    if (error) throw error;
    assert.equal(made.length, 1);
    assert.equal(made[0].body.stream, true);
    assert.ok(result.pieces.length >= 2, `${result.pieces.length} pieces`);
    assert.equal(result.pieces.join(''), text);
    assert.equal(result.finishReason, 'length');
    assert.equal(result.usage.outputTokens, 16);
  });

  await check('generateObject: a zod schema, the object obeys it', async () => {
    const schema = z.object({
      mood: z.enum(['happy', 'sad', 'angry']),
      count: z.number().int().min(1).max(9),
      done: z.boolean(),
    });
    const { result, made } = await responsesRequests(() => generateObject({
      model, schema, prompt, temperature: 0, maxOutputTokens: 64, maxRetries: 0,
    }));
    assert.equal(made[0].body.text.format.type, 'json_schema');
    assert.deepEqual(schema.parse(result.object), result.object);
    assert.equal(result.finishReason, 'stop');
  });
}

async function toolsChecks() {
  await check('tool loop: forced call, run, sent back as item_reference + output', async () => {
    const runs = [];
    const weather = tool({
      description: 'The weather of a city',
      inputSchema: z.object({
        city: z.enum(['Paris', 'Tokyo', 'Lima']),
        days: z.number().int().min(1).max(7),
      }),
      execute: async ({ city, days }) => {
        runs.push({ city, days });
        return { city, days, forecast: 'sunny' };
      },
    });
    const { result, made } = await responsesRequests(() => generateText({
      model, system: 'You answer questions about the weather.',
      prompt: 'What is the weather in Paris?', tools: { get_weather: weather },
      toolChoice: 'required', temperature: 0, maxOutputTokens: 100, maxRetries: 0,
      stopWhen: stepCountIs(2),
      // One call, then the grammar ends (with parallel calls a random model goes on writing
      // calls until maxOutputTokens).
      providerOptions: { openai: { parallelToolCalls: false } },
      prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: 'none' } : {}),
    }));
    assert.equal(made.length, 2);
    assert.equal(result.steps.length, 2);
    const [first, second] = result.steps;
    assert.equal(first.toolCalls.length, 1);
    assert.equal(first.finishReason, 'tool-calls');
    const call = first.toolCalls[0];
    assert.equal(call.toolName, 'get_weather');
    assert.equal(runs.length, 1);
    assert.deepEqual(runs[0], call.input);
    assert.equal(first.toolResults.length, 1);
    assert.equal(second.toolCalls.length, 0);
    assert.ok(['stop', 'length'].includes(second.finishReason), second.finishReason);
    // The first request: a system message, the question, the tool, the forced choice.
    assert.equal(made[0].body.tool_choice, 'required');
    assert.equal(made[0].body.parallel_tool_calls, false);
    assert.deepEqual(made[0].body.tools.map((t) => [t.type, t.name]), [['function', 'get_weather']]);
    // The second: the stored call as an item_reference to its fc_ item, then its output.
    const input = made[1].body.input;
    const fcId = first.response.body?.output?.find((i) => i.type === 'function_call')?.id ??
      call.providerMetadata?.openai?.itemId;
    assert.match(fcId, /^fc_/);
    assert.deepEqual(input.slice(-2).map((i) => i.type), ['item_reference', 'function_call_output']);
    assert.equal(input.at(-2).id, fcId);
    assert.equal(input.at(-1).call_id, call.toolCallId);
    assert.deepEqual(JSON.parse(input.at(-1).output), { ...runs[0], forecast: 'sunny' });
    assert.equal(made[1].body.tool_choice, 'none');
  });
}

const modes = { text: textChecks, tools: toolsChecks };
if (!modes[mode]) {
  console.log(`unknown MODE ${mode}: one of ${Object.keys(modes).join(', ')}`);
  process.exit(2);
}
await modes[mode]();
