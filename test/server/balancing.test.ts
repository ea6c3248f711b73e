/**
 * Where requests go: to the replica with the fewest outstanding requests (decisions checked under a
 * load the test holds still, replicas on fake time), and split by deployment target weight. Shares are
 * counted from the replica header the simulator sets. How much sooner requests finish than under round
 * robin is a measurement, not a unit test: bench/balance.ts.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createRng } from '../../src/sim/prng.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { FakeTime, runOnFakeTime } from '../helpers/fake-time.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { type RunningRouter } from '../../src/main.js';

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(cleanup.splice(0).map((f) => f()));
});

async function sims(...itlMs: number[]): Promise<SimServer[]> {
  const started = await Promise.all(itlMs.map((itl, i) => startTestSim({ model: ['served/llm'], itlMs: itl, ttftMs: 1, name: `replica-${i}` })));
  cleanup.push(() => Promise.all(started.map((s) => s.close())).then(() => undefined));
  return started;
}

async function router(options: Parameters<typeof startTestRouter>[0]): Promise<TestRouter<RunningRouter>> {
  const r = await startTestRouter(options);
  cleanup.push(() => r.close());
  return r;
}

const body = { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, ignore_eos: true };

/** `clients` closed-loop clients, each sending requests back to back until `total` were sent. */
async function closedLoop(clients: number, total: number, send: (i: number) => Promise<RawResponse>): Promise<{ replicas: string[] }> {
  let next = 0;
  const replicas: string[] = [];
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < total) {
        const i = next++;
        const res = await send(i);
        expect(res.status).toBe(200);
        replicas.push(String(res.headers['x-sim-replica']));
      }
    }),
  );
  return { replicas };
}

const share = (replicas: string[], name: string): number => replicas.filter((r) => r === name).length / replicas.length;

describe('least outstanding requests', () => {
  it('sends each request to the replica with the fewest outstanding, where round robin would alternate', async () => {
    // Replicas on fake time: a request stays outstanding until the test moves its replica's clock.
    const clocks = [new FakeTime(), new FakeTime()];
    const replicas = await Promise.all(clocks.map((time, i) => startTestSim({ model: ['served/llm'], ttftMs: 5, itlMs: 5, name: `replica-${i}` }, { clock: time, sleep: time.sleep })));
    cleanup.push(() => Promise.all(replicas.map((s) => s.close())).then(() => undefined));
    const [a, b] = replicas as [SimServer, SimServer];
    const gateway = await router(chatSetup([a.url, b.url]));
    const send = (): Promise<RawResponse> => rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body });
    const held = (s: SimServer): number => s.engine.numRunning + s.engine.numWaiting;

    // Four at once on two idle replicas: two each, whichever way the first tie is broken.
    const first = [send(), send(), send(), send()];
    await waitFor(() => held(a) + held(b) === 4, 'four requests to reach the replicas');
    expect([held(a), held(b)]).toEqual([2, 2]);

    // replica-0 answers its two; replica-1 still has two outstanding.
    await runOnFakeTime(
      clocks[0]!,
      waitFor(() => held(a) === 0 && gateway.router.inFlight.total() === 2, 'replica-0 to answer its two'),
    );

    // Two more: both to replica-0 (0, then 1, against 2). Round robin would send one to replica-1.
    const second = [send(), send()];
    await waitFor(() => held(a) + held(b) === 4, 'the next two requests to reach a replica');
    expect([held(a), held(b)]).toEqual([2, 2]);

    const all = Promise.all([...first, ...second]);
    const [results] = await Promise.all([runOnFakeTime(clocks[0]!, all), runOnFakeTime(clocks[1]!, all)]);
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const servedBy = results.map((r) => String(r.headers['x-sim-replica']));
    expect(servedBy.slice(0, 4).sort()).toEqual(['replica-0', 'replica-0', 'replica-1', 'replica-1']);
    expect(servedBy.slice(4)).toEqual(['replica-0', 'replica-0']);
    expect(gateway.router.inFlight.total()).toBe(0);
  });

  it('ends with no request outstanding', async () => {
    const [a, b] = await sims(1, 1);
    const gateway = await router(chatSetup([a!.url, b!.url]));
    await closedLoop(4, 20, () => rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body }));
    expect(gateway.router.inFlight.total()).toBe(0);
  });
});

describe('weighted deployment targets', () => {
  it('split traffic between pools by weight', async () => {
    const [a, b] = await sims(0, 0);
    const gateway = await router({
      random: createRng(7),
      pools: [
        { name: 'stable', servedModelName: 'served/llm', endpoints: [a!.url] },
        { name: 'canary', servedModelName: 'served/llm', endpoints: [b!.url] },
      ],
      deployments: [
        {
          id: 'llm',
          model: 'llm',
          targets: [
            { pool: 'stable', weight: 90 },
            { pool: 'canary', weight: 10 },
          ],
        },
      ],
    });
    const { replicas } = await closedLoop(4, 400, () => rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { ...body, max_tokens: 1 } }));
    const canary = share(replicas, 'replica-1');
    expect(canary).toBeGreaterThan(0.05);
    expect(canary).toBeLessThan(0.15);
  });

  it('skip a target pool without ready replicas', async () => {
    const [a] = await sims(0);
    const gateway = await router({
      pools: [
        { name: 'live', servedModelName: 'served/llm', endpoints: [a!.url] },
        { name: 'drained', servedModelName: 'served/llm', endpoints: [] },
      ],
      deployments: [
        {
          id: 'llm',
          model: 'llm',
          targets: [
            { pool: 'live', weight: 1 },
            { pool: 'drained', weight: 99 },
          ],
        },
      ],
    });
    const { replicas } = await closedLoop(2, 20, () => rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { ...body, max_tokens: 1 } }));
    expect(share(replicas, 'replica-0')).toBe(1);
  });
});
