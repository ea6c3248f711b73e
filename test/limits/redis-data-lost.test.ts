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
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type SimServer } from '../../src/sim/server.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const BUDGET_KEY = 'sk-lost-budget-0123456789'; // 300 tokens a day
const CONCURRENT_KEY = 'sk-lost-two-0123456789'; // two requests in flight at once

let dir: string;
let redis: RedisServer;
let sim: SimServer;
let routers: ServedRouter[];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-redis-lost-'));
  redis = await startRedisServer();
  // streams of 1,000 tokens at 50 ms each: in flight until the test ends them
  sim = await startTestSim({ model: ['meta/llama'], name: 'replica', ttftMs: 0, itlMs: 50, outputMin: 1_000, outputMax: 1_000, maxModelLen: 100_000 });
  await writeFile(
    join(dir, 'keys.yaml'),
    [`- { name: budget, key: ${BUDGET_KEY}, limits: { tokensPerDay: 300 } }`, `- { name: two, key: ${CONCURRENT_KEY}, limits: { concurrentRequests: 2 } }`].join('\n'),
  );
  await writeFile(
    join(dir, 'modelgate.yaml'),
    JSON.stringify({
      server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      log: { level: 'info' },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'llama', servedModelName: 'meta/llama', endpoints: [sim.url] }],
      deployments: [{ id: 'llama-prod', model: 'llama', targets: [{ pool: 'llama' }] }],
      // a loaded 2-core machine may answer later than the 50 ms default: this file is about lost data
      limits: { redis: { url: redis.url, timeoutMs: 1000 } },
    }),
  );
  routers = [];
  for (let i = 0; i < 2; i++) routers.push(await serveRouter(join(dir, 'modelgate.yaml')));
}, 60_000);

afterAll(async () => {
  await Promise.all((routers ?? []).map((r) => r.stop()));
  await sim?.close();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

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
