// Many concurrent streams against a real pagedllm-host, some clients leaving
// mid-stream: every other stream gets a complete, well-formed answer, the
// left ones are aborted, and afterwards nothing runs and no KV block is in use.
// Then SIGTERM: the server exits 0.

import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { metric, startServer } from './harness.js';

const STREAMS = 72;
const MAX_TOKENS = 24;
const LEAVER_MAX_TOKENS = 16000;
let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  assert.equal(await server.stop('SIGTERM'), 0);
});

async function runStream(client, model, i) {
  const leaves = i % 4 === 0;
  // A leaver asks for nearly the whole context (run_js_tests.sh makes it 16k
  // tokens): this tiny model decodes a few hundred tokens before a busy client
  // gets to read its third chunk, so a short leaver could finish before it leaves.
  const params = { model, max_tokens: leaves ? LEAVER_MAX_TOKENS : MAX_TOKENS, ignore_eos: true, temperature: 0.8, seed: i, stream: true,
                   stream_options: { include_usage: true } };
  const stream = i % 2 === 0
    ? await client.chat.completions.create({ ...params, messages: [{ role: 'user', content: `Tell story number ${i}.` }] })
    : await client.completions.create({ ...params, prompt: `Story number ${i}:` });
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    if (leaves && chunks.length === 3) {
      stream.controller.abort();  // the client leaves: its connection closes
      return { leaves };
    }
  }
  return { leaves, chunks };
}

function checkComplete(i, chunks) {
  const chat = i % 2 === 0;
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, [], `stream ${i}: the last chunk carries usage only`);
  assert.equal(usage.usage.completion_tokens, MAX_TOKENS, `stream ${i}: completion tokens`);
  const body = chunks.slice(0, -1);
  assert.ok(body.length >= 2, `stream ${i}: has content chunks`);
  for (const c of body) {
    assert.equal(c.id, usage.id, `stream ${i}: one id`);
    assert.equal(c.object, chat ? 'chat.completion.chunk' : 'text_completion');
    assert.equal(c.choices.length, 1);
    assert.equal(c.choices[0].index, 0);
  }
  if (chat) assert.equal(body[0].choices[0].delta.role, 'assistant');
  assert.equal(body.at(-1).choices[0].finish_reason, 'length', `stream ${i}: finishes by length`);
  assert.ok(body.slice(0, -1).every((c) => c.choices[0].finish_reason === null), `stream ${i}: one finish`);
}

it(`${STREAMS} concurrent streams, a quarter of the clients leaving mid-stream`, async () => {
  const client = server.client();
  const model = (await client.models.list()).data[0].id;
  const abortsBefore = await metric(server.url, 'pagedllm:request_success_total', 'finished_reason="abort"');
  const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) => runStream(client, model, i)));
  const left = results.filter((r) => r.leaves).length;
  results.forEach((r, i) => { if (!r.leaves) checkComplete(i, r.chunks); });

  // The engine drains: nothing running, no KV block owned, every leaver aborted.
  const deadline = Date.now() + 10000;
  let running, blocks, aborts;
  do {
    running = await metric(server.url, 'pagedllm:num_requests_running');
    blocks = await metric(server.url, 'pagedllm:kv_cache_blocks_in_use');
    aborts = await metric(server.url, 'pagedllm:request_success_total', 'finished_reason="abort"');
    if (running === 0 && blocks === 0 && aborts - abortsBefore === left) break;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < deadline);
  assert.equal(running, 0);
  assert.equal(blocks, 0);
  assert.equal(await metric(server.url, 'pagedllm:num_requests_waiting'), 0);
  assert.equal(aborts - abortsBefore, left);
  assert.equal(await metric(server.url, 'pagedllm:request_success_total', 'finished_reason="length"'), STREAMS - left);
});
