/** Every check before a request is forwarded: key, content type, size, JSON, schema, model. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import request from 'supertest';
import { sha256 } from '../../src/auth/key-store.js';
import { type Router } from '../../src/main.js';
import { buildTestRouter, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let gateway: TestRouter<Router>;
const LIMITED = 'sk-limited-key-1';
const HASHED = 'sk-hashed-key-22';

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await buildTestRouter({
    keysYaml: [`- name: tester\n  key: ${KEY}`, `- name: limited\n  key: ${LIMITED}\n  models: [embed]`, `- name: hashed\n  keySha256: ${sha256(HASHED).toString('hex')}\n  models: ['*']`].join('\n'),
    server: { maxBodyBytes: 4096 },
    pools: [
      { name: 'chat-pool', servedModelName: 'served/chat', capabilities: ['chat'], endpoints: [upstream.url] },
      { name: 'embed-pool', servedModelName: 'served/embed', capabilities: ['embeddings'], endpoints: [upstream.url] },
      { name: 'empty-pool', servedModelName: 'served/none', capabilities: ['chat'], endpoints: [] },
    ],
    deployments: [
      { id: 'chat-prod', model: 'chat', aliases: ['default'], targets: [{ pool: 'chat-pool' }] },
      { id: 'embed-prod', model: 'embed', aliases: ['text-embedding-3-small'], targets: [{ pool: 'embed-pool' }] },
      { id: 'cold', model: 'cold-model', targets: [{ pool: 'empty-pool' }] },
    ],
  });
});
afterAll(async () => {
  await gateway.close();
  await upstream.close();
});

const chat = (body: unknown, key = KEY, contentType = 'application/json'): request.Test =>
  request(gateway.router.api)
    .post('/v1/chat/completions')
    .set({ Authorization: `Bearer ${key}`, 'Content-Type': contentType })
    .send(typeof body === 'string' ? body : JSON.stringify(body));

function expectError(res: request.Response, status: number, code: string, param: string | null = null): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.body).toEqual({ error: { message: expect.any(String), type: expect.any(String), param, code } });
}

const hello = [{ role: 'user', content: 'hi' }];

describe('authentication', () => {
  it('answers 401 without a key, with a malformed header and with a wrong key', async () => {
    expectError(await request(gateway.router.api).post('/v1/chat/completions').send({}), 401, 'invalid_api_key');
    expectError(await request(gateway.router.api).get('/v1/models').set('Authorization', `Basic ${KEY}`), 401, 'invalid_api_key');
    const wrong = await chat({ model: 'chat', messages: hello }, 'sk-not-a-real-key');
    expectError(wrong, 401, 'invalid_api_key');
    expect(JSON.stringify(wrong.body)).not.toContain('sk-not-a-real-key');
  });

  it('accepts keys stored only as SHA-256', async () => {
    expect((await chat({ model: 'chat', messages: hello }, HASHED)).status).toBe(200);
  });

  it('answers a model the key may not use exactly as one that does not exist, and lists only allowed models', async () => {
    const hidden = await chat({ model: 'chat', messages: hello }, LIMITED);
    const missing = await chat({ model: 'no-such-model', messages: hello }, LIMITED);
    expectError(hidden, 404, 'model_not_found', 'model');
    expectError(missing, 404, 'model_not_found', 'model');
    expect((hidden.body as { error: { message: string } }).error.message).toBe('The model `chat` does not exist or you do not have access to it.');
    expect((hidden.body as { error: { message: string } }).error.message.replace('`chat`', '`no-such-model`')).toBe((missing.body as { error: { message: string } }).error.message);
    expect(Object.keys(hidden.headers).sort()).toEqual(Object.keys(missing.headers).sort());
    const res = await request(gateway.router.api).get('/v1/models').set('Authorization', `Bearer ${LIMITED}`).expect(200);
    expect((res.body as { data: Array<{ id: string }> }).data.map((m) => m.id).sort()).toEqual(['embed', 'embed-prod', 'text-embedding-3-small']);
    const embedded = await request(gateway.router.api)
      .post('/v1/embeddings')
      .set({ Authorization: `Bearer ${LIMITED}`, 'Content-Type': 'application/json' })
      .send('{"model":"text-embedding-3-small","input":"x"}');
    expect(embedded.status).toBe(200);
  });

  it('never writes a key into the logs', async () => {
    await chat({ model: 'chat', messages: hello }).expect(200);
    await chat({ model: 'chat', messages: hello }, 'sk-leaky-wrong-key').expect(401);
    const logs = gateway.logs.join('');
    expect(logs).toContain('"key":"tester"');
    for (const secret of [KEY, LIMITED, HASHED, 'sk-leaky-wrong-key']) expect(logs).not.toContain(secret);
  });
});

/** GET /v1/models on `agent`'s connection: its status, and whether the connection was one used before. */
function modelsOn(url: string, agent: http.Agent, key: string): Promise<{ status: number; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}/v1/models`, { agent, headers: { authorization: `Bearer ${key}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
    });
    req.on('error', reject);
  });
}

describe('a key remembered by its connection', () => {
  it('is refused on that same connection once the keys file no longer has it', async () => {
    const local = await startTestRouter({ pools: [], deployments: [] });
    const kept = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const other = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await modelsOn(local.router.apiUrl, kept, KEY)).toEqual({ status: 200, reused: false });
      expect(await modelsOn(local.router.apiUrl, kept, KEY)).toEqual({ status: 200, reused: true });
      await writeFile(local.keysFile, '- name: rotated\n  key: sk-rotated-key-9\n');
      await waitFor(async () => (await modelsOn(local.router.apiUrl, other, 'sk-rotated-key-9')).status === 200, 'the new keys file to be loaded');
      expect(await modelsOn(local.router.apiUrl, kept, KEY)).toEqual({ status: 401, reused: true });
      // the connection goes on with another key, and then back to a refused one
      expect(await modelsOn(local.router.apiUrl, kept, 'sk-rotated-key-9')).toEqual({ status: 200, reused: true });
      expect(await modelsOn(local.router.apiUrl, kept, KEY)).toEqual({ status: 401, reused: true });
    } finally {
      kept.destroy();
      other.destroy();
      await local.close();
    }
  });
});

describe('keys file reload', () => {
  it('picks up a new key without a restart, and keeps the old keys when the new file is bad', async () => {
    const local = await buildTestRouter({ pools: [], deployments: [] });
    const models = (key: string): Promise<number> =>
      request(local.router.api)
        .get('/v1/models')
        .set('Authorization', `Bearer ${key}`)
        .then((r) => r.status);
    try {
      expect(await models('sk-rotated-key-9')).toBe(401);
      await writeFile(local.keysFile, '- name: rotated\n  key: sk-rotated-key-9\n');
      await waitFor(async () => (await models('sk-rotated-key-9')) === 200, 'the new key to be accepted');
      expect(await models(KEY)).toBe(401);
      await writeFile(local.keysFile, '- name: broken\n  key: [not, a, string]\n');
      await waitFor(() => local.logs.join('').includes('API keys file rejected'), 'the bad file to be rejected');
      expect(await models('sk-rotated-key-9')).toBe(200);
    } finally {
      await local.close();
    }
  });

  it('warns of a key that names no deployment (static mode), at start-up and on each reload, and serves on', async () => {
    const keysYaml = `- name: team-c\n  key: ${KEY}\n  models: [chat-prod, llama-70b-prod]\n  limits: { deployments: { embed-prod: { requestsPerMinute: 1 } } }\n`;
    const local = await buildTestRouter({
      pools: [{ name: 'p', servedModelName: 'served/chat', endpoints: ['http://127.0.0.1:9'] }],
      deployments: [{ id: 'chat-prod', model: 'chat', targets: [{ pool: 'p' }] }],
      keysYaml,
    });
    const warnings = (): Array<Record<string, unknown>> => local.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'API key names no deployment');
    try {
      expect(warnings()).toEqual([
        expect.objectContaining({ level: 40, key: 'team-c', field: 'models', name: 'llama-70b-prod' }),
        expect.objectContaining({ level: 40, key: 'team-c', field: 'limits.deployments', name: 'embed-prod' }),
      ]);
      // the key still works for what it names that exists
      const listed = await request(local.router.api).get('/v1/models').set('Authorization', `Bearer ${KEY}`);
      expect((listed.body as { data: Array<{ id: string }> }).data.map((m) => m.id)).toContain('chat-prod');
      // a reload with the names fixed says nothing more; one with a new typo says it
      await writeFile(local.keysFile, `- name: team-c\n  key: ${KEY}\n  models: [chat-prod, chat]\n`);
      await waitFor(() => local.logs.join('').includes('API keys reloaded'), 'the fixed file to be loaded');
      expect(warnings()).toHaveLength(2);
      await writeFile(local.keysFile, `- name: team-c\n  key: ${KEY}\n  models: [chat-prdo]\n`);
      await waitFor(() => warnings().length === 3, 'the typo to be said');
      expect(warnings()[2]).toMatchObject({ key: 'team-c', field: 'models', name: 'chat-prdo' });
    } finally {
      await local.close();
    }
  });
});

describe('a key that limits one deployment under two of its names', () => {
  it('is warned of at start-up with the entry that applies, and that entry is the one enforced', async () => {
    const keysYaml = `- name: team-d\n  key: ${KEY}\n  limits: { deployments: { chat: { requestsPerMinute: 100 }, chat-prod: { requestsPerMinute: 1 } } }\n`;
    const local = await buildTestRouter({
      pools: [{ name: 'p', servedModelName: 'served/chat', endpoints: ['http://127.0.0.1:9'], resilience: { retries: { maxRetries: 0 } } }],
      deployments: [{ id: 'chat-prod', model: 'chat', targets: [{ pool: 'p' }] }],
      keysYaml,
    });
    try {
      const warned = local.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'API key limits one deployment under several names; one entry applies');
      expect(warned).toEqual([expect.objectContaining({ level: 40, key: 'team-d', deployment: 'chat-prod', names: ['chat', 'chat-prod'], applies: 'chat-prod' })]);
      // the ID's 1 a minute is enforced, whichever name the request uses, not the model name's 100
      const send = () => request(local.router.api).post('/v1/chat/completions').set('Authorization', `Bearer ${KEY}`).send({ model: 'chat', messages: hello });
      expect((await send()).status).not.toBe(429);
      expect((await send()).status).toBe(429);
    } finally {
      await local.close();
    }
  });
});

describe('content type and size', () => {
  it('answers 415 to a body that is not declared JSON', async () => {
    expectError(await chat(JSON.stringify({ model: 'chat', messages: hello }), KEY, 'text/plain'), 415, 'unsupported_media_type');
  });

  it('accepts application/json with a charset', async () => {
    expect((await chat({ model: 'chat', messages: hello }, KEY, 'application/json; charset=utf-8')).status).toBe(200);
  });

  it('answers 413 to a body over server.maxBodyBytes', async () => {
    expectError(await chat({ model: 'chat', messages: [{ role: 'user', content: 'x'.repeat(5000) }] }), 413, 'request_too_large');
  });

  it('answers 400 to a body that is not JSON', async () => {
    expectError(await chat('{"model": "chat",'), 400, 'invalid_json');
  });
});

describe('validation', () => {
  const cases: Array<[string, object, string | null]> = [
    ['a missing model', { messages: hello }, 'model'],
    ['missing messages', { model: 'chat' }, 'messages'],
    ['empty messages', { model: 'chat', messages: [] }, 'messages'],
    ['an unknown role', { model: 'chat', messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    ['content that is a number', { model: 'chat', messages: [{ role: 'user', content: 5 }] }, 'messages[0].content'],
    ['a text part without text', { model: 'chat', messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text'],
    ['five stop strings', { model: 'chat', messages: hello, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    ['a stop list with a number', { model: 'chat', messages: hello, stop: ['a', 1] }, 'stop[1]'],
    ['stop as a number', { model: 'chat', messages: hello, stop: 3 }, 'stop'],
    ['top_logprobs above 20', { model: 'chat', messages: hello, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['top_logprobs without logprobs', { model: 'chat', messages: hello, top_logprobs: 3 }, 'top_logprobs'],
    ['presence_penalty below -2', { model: 'chat', messages: hello, presence_penalty: -2.5 }, 'presence_penalty'],
    ['frequency_penalty above 2', { model: 'chat', messages: hello, frequency_penalty: 3 }, 'frequency_penalty'],
    ['n of 0', { model: 'chat', messages: hello, n: 0 }, 'n'],
    ['a fractional max_tokens', { model: 'chat', messages: hello, max_tokens: 1.5 }, 'max_tokens'],
    ['stream as a string', { model: 'chat', messages: hello, stream: 'yes' }, 'stream'],
    ['a tool without a type', { model: 'chat', messages: hello, tools: [{ function: { name: 'f' } }] }, 'tools[0].type'],
    ['a body that is an array', [1], null],
  ];
  it.each(cases)('answers 400 to %s, naming the field', async (_name, body, param) => {
    expectError(await chat(body), 400, 'invalid_request', param);
  });

  it('collects every error in one message', async () => {
    const res = await chat({ model: 'chat', messages: [{ role: 'robot' }], n: 0, presence_penalty: 9 });
    const message = (res.body as { error: { message: string } }).error.message;
    expect(message).toContain('messages[0].role');
    expect(message).toContain('n must be >= 1');
    expect(message).toContain('presence_penalty must be <= 2');
  });

  it('accepts every field of the convention, nulls and unknown fields', async () => {
    const body = {
      model: 'chat',
      messages: [
        { role: 'system', content: 's' },
        { role: 'developer', content: 'd' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'u' },
            { type: 'image_url', image_url: { url: 'data:' } },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [] },
        { role: 'tool', content: 't', tool_call_id: '1' },
      ],
      temperature: 0.7,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.05,
      n: 2,
      max_tokens: 10,
      max_completion_tokens: 10,
      min_tokens: 1,
      stop: ['\n'],
      stream: false,
      stream_options: null,
      presence_penalty: -2,
      frequency_penalty: 2,
      repetition_penalty: 1.1,
      logprobs: true,
      top_logprobs: 20,
      logit_bias: { '50256': -100 },
      seed: 7,
      response_format: { type: 'json_object' },
      tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      functions: [{ name: 'g' }],
      function_call: 'none',
      user: 'u-1',
      metadata: { team: 'a' },
      extra_body: { guided_json: {} },
      vendor_field: 1,
    };
    expect((await chat(body)).status).toBe(200);
  });

  it('validates embeddings input: strings, token ids, never empty', async () => {
    const embed = (input: unknown): Promise<number> =>
      request(gateway.router.api)
        .post('/v1/embeddings')
        .set({ Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' })
        .send(JSON.stringify({ model: 'embed', input }))
        .then((r) => r.status);
    for (const ok of ['text', ['a', 'b'], [1, 2], [[1], [2, 3]]]) expect(await embed(ok)).toBe(200);
    for (const bad of ['', [], [''], [[]], [1.5], [-1], { text: 'x' }]) expect(await embed(bad)).toBe(400);
  });
});

describe('model resolution', () => {
  it('answers 404 model_not_found naming the model', async () => {
    const res = await chat({ model: 'gpt-5', messages: hello });
    expectError(res, 404, 'model_not_found', 'model');
    expect((res.body as { error: { message: string } }).error.message).toContain('`gpt-5`');
  });

  it('is exact and case-sensitive', async () => {
    expectError(await chat({ model: 'Chat', messages: hello }), 404, 'model_not_found', 'model');
  });

  it('answers 400 to chat sent to an embeddings model and the reverse', async () => {
    expectError(await chat({ model: 'embed', messages: hello }), 400, 'model_capability_mismatch', 'model');
    const res = await request(gateway.router.api)
      .post('/v1/embeddings')
      .set({ Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' })
      .send('{"model":"default","input":"x"}');
    expectError(res, 400, 'model_capability_mismatch', 'model');
  });

  it('answers 503 with Retry-After when the model has no ready replica', async () => {
    const res = await chat({ model: 'cold-model', messages: hello });
    expectError(res, 503, 'no_ready_replica');
    expect(res.headers['retry-after']).toBe('2');
  });
});

describe('routes', () => {
  it('answers 404 to unknown routes and 405 to wrong methods, in the envelope', async () => {
    expectError(await request(gateway.router.api).get('/v2/anything'), 404, 'route_not_found');
    expectError(await request(gateway.router.api).get('/v1/chat/completions'), 405, 'method_not_allowed');
    expectError(await request(gateway.router.api).delete('/v1/models'), 405, 'method_not_allowed');
  });

  it('answers an unknown path under /v1/messages/ (the Anthropic SDK’s countTokens) in Anthropic’s envelope, which its SDK reads', async () => {
    const res = await request(gateway.router.api).post('/v1/messages/count_tokens').set('x-api-key', KEY).send({ model: 'chat', messages: hello });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ type: 'error', error: { type: 'not_found_error', message: expect.stringContaining('Unknown route POST /v1/messages/count_tokens') } });
    expect(res.headers['request-id']).toBeUndefined(); // no route of the Messages API: only its envelope
  });
});
