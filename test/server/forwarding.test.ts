/** What crosses the router: body bytes, headers, request ids, upstream errors and failures. */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { type Router } from '../../src/main.js';
import { buildTestRouter, chatSetup, KEY, type TestRouter } from '../helpers/router.js';
import { okChat, replyWith, startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let gateway: TestRouter<Router>;
const auth = { Authorization: `Bearer ${KEY}` };

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await buildTestRouter({
    pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat', 'embeddings'], endpoints: [upstream.url] }],
    deployments: [{ id: 'llm-prod', model: 'llm', aliases: ['default'], targets: [{ pool: 'llm' }] }],
  });
});
afterEach(() => {
  upstream.requests.length = 0;
  upstream.reply = okChat;
});
afterAll(async () => {
  await gateway.close();
  await upstream.close();
});

const post = (body: string | object, headers: Record<string, string> = {}): request.Test =>
  request(gateway.router.api)
    .post('/v1/chat/completions')
    .set({ ...auth, 'Content-Type': 'application/json', ...headers })
    .send(typeof body === 'string' ? body : JSON.stringify(body));

describe('request body', () => {
  it('reaches the engine with only model rewritten: unknown fields, number spellings and big integers intact', async () => {
    const body = '{"model":"default","messages":[{"role":"user","content":"caf\\u00e9"}],"temperature":1.0,"seed":18446744073709551615,"vendor_flag":{"deep":[1e2]}}';
    await post(body).expect(200);
    expect(upstream.requests[0]!.body).toBe(body.replace('"default"', '"served/llm"'));
    expect(upstream.requests[0]!.url).toBe('/v1/chat/completions');
  });

  it('merges extra_body into the top level (its keys win) and removes it', async () => {
    await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }], top_k: 1, extra_body: { top_k: 40, repetition_penalty: 1.1 } }).expect(200);
    expect(JSON.parse(upstream.requests[0]!.body)).toEqual({ model: 'served/llm', messages: [{ role: 'user', content: 'x' }], top_k: 40, repetition_penalty: 1.1 });
  });
});

describe('headers', () => {
  it('never forwards the client key, drops hop-by-hop headers and forwards only the allow-list', async () => {
    await post(
      { model: 'llm', messages: [{ role: 'user', content: 'x' }] },
      {
        Connection: 'keep-alive, x-hop',
        'x-hop': 'secret-hop',
        'Keep-Alive': 'timeout=5',
        TE: 'trailers',
        'Accept-Encoding': 'gzip',
        'X-Stainless-Lang': 'js',
        'OpenAI-Organization': 'org-1',
        Accept: 'application/json',
        'User-Agent': 'OpenAI/JS 7.0',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      },
    ).expect(200);
    const headers = upstream.requests[0]!.headers;
    expect(headers.authorization).toBeUndefined();
    expect(JSON.stringify(headers)).not.toContain(KEY);
    for (const name of ['x-hop', 'keep-alive', 'te', 'accept-encoding', 'x-stainless-lang', 'openai-organization']) expect(headers[name]).toBeUndefined();
    expect(headers.accept).toBe('application/json');
    expect(headers['user-agent']).toBe('OpenAI/JS 7.0');
    expect(headers.traceparent).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    expect(headers['content-type']).toBe('application/json');
    expect(Number(headers['content-length'])).toBe(Buffer.byteLength(upstream.requests[0]!.body));
  });

  it('sends the pool’s own backend key upstream when it has one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'modelgate-backend-'));
    await writeFile(join(dir, 'backend.key'), 'sk-backend-secret\n');
    const keyed = await buildTestRouter({
      pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints: [upstream.url], backendKeyFile: join(dir, 'backend.key') }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
    });
    try {
      await request(keyed.router.api)
        .post('/v1/chat/completions')
        .set({ ...auth, 'Content-Type': 'application/json' })
        .send('{"model":"llm","messages":[{"role":"user","content":"x"}]}')
        .expect(200);
      expect(upstream.requests[0]!.headers.authorization).toBe('Bearer sk-backend-secret');
    } finally {
      await keyed.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('keeps the engine’s cookie and server name from the client, and passes its other headers on', async () => {
    const body = JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'served/llm', choices: [] });
    upstream.reply = (_req, res) => {
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'set-cookie': ['route=replica-3; Path=/', 'session=abc'],
        server: 'uvicorn',
        'x-engine-note': 'kept',
      });
      res.end(body);
    };
    const res = await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }] }).expect(200);
    expect(res.headers['set-cookie']).toBeUndefined();
    expect(res.headers.server).toBeUndefined();
    expect(res.headers['x-engine-note']).toBe('kept');
    expect(res.body).toEqual(JSON.parse(body));
  });

  it('accepts a client x-request-id and returns it; the engine gets it with a suffix of its own, so two clients’ ids never meet there', async () => {
    const res = await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }] }, { 'x-request-id': 'client-req-42' }).expect(200);
    expect(res.headers['x-request-id']).toBe('client-req-42');
    // vLLM takes the header as its request id (aborts by it, makes the answer's id from it)
    const again = await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }] }, { 'x-request-id': 'client-req-42' }).expect(200);
    expect(again.headers['x-request-id']).toBe('client-req-42');
    const engineIds = upstream.requests.map((r) => r.headers['x-request-id']);
    expect(engineIds).toEqual([expect.stringMatching(/^client-req-42\.[0-9a-f]{8}$/), expect.stringMatching(/^client-req-42\.[0-9a-f]{8}$/)]);
    expect(engineIds[0]).not.toBe(engineIds[1]);
  });

  it('generates a request id when none (or a malformed one) is given, also on errors', async () => {
    const res = await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }] }, { 'x-request-id': 'bad id with spaces' }).expect(200);
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(upstream.requests[0]!.headers['x-request-id']).toBe(res.headers['x-request-id']);
    const failed = await request(gateway.router.api).post('/v1/chat/completions').expect(401);
    expect(failed.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    // the router's own answer to an inference request (written with its head, not set ahead), and one to another route
    const unknown = await post({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }, { 'x-request-id': 'mine-1' }).expect(404);
    expect(unknown.headers['x-request-id']).toBe('mine-1');
    const models = await request(gateway.router.api).get('/v1/models').set(auth).set('x-request-id', 'mine-2').expect(200);
    expect(models.headers['x-request-id']).toBe('mine-2');
  });
});

describe('upstream errors', () => {
  const table: Array<[string, number, string, Record<string, string>, number, object]> = [
    [
      // (a 404 naming the pool's own servedModelName is a misconfigured pool, 502 served_model_mismatch: served-model-mismatch.test.ts)
      'vLLM nested error with an integer code',
      404,
      '{"error":{"message":"The model `other/llm` does not exist.","type":"NotFoundError","param":"model","code":404}}',
      {},
      404,
      { message: 'The model `other/llm` does not exist.', type: 'invalid_request_error', param: 'model', code: 'model_not_found' },
    ],
    [
      'vLLM context-length error',
      400,
      '{"error":{"message":"This model\'s maximum context length is 8 tokens. However, your request has 9 input tokens.","type":"BadRequestError","param":"input_tokens","code":400}}',
      {},
      400,
      { type: 'invalid_request_error', param: 'input_tokens', code: 'context_length_exceeded' },
    ],
    [
      'old vLLM / TEI flat error',
      400,
      '{"object":"error","message":"bad field","type":"BadRequestError","param":null,"code":400}',
      {},
      400,
      { message: 'bad field', type: 'invalid_request_error', param: null, code: null },
    ],
    [
      'TGI flat error',
      429,
      '{"error":"Model is overloaded","error_type":"overloaded"}',
      { 'retry-after': '3' },
      429,
      { message: 'Model is overloaded', type: 'rate_limit_error', param: null, code: 'overloaded' },
    ],
    [
      'TGI 424 generation error',
      424,
      '{"error":"Request failed during generation","error_type":"generation"}',
      {},
      502,
      { message: 'Request failed during generation', type: 'server_error', code: 'generation' },
    ],
    [
      'plain-text body',
      422,
      'Failed to deserialize the JSON body',
      { 'content-type': 'text/plain' },
      422,
      { message: 'Failed to deserialize the JSON body', type: 'invalid_request_error', param: null, code: null },
    ],
    // a server error's text is the engine's insides (file paths, versions): the client is told the status only
    [
      'Python traceback',
      500,
      'Traceback (most recent call last):\n  File "/usr/lib/python3/dist-packages/vllm/entrypoints/api_server.py", line 1, in <module>\nRuntimeError: boom',
      { 'content-type': 'text/plain' },
      500,
      { message: 'The model server answered with status 500.', type: 'server_error', param: null },
    ],
    // the same insides in a JSON message (an engine answering its formatted exception): what precedes the trace
    // is shown (a 4xx here: one more server error would open this table's replica's breaker; the 5xx are unit-tested)
    [
      'JSON error carrying a traceback',
      400,
      JSON.stringify({
        error: { message: 'Bad sampling parameters\nTraceback (most recent call last):\n  File "/opt/vllm/engine.py", line 9, in step\nValueError: top_p', type: 'BadRequestError', code: 400 },
      }),
      {},
      400,
      { message: 'Bad sampling parameters', type: 'invalid_request_error', param: null, code: null },
    ],
    ['HTML error page', 502, '<html><body><h1>502 Bad Gateway</h1><hr>nginx/1.22.1</body></html>', { 'content-type': 'text/html' }, 502, { message: 'The model server answered with status 502.' }],
    ['HTML page on a 4xx', 404, '<!DOCTYPE html><title>Not Found</title>', { 'content-type': 'text/html' }, 404, { message: 'The model server answered with status 404.' }],
    ['empty body', 503, '', {}, 503, { message: 'The model server answered with status 503.', type: 'server_error' }],
    // a body past MAX_ERROR_BODY_BYTES is cut: the JSON that is left does not parse, and is no message (it was passed on as text)
    [
      'JSON body cut at 64 KiB',
      404,
      `{"error":{"message":"Response with id '${'a'.repeat(100_000)}' not found.","type":"NotFoundError","code":404}}`,
      {},
      404,
      { message: 'The model server answered with status 404.', type: 'invalid_request_error', param: null, code: null },
    ],
    // plain text that only starts like JSON, whole: passed on as text, as any 4xx's
    [
      'plain text starting with a bracket',
      400,
      '[Errno 2] No such file or directory',
      { 'content-type': 'text/plain' },
      400,
      { message: '[Errno 2] No such file or directory', type: 'invalid_request_error' },
    ],
    // vLLM names its exception class in `type`, and some of its errors in a string `code`: its insides, not an OpenAI code
    [
      'exception class as the code',
      500,
      '{"error":{"message":"boom","type":"InternalServerError","code":"InternalServerError"}}',
      {},
      500,
      { message: 'boom', type: 'server_error', param: null, code: null },
    ],
    ['engine refusing the router credentials', 401, '{"error":"Unauthorized"}', {}, 502, { type: 'server_error', code: 'upstream_auth_failed' }],
  ];
  it.each(table)('wraps a %s in the OpenAI envelope', async (_name, status, body, headers, expectedStatus, expected) => {
    upstream.reply = replyWith(status, body, { 'content-type': 'application/json', ...headers });
    const res = await post({ model: 'llm', messages: [{ role: 'user', content: 'x' }] }).expect(expectedStatus);
    const envelope = res.body as { error: Record<string, unknown> };
    expect(Object.keys(envelope.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(envelope.error).toMatchObject(expected);
    if (headers['retry-after']) expect(res.headers['retry-after']).toBe(headers['retry-after']);
    expect(res.headers['x-request-id']).toBe(upstream.requests.at(-1)?.headers['x-request-id']);
  });

  it('answers 502 when the engine cannot be reached, without leaking its address', async () => {
    const dead = await startUpstream();
    const url = dead.url;
    await dead.close();
    const gone = await buildTestRouter(chatSetup([url]));
    try {
      const res = await request(gone.router.api)
        .post('/v1/chat/completions')
        .set({ ...auth, 'Content-Type': 'application/json' })
        .send('{"model":"llm","messages":[{"role":"user","content":"x"}]}')
        .expect(502);
      expect((res.body as { error: { code: string; message: string } }).error.code).toBe('upstream_connection_failed');
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(JSON.stringify(res.body)).not.toContain(url.replace('http://', ''));
      expect(gone.router.inFlight.total()).toBe(0);
    } finally {
      await gone.close();
    }
  });
});
