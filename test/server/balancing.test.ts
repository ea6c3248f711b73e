/**
 * Where requests go. Least outstanding requests against round robin with one slow replica, and
 * weighted deployment targets. Shares are counted from the replica header the simulator sets.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createRng } from '../../src/sim/prng.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';
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
async function closedLoop(clients: number, total: number, send: (i: number) => Promise<RawResponse>): Promise<{ replicas: string[]; meanMs: number }> {
  let next = 0;
  const replicas: string[] = [];
  let latency = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < total) {
        const i = next++;
        const started = performance.now();
        const res = await send(i);
        latency += performance.now() - started;
        expect(res.status).toBe(200);
        replicas.push(String(res.headers['x-sim-replica']));
      }
    }),
  );
  return { replicas, meanMs: latency / total };
}

const share = (replicas: string[], name: string): number => replicas.filter((r) => r === name).length / replicas.length;

describe('least outstanding requests', () => {
  it('sends more to the fast replica than round robin does, and finishes requests sooner', async () => {
    const [fast, slow] = await sims(1, 15); // 10 tokens: about 10 ms against about 150 ms
    const gateway = await router(chatSetup([fast!.url, slow!.url]));
    const viaRouter = await closedLoop(8, 96, () =>
      rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body }),
    );
    // Round robin, what a Kubernetes Service would do at best: alternate replicas, same load.
    const replicaUrls = [fast!.url, slow!.url];
    const roundRobin = await closedLoop(8, 96, (i) => rawRequest(`${replicaUrls[i % 2]}/v1/chat/completions`, { body: { ...body, model: 'served/llm' } }));

    expect(share(roundRobin.replicas, 'replica-0')).toBeCloseTo(0.5, 5);
    expect(share(viaRouter.replicas, 'replica-0')).toBeGreaterThan(0.7);
    expect(viaRouter.meanMs).toBeLessThan(roundRobin.meanMs);
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
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'stable', weight: 90 }, { pool: 'canary', weight: 10 }] }],
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
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'live', weight: 1 }, { pool: 'drained', weight: 99 }] }],
    });
    const { replicas } = await closedLoop(2, 20, () => rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { ...body, max_tokens: 1 } }));
    expect(share(replicas, 'replica-0')).toBe(1);
  });
});
