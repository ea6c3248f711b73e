/**
 * The LimitStore contract, run against LocalLimitStore and against RedisLimitStore on a real
 * redis-server (both on fake time: RedisLimitStore's scripts get the test clock's ms), then what only
 * the Redis store has: Redis's own clock, the key layout and its expiry, heartbeats, one EVALSHA per
 * admit, failing fast while Redis is down, and a differential run against LocalLimitStore.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { type Redis } from 'ioredis';
import { reconnectDelay, redisClient, RedisLimitStore } from '../../src/limits/redis-store.js';
import { LocalLimitStore, StoreTimeout, type AdmitRequest, type BudgetSpec, type Checks, type ConcurrencySpec, type LimitStore, type RateSpec } from '../../src/limits/store.js';
import { FakeTime } from '../helpers/fake-time.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

const requests = (perMinute: number, id = 'requests'): RateSpec => ({ id, kind: 'requests', perMinute });
const tokens = (perMinute: number, id = 'tokens'): RateSpec => ({ id, kind: 'tokens', perMinute });
const HOUR = 3_600_000;
const day = (limit: number, period = '2026-11-24', endsInMs = 2 * HOUR): BudgetSpec => ({ window: 'day', period, limit, endsInMs });
const month = (limit: number, period = '2026-11', endsInMs = 200 * HOUR): BudgetSpec => ({ window: 'month', period, limit, endsInMs });
const slots = (limit: number, id = 'all'): ConcurrencySpec => ({ id, limit });
const LEASE_MS = 60_000;

let leases = 0;
/** An admit of `alice` (unless `key` says otherwise) with nothing but the given checks. */
function request(fields: Partial<AdmitRequest>): AdmitRequest {
  return { key: 'alice', rates: [], budgets: [], concurrency: [], tokens: 0, lease: `lease-${++leases}`, leaseMs: LEASE_MS, ...fields };
}

/** A fresh client of `url`, resolved once it is ready (the client fails commands until then). */
async function readyClient(url: string, timeoutMs = 5_000): Promise<Redis> {
  const client = redisClient({ url, tls: false, timeoutMs });
  await untilReady(client);
  return client;
}

/** Resolves at the client's next 'ready' (or now, if it is ready); `events.once` would reject on its reconnect errors. */
function untilReady(client: Redis): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => client.once('ready', () => resolve()));
}

/** The redis-server every test of this file uses (the down-and-back test starts its own). */
let server: RedisServer;
beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await server?.stop();
});

interface Subject {
  name: string;
  setUp(): Promise<void>;
  /** A store with nothing counted, on `time`. */
  fresh(time: FakeTime): Promise<LimitStore>;
  tearDown(): Promise<void>;
}

const local: Subject = {
  name: 'LocalLimitStore',
  setUp: () => Promise.resolve(),
  fresh: (time) => Promise.resolve(new LocalLimitStore(() => time.now())),
  tearDown: () => Promise.resolve(),
};

const redis: Subject & { client?: Redis } = {
  name: 'RedisLimitStore',
  async setUp() {
    this.client = await readyClient(server.url);
  },
  async fresh(time) {
    const client = this.client as Redis;
    await client.flushdb();
    return new RedisLimitStore(client, { prefix: 'test:', now: () => time.now() });
  },
  async tearDown() {
    await this.client?.quit();
  },
};

describe.each([local, redis])('$name', (subject) => {
  let time: FakeTime;
  let store: LimitStore;
  beforeAll(() => subject.setUp());
  afterAll(() => subject.tearDown());
  beforeEach(async () => {
    time = new FakeTime();
    store = await subject.fresh(time);
  });

  describe('rate buckets', () => {
    it('admits perMinute requests, then refuses with the time until one request has refilled', async () => {
      const rates = [requests(3)];
      const remaining: number[] = [];
      for (let i = 0; i < 3; i++) {
        const verdict = await store.admit(request({ rates }));
        expect(verdict.ok).toBe(true);
        remaining.push(verdict.rates[0]?.remaining ?? -1);
      }
      expect(remaining).toEqual([2, 1, 0]);
      expect(await store.admit(request({ rates }))).toEqual({
        ok: false,
        refused: { reason: 'requests', id: 'requests', retryAfterMs: 20_000 },
        rates: [{ id: 'requests', kind: 'requests', limit: 3, remaining: 0, resetMs: 60_000 }],
        budgets: [],
        concurrency: [],
      });
    });

    it('refills continuously over time, up to full', async () => {
      const rates = [requests(3)];
      for (let i = 0; i < 3; i++) await store.admit(request({ rates }));
      await time.advance(10_000);
      expect((await store.admit(request({ rates }))).refused).toEqual({ reason: 'requests', id: 'requests', retryAfterMs: 10_000 });
      await time.advance(10_000);
      expect((await store.admit(request({ rates }))).ok).toBe(true);
      await time.advance(10 * 60_000);
      expect((await store.peek({ key: 'alice', rates, budgets: [], concurrency: [] })).rates).toEqual([{ id: 'requests', kind: 'requests', limit: 3, remaining: 3, resetMs: 0 }]);
    });

    it('admits into a tokens bucket while it holds at least 1, which then goes into debt by the estimate', async () => {
      const rates = [tokens(100)];
      const first = await store.admit(request({ rates, tokens: 250 }));
      expect(first.ok).toBe(true);
      expect(first.rates).toEqual([{ id: 'tokens', kind: 'tokens', limit: 100, remaining: 0, resetMs: 150_000 }]);
      expect((await store.admit(request({ rates, tokens: 1 }))).refused).toEqual({ reason: 'tokens', id: 'tokens', retryAfterMs: 90_600 });
      await time.advance(90_000);
      expect((await store.admit(request({ rates, tokens: 1 }))).refused).toEqual({ reason: 'tokens', id: 'tokens', retryAfterMs: 600 });
      await time.advance(600);
      expect((await store.admit(request({ rates, tokens: 1_000 }))).ok).toBe(true);
    });

    it('reports remaining as whole units and resetMs as the time until full', async () => {
      const rates = [requests(7)];
      expect((await store.admit(request({ rates }))).rates).toEqual([{ id: 'requests', kind: 'requests', limit: 7, remaining: 6, resetMs: 8_572 }]);
      await time.advance(1_000);
      const checks: Checks = { key: 'alice', rates, budgets: [], concurrency: [] };
      expect((await store.peek(checks)).rates).toEqual([{ id: 'requests', kind: 'requests', limit: 7, remaining: 6, resetMs: 7_572 }]);
      await time.advance(7_572);
      expect((await store.peek(checks)).rates).toEqual([{ id: 'requests', kind: 'requests', limit: 7, remaining: 7, resetMs: 0 }]);
    });

    it('names the rate with the longest wait when several refuse, and a rate before concurrency', async () => {
      const rates = [tokens(120, 'tokens:llama'), tokens(60)];
      const concurrency = [slots(1)];
      expect((await store.admit(request({ rates, concurrency, tokens: 120 }))).ok).toBe(true);
      // tokens:llama is at 0 (500 ms to 1), tokens at -60 (61 s to 1), and the only slot is held
      expect((await store.admit(request({ rates, concurrency, tokens: 1 }))).refused).toEqual({ reason: 'tokens', id: 'tokens', retryAfterMs: 61_000 });
    });
  });

  describe('settlement', () => {
    it('takes tokens from tokens buckets and budgets (not from requests buckets); a refund never lifts a bucket above full nor a budget below 0', async () => {
      const checks: Checks = { key: 'alice', rates: [requests(10), tokens(1_000)], budgets: [day(10_000)], concurrency: [] };
      expect((await store.admit(request({ ...checks, tokens: 100 }))).ok).toBe(true);
      await store.settle([{ key: 'alice', rates: checks.rates, budgets: checks.budgets, tokens: 300 }]);
      let verdict = await store.peek(checks);
      expect(verdict.rates.map((r) => r.remaining)).toEqual([9, 600]);
      expect(verdict.budgets[0]?.used).toBe(400);
      await store.settle([{ key: 'alice', rates: checks.rates, budgets: checks.budgets, tokens: -5_000 }]);
      verdict = await store.peek(checks);
      expect(verdict.rates).toEqual([
        { id: 'requests', kind: 'requests', limit: 10, remaining: 9, resetMs: 6_000 },
        { id: 'tokens', kind: 'tokens', limit: 1_000, remaining: 1_000, resetMs: 0 },
      ]);
      expect(verdict.budgets[0]?.used).toBe(0);
    });

    it('settles several keys in one call', async () => {
      const rates = [tokens(1_000)];
      await store.settle([
        { key: 'alice', rates, budgets: [day(5_000)], tokens: 200 },
        { key: 'bob', rates, budgets: [day(5_000)], tokens: 700 },
      ]);
      const alice = await store.peek({ key: 'alice', rates, budgets: [day(5_000)], concurrency: [] });
      const bob = await store.peek({ key: 'bob', rates, budgets: [day(5_000)], concurrency: [] });
      expect([alice.rates[0]?.remaining, alice.budgets[0]?.used, bob.rates[0]?.remaining, bob.budgets[0]?.used]).toEqual([800, 200, 300, 700]);
    });
  });

  describe('budgets', () => {
    it('refuses at the limit until the period ends, naming the budget before any rate or concurrency', async () => {
      const checks = { rates: [requests(1)], budgets: [day(1_000, '2026-11-24', 7_200_000)], concurrency: [slots(1)] };
      const first = await store.admit(request({ ...checks, tokens: 1_000 }));
      expect(first.budgets).toEqual([{ window: 'day', period: '2026-11-24', limit: 1_000, used: 1_000, endsInMs: 7_200_000 }]);
      // the bucket is empty and the only slot is held too
      const refused = await store.admit(request({ ...checks, tokens: 1 }));
      expect(refused.refused).toEqual({ reason: 'budget', id: 'day', retryAfterMs: 7_200_000 });
      expect(refused.budgets[0]?.used).toBe(1_000);
    });

    it('admits while below the limit, even an estimate that overshoots it', async () => {
      const budgets = [day(1_000)];
      await store.admit(request({ budgets, tokens: 999 }));
      const verdict = await store.admit(request({ budgets, tokens: 500 }));
      expect(verdict.ok).toBe(true);
      expect(verdict.budgets[0]?.used).toBe(1_499);
    });

    it('counts each period and window separately', async () => {
      const first = await store.admit(request({ budgets: [day(100, '2026-11-24'), month(1_000)], tokens: 100 }));
      expect(first.budgets.map((b) => b.used)).toEqual([100, 100]);
      expect((await store.admit(request({ budgets: [day(100, '2026-11-24'), month(1_000)], tokens: 1 }))).refused?.id).toBe('day');
      const nextDay = await store.admit(request({ budgets: [day(100, '2026-11-25'), month(1_000)], tokens: 900 }));
      expect(nextDay.ok).toBe(true);
      expect(nextDay.budgets.map((b) => b.used)).toEqual([900, 1_000]);
      expect((await store.admit(request({ budgets: [day(100, '2026-11-26'), month(1_000)], tokens: 1 }))).refused).toEqual({ reason: 'budget', id: 'month', retryAfterMs: 200 * HOUR });
      expect((await store.admit(request({ budgets: [day(100, '2026-12-01'), month(1_000, '2026-12')], tokens: 1 }))).ok).toBe(true);
    });

    it('keeps an ended period’s count for an hour: a wall clock that steps back across midnight names that period again and finds it spent', async () => {
      expect((await store.admit(request({ budgets: [day(100, '2026-11-24', 1_000)], tokens: 100 }))).ok).toBe(true);
      await time.advance(10_000); // the next day, 9 s in
      expect((await store.admit(request({ budgets: [day(100, '2026-11-25', 24 * HOUR - 9_000)], tokens: 100 }))).ok).toBe(true);
      // NTP steps the clock back 30 s: the router names 2026-11-24 again, 21 s before its end
      expect((await store.admit(request({ budgets: [day(100, '2026-11-24', 21_000)], tokens: 1 }))).refused).toEqual({ reason: 'budget', id: 'day', retryAfterMs: 21_000 });
    });
  });

  describe('concurrency leases', () => {
    it('admits up to the limit of leases held; a release frees a slot', async () => {
      const concurrency = [slots(2)];
      const a = request({ concurrency });
      expect((await store.admit(a)).ok).toBe(true);
      expect((await store.admit(request({ concurrency }))).ok).toBe(true);
      expect((await store.admit(request({ concurrency }))).refused).toEqual({ reason: 'concurrency', id: 'all', retryAfterMs: 1_000 });
      await store.release('alice', concurrency, 'no-such-lease');
      expect((await store.admit(request({ concurrency }))).ok).toBe(false);
      await store.release('alice', concurrency, a.lease);
      expect((await store.admit(request({ concurrency }))).ok).toBe(true);
    });

    it('counts a key-wide and a per-deployment limit separately', async () => {
      const concurrency = [slots(3), slots(1, 'llama-70b')];
      expect((await store.admit(request({ concurrency }))).ok).toBe(true);
      expect((await store.admit(request({ concurrency }))).refused).toEqual({ reason: 'concurrency', id: 'llama-70b', retryAfterMs: 1_000 });
      expect((await store.admit(request({ concurrency: [slots(3), slots(1, 'mistral-7b')] }))).ok).toBe(true);
      expect((await store.admit(request({ concurrency: [slots(3)] }))).ok).toBe(true);
      expect((await store.admit(request({ concurrency: [slots(3)] }))).refused?.id).toBe('all');
    });

    it('lets a lease expire by itself after leaseMs', async () => {
      const concurrency = [slots(1)];
      await store.admit(request({ concurrency }));
      await time.advance(LEASE_MS - 1);
      expect((await store.admit(request({ concurrency }))).ok).toBe(false);
      await time.advance(1);
      expect((await store.admit(request({ concurrency }))).ok).toBe(true);
    });

    it('extends a held lease on renew, and does not bring back a released one', async () => {
      const concurrency = [slots(1)];
      const a = request({ concurrency });
      await store.admit(a);
      await time.advance(50_000);
      await store.renew([{ key: 'alice', concurrency, lease: a.lease }], LEASE_MS);
      await time.advance(59_999);
      expect((await store.admit(request({ concurrency }))).ok).toBe(false);
      await time.advance(1);
      const b = request({ concurrency });
      expect((await store.admit(b)).ok).toBe(true);
      await store.release('alice', concurrency, b.lease);
      await store.renew(
        [
          { key: 'alice', concurrency, lease: b.lease },
          { key: 'bob', concurrency, lease: b.lease },
        ],
        LEASE_MS,
      );
      expect((await store.admit(request({ concurrency }))).ok).toBe(true);
    });
  });

  describe('admission', () => {
    it('is all or nothing: a request refused by one check takes nothing from the others', async () => {
      const checks: Checks = { key: 'alice', rates: [requests(10), tokens(1_000)], budgets: [day(10_000)], concurrency: [slots(1)] };
      const a = request({ ...checks, tokens: 100 });
      expect((await store.admit(a)).ok).toBe(true);
      const refused = await store.admit(request({ ...checks, tokens: 100 }));
      expect(refused.refused?.reason).toBe('concurrency');
      expect(refused.rates.map((r) => r.remaining)).toEqual([9, 900]);
      expect(refused.budgets[0]?.used).toBe(100);
      const after = await store.peek(checks);
      expect([after.rates.map((r) => r.remaining), after.budgets[0]?.used]).toEqual([[9, 900], 100]);

      // refused by the budget: no lease was taken either
      const bob = { key: 'bob', budgets: [day(10)], concurrency: [slots(3)] };
      expect((await store.admit(request({ ...bob, tokens: 10 }))).ok).toBe(true);
      for (let i = 0; i < 3; i++) expect((await store.admit(request({ ...bob, tokens: 1 }))).refused?.reason).toBe('budget');
      await store.settle([{ key: 'bob', rates: [], budgets: bob.budgets, tokens: -10 }]);
      expect((await store.admit(request({ ...bob, tokens: 1 }))).ok).toBe(true);
      expect((await store.admit(request({ ...bob, tokens: 1 }))).ok).toBe(true);
      expect((await store.admit(request({ ...bob, tokens: 1 }))).refused?.reason).toBe('concurrency');
    });

    it('peek takes nothing and answers as admit would', async () => {
      const checks: Checks = { key: 'alice', rates: [requests(1)], budgets: [day(100)], concurrency: [slots(1)] };
      for (let i = 0; i < 3; i++) {
        expect(await store.peek(checks)).toEqual({
          ok: true,
          rates: [{ id: 'requests', kind: 'requests', limit: 1, remaining: 1, resetMs: 0 }],
          budgets: [{ window: 'day', period: '2026-11-24', limit: 100, used: 0, endsInMs: 2 * HOUR }],
          concurrency: [{ id: 'all', limit: 1, held: 0 }],
        });
      }
      expect((await store.admit(request({ ...checks, tokens: 5 }))).ok).toBe(true);
      const refusal = await store.admit(request({ ...checks, tokens: 5 }));
      expect(refusal.ok).toBe(false);
      expect(await store.peek(checks)).toEqual(refusal);
      expect(await store.peek({ key: 'alice', rates: [], budgets: [], concurrency: [] })).toEqual({ ok: true, rates: [], budgets: [], concurrency: [] });
    });

    it('takes a forced request even when a check refuses it, and says the checks refused', async () => {
      const checks: Checks = { key: 'alice', rates: [requests(1), tokens(10)], budgets: [day(8)], concurrency: [slots(1)] };
      expect((await store.admit(request({ ...checks, tokens: 6 }))).ok).toBe(true);
      // every check is spent: the router let this one through on its own view, so the store counts it anyway
      const forced = await store.admit({ ...request({ ...checks, tokens: 6 }), force: true });
      expect(forced.ok).toBe(false);
      expect(forced.refused?.reason).toBe('requests');
      expect(forced.rates.map((r) => r.remaining)).toEqual([0, 0]);
      expect(forced.budgets[0]?.used).toBe(12);
      expect(forced.concurrency).toEqual([{ id: 'all', limit: 1, held: 2 }]);
      // the debt stays: a plain request is refused
      expect((await store.peek(checks)).rates[1]?.remaining).toBe(0);
    });

    it('keeps two keys independent', async () => {
      const checks = { rates: [requests(1), tokens(100)], budgets: [day(50)], concurrency: [slots(1)] };
      expect((await store.admit(request({ ...checks, tokens: 50 }))).ok).toBe(true);
      expect((await store.admit(request({ ...checks, tokens: 50 }))).ok).toBe(false);
      const bob = await store.admit(request({ ...checks, key: 'bob', tokens: 50 }));
      expect(bob.ok).toBe(true);
      expect([bob.rates.map((r) => r.remaining), bob.budgets[0]?.used]).toEqual([[0, 50], 50]);
    });
  });
});

describe('RedisLimitStore on Redis', () => {
  let client: Redis;
  beforeAll(async () => {
    client = await readyClient(server.url);
  });
  afterAll(async () => {
    await client?.quit();
  });
  beforeEach(async () => {
    await client.flushdb();
  });

  it("does not count the router's own busy event loop against Redis: an answer that came while the loop was held is taken", async () => {
    // the timeout is the router's own time after the hold: 100 ms for Redis to answer on a loaded machine
    // (20 ms once was not enough, at a load average of 5 on 2 cores); the hold is six times it
    const store = new RedisLimitStore(client, { prefix: 'test:', timeoutMs: 100 });
    const checks = { key: 'busy-loop', rates: [requests(100)], budgets: [], concurrency: [] };
    for (let i = 0; i < 3; i++) {
      const answer = store.admit(request(checks));
      // a burst handled in one turn of the loop: the command is written, and answered, only after it
      const until = performance.now() + 600;
      while (performance.now() < until);
      await expect(answer).resolves.toMatchObject({ ok: true });
    }
  });

  it('times a call out at timeoutMs when Redis itself does not answer (paused), as StoreTimeout', async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:', timeoutMs: 50 });
    const other = await readyClient(server.url);
    try {
      await other.call('CLIENT', 'PAUSE', '400', 'ALL');
      const started = performance.now();
      await expect(store.peek({ key: 'paused', rates: [requests(10)], budgets: [], concurrency: [] })).rejects.toBeInstanceOf(StoreTimeout);
      expect(performance.now() - started).toBeLessThan(350);
    } finally {
      await other.call('CLIENT', 'UNPAUSE');
      other.disconnect();
    }
  });

  it("uses Redis's own clock (TIME) when no clock is given", async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:' });
    const rates = [requests(2)];
    expect((await store.admit(request({ rates }))).ok).toBe(true);
    expect((await store.admit(request({ rates, concurrency: [slots(1)] }))).ok).toBe(true);
    const refused = await store.admit(request({ rates }));
    // a few real ms may have passed since the bucket emptied, never a whole 30 s refill
    expect(refused.refused?.reason).toBe('requests');
    expect(refused.refused?.retryAfterMs).toBeGreaterThan(25_000);
    expect(refused.refused?.retryAfterMs).toBeLessThanOrEqual(30_000);
    const [seconds, micros] = await client.time();
    const redisMs = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
    const at = Number(await client.hget('test:{alice}:r:requests', 'at'));
    expect(Math.abs(redisMs - at)).toBeLessThan(10_000);
    const [, expires] = await client.zrange('test:{alice}:c:all', 0, 0, 'WITHSCORES');
    expect(Math.abs(Number(expires) - (redisMs + LEASE_MS))).toBeLessThan(10_000);
    expect(await store.heartbeat('router-a', 15_000)).toEqual({ routers: 1 });
  });

  it('names every key of an API key with its hash tag, stores exact values, and lets idle state expire', async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:', now: () => 0 });
    await store.admit(request({ rates: [requests(10), tokens(1_000)], budgets: [day(10_000, '2026-11-24', 7_200_000)], concurrency: [slots(2)], tokens: 100 }));
    await store.settle([{ key: 'alice', rates: [tokens(1_000)], budgets: [], tokens: 0.5 }]);
    expect((await client.keys('*')).sort()).toEqual(['test:{alice}:b:2026-11-24', 'test:{alice}:c:all', 'test:{alice}:r:requests', 'test:{alice}:r:tokens']);
    expect(await client.type('test:{alice}:r:requests')).toBe('hash');
    expect(await client.type('test:{alice}:b:2026-11-24')).toBe('string');
    expect(await client.type('test:{alice}:c:all')).toBe('zset');
    expect(await client.hgetall('test:{alice}:r:tokens')).toEqual({ level: '899.5', at: '0' });
    expect(await client.get('test:{alice}:b:2026-11-24')).toBe('100');

    // full again after 6 s (requests) and 6.03 s (tokens), plus a minute; the budget at its end plus an hour; the leases at their expiry
    const ttl = async (key: string): Promise<number> => client.pttl(key);
    const slack = 10_000; // real ms the test itself may take on a loaded machine
    expect(await ttl('test:{alice}:r:requests')).toBeGreaterThan(66_000 - slack);
    expect(await ttl('test:{alice}:r:requests')).toBeLessThanOrEqual(66_000);
    expect(await ttl('test:{alice}:r:tokens')).toBeLessThanOrEqual(66_030);
    expect(await ttl('test:{alice}:r:tokens')).toBeGreaterThan(66_030 - slack);
    expect(await ttl('test:{alice}:b:2026-11-24')).toBeLessThanOrEqual(7_200_000 + HOUR);
    expect(await ttl('test:{alice}:b:2026-11-24')).toBeGreaterThan(7_200_000 + HOUR - slack);
    expect(await ttl('test:{alice}:c:all')).toBeLessThanOrEqual(LEASE_MS);
    expect(await ttl('test:{alice}:c:all')).toBeGreaterThan(LEASE_MS - slack);
  });

  it('refills a bucket from the moment Redis’s clock went back (a step back, a failover to a host whose clock is behind), not once it is caught up', async () => {
    let now = 10 * HOUR;
    const store = new RedisLimitStore(client, { prefix: 'test:', now: () => now });
    const rates = [requests(3)];
    for (let i = 0; i < 3; i++) expect((await store.admit(request({ rates }))).ok).toBe(true);
    now -= HOUR; // the clock steps back an hour: the bucket was measured "in the future"
    expect((await store.admit(request({ rates }))).refused).toEqual({ reason: 'requests', id: 'requests', retryAfterMs: 20_000 });
    now += 20_000;
    expect((await store.admit(request({ rates }))).ok).toBe(true); // not refused for the hour until the clock is back where it was
    expect(await client.hget('test:{alice}:r:requests', 'at')).toBe(String(now));
    // a peek sees the same
    now += 20_000;
    expect((await store.peek({ key: 'alice', rates, budgets: [], concurrency: [] })).rates[0]?.remaining).toBe(1);
  });

  it('counts the routers that beat within the ttl, dropping one that stopped', async () => {
    const time = new FakeTime();
    const store = new RedisLimitStore(client, { prefix: 'test:', now: () => time.now() });
    expect(await store.heartbeat('router-a', 15_000)).toEqual({ routers: 1 });
    await time.advance(1_000);
    expect(await store.heartbeat('router-b', 15_000)).toEqual({ routers: 2 });
    await time.advance(13_999);
    expect(await store.heartbeat('router-b', 15_000)).toEqual({ routers: 2 });
    await time.advance(1);
    expect(await store.heartbeat('router-b', 15_000)).toEqual({ routers: 1 });
    expect(await client.zrange('test:routers', 0, -1)).toEqual(['router-b']);
    expect(await client.pttl('test:routers')).toBeLessThanOrEqual(15_000);
  });

  it('keeps one epoch until Redis loses it; takes a missing lease again only when asked; raises a budget, never lowers one', async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:', now: () => 0 });
    // read with the heartbeat, in the same round trip
    expect(await store.heartbeat('router-a', 15_000, 'first')).toEqual({ routers: 1, epoch: 'first' });
    expect(await store.heartbeat('router-a', 15_000, 'second')).toEqual({ routers: 1, epoch: 'first' });
    expect(await client.pttl('test:epoch')).toBe(-1); // no expiry: only lost data removes it
    await client.flushdb();
    expect(await store.heartbeat('router-a', 15_000, 'third')).toEqual({ routers: 1, epoch: 'third' });
    const lease = { key: 'alice', concurrency: [slots(2)], lease: 'l1' };
    await store.renew([lease], LEASE_MS);
    expect(await client.zscore('test:{alice}:c:all', 'l1')).toBeNull();
    await store.renew([lease], LEASE_MS, true);
    expect(Number(await client.zscore('test:{alice}:c:all', 'l1'))).toBe(LEASE_MS);
    await store.restore([{ key: 'alice', period: 'day:2026-11-24', used: 500, endsInMs: 7_200_000 }]);
    expect(await client.get('test:{alice}:b:day:2026-11-24')).toBe('500');
    expect(await client.pttl('test:{alice}:b:day:2026-11-24')).toBeGreaterThan(7_200_000);
    await store.restore([{ key: 'alice', period: 'day:2026-11-24', used: 300, endsInMs: 7_200_000 }]);
    expect(await client.get('test:{alice}:b:day:2026-11-24')).toBe('500');
  });

  it('sends one EVALSHA per admit and per peek once the script is loaded on the connection', async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:' });
    const checks: Checks = { key: 'alice', rates: [requests(100), tokens(10_000)], budgets: [day(1_000_000), month(10_000_000)], concurrency: [slots(50), slots(10, 'llama')] };
    await store.admit(request({ ...checks, tokens: 10 })); // the first call on a connection sends EVAL
    const admin = await readyClient(server.url);
    try {
      await admin.config('RESETSTAT');
      for (let i = 0; i < 5; i++) expect((await store.admit(request({ ...checks, tokens: 10 }))).ok).toBe(true);
      await store.peek(checks);
      const stats = await admin.info('commandstats');
      expect(stats).toMatch(/cmdstat_evalsha:calls=6,/);
      expect(stats).not.toMatch(/cmdstat_eval:|cmdstat_script/);
    } finally {
      await admin.quit();
    }
  });

  it('refuses a fractional token count where a budget counts it, before sending anything', async () => {
    const store = new RedisLimitStore(client, { prefix: 'test:', now: () => 0 });
    await expect(store.admit(request({ budgets: [day(100)], tokens: 1.5 }))).rejects.toThrow(RangeError);
    await expect(store.settle([{ key: 'alice', rates: [], budgets: [day(100)], tokens: 0.5 }])).rejects.toThrow(/whole number/);
    expect(await client.dbsize()).toBe(0);
    expect(() => new RedisLimitStore(client, { prefix: 'test:{x}:' })).toThrow(/brace/);
  });

  it('gives the same answers as LocalLimitStore for any sequence of calls', async () => {
    type Op =
      | { op: 'check'; take: boolean; key: string; pick: boolean[]; tokens: number }
      | { op: 'settle'; key: string; tokens: number }
      | { op: 'release' | 'renew'; index: number }
      | { op: 'advance'; ms: number };
    const key = fc.constantFrom('alice', 'bob');
    const op: fc.Arbitrary<Op> = fc.oneof(
      {
        weight: 5,
        arbitrary: fc.record({
          op: fc.constant('check' as const),
          take: fc.constant(true),
          key,
          pick: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
          tokens: fc.integer({ min: 0, max: 300 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ op: fc.constant('check' as const), take: fc.constant(false), key, pick: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }), tokens: fc.constant(0) }) },
      { weight: 2, arbitrary: fc.record({ op: fc.constant('settle' as const), key, tokens: fc.integer({ min: -300, max: 600 }) }) },
      { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('release' as const, 'renew' as const), index: fc.nat() }) },
      { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.oneof(fc.integer({ min: 0, max: 8_000 }), fc.integer({ min: 0, max: 120_000 })).map((n) => n / 4) }) },
    );
    const specs = {
      rates: [requests(3), tokens(500), requests(2, 'requests:llama')],
      budgets: [day(600, '2026-11-24', 1e9), month(1_500, '2026-11', 1e10)],
      concurrency: [slots(2), slots(1, 'llama')],
    };
    const checksOf = (key: string, pick: boolean[]): Checks => ({
      key,
      rates: specs.rates.filter((_, i) => pick[i]),
      budgets: specs.budgets.filter((_, i) => pick[3 + i]),
      concurrency: pick[5] ? specs.concurrency : [],
    });
    /** How often each answer came (so a run that never refused would not pass for agreement). */
    const outcomes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 10, maxLength: 60 }), async (ops) => {
        await client.flushdb();
        const time = new FakeTime();
        const stores = [new LocalLimitStore(() => time.now()), new RedisLimitStore(client, { prefix: 'test:', now: () => time.now() })] as const;
        /** Leases held (by the test's own reckoning), so renew only ever extends unexpired ones. */
        const held: Array<{ key: string; lease: string; expires: number }> = [];
        for (const step of ops) {
          if (step.op === 'advance') {
            await time.advance(step.ms);
          } else if (step.op === 'check') {
            const checks = checksOf(step.key, step.pick);
            const admit = request({ ...checks, tokens: step.tokens });
            const [a, b] = await Promise.all(stores.map((s) => (step.take ? s.admit(admit) : s.peek(checks))));
            expect(b).toEqual(a);
            outcomes.set(a?.refused?.reason ?? 'ok', (outcomes.get(a?.refused?.reason ?? 'ok') ?? 0) + 1);
            if (step.take && a?.ok && checks.concurrency.length > 0) held.push({ key: step.key, lease: admit.lease, expires: time.now() + LEASE_MS });
          } else if (step.op === 'settle') {
            await Promise.all(stores.map((s) => s.settle([{ key: step.key, rates: specs.rates, budgets: specs.budgets, tokens: step.tokens }])));
          } else {
            const unexpired = held.filter((h) => h.expires > time.now());
            const lease = unexpired[step.index % Math.max(1, unexpired.length)];
            if (!lease) continue;
            if (step.op === 'release') {
              held.splice(held.indexOf(lease), 1);
              await Promise.all(stores.map((s) => s.release(lease.key, specs.concurrency, lease.lease)));
            } else {
              lease.expires = time.now() + LEASE_MS;
              await Promise.all(stores.map((s) => s.renew([{ key: lease.key, concurrency: specs.concurrency, lease: lease.lease }], LEASE_MS)));
            }
          }
        }
      }),
      { numRuns: 100 },
    );
    expect([...outcomes.keys()].sort()).toEqual(['budget', 'concurrency', 'ok', 'requests', 'tokens']);
  });
});

describe('redisClient', () => {
  let down: RedisServer | undefined;
  let client: Redis | undefined;
  afterEach(async () => {
    client?.disconnect();
    client = undefined;
    await down?.stop();
    down = undefined;
  });

  /** How `work` settled within `ms` real ms, or 'pending' (a generous bound: this checks "not hanging", not speed). */
  async function settledWithin<T>(work: Promise<T>, ms: number): Promise<PromiseSettledResult<T> | 'pending'> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
    const outcome = await Promise.race([Promise.allSettled([work]).then(([r]) => r as PromiseSettledResult<T>), bound]);
    clearTimeout(timer);
    return outcome;
  }

  it('fails at once while Redis is down, and works again once it is back on its address (reloading the scripts)', async () => {
    down = await startRedisServer();
    client = await readyClient(down.url, 10_000);
    const store = new RedisLimitStore(client, { prefix: 'test:' });
    const checks: Checks = { key: 'alice', rates: [requests(10)], budgets: [day(100)], concurrency: [slots(2)] };
    expect((await store.admit(request({ ...checks, tokens: 1 }))).ok).toBe(true);

    await down.stop();
    // the command timeout is 10 s: settling well before it shows the failure was immediate, not a timeout
    for (const call of [
      () => store.admit(request({ ...checks, tokens: 1 })),
      () => store.settle([{ key: 'alice', rates: [], budgets: checks.budgets, tokens: 1 }]),
      () => store.heartbeat('router-a', 15_000),
    ]) {
      const outcome = await settledWithin<unknown>(call(), 8_000);
      expect(outcome === 'pending' ? 'pending' : outcome.status).toBe('rejected');
    }

    // the calls above may have beaten the client's 'close' (the socket had ended, 'ready' was not yet
    // withdrawn): the new 'ready' to wait for is the one after it
    if (client.status === 'ready') await new Promise((resolve) => client?.once('close', resolve));
    const ready = untilReady(client);
    await down.restart();
    await ready;
    // a new, empty Redis: the scripts are not in its cache, and nothing is counted
    const verdict = await store.admit(request({ ...checks, tokens: 1 }));
    expect(verdict.ok).toBe(true);
    expect(verdict.budgets[0]?.used).toBe(1);
  });

  it('fails at once when Redis was never there', async () => {
    down = await startRedisServer();
    const url = down.url;
    await down.stop();
    client = redisClient({ url, tls: false, timeoutMs: 10_000 });
    const outcome = await settledWithin(new RedisLimitStore(client, { prefix: 'test:' }).peek({ key: 'alice', rates: [requests(1)], budgets: [], concurrency: [] }), 8_000);
    expect(outcome === 'pending' ? 'pending' : outcome.status).toBe('rejected');
  });

  it('sets the options that keep Redis off the critical path, and TLS for rediss:// with the CA given', () => {
    client = redisClient({ url: 'rediss://user:secret@127.0.0.1:1/2', tls: false, ca: 'PEM', timeoutMs: 250 });
    expect(client.options).toMatchObject({
      host: '127.0.0.1',
      port: 1,
      db: 2,
      username: 'user',
      password: 'secret',
      tls: { ca: 'PEM' },
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      lazyConnect: false,
    });
    // the stores time their calls themselves (withTimeout), counting only the time Redis had
    expect(client.options.commandTimeout).toBeUndefined();
    client.disconnect();
    client = redisClient({ url: 'redis://127.0.0.1:1', tls: false, timeoutMs: 250 });
    expect(client.options.tls).toBeUndefined();
  });

  it('backs off reconnects to about 2 s and keeps trying', () => {
    const delays = [1, 2, 3, 4, 5, 6, 50, 10_000].map((attempt) => reconnectDelay(attempt, () => 0.5));
    expect(delays).toEqual([100, 200, 400, 800, 1_600, 2_000, 2_000, 2_000]);
    for (const random of [0, 0.999]) expect(reconnectDelay(1_000, () => random)).toBeLessThanOrEqual(2_500);
  });
});
