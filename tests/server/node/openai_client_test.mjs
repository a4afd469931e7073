// The official `openai` npm client (v4) against a running `strata serve`: completions and chat,
// streamed and not, usage, logprobs, and the client's typed errors for 400/401/404.
// Usage: node openai_client_test.mjs BASE_URL API_KEY MODEL REFERENCE_JSONL
// Exits 0 when every check passes; prints the failed assertion and exits 1 otherwise.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [baseURL, apiKey, model, referencePath] = process.argv.slice(2);
if (!referencePath) {
  console.error('usage: node openai_client_test.mjs BASE_URL API_KEY MODEL REFERENCE_JSONL');
  process.exit(2);
}
const reference = JSON.parse(readFileSync(referencePath, 'utf8').split('\n')[0]);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

function checkUsage(usage, promptTokens, completionTokens) {
  assert.equal(usage.prompt_tokens, promptTokens);
  assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(usage.total_tokens, promptTokens + completionTokens);
}

async function models() {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [model]);
  assert.equal(list.data[0].object, 'model');
}

async function completions() {
  const n = reference.tokens.length;
  const whole = await client.completions.create({ model, prompt: reference.prompt, max_tokens: n, temperature: 0 });
  assert.equal(whole.object, 'text_completion');
  assert.ok(whole.id.startsWith('cmpl-'));
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].text, reference.content);
  assert.equal(whole.choices[0].finish_reason, 'length');
  checkUsage(whole.usage, reference.prompt_tokens.length, n);

  const stream = await client.completions.create({
    model, prompt: reference.prompt, max_tokens: n, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, reference.content);
  assert.equal(finish, 'length');
  assert.ok(usage, 'include_usage gives a usage chunk');
  checkUsage(usage, reference.prompt_tokens.length, n);
}

async function chat() {
  const messages = [
    { role: 'system', content: 'You are a storyteller.' },
    { role: 'user', content: 'Tell me a story about a dog.' },
  ];
  const whole = await client.chat.completions.create({
    model, messages, max_completion_tokens: 32, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  assert.equal(whole.object, 'chat.completion');
  assert.ok(whole.id.startsWith('chatcmpl-'));
  const choice = whole.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(choice.message.content.length > 0);
  assert.ok(['stop', 'length'].includes(choice.finish_reason));
  assert.equal(choice.logprobs.content.length, whole.usage.completion_tokens);
  assert.equal(choice.logprobs.content.map((t) => t.token).join(''), choice.message.content);
  for (const t of choice.logprobs.content) assert.equal(t.top_logprobs.length, 2);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let content = '';
  let role = null;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, choice.message.content);
  assert.equal(finish, choice.finish_reason);
  checkUsage(usage, whole.usage.prompt_tokens, whole.usage.completion_tokens);
}

async function errors() {
  await assert.rejects(
    client.completions.create({ model, prompt: 'Hi', max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens' && e.type === 'invalid_request_error',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /unknown role/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'Hi', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found',
  );
  const wrongKey = new OpenAI({ baseURL, apiKey: apiKey + '-wrong', maxRetries: 0 });
  await assert.rejects(
    wrongKey.completions.create({ model, prompt: 'Hi', max_tokens: 2 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
}

try {
  await models();
  await completions();
  await chat();
  await errors();
  console.log('openai client: all checks passed');
} catch (e) {
  console.error('openai client check failed:', e);
  process.exit(1);
}
