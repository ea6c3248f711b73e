/**
 * What a router admits while Redis does not answer is added to Redis's counts once it answers again
 * (limits/outage-carry.ts), on a real redis-server and the test's fake clock (the scripts get its ms).
 * Before, the requests a router admitted on its local share were never counted there: a key that had
 * spent its minute's requests during a short outage got them all again from Redis right after it; and
 * the budget tokens that were carried were sent again after a flush that timed out once Redis had run it.
 * Redis is made to stop answering the router's client (and only it) without losing its data: it asks
 * for a password, and the router's connection is closed; it answers again once the password is lifted.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { Limiter, periods, type LimitedKey } from '../../src/limits/limiter.js';
import { type CarriedKey } from '../../src/limits/outage-carry.js';
import { redisClient, RedisLimitStore } from '../../src/limits/redis-store.js';
import { StoreTimeout, type Checks } from '../../src/limits/store.js';
import { FakeTime } from '../helpers/fake-time.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/** 2026-11-24 12:00:00 UTC */
const NOON = Date.UTC(2026, 10, 24, 12);
const PREFIX = 'carry:';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  admin = new Redis(server.url);
});
afterAll(async () => {
  admin?.disconnect();
  await server?.stop();
});

/** Resolves at the client's next 'ready' (or now, if it is ready). */
function ready(client: Redis): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => client.once('ready', () => resolve()));
}

/** A store whose carry Redis runs but answers too late, `late` times (a Redis that froze a moment). */
class LateCarry extends RedisLimitStore {
  late = 0;
  sent: CarriedKey[][] = [];
  override async carry(router: string, batches: readonly CarriedKey[]): Promise<void> {
    this.sent.push(batches.map((b) => ({ ...b })));
    await super.carry(router, batches);
    if (this.late > 0) {
      this.late -= 1;
      throw new StoreTimeout('Redis answered later than limits.redis.timeoutMs');
    }
  }
}

describe('counts a router admitted while Redis did not answer', () => {
  let time: FakeTime;
  let client: Redis;
  let store: LateCarry;
  let limiter: Limiter;
  let carried: number[];
  /** Redis's counts as another router would read them. */
  let reader: RedisLimitStore;

  beforeEach(async () => {
    await admin.flushdb();
    time = new FakeTime();
    client = redisClient({ url: server.url, tls: false, timeoutMs: 1_000 });
    await ready(client);
    store = new LateCarry(client, { prefix: PREFIX, now: () => time.now(), timeoutMs: 1_000 });
    reader = new RedisLimitStore(admin, { prefix: PREFIX, now: () => time.now() });
    carried = [];
    limiter = new Limiter({
      defaults: {},
      clock: time,
      wallNow: () => NOON + time.now(),
      scheduler: time,
      shared: { store, flushIntervalMs: 250, expectedRouters: 1 },
      events: { onCarried: (keys) => carried.push(keys) },
    });
    limiter.start();
    await time.advance(0);
  });

  afterEach(async () => {
    await admin.config('SET', 'requirepass', '');
    await limiter?.stop();
    client?.disconnect();
  });

  /** Redis stops answering this router (its data kept); resolves once the router has counted that. */
  async function outage(): Promise<void> {
    const id = String(await client.client('ID'));
    await admin.config('SET', 'requirepass', 'only-the-admin-knows');
    await admin.client('KILL', 'ID', id);
  }

  /** Redis answers the router again; a request of another key finds it (the one try a second). */
  async function back(): Promise<void> {
    await admin.config('SET', 'requirepass', '');
    await ready(client);
    await time.advance(1_000);
    await limiter.admit({ name: 'probe', limits: { requestsPerMinute: 1_000 } }, 'llama', 1);
    expect(limiter.shared).toBe(true);
  }

  function checks(key: string, perMinute: number, budget: number): Checks {
    const { day } = periods(NOON + time.now());
    return { key, rates: [{ id: 'requests', kind: 'requests', perMinute }], budgets: [{ window: 'day', ...day, limit: budget }], concurrency: [] };
  }

  it("adds the requests and tokens admitted during the outage to Redis's bucket and budget, so the key does not get its minute again", async () => {
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10, tokensPerDay: 1_000_000 } };
    (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 50 });
    await outage();
    // on its local counts: what Redis had left of the minute (9), one router's share of it
    let admitted = 0;
    for (let i = 0; i < 12; i++) {
      const lease = await limiter.admit(key, 'llama', 100).catch(() => undefined);
      if (!lease) continue;
      admitted += 1;
      lease.finish({ promptTokens: 100, completionTokens: 50 });
    }
    expect(limiter.shared).toBe(false);
    expect(admitted).toBe(9);

    await back();
    await limiter.flush();
    const seen = await reader.peek(checks('team', 10, 1_000_000));
    // a second's refill is all the key has: the nine requests count in Redis (before: 9 left)
    expect(seen.rates[0]?.remaining).toBe(0);
    expect(seen.budgets[0]?.used).toBe(10 * 150);
    expect(carried).toEqual([1]);
    await expect(limiter.admit(key, 'llama', 100)).rejects.toMatchObject({ code: 'RATE_LIMIT_EXCEEDED' });
    // nothing more to carry: the next flushes send nothing
    await limiter.flush();
    expect(store.sent).toHaveLength(1);
  });

  it('counts a batch once when Redis ran it but answered too late, and sends it again unchanged', async () => {
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10, tokensPerDay: 1_000_000 } };
    (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 0 });
    await outage();
    for (let i = 0; i < 5; i++) (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 0 });
    expect(limiter.shared).toBe(false);
    await back();
    store.late = 1;
    await limiter.flush(); // Redis applies it; the router does not hear in time
    expect(carried).toEqual([]);
    await limiter.flush(); // sent again, with the same number: Redis skips it
    expect(carried).toEqual([1]);
    expect(store.sent.map((batches) => batches.map((b) => b.seq))).toEqual([[1], [1]]);
    const seen = await reader.peek(checks('team', 10, 1_000_000));
    expect(seen.budgets[0]?.used).toBe(6 * 100);
    expect(seen.rates[0]?.remaining).toBe(4);
  });

  it('does not carry a minute that ended during the outage, nor a day that ended: only what still counts', async () => {
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10, tokensPerDay: 1_000_000 } };
    (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 0 });
    await outage();
    for (let i = 0; i < 5; i++) (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 0 });
    await time.advance(12 * 3_600_000); // past midnight (UTC): the day and the minute ended
    await back();
    await limiter.flush();
    expect(store.sent).toEqual([]);
    expect(carried).toEqual([]);
    const seen = await reader.peek(checks('team', 10, 1_000_000));
    expect(seen.rates[0]?.remaining).toBe(10);
    expect(seen.budgets[0]?.used).toBe(0);
  });
});

describe('RedisLimitStore.carry', () => {
  it("applies a router's batch of a key once, a later batch again, and another router's on its own", async () => {
    await admin.flushdb();
    const store = new RedisLimitStore(admin, { prefix: PREFIX, now: () => 0 });
    const batch = (seq: number): CarriedKey => ({
      key: 'team',
      seq,
      keepMs: 60_000,
      rates: [{ id: 'requests', perMinute: 10, taken: 4 }],
      budgets: [{ period: 'day:2026-11-24', tokens: 300, endsInMs: 3_600_000 }],
    });
    const used = async (): Promise<unknown> => ({ budget: await admin.get(`${PREFIX}{team}:b:day:2026-11-24`), level: await admin.hget(`${PREFIX}{team}:r:requests`, 'level') });
    await store.carry('router-a', [batch(1)]);
    await store.carry('router-a', [batch(1)]);
    expect(await used()).toEqual({ budget: '300', level: '6' });
    await store.carry('router-a', [batch(2)]);
    await store.carry('router-b', [batch(1)]);
    expect(await used()).toEqual({ budget: '900', level: '-2' });
    // the mark lives as long as the batch could still be counted, then goes by itself
    const ttl = await admin.pttl(`${PREFIX}{team}:carried:router-a`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });
});
