/** Streams through the router over real sockets: pass-through as events arrive, disconnects, breaks. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { contentTimes, rawRequest, sseData, type RawRequest, type RawResponse } from '../helpers/http.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  sims = await Promise.all([startTestSim({ model: ['served/llm'], itlMs: 20 }), startTestSim({ model: ['served/llm'], itlMs: 20 })]);
  // the simulator's per-request fault header is not on the default allow-list: forwarded as an operator would
  gateway = await startTestRouter(chatSetup(sims.map((s) => s.url), { server: { forwardHeaders: ['x-sim-fault'] } }));
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

const running = (): number => sims.reduce((n, s) => n + s.engine.numRunning + s.engine.numWaiting, 0);
const aborted = (): number => sims.reduce((n, s) => n + s.engine.stats.finished.abort, 0);

describe('streaming through the router', () => {
  it('relays each event as it arrives instead of buffering the stream', async () => {
    const res = await chat({ stream: true, max_tokens: 8, ignore_eos: true });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    const times = contentTimes(res);
    expect(times).toHaveLength(8);
    // 7 inter-token gaps of 20 ms at the engine must still be visible at the client
    expect(times.at(-1)! - times[0]!).toBeGreaterThanOrEqual(7 * 20 - 10);
    expect(new Set(times).size).toBeGreaterThanOrEqual(6);
    expect(sseData(res.body).at(-1)).toBe('[DONE]');
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
      if (mode === 0) storm.push(chat({ stream: true, max_tokens: 500, ignore_eos: true }, { abortAfterMs: 1 + (i % 7) })); // often before the first byte
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
