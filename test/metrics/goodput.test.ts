/** Goodput: how a finished request counts against its deployment's SLO, and the counters over real requests. */
import { afterEach, describe, expect, it } from '@jest/globals';
import { sloResult } from '../../src/metrics/goodput.js';
import { adminMetrics, KEY, metricSum, startTestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const slo = { ttftMs: 500, itlMs: 50 };

describe('sloResult', () => {
  it('judges a stream by its time to first token and its mean gap between tokens', () => {
    expect(sloResult({ status: 200, incomplete: false, durationMs: 900, ttftMs: 400, completionTokens: 11 }, slo)).toBe('within'); // gaps 50 ms
    expect(sloResult({ status: 200, incomplete: false, durationMs: 300, ttftMs: 600, completionTokens: 1 }, slo)).toBe('outside');
    expect(sloResult({ status: 200, incomplete: false, durationMs: 1500, ttftMs: 400, completionTokens: 11 }, slo)).toBe('outside'); // gaps 110 ms
  });

  it('judges an answer that is not streamed by its whole time against ttft + itl × tokens', () => {
    expect(sloResult({ status: 200, incomplete: false, durationMs: 1000, completionTokens: 10 }, slo)).toBe('within');
    expect(sloResult({ status: 200, incomplete: false, durationMs: 1001, completionTokens: 10 }, slo)).toBe('outside');
  });

  it('counts 429 and 503 as rejected, other failures and cut responses as failed, and leaves out client mistakes and clients that left', () => {
    expect(sloResult({ status: 429, incomplete: false, durationMs: 1 }, slo)).toBe('rejected');
    expect(sloResult({ status: 503, incomplete: false, durationMs: 1 }, slo)).toBe('rejected');
    expect(sloResult({ status: 502, incomplete: false, durationMs: 1 }, slo)).toBe('failed');
    expect(sloResult({ status: 200, incomplete: true, durationMs: 1, ttftMs: 1 }, slo)).toBe('failed');
    expect(sloResult({ status: 400, incomplete: false, durationMs: 1 }, slo)).toBeUndefined();
    expect(sloResult({ status: 499, incomplete: true, durationMs: 1 }, slo)).toBeUndefined();
    expect(sloResult({ status: 499, incomplete: true, durationMs: 5_000 }, slo)).toBe('outside'); // it gave up waiting past the objective
    // a client that left mid-answer, or stopped reading and was cut: its "stop generating" says nothing of the service…
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 1, ttftMs: 1 }, slo)).toBeUndefined();
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 450, ttftMs: 400, completionTokens: 2 }, slo)).toBeUndefined();
    // …unless what it had waited already missed the objective: users give up on slow answers
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 30_000, ttftMs: 25_000, completionTokens: 3 }, slo)).toBe('outside');
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 30_000 }, slo)).toBe('outside'); // no first token by then
    // an answer not streamed, cut while its body went out: judged by what its tokens allow
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 900, completionTokens: 10 }, slo)).toBeUndefined();
    expect(sloResult({ status: 200, incomplete: true, clientEnded: true, durationMs: 100 + 9 * 200, ttftMs: 100, completionTokens: 10 }, slo)).toBe('outside'); // gaps of 200 ms
    // a 5xx is the server's whatever the client did next
    expect(sloResult({ status: 502, incomplete: true, clientEnded: true, durationMs: 1 }, slo)).toBe('failed');
  });
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('goodput counters', () => {
  it('count each deployment’s requests against its own SLO (over the config’s), with every result present from the first request', async () => {
    const fast = await startTestSim({ model: ['m'], ttftMs: 1, itlMs: 1 });
    const slow = await startTestSim({ model: ['m'], ttftMs: 60, itlMs: 1 });
    const down = await startTestSim({ model: ['m'], fault: 'status=503' });
    cleanups.push(() => Promise.all([fast.close(), slow.close(), down.close()]));
    const gateway = await startTestRouter({
      pools: [
        { name: 'fast', servedModelName: 'm', endpoints: [fast.url] },
        { name: 'slow', servedModelName: 'm', endpoints: [slow.url] },
        { name: 'down', servedModelName: 'm', endpoints: [down.url], resilience: { retries: { maxRetries: 0 } } },
      ],
      deployments: [
        { id: 'fast', model: 'fast', targets: [{ pool: 'fast' }] },
        { id: 'slow', model: 'slow', targets: [{ pool: 'slow' }], slo: { ttftMs: 20 } },
        { id: 'down', model: 'down', targets: [{ pool: 'down' }] },
      ],
      config: { slo: { ttftMs: 1000, itlMs: 100 } },
    });
    cleanups.push(() => gateway.close());
    const chat = (model: string, extra: object = {}): Promise<number> =>
      fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true, ...extra }),
      }).then(async (r) => (await r.text(), r.status));
    expect(await chat('fast')).toBe(200);
    expect(await chat('fast')).toBe(200);
    expect(await chat('slow')).toBe(200); // 60 ms to the first token against its own 20
    expect(await chat('down')).toBe(503);
    expect(await chat('fast', { max_tokens: 'three' })).toBe(400); // the client's mistake: not offered
    const series = async (deployment: string, result: string): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_goodput_requests_total', { deployment, result });
    const text = async (): Promise<string> => adminMetrics(gateway);
    // the access log (and these counters) are written once each response has closed
    await waitFor(async () => (await series('fast', 'within')) + (await series('slow', 'outside')) + (await series('down', 'rejected')) === 4, 'the four offered requests counted');
    expect(await series('fast', 'within')).toBe(2);
    expect(await series('slow', 'outside')).toBe(1);
    expect(await series('down', 'rejected')).toBe(1);
    expect(await text()).toContain('modelgate_goodput_requests_total{deployment="fast",result="failed"} 0');
    expect(await series('fast', 'outside')).toBe(0);
  });

  it('leave out a stream its client cancelled mid-way (a user pressing stop), as they leave out a 499', async () => {
    const sim = await startTestSim({ model: ['m'], ttftMs: 1, itlMs: 20 });
    cleanups.push(() => sim.close());
    const gateway = await startTestRouter({ pools: [{ name: 'p', servedModelName: 'm', endpoints: [sim.url] }], deployments: [{ id: 'd', model: 'd', targets: [{ pool: 'p' }] }] });
    cleanups.push(() => gateway.close());
    const series = async (result: string): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_goodput_requests_total', { deployment: 'd', result });
    const ends = async (end: string): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_response_ends_total', { deployment: 'd', end });
    for (let i = 0; i < 3; i++) {
      const abort = new AbortController();
      const res = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'd', messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, stream: true }),
        signal: abort.signal,
      });
      expect(res.status).toBe(200);
      await res.body?.getReader().read(); // the first tokens came
      abort.abort();
    }
    await waitFor(async () => (await ends('client_gone')) === 3, 'the three cancelled streams to end');
    // then one the client reads to its end: the access log counts in order, so when it is counted the three were judged
    const whole = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'd', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true }),
    });
    await whole.text();
    await waitFor(async () => (await series('within')) === 1, 'the whole stream counted');
    expect(await series('failed')).toBe(0);
    expect(await series('outside')).toBe(0);
  });

  it("time to first token is the client's: from its arrival, the router's queue included (the engine's own 1 ms is not what it waited)", async () => {
    const sim = await startTestSim({ model: ['m'], ttftMs: 1, itlMs: 60 });
    cleanups.push(() => sim.close());
    const gateway = await startTestRouter({
      // one stream at a time: the others wait in the router's queue for the whole of the one before
      pools: [{ name: 'one', servedModelName: 'm', endpoints: [sim.url], resilience: { maxConcurrencyPerReplica: 1 } }],
      deployments: [{ id: 'one', model: 'one', targets: [{ pool: 'one' }], slo: { ttftMs: 150, itlMs: 1000 } }],
    });
    cleanups.push(() => gateway.close());
    const stream = (): Promise<number> =>
      fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'one', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true }),
      }).then(async (r) => (await r.text(), r.status));
    expect(await Promise.all([stream(), stream(), stream()])).toEqual([200, 200, 200]);
    const series = async (result: string): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_goodput_requests_total', { deployment: 'one', result });
    await waitFor(async () => (await series('within')) + (await series('outside')) === 3, 'the three streams counted');
    // the second and third waited a whole stream (4 tokens, 60 ms apart) before theirs began
    expect(await series('outside')).toBeGreaterThanOrEqual(2);
  });
});
