/**
 * Defects found by adversarial testing, each over real sockets against a listening router: an empty
 * keys file, spoofed X-Forwarded-*, a path that is not the canonical one, client credentials reaching
 * the engine, and hidden models told apart from missing ones.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { writeFile } from 'node:fs/promises';
import { validateCommand, exitFor } from '../../src/commands.js';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter, type TestRouterOptions } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
const routers: Array<TestRouter<RunningRouter>> = [];

beforeAll(async () => {
  upstream = await startUpstream();
});
afterEach(async () => {
  upstream.requests.length = 0;
  for (const g of routers.splice(0)) await g.close();
});
afterAll(() => upstream.close());

const LIMITED = 'sk-limited-key-1';

async function gateway(extra: Partial<TestRouterOptions> = {}): Promise<TestRouter<RunningRouter>> {
  const g = await startTestRouter({
    keysYaml: `- name: tester\n  key: ${KEY}\n- name: limited\n  key: ${LIMITED}\n  models: [embed]\n`,
    pools: [
      { name: 'llm', servedModelName: 'served/llm', endpoints: [upstream.url] },
      { name: 'embed', servedModelName: 'served/embed', capabilities: ['embeddings'], endpoints: [upstream.url] },
    ],
    deployments: [
      { id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }] },
      { id: 'embed-prod', model: 'embed', targets: [{ pool: 'embed' }] },
    ],
    ...extra,
  });
  routers.push(g);
  return g;
}

const chatBody = { model: 'llm', messages: [{ role: 'user', content: 'hi' }] };

function chat(g: TestRouter<RunningRouter>, headers: Record<string, string> = {}, key = KEY): Promise<RawResponse> {
  return rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${key}`, ...headers }, body: chatBody });
}

/** A request with exactly this request target (absolute-form, odd case, …), as a hostile client sends it. */
function rawTarget(g: TestRouter<RunningRouter>, method: string, target: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(g.router.apiUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, method, path: target, agent: false, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(chatBody));
  });
}

interface LogLine {
  msg: string;
  level: number;
  path?: string;
  client?: string;
  model?: string;
  deployment?: string;
  pool?: string;
  endpoint?: string;
  failure?: string;
  error?: string;
}
const logLines = (g: TestRouter<RunningRouter>): LogLine[] =>
  g.logs
    .join('')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine);

describe('a keys file with no keys', () => {
  it.each([
    ['empty', ''],
    ['comments only', '# all keys removed\n'],
    ['null', 'null\n'],
    ['an empty list', '[]\n'],
  ])('(%s) is rejected on reload: the previous keys stay in force, logged at error, counted as failed', async (_what, text) => {
    const g = await gateway();
    expect((await chat(g)).status).toBe(200);
    await writeFile(g.keysFile, text);
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_keys_reloads_total', { result: 'failure' }) >= 1, 'the reload to fail');
    expect((await chat(g)).status).toBe(200);
    expect(metricSum(await adminMetrics(g), 'modelgate_keys_reloads_total', { result: 'success' })).toBe(0);
    const rejected = logLines(g).find((l) => l.msg === 'API keys file rejected; keeping the previous keys');
    expect(rejected?.level).toBe(50);
    expect(rejected?.error).toContain('has no keys');
    // the lasting signal the alert reads: 0 for as long as the file is rejected, 1 once it is accepted again
    expect(metricSum(await adminMetrics(g), 'modelgate_keys_file_valid', {})).toBe(0);
    await writeFile(g.keysFile, `- name: tester\n  key: ${KEY}\n`);
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_keys_reloads_total', { result: 'success' }) >= 1, 'the reload to succeed');
    expect(metricSum(await adminMetrics(g), 'modelgate_keys_file_valid', {})).toBe(1);
  });

  it('fails `modelgate validate` with exit code 2', async () => {
    const g = await gateway();
    await writeFile(g.keysFile, '');
    const config = g.keysFile.replace(/keys\.yaml$/, 'modelgate.json');
    await writeFile(config, JSON.stringify({ auth: { keysFile: 'keys.yaml' } }));
    const err = await validateCommand(['--config', config], {}).catch((e: unknown) => e);
    expect(exitFor(err)).toEqual({ code: 2, message: expect.stringContaining('keys.yaml: has no keys') });
  });
});

describe('X-Forwarded-*', () => {
  const spoofed = { 'x-forwarded-for': '203.0.113.9', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'evil.example', 'x-forwarded-port': '443', forwarded: 'for=203.0.113.9' };

  it('from an untrusted client are replaced by what the router saw', async () => {
    const g = await gateway();
    expect((await chat(g, spoofed)).status).toBe(200);
    const { port } = new URL(g.router.apiUrl);
    const seen = upstream.requests[0]?.headers ?? {};
    expect(seen['x-forwarded-for']).toBe('127.0.0.1');
    expect(seen['x-forwarded-proto']).toBe('http');
    expect(seen['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
    expect(seen['x-forwarded-port']).toBe(port);
    expect(seen.forwarded).toBeUndefined();
    await waitFor(() => logLines(g).some((l) => l.msg === 'request'), 'the access log line');
    expect(logLines(g).find((l) => l.msg === 'request')?.client).toBe('127.0.0.1');
  });

  it('without any, the engine still gets the peer, scheme, host and the port the router listens on', async () => {
    const g = await gateway();
    expect((await chat(g)).status).toBe(200);
    const seen = upstream.requests[0]?.headers ?? {};
    const { port } = new URL(g.router.apiUrl);
    expect([seen['x-forwarded-for'], seen['x-forwarded-proto'], seen['x-forwarded-host'], seen['x-forwarded-port']]).toEqual(['127.0.0.1', 'http', `127.0.0.1:${port}`, port]);
  });

  it('from a trusted proxy are kept, with the proxy appended to the chain', async () => {
    const g = await gateway({ server: { trustedProxies: ['127.0.0.0/8', '::1'] } });
    expect((await chat(g, spoofed)).status).toBe(200);
    const seen = upstream.requests[0]?.headers ?? {};
    expect(seen['x-forwarded-for']).toBe('203.0.113.9, 127.0.0.1');
    expect([seen['x-forwarded-proto'], seen['x-forwarded-host'], seen['x-forwarded-port']]).toEqual(['https', 'evil.example', '443']);
    await waitFor(() => logLines(g).some((l) => l.msg === 'request'), 'the access log line');
    expect(logLines(g).find((l) => l.msg === 'request')?.client).toBe('203.0.113.9');
  });
});

describe('the path checked is the path forwarded', () => {
  it.each([
    ['POST', '/V1/CHAT/COMPLETIONS'],
    ['POST', '/v1/chat/completions/'],
    ['POST', 'http://evil.example/v1/chat/completions'],
    ['POST', '//v1/chat/completions'],
    ['POST', '/v1/chat/completions/../embeddings'],
    ['GET', '/V1/MODELS'],
  ])('%s %s is a 404 from the router and never reaches an engine', async (method, target) => {
    const g = await gateway();
    const res = await rawTarget(g, method, target);
    expect(res.status).toBe(404);
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'route_not_found', type: 'invalid_request_error' } });
    expect(upstream.requests).toHaveLength(0);
  });

  it('forwards exactly the canonical path, without the client’s query parameters, and logs that path', async () => {
    const g = await gateway();
    const res = await rawTarget(g, 'POST', '/v1/chat/completions?api-version=2024&x=%2F..%2Fadmin');
    expect(res.status).toBe(200);
    expect(upstream.requests.map((r) => r.url)).toEqual(['/v1/chat/completions']);
    await waitFor(() => logLines(g).some((l) => l.msg === 'request'), 'the access log line');
    expect(logLines(g).find((l) => l.msg === 'request')?.path).toBe('/v1/chat/completions');
  });
});

describe('client credentials', () => {
  it('never reach the engine: only the documented allow-list does, plus what the operator adds', async () => {
    const g = await gateway({ server: { forwardHeaders: ['X-Tenant'] } });
    const sent = {
      cookie: 'session=abc',
      'x-api-key': 'sk-other-credential',
      'proxy-authorization': 'Basic eA==',
      'x-tenant': 'team-a',
      'x-custom': 'dropped',
      'x-session-id': 'conv-1',
      'x-modelgate-priority': 'sheddable',
    };
    expect((await chat(g, sent)).status).toBe(200);
    const seen = upstream.requests[0]?.headers ?? {};
    for (const name of ['cookie', 'x-api-key', 'proxy-authorization', 'x-custom']) expect(seen[name]).toBeUndefined();
    expect(JSON.stringify(seen)).not.toContain(KEY);
    expect(JSON.stringify(seen)).not.toContain('sk-other-credential');
    expect(seen['x-tenant']).toBe('team-a');
    expect(seen['x-session-id']).toBe('conv-1'); // the pool's session header
    expect(seen['x-modelgate-priority']).toBe('sheddable');
    expect(seen.connection).toBe('keep-alive'); // Node's own, for the router's connection to the engine
    expect(Object.keys(seen).sort()).toEqual(
      [
        'connection',
        'content-length',
        'content-type',
        'host',
        'x-forwarded-for',
        'x-forwarded-host',
        'x-forwarded-port',
        'x-forwarded-proto',
        'x-modelgate-priority',
        'x-request-id',
        'x-session-id',
        'x-tenant',
      ].sort(),
    );
  });

  it('on /v1/messages the client’s x-api-key authenticates it and still never reaches the engine', async () => {
    const g = await gateway({
      pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['messages'], endpoints: [upstream.url] }],
      deployments: [{ id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }] }],
    });
    const body = { model: 'llm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
    const res = await rawRequest(`${g.router.apiUrl}/v1/messages`, { headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' }, body });
    expect(res.status).toBe(200);
    const seen = upstream.requests[0]?.headers ?? {};
    expect(upstream.requests[0]?.url).toBe('/v1/messages');
    expect(seen['x-api-key']).toBeUndefined();
    expect(seen.authorization).toBeUndefined();
    expect(JSON.stringify(seen)).not.toContain(KEY);
  });

  it('a router-owned header cannot be added to the allow-list', async () => {
    await expect(gateway({ server: { forwardHeaders: ['Authorization'] } })).rejects.toThrow('server.forwardHeaders[0]: "authorization" is set by the router itself');
    // the Messages API's key header is the same credential
    await expect(gateway({ server: { forwardHeaders: ['content-language', 'X-Api-Key'] } })).rejects.toThrow('server.forwardHeaders[1]: "x-api-key" is a client credential');
  });
});

describe('a model name of megabytes', () => {
  it('is cut to 200 characters in the access log line, as in the error message', async () => {
    const g = await gateway();
    const model = `m${'x'.repeat(2 * 1024 * 1024)}`;
    const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { ...chatBody, model } });
    expect(res.status).toBe(404);
    expect(res.body.length).toBeLessThan(1000);
    await waitFor(() => logLines(g).some((l) => l.msg === 'request'), 'the access log line');
    const line = logLines(g).find((l) => l.msg === 'request');
    expect(line?.model).toBe(`${model.slice(0, 200)}…`);
    expect(JSON.stringify(line).length).toBeLessThan(2000);
  });
});

describe('hidden models', () => {
  it('answer exactly like missing ones, on chat and on GET /v1/models/{id}', async () => {
    const g = await gateway();
    const hidden = await chat(g, {}, LIMITED);
    const missing = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${LIMITED}` }, body: { ...chatBody, model: 'llx' } });
    expect([hidden.status, missing.status]).toEqual([404, 404]);
    expect(JSON.parse(hidden.body)).toEqual({
      error: { message: 'The model `llm` does not exist or you do not have access to it.', type: 'invalid_request_error', param: 'model', code: 'model_not_found' },
    });
    expect(JSON.parse(missing.body)).toEqual({
      error: { message: 'The model `llx` does not exist or you do not have access to it.', type: 'invalid_request_error', param: 'model', code: 'model_not_found' },
    });
    const retrieve = (id: string): Promise<RawResponse> => rawRequest(`${g.router.apiUrl}/v1/models/${id}`, { headers: { authorization: `Bearer ${LIMITED}` } });
    expect((await retrieve('llm')).status).toBe(404);
    expect((await retrieve('llx')).status).toBe(404);
    expect((await retrieve('embed')).status).toBe(200);
    // the operator still sees why
    await waitFor(() => logLines(g).filter((l) => l.msg === 'request').length >= 2, 'the access log lines');
    expect(logLines(g).find((l) => l.msg === 'request' && l.model === 'llm')).toMatchObject({ failure: 'model_not_allowed', deployment: 'llm-prod' });
  });
});

describe('a body of millions of items', () => {
  // Validation collected every error: 4.5 million bad rerank documents (8.6 MiB, under the default body
  // limit) held the event loop 77 s, for every tenant, and then exhausted the heap; a valid list of
  // millions of token ids that a union's first branch rejected item by item cost seconds too.
  const big = (items: string): string => `[${`${items},`.repeat(4_500_000 - 1)}${items}]`;

  it('refused: one pass over it, the first bad item named; the router serves on', async () => {
    const g = await gateway({
      pools: [{ name: 'rr', servedModelName: 'served/rr', capabilities: ['rerank'], endpoints: [upstream.url] }],
      deployments: [{ id: 'rr', model: 'rr', targets: [{ pool: 'rr' }] }],
    });
    const body = `{"model":"rr","query":"q","documents":${big('1')}}`;
    expect(body.length).toBeLessThan(10 * 1024 * 1024); // under the default server.maxBodyBytes
    const res = await rawRequest(`${g.router.apiUrl}/v1/rerank`, { headers: { authorization: `Bearer ${KEY}` }, body });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toEqual({
      error: { message: 'Invalid request: documents[0] must be a string or an object with a text or a content list.', type: 'invalid_request_error', param: 'documents[0]', code: 'invalid_request' },
    });
    expect(upstream.requests).toHaveLength(0);
    expect((await rawRequest(`${g.router.adminUrl}/livez`)).status).toBe(200);
  });

  // a guard, not a reproduction (the old validator accepted it too, in seconds): stopping at the first error refuses nothing valid
  it('valid: a completions prompt of millions of token ids is still accepted and reaches the engine', async () => {
    const g = await gateway();
    const res = await rawRequest(`${g.router.apiUrl}/v1/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: `{"model":"llm","prompt":${big('7')},"max_tokens":1}` });
    expect(res.status).toBe(200);
    expect(upstream.requests).toHaveLength(1);
  });
});
