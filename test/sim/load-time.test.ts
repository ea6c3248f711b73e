/**
 * The model load (`--load-time-ms`, `POST /sim/config {"loadTimeMs": N}`): the replica listens at
 * once, answers 503 with Retry-After on health, discovery and every inference route until the load
 * ends, keeps serving /metrics and /sim/config, and then behaves as usual. Most tests run the load
 * on fake time over real sockets; one runs it on real time, waiting on events with a bound.
 */
import { describe, expect, it } from '@jest/globals';
import { type SimOptions } from '../../src/sim/options.js';
import { SimClosedError, type SimServer } from '../../src/sim/server.js';
import { FakeTime } from '../helpers/fake-time.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { simsClosedAfterEach, waitFor } from '../helpers/sim.js';

const sim = simsClosedAfterEach();

/**
 * A simulator on fake time whose "model loaded" lines are kept in `logged`. Generation takes no time,
 * so only the load moves with the fake clock.
 */
async function loadingSim(loadTimeMs: number, overrides: Partial<SimOptions> = {}): Promise<{ s: SimServer; time: FakeTime; logged: string[] }> {
  const time = new FakeTime();
  const logged: string[] = [];
  const instant = { ttftMs: 0, prefillMsPerToken: 0, itlMs: 0 };
  const s = await sim({ loadTimeMs, ...instant, ...overrides }, { clock: time, sleep: time.sleep, log: (line) => logged.push(line) });
  return { s, time, logged };
}

const chat = (s: SimServer): Promise<RawResponse> => rawRequest(`${s.url}/v1/chat/completions`, { body: { messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 } });
const health = async (s: SimServer): Promise<number> => (await rawRequest(`${s.url}/health`)).status;
const setConfig = (s: SimServer, body: object): Promise<RawResponse> => rawRequest(`${s.url}/sim/config`, { body });

/** Every inference route with a body it would accept once loaded. */
const INFERENCE: Array<[path: string, body: object | undefined]> = [
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }],
  ['/v1/completions', { prompt: 'hi' }],
  ['/v1/embeddings', { input: 'hi' }],
  ['/v1/responses', { input: 'hi' }],
  ['/rerank', { query: 'cats', documents: ['cats purr'] }],
  ['/v1/rerank', { query: 'cats', documents: ['cats purr'] }],
  ['/v2/rerank', { query: 'cats', documents: ['cats purr'] }],
  ['/score', { text_1: 'a', text_2: 'b' }],
  ['/v1/score', { text_1: 'a', text_2: 'b' }],
  ['/tokenize', { prompt: 'hi' }],
  ['/detokenize', { tokens: [1] }],
  ['/v1/audio/transcriptions', {}],
  ['/v1/audio/translations', {}],
  ['/v1/responses/resp_123', undefined],
];

describe('model load (--load-time-ms)', () => {
  it('answers 503 with Retry-After on health, /v1/models and every inference route while loading', async () => {
    const { s } = await loadingSim(30_000);
    expect(s.loading).toBe(true);

    const probe = await rawRequest(`${s.url}/health`);
    expect(probe.status).toBe(503);
    expect(probe.headers['retry-after']).toBe('30');
    expect(probe.body).toBe('');

    const loadingError = { error: { message: 'The model is still loading (ready in about 30 s). Retry later.', type: 'ServiceUnavailableError', param: null, code: 503 } };
    const models = await rawRequest(`${s.url}/v1/models`);
    expect(models.status).toBe(503);
    expect(models.headers['retry-after']).toBe('30');
    expect(JSON.parse(models.body)).toEqual(loadingError);

    for (const [path, body] of INFERENCE) {
      const res = await rawRequest(`${s.url}${path}`, { body });
      expect({ path, status: res.status, retryAfter: res.headers['retry-after'], body: JSON.parse(res.body) as unknown }).toEqual({ path, status: 503, retryAfter: '30', body: loadingError });
    }
    expect(s.engine.stats.promptTokens).toBe(0);
  });

  it('writes the loading 503 of /v1/messages in Anthropic’s envelope, as its other errors', async () => {
    const { s } = await loadingSim(5_000);
    const res = await rawRequest(`${s.url}/v1/messages`, { body: { model: 'sim-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] } });
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('5');
    expect(JSON.parse(res.body)).toEqual({ type: 'error', error: { type: 'ServiceUnavailableError', message: 'The model is still loading (ready in about 5 s). Retry later.' } });
  });

  it('keeps answering /metrics (in the --engine dialect) and /sim/config while loading', async () => {
    const { s } = await loadingSim(10_000, { engine: 'tgi' });
    const metrics = await rawRequest(`${s.url}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.body).toContain('\ntgi_queue_size 0\n');
    const config = await rawRequest(`${s.url}/sim/config`);
    expect(config.status).toBe(200);
    expect(JSON.parse(config.body)).toMatchObject({ loadRemainingMs: 10_000, engine: 'tgi' });
  });

  it('counts Retry-After down and serves as usual once the load time has passed', async () => {
    const { s, time, logged } = await loadingSim(30_000);
    let loaded = false;
    const done = s.loaded.then(() => (loaded = true));

    await time.advance(29_500);
    expect((await rawRequest(`${s.url}/health`)).headers['retry-after']).toBe('1');
    expect((await chat(s)).status).toBe(503);
    expect(loaded).toBe(false);
    expect(logged).toEqual([]);

    await time.advance(500);
    await done;
    expect(s.loading).toBe(false);
    expect(await health(s)).toBe(200);
    expect((await rawRequest(`${s.url}/v1/models`)).status).toBe(200);
    const answer = await chat(s);
    expect(answer.status).toBe(200);
    expect(answer.headers['retry-after']).toBeUndefined();
    expect(logged).toEqual([`sim: model loaded after 30000 ms; ${s.url} is ready`]);
    expect(time.pendingTimers).toBe(0);
  });

  it('does not load at all by default: ready at once, loaded already resolved, nothing logged', async () => {
    const { s, time, logged } = await loadingSim(0);
    expect(s.loading).toBe(false);
    await s.loaded;
    expect(await health(s)).toBe(200);
    expect((await chat(s)).status).toBe(200);
    expect(time.pendingTimers).toBe(0);
    expect(logged).toEqual([]);
  });

  it('keeps /health at 503 after the load while marked unhealthy', async () => {
    const { s, time } = await loadingSim(1_000);
    expect((await setConfig(s, { unhealthy: true })).status).toBe(200);
    await time.advance(1_000);
    await s.loaded;
    expect(await health(s)).toBe(503);
    expect((await rawRequest(`${s.url}/health`)).headers['retry-after']).toBeUndefined();
  });

  it('on real time: 503 first, then /health turns 200 when `loaded` resolves', async () => {
    const logged: string[] = [];
    const s = await sim({ loadTimeMs: 1_000 }, { log: (line) => logged.push(line) });
    expect(await health(s)).toBe(503);
    let loaded = false;
    void s.loaded.then(() => (loaded = true));
    await waitFor(async () => (await health(s)) === 200, '/health to turn 200', 10_000);
    await s.loaded;
    expect(loaded).toBe(true);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatch(/^sim: model loaded after \d+ ms; http:\/\/127\.0\.0\.1:\d+ is ready$/);
  });

  it('rejects `loaded` and clears its timer when closed while loading', async () => {
    const { s, time, logged } = await loadingSim(60_000);
    const loaded = s.loaded;
    expect(time.pendingTimers).toBe(1);
    await s.close();
    await expect(loaded).rejects.toBeInstanceOf(SimClosedError);
    expect(time.pendingTimers).toBe(0);
    await time.advance(60_000);
    expect(logged).toEqual([]);
  });

  it('leaves no real timer behind when closed while loading', async () => {
    const timers = (): number => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timers();
    const s = await sim({ loadTimeMs: 3_600_000 });
    expect(timers()).toBeGreaterThan(before);
    const loaded = s.loaded;
    await s.close();
    await expect(loaded).rejects.toThrow(/closed before its model finished loading/);
    expect(s.loading).toBe(false);
    expect(timers()).toBe(before);
  });
});

describe('reloading through /sim/config {"loadTimeMs": N}', () => {
  it('puts a ready replica back into loading for N ms, then ready again', async () => {
    const { s, time, logged } = await loadingSim(0);
    const set = await setConfig(s, { loadTimeMs: 5_000 });
    expect(set.status).toBe(200);
    expect(JSON.parse(set.body)).toMatchObject({ loadRemainingMs: 5_000 });
    expect(s.loading).toBe(true);
    expect(await health(s)).toBe(503);
    const refused = await chat(s);
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('5');

    await time.advance(5_000);
    await s.loaded;
    expect(await health(s)).toBe(200);
    expect((await chat(s)).status).toBe(200);
    expect(JSON.parse((await rawRequest(`${s.url}/sim/config`)).body)).toMatchObject({ loadRemainingMs: 0 });
    expect(logged).toEqual([`sim: model loaded after 5000 ms; ${s.url} is ready`]);
  });

  it('restarts the countdown during a load, and ends it at once with 0', async () => {
    const { s, time, logged } = await loadingSim(5_000);
    const first = s.loaded;
    await time.advance(3_000);
    await setConfig(s, { loadTimeMs: 5_000 });
    expect(s.loaded).toBe(first); // still the same load
    await time.advance(3_000);
    expect(await health(s)).toBe(503);
    await time.advance(2_000);
    await first;
    expect(await health(s)).toBe(200);
    expect(logged).toEqual([`sim: model loaded after 8000 ms; ${s.url} is ready`]);

    await setConfig(s, { loadTimeMs: 60_000 });
    expect(await health(s)).toBe(503);
    expect((await setConfig(s, { loadTimeMs: 0 })).status).toBe(200);
    expect(await health(s)).toBe(200);
    expect(time.pendingTimers).toBe(0);
    expect(logged).toHaveLength(2);
  });

  it.each([[-1], ['soon'], [86_400_001], [null]])('refuses loadTimeMs %j with a 400 naming it, changing nothing', async (value) => {
    const { s } = await loadingSim(0);
    const res = await setConfig(s, { loadTimeMs: value, unhealthy: true });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toEqual({ error: { message: 'loadTimeMs must be a number from 0 to 86400000', type: 'BadRequestError', param: 'loadTimeMs', code: 400 } });
    expect(s.loading).toBe(false);
    expect(await health(s)).toBe(200);
  });
});
