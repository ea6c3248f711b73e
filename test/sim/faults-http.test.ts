/** Each injected fault, by header, by flag and at run time, seen by a raw HTTP client. */
import { describe, expect, it } from '@jest/globals';
import { type Sleep } from '../../src/core/clock.js';
import { type SimServer } from '../../src/sim/server.js';
import { FakeTime, runOnFakeTime } from '../helpers/fake-time.js';
import { contentTimes, rawRequest, sseData, type RawResponse } from '../helpers/http.js';
import { simsClosedAfterEach, waitFor } from '../helpers/sim.js';

const sim = simsClosedAfterEach();

const chat = (s: SimServer, body: object, fault?: string, extra: Parameters<typeof rawRequest>[1] = {}): Promise<RawResponse> =>
  rawRequest(`${s.url}/v1/chat/completions`, {
    ...extra,
    headers: fault ? { 'x-sim-fault': fault } : {},
    body: { messages: [{ role: 'user', content: 'hello' }], ...body },
  });

describe('injected faults', () => {
  it('status=N answers at once with a vLLM error body and Retry-After when given', async () => {
    const s = await sim();
    const res = await chat(s, {}, 'status=503,retry-after=2');
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('2');
    expect(JSON.parse(res.body)).toEqual({ error: { message: 'Injected failure (status 503).', type: 'ServiceUnavailableError', param: null, code: 503 } });
    expect(s.engine.stats.promptTokens).toBe(0);
  });

  it('hang accepts the request and never sends a byte, without taking a slot', async () => {
    const s = await sim();
    const res = await chat(s, { stream: true }, 'hang', { abortAfterMs: 150 });
    expect(res.status).toBe(0);
    expect(res.chunks).toHaveLength(0);
    expect(res.error?.code).toBe('CLIENT_ABORT');
    expect(s.engine.numRunning + s.engine.numWaiting).toBe(0);
  });

  it('slow-start=MS delays the first token by MS', async () => {
    const time = new FakeTime();
    const waits: number[] = [];
    const sleep: Sleep = (ms, signal) => (waits.push(ms), time.sleep(ms, signal));
    const s = await sim({ ttftMs: 0, prefillMsPerToken: 0, itlMs: 0 }, { clock: time, sleep });
    const res = await runOnFakeTime(time, chat(s, { stream: true, max_tokens: 2 }, 'slow-start=150'));
    expect(res.status).toBe(200);
    expect(contentTimes(res)).toHaveLength(2);
    expect(waits).toEqual([150]); // the prefill, on an engine that otherwise waits for nothing
    expect(s.engine.stats.ttft.sum).toBe(0.15);
    const plain = await runOnFakeTime(time, chat(s, { stream: true, max_tokens: 2 }));
    expect(contentTimes(plain)).toHaveLength(2);
    expect(waits).toEqual([150]);
  });

  it('die-after=N destroys the socket mid-stream after N tokens, with no [DONE]', async () => {
    const s = await sim();
    const res = await chat(s, { stream: true, max_tokens: 10, ignore_eos: true }, 'die-after=2');
    expect(res.status).toBe(200);
    expect(res.error).toBeDefined();
    const events = sseData(res.body);
    expect(events).toHaveLength(1 + 2);
    expect(events).not.toContain('[DONE]');
    await waitFor(() => s.engine.stats.finished.abort === 1, 'the abort to be counted');
  });

  it('die-after=N on a non-streamed request drops the connection without a response', async () => {
    const s = await sim();
    const res = await chat(s, { max_tokens: 10, ignore_eos: true }, 'die-after=3');
    expect(res.status).toBe(0);
    expect(res.error?.code).toBe('ECONNRESET');
  });

  it('stall-after=N sends N tokens, then nothing while keeping the connection open', async () => {
    const time = new FakeTime();
    const s = await sim({ itlMs: 1 }, { clock: time, sleep: time.sleep });
    const client = new AbortController();
    let sawToken!: () => void;
    const firstToken = new Promise<void>((resolve) => (sawToken = resolve));
    const response = chat(s, { stream: true, max_tokens: 50, ignore_eos: true }, 'stall-after=1', {
      signal: client.signal,
      onChunk: (_d, all) => void (all.includes('"content":" ') && sawToken()),
    });
    await runOnFakeTime(time, firstToken);
    // A minute later the request still holds its slot, with nothing scheduled that could send more.
    await time.advance(60_000);
    expect(s.engine.numRunning).toBe(1);
    expect(time.pendingTimers).toBe(0);
    client.abort();
    const res = await response;
    expect(res.status).toBe(200);
    expect(res.error?.code).toBe('CLIENT_ABORT');
    expect(sseData(res.body)).toHaveLength(2); // the role, then the one token
    await waitFor(() => s.engine.numRunning === 0, 'the stalled slot to be freed');
    expect(s.engine.stats.finished.abort).toBe(1);
  });

  it('error-after=N ends a stream with vLLM’s in-stream error event, then [DONE]', async () => {
    const s = await sim();
    const res = await chat(s, { stream: true, max_tokens: 10, ignore_eos: true }, 'error-after=1');
    expect(res.status).toBe(200);
    expect(res.error).toBeUndefined();
    expect(res.body.endsWith('data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n')).toBe(true);
    expect(s.engine.stats.finished.error).toBe(1);
  });

  it('error-after=N on a non-streamed request answers 500', async () => {
    const s = await sim();
    const res = await chat(s, { max_tokens: 10, ignore_eos: true }, 'error-after=1');
    expect(res.status).toBe(500);
    expect(JSON.parse(res.body)).toMatchObject({ error: { type: 'InternalServerError', code: 500 } });
  });

  it('applies --fault to every request, with the header winning field by field', async () => {
    const s = await sim({ fault: 'status=500' });
    expect((await chat(s, {})).status).toBe(500);
    expect((await chat(s, {}, 'status=429')).status).toBe(429);
    expect((await rawRequest(`${s.url}/v1/embeddings`, { body: { input: 'x' } })).status).toBe(500);
  });

  it('fails --failure-rate of requests with --failure-status', async () => {
    let i = 0;
    const alternating = (): number => (i++ % 2 === 0 ? 0.25 : 0.75);
    const s = await sim({ failureRate: 0.5, failureStatus: 502 }, { random: alternating });
    const statuses: number[] = [];
    for (let n = 0; n < 10; n++) statuses.push((await chat(s, { max_tokens: 1, seed: 1 })).status);
    expect(statuses.filter((code) => code === 502)).toHaveLength(5);
    expect(statuses.filter((code) => code === 200)).toHaveLength(5);
  });

  it('rejects a malformed x-sim-fault header with 400 naming it', async () => {
    const s = await sim();
    const res = await chat(s, {}, 'explode');
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toMatchObject({ error: { param: 'x-sim-fault', code: 400 } });
  });

  it('changes faults, health and latency at run time through /sim/config', async () => {
    const s = await sim();
    const set = (body: object): Promise<RawResponse> => rawRequest(`${s.url}/sim/config`, { body });
    expect((await set({ fault: 'status=503', unhealthy: true, latency: { itlMs: 7 } })).status).toBe(200);
    expect((await chat(s, {})).status).toBe(503);
    expect((await rawRequest(`${s.url}/health`)).status).toBe(503);
    expect(s.engine.latency.itlMs).toBe(7);
    await set({ fault: 'none', unhealthy: false });
    expect((await chat(s, { max_tokens: 1 })).status).toBe(200);
    expect((await rawRequest(`${s.url}/health`)).status).toBe(200);
    const current = JSON.parse((await rawRequest(`${s.url}/sim/config`)).body) as { fault: object; unhealthy: boolean };
    expect(current).toMatchObject({ fault: {}, unhealthy: false });
    expect((await set({ latency: { itlMs: 'fast' } })).status).toBe(400);
    expect((await set({ fault: 'explode' })).status).toBe(400);
  });
});
