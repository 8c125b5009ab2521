// What the openai-client checks share: one printed line per check, and the expectation that a
// call fails with the client's APIError of a given status and words.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

// Runs `body`; prints "ok   name", or "FAIL name: ..." and exits 1.
export async function check(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exit(1);
  }
}

// Awaits `promise`, which must fail with an APIError of `status` whose message has `words`.
export async function expectApiError(promise, status, words) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    assert.ok(e.message.includes(words), `"${e.message}" lacks "${words}"`);
    return e;
  }
  assert.fail(`no error (expected ${status})`);
}
