// The OpenAI-compatible API through the official openai client, against a
// real pagedllm-host serving a tiny random Llama: completions and chat,
// streamed and not, stop strings, n > 1, logprobs, echo, and every error class.

import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { collect, startServer } from './harness.js';

const KEY = 'test-key';
let server;
let client;
let model;

before(async () => {
  server = await startServer([`server.api_key=${KEY}`, 'server.max_request_body=64KiB', 'scheduler.max_model_len=512']);
  client = server.client({ apiKey: KEY });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

const greedy = (extra = {}) => ({ model, temperature: 0, ...extra });

describe('models and the side routes', () => {
  it('lists the served model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].object, 'model');
    assert.equal((await client.models.retrieve(model)).id, model);
  });

  it('answers /health, /version, /metrics, /tokenize, /detokenize without a key', async () => {
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    assert.match((await (await fetch(`${server.url}/version`)).json()).version, /^\d+\.\d+\.\d+$/);
    const metrics = await fetch(`${server.url}/metrics`);
    assert.match(metrics.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
    assert.match(await metrics.text(), /# TYPE pagedllm:time_to_first_token_seconds histogram/);
    const post = (path, body) =>
      fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const tokens = await (await post('/tokenize', { prompt: 'Hello world' })).json();
    assert.equal(tokens.count, tokens.tokens.length);
    assert.equal(tokens.max_model_len, 512);
    const text = await (await post('/detokenize', { tokens: tokens.tokens })).json();
    assert.match(text.prompt, /Hello world$/);
  });
});

describe('completions', () => {
  it('returns a whole completion with usage; greedy is deterministic', async () => {
    const a = await client.completions.create(greedy({ prompt: 'The capital of France is', max_tokens: 8 }));
    assert.equal(a.object, 'text_completion');
    assert.equal(a.model, model);
    assert.equal(a.choices.length, 1);
    assert.equal(a.choices[0].finish_reason, 'length');
    assert.equal(typeof a.choices[0].text, 'string');
    assert.equal(a.usage.completion_tokens, 8);
    assert.ok(a.usage.prompt_tokens > 0);
    assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 8);
    const b = await client.completions.create(greedy({ prompt: 'The capital of France is', max_tokens: 8 }));
    assert.equal(b.choices[0].text, a.choices[0].text);
  });

  it('streams the same text, then the usage chunk', async () => {
    const whole = await client.completions.create(greedy({ prompt: 'Once upon a time', max_tokens: 12 }));
    const chunks = await collect(await client.completions.create(greedy({
      prompt: 'Once upon a time', max_tokens: 12, stream: true, stream_options: { include_usage: true },
    })));
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 12);
    const textChunks = chunks.slice(0, -1);
    assert.ok(textChunks.every((c) => c.usage === null && c.id === usage.id));
    assert.equal(textChunks.map((c) => c.choices[0].text).join(''), whole.choices[0].text);
    assert.equal(textChunks.at(-1).choices[0].finish_reason, 'length');
    assert.ok(textChunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
  });

  it('accepts token ids and batches; choices are prompt-major', async () => {
    const ids = (await client.completions.create(greedy({ prompt: [959, 10, 20, 30], max_tokens: 3 })));
    assert.equal(ids.usage.prompt_tokens, 4);
    const batch = await client.completions.create(greedy({ prompt: ['one', 'two'], n: 2, max_tokens: 3 }));
    assert.deepEqual(batch.choices.map((c) => c.index), [0, 1, 2, 3]);
    // Greedy: both choices of a prompt agree, and match that prompt alone.
    assert.equal(batch.choices[0].text, batch.choices[1].text);
    const two = await client.completions.create(greedy({ prompt: 'two', max_tokens: 3 }));
    assert.equal(batch.choices[2].text, two.choices[0].text);
  });

  it('ends at a stop string, which is not in the text', async () => {
    const free = await client.completions.create(greedy({ prompt: 'Stop strings', max_tokens: 24, ignore_eos: true }));
    const text = free.choices[0].text;
    // A stop string from the middle of what greedy decoding produced.
    const stop = [...text.slice(4).matchAll(/[A-Za-z]{2}/g)].map((m) => m[0])[0] ?? text.slice(4, 6);
    const expected = text.slice(0, text.indexOf(stop));
    const stopped = await client.completions.create(greedy({ prompt: 'Stop strings', max_tokens: 24, ignore_eos: true, stop: [stop] }));
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    assert.equal(stopped.choices[0].text, expected);
    assert.equal(stopped.choices[0].stop_reason, stop);
    const streamed = await collect(await client.completions.create(greedy({
      prompt: 'Stop strings', max_tokens: 24, ignore_eos: true, stop: stop, stream: true,
    })));
    assert.equal(streamed.map((c) => c.choices[0].text).join(''), expected);
    assert.equal(streamed.at(-1).choices[0].finish_reason, 'stop');
  });

  it('samples n > 1 choices, reproducibly with a seed', async () => {
    const params = { model, prompt: 'Random', max_tokens: 6, n: 3, temperature: 1.0, seed: 1234 };
    const a = await client.completions.create(params);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    assert.ok(a.choices.every((c) => c.finish_reason === 'length' || c.finish_reason === 'stop'));
    const b = await client.completions.create(params);
    assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
    const streamed = await collect(await client.completions.create({ ...params, stream: true }));
    for (const index of [0, 1, 2]) {
      const mine = streamed.filter((c) => c.choices[0].index === index);
      assert.equal(mine.map((c) => c.choices[0].text).join(''), a.choices[index].text);
      assert.ok(mine.at(-1).choices[0].finish_reason);
    }
  });

  it('returns legacy logprobs; the greedy token is the top one', async () => {
    const r = await client.completions.create(greedy({ prompt: 'Logprobs', max_tokens: 5, logprobs: 2, ignore_eos: true }));
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 5; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 2);
      assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-5);
      if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    }
  });

  it('echoes the prompt; its tokens have null logprobs', async () => {
    const r = await client.completions.create(greedy({ prompt: 'Echo me', max_tokens: 2, echo: true, logprobs: 0 }));
    assert.ok(r.choices[0].text.startsWith('Echo me'));
    const lp = r.choices[0].logprobs;
    const promptTokens = r.usage.prompt_tokens;
    assert.equal(lp.tokens.length, promptTokens + 2);
    assert.ok(lp.token_logprobs.slice(0, promptTokens).every((x) => x === null));
    assert.ok(lp.token_logprobs.slice(promptTokens).every((x) => typeof x === 'number'));
  });
});

describe('chat completions', () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi.' }];

  it('answers as the assistant, streamed and not, with the same text', async () => {
    const whole = await client.chat.completions.create(greedy({ messages, max_tokens: 10, ignore_eos: true }));
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, 10);
    const chunks = await collect(await client.chat.completions.create(greedy({
      messages, max_tokens: 10, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    })));
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    const content = chunks.filter((c) => c.choices.length).map((c) => c.choices[0].delta.content ?? '').join('');
    assert.equal(content, whole.choices[0].message.content);
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
    assert.equal(chunks.at(-1).usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  it('uses max_completion_tokens and n', async () => {
    const r = await client.chat.completions.create(greedy({ messages, max_completion_tokens: 3, n: 2, ignore_eos: true }));
    assert.equal(r.choices.length, 2);
    assert.equal(r.usage.completion_tokens, 6);
  });

  it('returns chat logprobs with bytes and sorted alternatives', async () => {
    const r = await client.chat.completions.create(greedy({ messages, max_tokens: 4, logprobs: true, top_logprobs: 3, ignore_eos: true }));
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const entry of content) {
      assert.equal(typeof entry.token, 'string');
      assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, 'utf8')]);
      assert.equal(entry.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(entry.top_logprobs[i - 1].logprob >= entry.top_logprobs[i].logprob);
      assert.ok(Math.abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-5);
    }
  });
});

describe('errors', () => {
  const expectError = async (promise, status, check = () => {}) => {
    await assert.rejects(promise, (err) => {
      assert.ok(err instanceof OpenAI.APIError, `expected an APIError, got ${err}`);
      assert.equal(err.status, status, err.message);
      check(err);
      return true;
    });
  };

  it('400 for wrong types and values, naming the field', async () => {
    await expectError(client.completions.create({ model, prompt: 'x', temperature: 5 }), 400, (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.param, 'temperature');
      assert.equal(e.type, 'invalid_request_error');
    });
    await expectError(client.completions.create({ model, prompt: 'x', max_tokens: 'many' }), 400, (e) => assert.equal(e.param, 'max_tokens'));
    await expectError(client.completions.create({ model, prompt: 'x', n: 1000 }), 400, (e) => assert.equal(e.param, 'n'));
    await expectError(client.completions.create({ model, prompt: 'x', logprobs: 50 }), 400, (e) => assert.equal(e.param, 'logprobs'));
    await expectError(client.chat.completions.create({ model, messages: [] }), 400, (e) => assert.equal(e.param, 'messages'));
    await expectError(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 400);
  });

  it('400 for prompts longer than the context, or outputs that do not fit', async () => {
    await expectError(client.completions.create({ model, prompt: new Array(600).fill(10) }), 400, (e) => {
      assert.equal(e.param, 'prompt');
      assert.match(e.message, /maximum context length is 512 tokens/);
    });
    await expectError(client.completions.create({ model, prompt: 'x', max_tokens: 600 }), 400, (e) => assert.equal(e.param, 'max_tokens'));
  });

  it('401 without the right key', async () => {
    await expectError(server.client({ apiKey: 'wrong' }).models.list(), 401, (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError);
      assert.equal(e.code, 'invalid_api_key');
    });
  });

  it('404 for an unknown model or route, 405 for a wrong method', async () => {
    await expectError(client.completions.create({ model: 'gpt-4', prompt: 'x' }), 404, (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError);
      assert.equal(e.code, 'model_not_found');
    });
    const auth = { authorization: `Bearer ${KEY}` };
    const missing = await fetch(`${server.url}/v1/embeddings`, { method: 'POST', headers: auth, body: '{}' });
    assert.equal(missing.status, 404);
    assert.ok((await missing.json()).error.message);
    const wrong = await fetch(`${server.url}/v1/completions`, { headers: auth });
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get('allow'), 'POST');
    assert.equal((await wrong.json()).error.code, 'method_not_allowed');
  });

  it('413 for a body over the limit', async () => {
    await expectError(client.completions.create({ model, prompt: 'x'.repeat(100 * 1024) }), 413, (e) => {
      assert.equal(e.code, 'request_too_large');
    });
  });

  it('400 for a body that is not JSON, and the connection is fine after', async () => {
    const r = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{"prompt": ',
    });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.type, 'invalid_request_error');
    assert.equal((await client.models.list()).data.length, 1);
  });
});

describe('overload', () => {
  it('503 with Retry-After over server.max_concurrent_requests', async () => {
    const busy = await startServer(['server.max_concurrent_requests=1']);
    try {
      const c = busy.client();
      const stream = await c.completions.create({ model, prompt: 'x', max_tokens: 400, ignore_eos: true, stream: true });
      const iterator = stream[Symbol.asyncIterator]();
      await iterator.next();  // the first request is running
      await assert.rejects(c.completions.create({ model, prompt: 'y', max_tokens: 2 }), (err) => {
        assert.equal(err.status, 503);
        assert.equal(err.code, 'overloaded');
        assert.equal(err.headers['retry-after'], '1');
        return true;
      });
      stream.controller.abort();
    } finally {
      assert.equal(await busy.stop(), 0);
    }
  });
});
