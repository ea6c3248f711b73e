/**
 * Two router processes (`modelgate serve`, as users start it) sharing one real redis-server: together
 * they hold a key to its requests and tokens per minute; with Redis killed mid-run traffic keeps
 * flowing on each router's share of the limits; with Redis back, counting is shared again.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startSharedLimits, type SharedLimitsRig } from '../helpers/shared-limits.js';
import { waitFor } from '../helpers/sim.js';

const RPM_KEY = 'sk-shared-rpm-0123456789'; // 600 requests a minute: 10 a second across both routers
const TPM_KEY = 'sk-shared-tpm-0123456789'; // 30,000 tokens a minute: 500 a second
const OUTAGE_KEY = 'sk-outage-0123456789'; // 600 requests a minute, 100 million tokens a day
const SLOW_KEY = 'sk-slow-0123456789'; // 60 requests a minute: one a second
const ONE_KEY = 'sk-one-at-a-time-0123456789'; // one request in flight at once

let dir: string;
let redis: RedisServer;
let routers: ServedRouter[];
let rig: SharedLimitsRig | undefined;
let routerConfig: SharedLimitsRig['routerConfig'];

beforeAll(async () => {
  rig = await startSharedLimits('shared-limits', [
    `- { name: rpm, key: ${RPM_KEY}, limits: { requestsPerMinute: 600 } }`,
    `- { name: tpm, key: ${TPM_KEY}, limits: { tokensPerMinute: 30000 } }`,
    `- { name: outage, key: ${OUTAGE_KEY}, limits: { requestsPerMinute: 600, tokensPerDay: 100000000 } }`,
    `- { name: slow, key: ${SLOW_KEY}, limits: { requestsPerMinute: 60 } }`,
    `- { name: one, key: ${ONE_KEY}, limits: { concurrentRequests: 1 } }`,
  ]);
  ({ dir, redis, routers, routerConfig } = rig);
}, 60_000);

afterAll(() => rig?.stop());

function chat(router: ServedRouter, key: string, content = 'hi'): Promise<Response> {
  return fetch(`${router.api}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llama', messages: [{ role: 'user', content }], max_tokens: 2 }),
  });
}

/**
 * Sixteen clients, eight on each router, send as fast as they are answered and, like the official
 * SDKs, wait the `retry-after-ms` of a 429 before sending again: enough demand that the key's limit is
 * always the bound, and no storm of refused requests loading the machine (clients that retried at
 * once left a loaded CI machine's count 6–13% short). Once the key's burst is spent
 * (the first 429) and `settleMs` more have passed — for tokens, the burst's last requests are settled
 * (their prompt estimates corrected) and paid back — requests sent during the next `measureMs` are
 * counted: the key's steady rate. Resolves with the admitted requests and their tokens, and any answer other than 200 or 429.
 */
async function flood(key: string, content: string, measureMs: number, settleMs: number): Promise<{ admitted: number; tokens: number; other: number }> {
  const totals = { admitted: 0, tokens: 0, other: 0 };
  let from = Infinity;
  let until = Infinity;
  const client = async (router: ServedRouter): Promise<void> => {
    for (let sent = performance.now(); sent < until; sent = performance.now()) {
      const res = await chat(router, key, content);
      const body = (await res.json()) as { usage?: { total_tokens: number } };
      if (res.status === 429 && from === Infinity) {
        from = performance.now() + settleMs;
        until = from + measureMs;
      }
      if (res.status === 429) await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, Number(res.headers.get('retry-after-ms')) || 0)));
      if (sent < from || sent >= until) continue;
      if (res.status === 200) {
        totals.admitted += 1;
        totals.tokens += body.usage?.total_tokens ?? 0;
      } else if (res.status !== 429) totals.other += 1;
    }
  };
  await Promise.all(Array.from({ length: 16 }, (_, i) => client(routers[i % 2] as ServedRouter)));
  return totals;
}

async function metric(router: ServedRouter, name: string): Promise<number> {
  return metricSum(await (await fetch(`${router.admin}/metrics`)).text(), name);
}

describe('limits shared by two routers through Redis', () => {
  it('holds a key to its requests per minute within 5%, whichever router its requests reach', async () => {
    // once the bucket's burst (600) is spent, 8 s are measured: 10 a second → 80
    const { admitted, other } = await flood(RPM_KEY, 'hi', 8_000, 500);
    expect(other).toBe(0);
    expect(admitted).toBeGreaterThanOrEqual(80 * 0.95);
    expect(admitted).toBeLessThanOrEqual(80 * 1.05);
  }, 30_000);

  it('holds a key to its tokens per minute within 5%, counting prompt and completion tokens', async () => {
    // about 12 tokens a request (prompt and completion): ~40 requests a second at 500 tokens a second, so
    // the requests not yet settled at each end of the window weigh little against the 6,000 measured
    const { tokens, other } = await flood(TPM_KEY, 'say hi', 12_000, 3_000);
    expect(other).toBe(0);
    expect(tokens).toBeGreaterThanOrEqual(6000 * 0.95);
    expect(tokens).toBeLessThanOrEqual(6000 * 1.05);
  }, 40_000);

  it('never refuses a client with one request in flight whose requests alternate between the routers: a finished slot is free before its answer arrives', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++) {
      const res = await chat(routers[i % 2] as ServedRouter, ONE_KEY);
      await res.text();
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });

  it('keeps traffic flowing on each router’s share while Redis is down, and shares the counts again once it is back', async () => {
    // both routers know there are two of them (their heartbeats, every 5 s)
    await waitFor(
      async () => (await metric(routers[0] as ServedRouter, 'modelgate_limits_routers')) === 2 && (await metric(routers[1] as ServedRouter, 'modelgate_limits_routers')) === 2,
      'two routers',
      15_000,
    );
    const shared = await chat(routers[0] as ServedRouter, OUTAGE_KEY);
    expect(shared.headers.get('x-ratelimit-limit-requests')).toBe('600');
    // a busy machine may have slowed Redis past its timeout in an earlier test: count this outage's lines
    const outageLines = (router: ServedRouter): number => router.logs.filter((l) => String(l.msg).startsWith('Redis is not answering')).length;
    const before = routers.map(outageLines);

    await redis.stop();
    // a router learns Redis is gone from a request: the first, far from the key's limits, goes through
    // on what it last heard from Redis, and the count it sends there fails
    for (const router of routers) {
      await waitFor(
        async () => {
          expect((await chat(router, OUTAGE_KEY)).status).toBe(200);
          return (await metric(router, 'modelgate_limits_redis_up')) === 0;
        },
        'Redis seen as down',
        15_000,
      );
    }
    for (let i = 0; i < 20; i++) {
      const res = await chat(routers[i % 2] as ServedRouter, OUTAGE_KEY);
      expect(res.status).toBe(200);
      // each router's share: 600 / 2
      expect(res.headers.get('x-ratelimit-limit-requests')).toBe('300');
    }
    for (const [i, router] of routers.entries()) {
      expect(await metric(router, 'modelgate_limits_redis_up')).toBe(0);
      expect(outageLines(router)).toBe((before[i] as number) + 1);
    }

    await redis.restart();
    for (const router of routers) {
      await waitFor(async () => (await chat(router, OUTAGE_KEY)).headers.get('x-ratelimit-limit-requests') === '600', 'shared counting again', 15_000);
      expect(await metric(router, 'modelgate_limits_redis_up')).toBe(1);
      expect(router.logs.some((l) => String(l.msg).startsWith('Redis answers again'))).toBe(true);
      // what each router admitted meanwhile is added to Redis's counts, and the log says for how many keys
      // (the key's day budget: its minute may have refilled by then, its day's tokens still count)
      await waitFor(() => router.logs.some((l) => String(l.msg).startsWith('Redis took what this router counted while it was not answering') && l.keys === 1), 'the carry line', 15_000);
    }
    // shared again: five requests on one router show on the other (one a second refills, so allow two)
    for (let i = 0; i < 5; i++) await chat(routers[0] as ServedRouter, SLOW_KEY);
    const seen = Number((await chat(routers[1] as ServedRouter, SLOW_KEY)).headers.get('x-ratelimit-remaining-requests'));
    expect(seen).toBeLessThanOrEqual(54 + 2);
    expect(seen).toBeGreaterThanOrEqual(54);
  }, 60_000);
});

describe('a Redis the router can no longer use', () => {
  it('says why once it starts asking for a password the config does not give, not only that a command failed', async () => {
    const locked = await startRedisServer();
    const admin = new Redis(locked.url);
    const file = join(dir, 'later-locked.yaml');
    let router: ServedRouter | undefined;
    try {
      await writeFile(file, routerConfig({ url: locked.url, timeoutMs: 1000 }));
      router = await serveRouter(file);
      const served = router;
      expect((await chat(served, RPM_KEY)).status).toBe(200);
      await admin.config('SET', 'requirepass', 'the-password');
      await admin.client('KILL', 'TYPE', 'normal'); // the router's connection too: it reconnects without a password
      await waitFor(
        async () => {
          expect((await chat(served, RPM_KEY)).status).toBe(200);
          return (await metric(served, 'modelgate_limits_redis_up')) === 0;
        },
        'Redis seen as down',
        15_000,
      );
      await waitFor(() => served.logs.some((l) => l.msg === 'Redis connection failed: retrying (every 2 s at most); the limits are counted locally until it is ready'), 'the connection line', 15_000);
      const lines = served.logs.filter((l) => String(l.msg).startsWith('Redis connection failed'));
      expect(lines[0]?.error).toMatch(/NOAUTH|WRONGPASS|Authentication required/i);
      expect(lines[0]?.level).toBe(40);
      // the client retries with the same answer: one line, not one a retry (three more connections seen by Redis)
      const connections = async (): Promise<number> => Number(/total_connections_received:(\d+)/.exec(await admin.info('stats'))?.[1]);
      const seen = await connections();
      await waitFor(async () => (await connections()) >= seen + 3, 'three more tries', 20_000);
      expect(served.logs.filter((l) => String(l.msg).startsWith('Redis connection failed'))).toHaveLength(1);
    } finally {
      await router?.stop();
      admin.disconnect();
      await locked.stop();
    }
  }, 45_000);
});

describe('a Redis the router cannot use at start', () => {
  it('says why in its start-up line: a password Redis asks for and was not given reads as such, not as a Redis that is not there', async () => {
    const locked = await startRedisServer();
    const admin = new Redis(locked.url);
    const file = join(dir, 'locked.yaml');
    let router: ServedRouter | undefined;
    try {
      await admin.config('SET', 'requirepass', 'the-password');
      await writeFile(file, routerConfig({ url: locked.url }));
      router = await serveRouter(file);
      const line = router.logs.find((l) => String(l.msg).startsWith('Redis is not answering at start'));
      expect(line?.error).toMatch(/NOAUTH|WRONGPASS|Authentication required/i);
    } finally {
      await router?.stop();
      admin.disconnect();
      await locked.stop();
    }
  }, 30_000);
});
