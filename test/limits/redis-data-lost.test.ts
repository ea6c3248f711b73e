/**
 * Redis restarts without persistence (or fails over to an empty replica) while two routers
 * (`modelgate serve`, as users start them) share a key's budget and concurrency through it. The
 * restart is quick: neither router may even see Redis down. Before, every key's spent budget was
 * fresh again and the streams in flight held no concurrency slot there (a 2-at-once key had 4 streams
 * in flight), and one router logged a blip of a second or nothing at all. Now each router finds the
 * installation's epoch key changed at its next heartbeat, puts back its requests' leases and the
 * budgets it saw, logs it at `error` and counts it in `modelgate_limits_redis_data_lost_total`.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RedisServer } from '../helpers/redis-server.js';
import { metricSum } from '../helpers/router.js';
import { type ServedRouter } from '../helpers/serve.js';
import { startSharedLimits, type SharedLimitsRig } from '../helpers/shared-limits.js';
import { waitFor } from '../helpers/sim.js';

const BUDGET_KEY = 'sk-lost-budget-0123456789'; // 300 tokens a day
const CONCURRENT_KEY = 'sk-lost-two-0123456789'; // two requests in flight at once

let redis: RedisServer;
let routers: ServedRouter[];
let rig: SharedLimitsRig | undefined;

beforeAll(async () => {
  // streams of 1,000 tokens at 50 ms each: in flight until the test ends them
  rig = await startSharedLimits('redis-lost', [`- { name: budget, key: ${BUDGET_KEY}, limits: { tokensPerDay: 300 } }`, `- { name: two, key: ${CONCURRENT_KEY}, limits: { concurrentRequests: 2 } }`], {
    itlMs: 50,
    outputMin: 1_000,
    outputMax: 1_000,
    maxModelLen: 100_000,
  });
  ({ redis, routers } = rig);
}, 60_000);

afterAll(() => rig?.stop());

function chat(router: ServedRouter, key: string, options: { content?: string; stream?: boolean; signal?: AbortSignal } = {}): Promise<Response> {
  return fetch(`${router.api}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llama', messages: [{ role: 'user', content: options.content ?? 'hi' }], max_tokens: options.stream ? 1_000 : 1, stream: options.stream ?? false }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

async function metric(router: ServedRouter, name: string): Promise<number> {
  return metricSum(await (await fetch(`${router.admin}/metrics`)).text(), name);
}

describe('Redis that comes back empty', () => {
  it('keeps a spent budget spent and the streams in flight counted, and tells the operator at each router', async () => {
    // both routers have beaten (and read the epoch) at least once
    await waitFor(
      async () => (await metric(routers[0] as ServedRouter, 'modelgate_limits_routers')) === 2 && (await metric(routers[1] as ServedRouter, 'modelgate_limits_routers')) === 2,
      'two routers',
      20_000,
    );
    // spend the budget on the first router (a prompt of about 100 tokens a request)
    let spent = false;
    for (let i = 0; i < 20 && !spent; i++) {
      const res = await chat(routers[0] as ServedRouter, BUDGET_KEY, { content: 'x'.repeat(400) });
      await res.arrayBuffer();
      spent = res.status === 429;
    }
    expect(spent).toBe(true);
    // one stream on each router, kept open (unread): the key's two slots
    const streams = new AbortController();
    for (const router of routers) expect((await chat(router, CONCURRENT_KEY, { stream: true, signal: streams.signal })).status).toBe(200);
    try {
      expect((await chat(routers[0] as ServedRouter, CONCURRENT_KEY)).status).toBe(429);

      await redis.restart(); // empty: no persistence

      // each router finds it at its next heartbeat (every 5 s) and puts back what it knows
      for (const router of routers) await waitFor(async () => (await metric(router, 'modelgate_limits_redis_data_lost_total')) === 1, 'Redis seen to have lost its data', 30_000);
      for (const router of routers) {
        const concurrent = await chat(router, CONCURRENT_KEY);
        expect(concurrent.status).toBe(429);
        expect(((await concurrent.json()) as { error: { message: string } }).error.message).toContain('Too many concurrent requests');
        const budget = await chat(router, BUDGET_KEY);
        expect(budget.status).toBe(429);
        expect(((await budget.json()) as { error: { code: string } }).error.code).toBe('insufficient_quota');
        expect(router.logs.filter((l) => String(l.msg).startsWith("Redis lost the shared limits' counts"))).toHaveLength(1);
        expect(router.logs.find((l) => String(l.msg).startsWith("Redis lost the shared limits' counts"))?.level).toBe(50);
      }
    } finally {
      streams.abort();
    }
  }, 90_000);
});
