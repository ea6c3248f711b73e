/**
 * Bad input on every API beyond chat, through a listening router in front of simulator replicas
 * (behind recording proxies, to see that nothing reached an engine): each body's 400 names its field,
 * a wrong method is a 405, a model without the route's capability is a 400 naming it, and
 * /v1/messages answers every error — the router's and the engine's — in Anthropic's envelope.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';
import { startTap, type Tap } from '../helpers/tap.js';

let gen: SimServer;
let pooling: SimServer;
let faulty: SimServer;
let taps: Tap[];
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  [gen, pooling, faulty] = await Promise.all([startTestSim({ model: ['served/llm'], name: 'gen-0' }), startTestSim({ model: ['served/reranker'] }), startTestSim({ model: ['served/claude'] })]);
  taps = await Promise.all([startTap(gen.url), startTap(pooling.url)]);
  g = await startTestRouter({
    pools: [
      { name: 'gen', servedModelName: 'served/llm', capabilities: ['chat', 'completions', 'responses', 'messages', 'tokenize'], endpoints: [taps[0]!.url] },
      { name: 'pooling', servedModelName: 'served/reranker', capabilities: ['rerank', 'score'], endpoints: [taps[1]!.url] },
      // engine errors reach the client as they are: no retry, and no breaker in the way
      { name: 'faulty', servedModelName: 'served/claude', capabilities: ['messages'], endpoints: [faulty.url], resilience: { retries: { maxRetries: 0 }, breaker: { failureThreshold: 100 } } },
    ],
    deployments: [
      { id: 'llm', model: 'llm-model', targets: [{ pool: 'gen' }] },
      { id: 'reranker', model: 'reranker-model', targets: [{ pool: 'pooling' }] },
      { id: 'claude', model: 'claude-sim', targets: [{ pool: 'faulty' }] },
    ],
  });
});
afterAll(async () => {
  await g.close();
  await Promise.all(taps.map((t) => t.close()));
  await Promise.all([gen, pooling, faulty].map((s) => s.close()));
});

const auth = { authorization: `Bearer ${KEY}` };
const posts = (): number => taps.reduce((n, t) => n + t.posts().length, 0);

async function send(
  path: string,
  body: object | string,
  headers: Record<string, string> = auth,
  method = 'POST',
): Promise<{ status: number; json: Record<string, unknown>; headers: Record<string, unknown> }> {
  const res = await rawRequest(`${g.router.apiUrl}${path}`, { method, headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, json: res.body.startsWith('{') ? (JSON.parse(res.body) as Record<string, unknown>) : {}, headers: res.headers };
}

/** A multipart upload's body and content type (fetch's encoding). */
async function form(fields: Record<string, string>, file = true): Promise<{ body: Buffer; type: string }> {
  const data = new FormData();
  if (file) data.append('file', new Blob([new Uint8Array(32000).fill(7)], { type: 'audio/wav' }), 'a.wav');
  for (const [name, value] of Object.entries(fields)) data.append(name, value);
  const request = new Request('http://encoder.invalid/', { method: 'POST', body: data });
  return { body: Buffer.from(await request.arrayBuffer()), type: request.headers.get('content-type') ?? '' };
}
async function upload(path: string, fields: Record<string, string>, file = true): Promise<{ status: number; json: Record<string, unknown> }> {
  const { body, type } = await form(fields, file);
  const res = await fetch(`${g.router.apiUrl}${path}`, { method: 'POST', headers: { ...auth, 'content-type': type }, body });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** The body is Anthropic's error envelope, exactly: `{type: "error", error: {type, message}}`. */
function expectAnthropicError(json: Record<string, unknown>, type: string): string {
  expect(Object.keys(json).sort()).toEqual(['error', 'type']);
  expect(json.type).toBe('error');
  const error = json.error as Record<string, unknown>;
  expect(Object.keys(error).sort()).toEqual(['message', 'type']);
  expect(error.type).toBe(type);
  expect(typeof error.message).toBe('string');
  return error.message as string;
}
const openAiError = (json: Record<string, unknown>): { message: string; type: string; param: string | null; code: string | null } => json.error as never;

describe('bad bodies', () => {
  it.each([
    ['/v1/completions', { model: 'llm-model' }, 'prompt'],
    ['/v1/completions', { model: 'llm-model', prompt: 'hi', stream_options: { include_usage: true } }, 'stream_options'],
    ['/v1/responses', { model: 'llm-model', input: 'hi', temperature: 3 }, 'temperature'],
    ['/v1/responses', { model: 'llm-model', input: [{ content: 'no role, no type' }] }, 'input[0].type'],
    ['/v1/rerank', { model: 'reranker-model', query: 'q', documents: [] }, 'documents'],
    ['/v2/rerank', { model: 'reranker-model', query: 'q', documents: [{ title: 'no text' }] }, 'documents[0].text'],
    ['/v1/score', { model: 'reranker-model', text_1: 'a' }, 'text_2'],
    ['/score', { model: 'reranker-model', queries: 'a' }, 'documents'],
    ['/tokenize', { model: 'llm-model' }, 'prompt'],
    ['/tokenize', { model: 'llm-model', messages: [{ role: 'user', content: 'x' }], continue_final_message: true, add_generation_prompt: true }, 'continue_final_message'],
    ['/detokenize', { model: 'llm-model', tokens: ['a'] }, 'tokens[0]'],
    ['/detokenize', { model: 'llm-model' }, 'tokens'],
  ])('%s %j → 400 invalid_request, param %s, nothing sent upstream', async (path, body, param) => {
    const before = posts();
    const { status, json } = await send(path, body);
    expect(status).toBe(400);
    expect(Object.keys(json)).toEqual(['error']);
    expect(openAiError(json)).toMatchObject({ type: 'invalid_request_error', code: 'invalid_request', param });
    expect(posts()).toBe(before);
  });

  it.each([
    ['/v1/audio/transcriptions', {}, false, 'file'],
    ['/v1/audio/transcriptions', { model: 'llm-model', temperature: '3' }, true, 'temperature'],
    ['/v1/audio/translations', { model: 'llm-model', response_format: 'mp3' }, true, 'response_format'],
    ['/v1/audio/translations', { model: 'llm-model', stream: 'maybe' }, true, 'stream'],
  ])('%s form %j (file: %s) → 400 invalid_request, param %s', async (path, fields, file, param) => {
    const { status, json } = await upload(path, { model: 'llm-model', ...fields }, file);
    expect(status).toBe(400);
    expect(openAiError(json)).toMatchObject({ code: 'invalid_request', param });
  });

  it.each([
    ['without max_tokens', { model: 'llm-model', messages: [{ role: 'user', content: 'hi' }] }, /max_tokens/],
    ['with no messages', { model: 'llm-model', max_tokens: 5, messages: [] }, /messages/],
    ['with a system role in messages', { model: 'llm-model', max_tokens: 5, messages: [{ role: 'system', content: 'hi' }] }, /messages\[0\]\.role/],
    ['with a text block without text', { model: 'llm-model', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'text' }] }] }, /text/],
    ['that is not JSON', '{"model": "llm-model", ', /JSON/],
  ])('/v1/messages %s → 400 in Anthropic’s envelope (no param, no code)', async (_what, body, mentions) => {
    const before = posts();
    const { status, json } = await send('/v1/messages', body);
    expect(status).toBe(400);
    expect(expectAnthropicError(json, 'invalid_request_error')).toMatch(mentions);
    expect(posts()).toBe(before);
  });

  it('/v1/messages with a body not declared as JSON → 415 in Anthropic’s envelope', async () => {
    const { status, json } = await send('/v1/messages', '{}', { ...auth, 'content-type': 'text/plain' });
    expect(status).toBe(415);
    expectAnthropicError(json, 'invalid_request_error');
  });
});

const NEW_PATHS = ['/v1/completions', '/v1/responses', '/v1/rerank', '/rerank', '/v2/rerank', '/v1/score', '/score', '/tokenize', '/detokenize', '/v1/audio/transcriptions', '/v1/audio/translations'];

describe('wrong method', () => {
  it.each(NEW_PATHS)('GET %s → 405 method_not_allowed', async (path) => {
    const res = await rawRequest(`${g.router.apiUrl}${path}`, { headers: auth });
    expect(res.status).toBe(405);
    expect(openAiError(JSON.parse(res.body) as Record<string, unknown>)).toMatchObject({ code: 'method_not_allowed', type: 'invalid_request_error' });
  });

  it('GET /v1/messages → 405 in Anthropic’s envelope', async () => {
    const { status, json } = await send('/v1/messages', '', auth, 'GET');
    expect(status).toBe(405);
    expect(expectAnthropicError(json, 'invalid_request_error')).toMatch(/POST/);
  });
});

describe('capability mismatch', () => {
  const JSON_CASES: Array<[string, object, string]> = [
    ['/v1/completions', { model: 'reranker-model', prompt: 'hi' }, 'completions'],
    ['/v1/responses', { model: 'reranker-model', input: 'hi' }, 'responses'],
    ['/v1/rerank', { model: 'llm-model', query: 'q', documents: ['d'] }, 'rerank'],
    ['/v2/rerank', { model: 'llm-model', query: 'q', documents: ['d'] }, 'rerank'],
    ['/score', { model: 'llm-model', text_1: 'a', text_2: 'b' }, 'score'],
    ['/tokenize', { model: 'reranker-model', prompt: 'hi' }, 'tokenize'],
    ['/detokenize', { model: 'reranker-model', tokens: [1] }, 'tokenize'],
  ];
  it.each(JSON_CASES)('%s %j for a model whose pools lack it → 400 model_capability_mismatch naming %s', async (path, body, capability) => {
    const before = posts();
    const { status, json } = await send(path, body);
    expect(status).toBe(400);
    const error = openAiError(json);
    expect(error).toMatchObject({ code: 'model_capability_mismatch', param: 'model' });
    expect(error.message).toContain(`capability \`${capability}\``);
    expect(posts()).toBe(before);
  });

  it.each(['/v1/audio/transcriptions', '/v1/audio/translations'])('%s for a model without audio → 400 naming audio', async (path) => {
    const { status, json } = await upload(path, { model: 'llm-model' });
    expect(status).toBe(400);
    expect(openAiError(json)).toMatchObject({ code: 'model_capability_mismatch', message: expect.stringContaining('capability `audio`') });
  });

  it('/v1/messages for a model without messages → 400 in Anthropic’s envelope naming it', async () => {
    const { status, json } = await send('/v1/messages', { model: 'reranker-model', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
    expect(status).toBe(400);
    expect(expectAnthropicError(json, 'invalid_request_error')).toContain('capability `messages`');
  });
});

describe('/v1/messages keys and errors', () => {
  const hello = { model: 'llm-model', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] };
  afterEach(async () => {
    await rawRequest(`${faulty.url}/sim/config`, { body: { fault: 'none' } });
  });

  it('without a key → 401 authentication_error; a wrong x-api-key too', async () => {
    const none = await send('/v1/messages', hello, {});
    expect(none.status).toBe(401);
    expect(expectAnthropicError(none.json, 'authentication_error')).toContain('x-api-key');
    const wrong = await send('/v1/messages', hello, { 'x-api-key': 'sk-wrong-key-000' });
    expect(wrong.status).toBe(401);
    expectAnthropicError(wrong.json, 'authentication_error');
  });

  it.each([
    ['x-api-key', { 'x-api-key': KEY }],
    ['Authorization: Bearer', auth],
  ])('with the key as %s → 200, and the key stays at the router', async (_how, headers) => {
    const before = taps[0]!.posts().length;
    const { status, json, headers: got } = await send('/v1/messages', hello, headers);
    expect(status).toBe(200);
    expect(got['x-sim-replica']).toBe('gen-0');
    expect(json).toMatchObject({ type: 'message', role: 'assistant', model: 'served/llm' });
    const sent = taps[0]!.posts()[before];
    expect(sent?.url).toBe('/v1/messages');
    expect(sent?.headers['x-api-key']).toBeUndefined();
    expect(sent?.headers.authorization).toBeUndefined();
  });

  it('takes x-api-key only on /v1/messages: other routes still need a Bearer key', async () => {
    const { status, json } = await send('/v1/completions', { model: 'llm-model', prompt: 'hi' }, { 'x-api-key': KEY });
    expect(status).toBe(401);
    expect(openAiError(json)).toMatchObject({ code: 'invalid_api_key' });
  });

  it('an unknown model → 404 not_found_error', async () => {
    const { status, json } = await send('/v1/messages', { ...hello, model: 'claude-nonexistent' });
    expect(status).toBe(404);
    expect(expectAnthropicError(json, 'not_found_error')).toContain('claude-nonexistent');
  });

  it.each([
    ['status=500', 500, 'api_error'],
    ['status=503', 503, 'overloaded_error'],
    ['status=429,retry-after=1', 429, 'rate_limit_error'],
    ['status=400', 400, 'invalid_request_error'],
  ])('the engine’s own error (%s) keeps its status, in Anthropic’s envelope with the type for it', async (fault, status, type) => {
    const configured = await rawRequest(`${faulty.url}/sim/config`, { body: { fault } });
    expect(configured.status).toBe(200);
    const res = await send('/v1/messages', { ...hello, model: 'claude-sim' });
    expect(res.status).toBe(status);
    expect(expectAnthropicError(res.json, type)).toBe(`Injected failure (status ${status}).`);
    if (status === 429) expect(res.headers['retry-after']).toBe('1');
  });
});
