/**
 * What every inference route shares with chat: the method check, injected faults, an engine slot
 * (so a full queue answers 429 and `/metrics` counts the request), and mid-stream faults.
 */
import { describe, expect, it } from '@jest/globals';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { simsClosedAfterEach, waitFor } from '../helpers/sim.js';

const sim = simsClosedAfterEach();

type Send = (s: SimServer, headers?: Record<string, string>, signal?: AbortSignal) => Promise<Response>;

const json =
  (path: string, body: object): Send =>
  (s, headers = {}, signal) =>
    fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal });

const speech =
  (path: string): Send =>
  (s, headers = {}, signal) => {
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(32000)]), 'a.wav');
    return fetch(`${s.url}${path}`, { method: 'POST', headers, body: form, signal });
  };

const hello = [{ role: 'user', content: 'hello' }];
/** Routes that take an engine slot, each with a small valid request. */
const SLOT_ROUTES: Array<[string, Send]> = [
  ['/v1/completions', json('/v1/completions', { prompt: 'hello', max_tokens: 2 })],
  ['/v1/responses', json('/v1/responses', { input: 'hello', max_output_tokens: 2 })],
  ['/v1/messages', json('/v1/messages', { model: 'sim-model', max_tokens: 2, messages: hello })],
  ['/rerank', json('/rerank', { query: 'hello', documents: ['hello world'] })],
  ['/v1/score', json('/v1/score', { text_1: 'hello', text_2: 'hello world' })],
  ['/v1/audio/transcriptions', speech('/v1/audio/transcriptions')],
  ['/v1/audio/translations', speech('/v1/audio/translations')],
];
const ALL_ROUTES: Array<[string, Send]> = [...SLOT_ROUTES, ['/tokenize', json('/tokenize', { prompt: 'hello' })], ['/detokenize', json('/detokenize', { tokens: [1] })]];

describe('every inference route', () => {
  it.each(ALL_ROUTES)('%s answers 405 to GET and an injected status with its error', async (path, send) => {
    const s = await sim();
    expect((await rawRequest(`${s.url}${path}`)).status).toBe(405);
    const res = await send(s, { 'x-sim-fault': 'status=503,retry-after=3' });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('3');
    expect(await res.text()).toContain('Injected failure (status 503).');
  });

  it.each(SLOT_ROUTES)('%s takes an engine slot: counted in /metrics, 429 when the queue is full', async (_path, send) => {
    const s = await sim({ maxNumSeqs: 1, maxWaiting: 0 });
    expect((await send(s)).status).toBe(200);
    await waitFor(() => s.engine.stats.finished.stop + s.engine.stats.finished.length === 1, 'the request to finish');
    const metrics = (await rawRequest(`${s.url}/metrics`)).body;
    const successes = metrics
      .split('\n')
      .filter((line) => line.startsWith('vllm:request_success_total{'))
      .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
    expect(successes).toBe(1);

    // A request that stalls before its first token holds the only slot; with no queue the next one is refused.
    const holder = new AbortController();
    const held = send(s, { 'x-sim-fault': 'stall-after=0' }, holder.signal).catch(() => undefined);
    await waitFor(() => s.engine.numRunning === 1, 'the slot to be taken');
    const refused = await send(s);
    expect(refused.status).toBe(429);
    expect(await refused.text()).toContain('waiting queue is full');
    holder.abort();
    await held;
    await waitFor(() => s.engine.numRunning === 0, 'the slot to be freed');
  });
});

describe('mid-stream faults on the new streams', () => {
  it.each([
    [
      '/v1/completions',
      { prompt: 'hello', max_tokens: 5, ignore_eos: true, stream: true },
      'data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n',
    ],
    ['/v1/responses', { input: 'hello', max_output_tokens: 5, ignore_eos: true, stream: true }, '"code":"InternalServerError","message":"Internal server error","param":null'],
  ])('%s ends with its error event after error-after', async (path, body, tail) => {
    const s = await sim();
    const res = await rawRequest(`${s.url}${path}`, { body, headers: { 'x-sim-fault': 'error-after=2' } });
    expect(res.status).toBe(200);
    expect(res.body.includes(tail)).toBe(true);
    expect(res.body.endsWith('\n\n')).toBe(true);
    expect(s.engine.stats.finished.error).toBe(1);
  });

  it('die-after cuts a Responses stream without response.completed', async () => {
    const s = await sim();
    const res = await rawRequest(`${s.url}/v1/responses`, { body: { input: 'hello', max_output_tokens: 9, ignore_eos: true, stream: true }, headers: { 'x-sim-fault': 'die-after=2' } });
    expect(res.error).toBeDefined();
    expect(res.body).toContain('event: response.created');
    expect(res.body).not.toContain('response.completed');
    await waitFor(() => s.engine.stats.finished.abort === 1, 'the abort to be counted');
  });
});
