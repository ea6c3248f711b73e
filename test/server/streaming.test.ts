/** Streams through the router over real sockets: pass-through as events arrive, disconnects, breaks. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { contentTimes, rawRequest, sseData, type RawRequest, type RawResponse } from '../helpers/http.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { FakeTime } from '../helpers/fake-time.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  sims = await Promise.all([startTestSim({ model: ['served/llm'], itlMs: 20 }), startTestSim({ model: ['served/llm'], itlMs: 20 })]);
  // the simulator's per-request fault header is not on the default allow-list: forwarded as an operator would
  // The faults here are each request's own (the header), not a replica's, and every test shares these two
  // replicas: their breakers must not take them out (a broken stream is a breaker failure; the storm below
  // breaks 15 and has 8 more answered 500).
  const endpoints = sims.map((s) => s.url);
  const pools = [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat'], endpoints, resilience: { breaker: { failureThreshold: 1000 } } }];
  gateway = await startTestRouter(chatSetup(endpoints, { server: { forwardHeaders: ['x-sim-fault'] }, pools }));
});
afterAll(async () => {
  await gateway.close();
  await Promise.all(sims.map((s) => s.close()));
});

const chat = (body: object, extra: RawRequest = {}): Promise<RawResponse> =>
  rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, {
    ...extra,
    headers: { authorization: `Bearer ${KEY}`, ...extra.headers },
    body: { model: 'llm', messages: [{ role: 'user', content: 'hello' }], ...body },
  });

/** An SSE payload that carries generated text. */
const CONTENT = /"delta":\{"content":"[^"]/;

const running = (): number => sims.reduce((n, s) => n + s.engine.numRunning + s.engine.numWaiting, 0);
const aborted = (): number => sims.reduce((n, s) => n + s.engine.stats.finished.abort, 0);

describe('streaming through the router', () => {
  it('relays each event as it arrives instead of buffering the stream', async () => {
    // An engine on fake time makes token k+1 only when the test moves time: token k reaching the
    // client first proves the router passed it on by itself, not with what came after.
    const time = new FakeTime();
    const engine = await startTestSim({ model: ['served/llm'], ttftMs: 5, itlMs: 20 }, { clock: time, sleep: time.sleep });
    const solo = await startTestRouter(chatSetup([engine.url]));
    try {
      let received = 0;
      const response = rawRequest(`${solo.router.apiUrl}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${KEY}` },
        body: { model: 'llm', messages: [{ role: 'user', content: 'hello' }], stream: true, max_tokens: 8, ignore_eos: true },
        onChunk: (_d, all) => void (received = sseData(all).filter((e) => CONTENT.test(e)).length),
      });
      for (let k = 1; k <= 8; k++) {
        await waitFor(() => time.pendingTimers === 1, `the engine to wait before token ${k}`);
        await time.advance(time.nextDueIn!);
        expect(engine.engine.stats.generationTokens).toBe(k);
        await waitFor(() => received === k, `token ${k} to reach the client`);
      }
      const res = await response;
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
      expect(contentTimes(res)).toHaveLength(8);
      expect(sseData(res.body).at(-1)).toBe('[DONE]');
    } finally {
      await solo.close();
      await engine.close();
    }
  });

  it('aborts the engine’s generation at once when the client disconnects', async () => {
    const before = aborted();
    const res = await chat({ stream: true, max_tokens: 2000, ignore_eos: true }, { onChunk: (_d, all) => all.includes('"content":" ') });
    expect(res.error?.code).toBe('CLIENT_ABORT');
    await waitFor(() => running() === 0 && aborted() === before + 1, 'the engine to abort the generation');
    await waitFor(() => gateway.router.inFlight.total() === 0, 'the in-flight count to drop');
  });

  it('ends a stream the engine broke with a final SSE error event', async () => {
    const res = await chat({ stream: true, max_tokens: 10, ignore_eos: true }, { headers: { 'x-sim-fault': 'die-after=2' } });
    expect(res.status).toBe(200);
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    const error = JSON.parse(events.at(-2)!) as { error: { code: string; type: string; message: string; param: null } };
    expect(error.error).toEqual({ message: expect.any(String), type: 'server_error', param: null, code: 'upstream_stream_broken' });
    expect(events.filter((e) => e.includes('"content":" '))).toHaveLength(2);
  });

  it('answers 502 when the engine drops the connection before answering', async () => {
    const res = await chat({ max_tokens: 10, ignore_eos: true }, { headers: { 'x-sim-fault': 'die-after=1' } });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'upstream_connection_failed', type: 'server_error' } });
    await waitFor(() => gateway.router.inFlight.total() === 0, 'the in-flight count to drop');
  });

  it('brings in-flight counts back to zero after a storm of aborted and failed streams', async () => {
    const storm: Array<Promise<RawResponse>> = [];
    for (let i = 0; i < 60; i++) {
      const mode = i % 4;
      if (mode === 0)
        storm.push(chat({ stream: true, max_tokens: 500, ignore_eos: true }, { abortAfterMs: 1 + (i % 7) })); // often before the first byte
      else if (mode === 1) storm.push(chat({ stream: true, max_tokens: 500, ignore_eos: true }, { onChunk: (_d, all) => all.split('"content":" ').length > 1 + (i % 3) }));
      else if (mode === 2) storm.push(chat({ stream: true, max_tokens: 500, ignore_eos: true }, { headers: { 'x-sim-fault': `die-after=${i % 3}` } }));
      else storm.push(chat({ stream: true, max_tokens: 3 }, { headers: { 'x-sim-fault': i % 8 === 3 ? 'status=500' : 'none' } }));
    }
    const results = await Promise.all(storm);
    expect(results.filter((r) => r.status === 200 && r.body.endsWith('data: [DONE]\n\n')).length).toBeGreaterThan(10);
    await waitFor(() => gateway.router.inFlight.total() === 0, 'every in-flight count to be released');
    await waitFor(() => running() === 0, 'every engine slot to be freed');
    expect([...gateway.router.inFlight.entries()]).toEqual([]);
  });
});
