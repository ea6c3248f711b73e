/**
 * A client that stops reading a stream. The router pauses the engine's response for it (backpressure);
 * the engine's resulting silence is the router's doing, so the idle timeout must not fire and no
 * replica's breaker may count it. The client is cut on its own limit (`server.clientStallTimeoutMs`),
 * counted as `client_stalled`, and the engine's request is cancelled so its slot is freed.
 * Timeouts are short (1 s idle, 3 s stall) and the breaker trips after two failures, so any blame on the
 * engines would show at once.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import net from 'node:net';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

let sims: SimServer[];
let g: TestRouter<RunningRouter>;
/** Two per replica: more than the breaker's threshold of two failures, if stalls were blamed on replicas. */
const STALLED = 4;

beforeAll(async () => {
  // a fast engine with a long context, so a stream outruns any socket buffer
  sims = await Promise.all([0, 1].map((i) => startTestSim({ model: ['served/llm'], name: `r${i}`, itlMs: 0, ttftMs: 0, maxModelLen: 10_000_000, maxNumSeqs: 64 })));
  g = await startTestRouter({
    pools: [
      {
        name: 'llm',
        servedModelName: 'served/llm',
        endpoints: sims.map((s) => s.url),
        // idle 1 s: a stall held for 3 s outlasts it; a loaded 2-core machine can starve a simulator for 300 ms
        resilience: { timeouts: { idleMs: 1_000 }, breaker: { failureThreshold: 2, cooldownMs: 600_000 } },
      },
    ],
    deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
    server: { clientStallTimeoutMs: 3_000 },
  });
});
afterAll(async () => {
  await g.close();
  await Promise.all(sims.map((s) => s.close()));
});

/**
 * A client that sends a streamed request and does not read the answer until `readAll()`, which
 * reads what the kernel kept for it to the end of the connection.
 */
function stalledClient(): { readAll: () => Promise<string>; destroy: () => void } {
  const { hostname, port } = new URL(g.router.apiUrl);
  const socket = net.connect(Number(port), hostname);
  const body = JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'go on' }], stream: true, max_tokens: 5_000_000, ignore_eos: true, n: 8 });
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  socket.pause(); // does not read: the kernel buffers fill, then the router's writes stop draining
  socket.on('error', () => undefined);
  let tail = '';
  const readAll = (): Promise<string> =>
    new Promise((resolve) => {
      socket.on('data', (d: Buffer) => (tail = (tail + d.toString('latin1')).slice(-4096)));
      socket.once('close', () => resolve(tail));
      socket.resume();
    });
  return { readAll, destroy: () => socket.destroy() };
}

const engineAborts = async (sim: SimServer): Promise<number> => metricSum((await rawRequest(`${sim.url}/metrics`)).body, 'vllm:request_success_total', { finished_reason: 'abort' });

describe('a client that stops reading', () => {
  it('is cut on the client-side limit while breakers stay closed and other clients keep getting 200', async () => {
    const clients = Array.from({ length: STALLED }, () => stalledClient());
    try {
      // While the stalled clients hold their streams (well past the 1 s idle timeout), ordinary traffic flows.
      let served = 0;
      await waitFor(
        async () => {
          const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
            headers: { authorization: `Bearer ${KEY}` },
            body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
          });
          expect(res.status).toBe(200);
          served += 1;
          // every stalled stream has ended, however (asserted below: each on the client-side limit)
          const ends = await adminMetrics(g);
          return ['client_stalled', 'idle_timeout', 'upstream_broken', 'deadline'].reduce((n, end) => n + metricSum(ends, 'modelgate_response_ends_total', { end }), 0) >= STALLED;
        },
        'every stalled stream to end',
        50_000, // filling the kernel's socket buffers takes a while on a loaded machine
      );
      expect(served).toBeGreaterThan(0);
      expect(metricSum(await adminMetrics(g), 'modelgate_response_ends_total', { end: 'client_stalled' })).toBe(STALLED);
      // the client, reading again, finds its stream cut short: no [DONE], then the connection closed
      for (const tail of await Promise.all(clients.map((c) => c.readAll()))) {
        expect(tail).toContain('"delta":');
        expect(tail).not.toContain('[DONE]');
      }

      const m = await adminMetrics(g);
      for (const sim of sims) expect(metricSum(m, 'modelgate_breaker_state', { endpoint: sim.url })).toBe(0);
      expect(metricSum(m, 'modelgate_response_ends_total', { end: 'idle_timeout' })).toBe(0);
      expect(metricSum(m, 'modelgate_response_ends_total', { end: 'upstream_broken' })).toBe(0);
      // the engines' requests were cancelled, freeing their slots
      await waitFor(async () => (await engineAborts(sims[0]!)) + (await engineAborts(sims[1]!)) === STALLED, 'the engines to see the streams cancelled', 10_000);
      await waitFor(() => g.router.inFlight.total() === 0, 'the stalled requests to leave the router');
      // the operator's view: each cut is logged as the client's failure
      const lines = g.logs
        .join('')
        .split('\n')
        .filter((l) => l.includes('"msg":"request"') && l.includes('"failure":"client_stalled"'));
      expect(lines).toHaveLength(STALLED);
    } finally {
      for (const c of clients) c.destroy();
    }
    // after the storm, every replica still serves
    for (let i = 0; i < 4; i++) {
      const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${KEY}` },
        body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
      });
      expect(res.status).toBe(200);
    }
  }, 90_000);
});
