// The official openai npm package, unmodified, against redlite-api. TestOpenAINodeSDK runs
// it with OPENAI_BASE_URL, OPENAI_API_KEY and REDLITE_MODEL set; it exits non-zero with the
// reason on the first failed check.
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';

const model = process.env.REDLITE_MODEL;
const client = new OpenAI({ maxRetries: 0 }); // base URL and key from the environment

const chatBody = (maxTokens, content) => ({
  model, max_tokens: maxTokens, temperature: 0,
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content }],
});

const jsonl = (n, body, url = '/v1/chat/completions') => Array.from({ length: n }, (_, i) => JSON.stringify({
  custom_id: `node-${String(i).padStart(2, '0')}`, method: 'POST', url, body: body(i),
})).join('\n') + '\n';

async function startBatch(input, endpoint = '/v1/chat/completions') {
  const file = await client.files.create({ file: await toFile(Buffer.from(input), 'input.jsonl'), purpose: 'batch' });
  assert.equal(file.bytes, Buffer.byteLength(input));
  const batch = await client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
  assert.equal(batch.status, 'validating');
  return batch;
}

const final = (b) => ['completed', 'failed', 'cancelled', 'expired'].includes(b.status);

async function poll(id, cond) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (cond(b)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${id} timed out: ${JSON.stringify(b)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function lines(fileId) {
  const text = await (await client.files.content(fileId)).text();
  const out = new Map();
  for (const l of text.split('\n').filter(Boolean)) {
    const o = JSON.parse(l);
    assert.ok(!out.has(o.custom_id), `custom_id ${o.custom_id} twice`);
    out.set(o.custom_id, o);
  }
  return out;
}

// A batch of 20 runs to completion; one output line per request, matched by custom_id.
{
  const n = 20;
  let batch = await startBatch(jsonl(n, (i) => chatBody(2 + (i % 3), `Count to ${i}.`)));
  batch = await poll(batch.id, final);
  assert.equal(batch.status, 'completed', JSON.stringify(batch));
  assert.deepEqual(batch.request_counts, { total: n, completed: n, failed: 0 });
  const out = await lines(batch.output_file_id);
  assert.equal(out.size, n);
  for (let i = 0; i < n; i++) {
    const l = out.get(`node-${String(i).padStart(2, '0')}`);
    assert.ok(l, `line ${i} missing`);
    assert.equal(l.response.status_code, 200);
    assert.equal(l.response.body.object, 'chat.completion');
    assert.equal(l.response.body.choices[0].message.role, 'assistant');
    assert.ok(l.response.body.usage.completion_tokens >= 1);
  }
  const page = await client.batches.list({ limit: 1 });
  assert.equal(page.data[0].id, batch.id);
}

// Cancelled midway: the finished request is kept, the rest are cancelled.
{
  const n = 20;
  let batch = await startBatch(jsonl(n, (i) => (i === 0 ? chatBody(2, 'Hi.') : chatBody(32768, 'Tell a very long story.'))));
  await poll(batch.id, (b) => b.request_counts.completed >= 1);
  const c = await client.batches.cancel(batch.id);
  assert.equal(c.status, 'cancelling');
  batch = await poll(batch.id, final);
  assert.equal(batch.status, 'cancelled');
  assert.equal(batch.request_counts.completed, 1);
  const out = await lines(batch.output_file_id);
  const errs = await lines(batch.error_file_id);
  assert.equal(out.size, 1);
  assert.ok(out.has('node-00'));
  assert.equal(errs.size, n - 1);
  for (const l of errs.values()) assert.equal(l.error.code, 'batch_cancelled');
}

// Chat completions, plain and streamed: greedy decoding gives the same text.
{
  const body = chatBody(5, 'Say hello.');
  const plain = await client.chat.completions.create(body);
  assert.equal(plain.choices.length, 1);
  assert.ok(plain.usage.completion_tokens >= 1 && plain.usage.completion_tokens <= 5);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
}

// 200 sampled tokens with a seed, streamed: the pieces put together are the text of the same
// request not streamed. The test's worker writes an entry per token (REDLITE_STREAM_INTERVAL=0),
// so a chunk comes per token whose text is released (not half a character): ≥ 100 of 200.
{
  const body = { ...chatBody(200, 'Tell me a long story.'), temperature: 0.9, seed: 11 };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let pieces = 0;
  let usage = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (ch.delta?.content) {
        text += ch.delta.content;
        pieces++;
      }
    }
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  assert.equal(usage.completion_tokens, 200);
  assert.ok(pieces >= 100, `${pieces} content chunks for 200 tokens, want ≥ 100`);
  console.log(`stream: ${usage.completion_tokens} tokens in ${pieces} pieces`);
}

// n: 3 gives three choices, indexed 0..2, that differ when sampled and are equal when
// greedy; the prompt counts once.
{
  const body = (temperature) => ({ ...chatBody(12, 'Tell me a story.'), temperature, seed: 5 });
  const one = await client.chat.completions.create(body(1));
  const three = await client.chat.completions.create({ ...body(1), n: 3 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(new Set(three.choices.map((c) => c.message.content)).size, 3, JSON.stringify(three.choices));
  assert.equal(three.choices[0].message.content, one.choices[0].message.content);
  assert.equal(three.usage.prompt_tokens, one.usage.prompt_tokens);
  const greedy = await client.chat.completions.create({ ...body(0), n: 3 });
  assert.equal(new Set(greedy.choices.map((c) => c.message.content)).size, 1, JSON.stringify(greedy.choices));
  const cmpl = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 1, seed: 5, n: 3 });
  assert.deepEqual(cmpl.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(new Set(cmpl.choices.map((c) => c.text)).size, 3, JSON.stringify(cmpl.choices));
}

// /v1/completions and /v1/responses, live, streamed and in batches.
{
  const cbody = { model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, logprobs: 1 };
  const cmpl = await client.completions.create(cbody);
  assert.equal(cmpl.object, 'text_completion');
  assert.ok(cmpl.choices[0].text.length > 0 && cmpl.usage.completion_tokens <= 16);
  assert.equal(cmpl.choices[0].logprobs.tokens.length, cmpl.usage.completion_tokens);
  let text = '';
  for await (const chunk of await client.completions.create({ ...cbody, stream: true })) {
    for (const ch of chunk.choices) text += ch.text;
  }
  assert.equal(text, cmpl.choices[0].text);

  const rbody = { model, input: 'Tell me a story.', instructions: 'Be brief.', max_output_tokens: 16, temperature: 0 };
  const resp = await client.responses.create(rbody);
  assert.equal(resp.object, 'response');
  assert.ok(resp.output_text.length > 0, JSON.stringify(resp)); // the SDK's sum of the output_text parts
  assert.ok(resp.usage.input_tokens > 0 && resp.usage.output_tokens <= 16);
  const chat = await client.chat.completions.create({ ...chatBody(16, 'Tell me a story.') });
  assert.equal(resp.output_text, chat.choices[0].message.content);
  let streamed = '';
  let done = null;
  for await (const ev of await client.responses.create({ ...rbody, stream: true })) {
    if (ev.type === 'response.output_text.delta') streamed += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') done = ev.response;
  }
  assert.equal(streamed, resp.output_text);
  assert.equal(done.output_text ?? done.output[0].content[0].text, resp.output_text);

  for (const [url, body, text] of [
    ['/v1/completions', (i) => ({ model, prompt: `Count to ${i}:`, max_tokens: 4 }), (b) => b.choices[0].text],
    ['/v1/responses', (i) => ({ model, input: `Count to ${i}.`, max_output_tokens: 4 }), (b) => b.output[0].content[0].text],
  ]) {
    const n = 3;
    let batch = await startBatch(jsonl(n, body, url), url);
    batch = await poll(batch.id, final);
    assert.equal(batch.status, 'completed', JSON.stringify(batch));
    assert.equal(batch.endpoint, url);
    const out = await lines(batch.output_file_id);
    assert.equal(out.size, n);
    for (const l of out.values()) {
      assert.equal(l.response.status_code, 200);
      assert.ok(text(l.response.body).length > 0, JSON.stringify(l));
    }
  }
}

// Errors come back as the SDK's typed errors.
{
  await assert.rejects(client.chat.completions.create({ ...chatBody(2, 'Hi.'), n: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  const bad = new OpenAI({ apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
}

// Structured outputs on the random-weight fixture, whose free text is noise: only the
// grammar can make these documents valid. ajv (a real validator) checks each one.
{
  const schema = JSON.parse(readFileSync('../order.schema.json', 'utf8'));
  const valid = new Ajv2020({ strict: true, allErrors: true }).compile(schema);
  const check = (text, where) => {
    let doc;
    assert.doesNotThrow(() => { doc = JSON.parse(text); }, `${where}: not JSON: ${text}`);
    assert.ok(valid(doc), `${where}: ${text}: ${JSON.stringify(valid.errors)}`);
  };
  const format = (s) => ({ type: 'json_schema', json_schema: { name: 'order', strict: true, schema: s } });
  const body = (i) => ({ ...chatBody(400, `Order ${i} as JSON.`), temperature: 1, seed: i, response_format: format(schema) });

  const cc = await client.chat.completions.create({ ...body(100), logprobs: true, top_logprobs: 2 });
  check(cc.choices[0].message.content, 'chat');
  assert.equal(cc.choices[0].finish_reason, 'stop');
  const lp = cc.choices[0].logprobs.content;
  assert.equal(lp.length, cc.usage.completion_tokens);
  assert.equal(Buffer.from(lp.flatMap((t) => t.bytes)).toString('utf8'), cc.choices[0].message.content);
  for (const t of lp) assert.ok(t.logprob <= 0 && t.top_logprobs.length >= 1 && t.top_logprobs.length <= 2, JSON.stringify(t));

  const n = 20;
  let batch = await startBatch(jsonl(n, body));
  batch = await poll(batch.id, final);
  assert.equal(batch.status, 'completed', JSON.stringify(batch));
  assert.deepEqual(batch.request_counts, { total: n, completed: n, failed: 0 });
  const out = await lines(batch.output_file_id);
  for (let i = 0; i < n; i++) {
    const l = out.get(`node-${String(i).padStart(2, '0')}`);
    assert.equal(l.response.status_code, 200);
    check(l.response.body.choices[0].message.content, `line ${i}`);
  }

  // A keyword the grammar cannot enforce: 400 naming it, never ignored.
  const bad = { type: 'object', properties: { n: { type: 'integer', multipleOf: 3 } } };
  await assert.rejects(client.chat.completions.create({ ...chatBody(2, 'Hi.'), response_format: format(bad) }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' && e.message.includes('"multipleOf"'));
}

// A chat no worker can hold: 400 context_length_exceeded in ONE request, though the SDK
// retries 5xx, 408, 409 and 429 twice by default (REDLITE_OVERSIZED_* from the Go test).
{
  let calls = 0;
  const counting = new OpenAI({ fetch: (url, init) => { calls++; return fetch(url, init); } });
  const text = 'a'.repeat(Number(process.env.REDLITE_OVERSIZED_BYTES));
  const maxTokens = Number(process.env.REDLITE_OVERSIZED_MAX_TOKENS);
  await assert.rejects(counting.chat.completions.create(chatBody(maxTokens, text)), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.code, 'context_length_exceeded');
    assert.match(e.message, /max_tokens/);
    return true;
  });
  assert.equal(calls, 1, 'the SDK retried an oversized request');
}

console.log('ok');
