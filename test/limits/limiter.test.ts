import { describe, expect, it } from '@jest/globals';
import { RouterError, toErrorResponse } from '../../src/core/errors.js';
import { formatDuration } from '../../src/limits/headers.js';
import { LEASE_MS, Limiter, periods, type LimitedKey, type LimiterEvents, type SharedLimitStore } from '../../src/limits/limiter.js';
import { type LimitFields } from '../../src/limits/settings.js';
import { LocalLimitStore, StoreTimeout, type AdmitRequest, type Checks, type ConcurrencySpec, type Settlement } from '../../src/limits/store.js';
import { type CarriedKey } from '../../src/limits/outage-carry.js';
import { FakeTime } from '../helpers/fake-time.js';

/** 2026-11-24 12:00:00 UTC */
const NOON = Date.UTC(2026, 10, 24, 12);

/** A shared store (Redis's stand-in) over local counts, which can be made to stop answering. */
class FlakyShared implements SharedLimitStore {
  readonly counts: LocalLimitStore;
  down = false;
  /** Calls left that answer too late. */
  slow = 0;
  /** Admissions left that the store carries out but answers too late (a slow Redis runs the script all the same). */
  late = 0;
  routers = 1;
  settled: Settlement[] = [];
  released: string[] = [];
  constructor(time: FakeTime) {
    this.counts = new LocalLimitStore(() => time.now());
  }
  private check(): void {
    if (this.down) throw new Error('connect ECONNREFUSED 127.0.0.1:6379');
    if (this.slow > 0) {
      this.slow -= 1;
      throw new StoreTimeout('Redis answered later than limits.redis.timeoutMs');
    }
  }
  /**
   * Runs `admit` with the store's answers held back: resolves with whether the admission settled
   * before the store answered, then lets the answers through and resolves with its result.
   */
  async whileHeld<T>(admit: () => Promise<T>): Promise<{ settledEarly: boolean; result: T }> {
    this.held = [];
    let settled = false;
    const waiting = admit().then((result) => {
      settled = true;
      return result;
    });
    await Promise.resolve();
    await Promise.resolve();
    const settledEarly = settled;
    for (const answer of this.held.splice(0)) answer();
    this.held = undefined;
    return { settledEarly, result: await waiting };
  }
  /** Admissions answered only when released (as a slow Redis would); undefined: at once. */
  held: Array<() => void> | undefined;
  forced = 0;
  async admit(request: AdmitRequest) {
    if (this.late > 0) {
      this.late -= 1;
      void this.counts.admit(request);
      throw new StoreTimeout('Redis answered later than limits.redis.timeoutMs');
    }
    this.check();
    if (request.force) this.forced += 1;
    const verdict = this.counts.admit(request);
    if (this.held) await new Promise<void>((resolve) => this.held?.push(resolve));
    return verdict;
  }
  async peek(checks: Checks) {
    this.check();
    return this.counts.peek(checks);
  }
  async settle(settlements: readonly Settlement[]) {
    this.check();
    this.settled.push(...settlements.map((s) => ({ ...s })));
    return this.counts.settle(settlements);
  }
  async release(key: string, concurrency: readonly ConcurrencySpec[], lease: string) {
    this.check();
    this.released.push(lease);
    return this.counts.release(key, concurrency, lease);
  }
  /** Each renew's leases, and whether it was to take again those the store does not hold. */
  renewed: Array<{ leases: string[]; retake: boolean }> = [];
  async renew(leases: ReadonlyArray<{ key: string; concurrency: readonly ConcurrencySpec[]; lease: string }>, leaseMs: number, retake = false) {
    this.check();
    this.renewed.push({ leases: leases.map((l) => l.lease), retake });
    return this.counts.renew(leases, leaseMs);
  }
  /** Redis's epoch key (undefined: lost, as a Redis restarted empty has none). */
  epochHeld: string | undefined;
  restored: Array<{ key: string; period: string; used: number }> = [];
  restore(budgets: ReadonlyArray<{ key: string; period: string; used: number; endsInMs: number }>) {
    this.check();
    this.restored.push(...budgets.map(({ key, period, used }) => ({ key, period, used })));
    return Promise.resolve();
  }
  heartbeat(_router: string, _ttlMs: number, epochCandidate?: string) {
    this.check();
    return Promise.resolve({ routers: this.routers, ...(epochCandidate !== undefined ? { epoch: (this.epochHeld ??= epochCandidate) } : {}) });
  }
  carried: CarriedKey[] = [];
  async carry(_router: string, batches: readonly CarriedKey[]) {
    this.check();
    this.carried.push(...batches);
    for (const { key, rates, budgets } of batches) {
      for (const { id, perMinute, taken } of rates) await this.counts.settle([{ key, rates: [{ id, kind: 'tokens', perMinute }], budgets: [], tokens: taken }]);
      for (const { period, tokens, endsInMs } of budgets) await this.counts.settle([{ key, rates: [], budgets: [{ window: 'day', period, limit: 0, endsInMs }], tokens }]);
    }
  }
}

function setup(defaults: LimitFields = {}, options: { shared?: boolean; events?: LimiterEvents } = {}) {
  const time = new FakeTime();
  const wall = (): number => NOON + time.now();
  const shared = options.shared ? new FlakyShared(time) : undefined;
  const limiter = new Limiter({
    defaults,
    clock: time,
    wallNow: wall,
    scheduler: time,
    ...(shared ? { shared: { store: shared, flushIntervalMs: 250, expectedRouters: 1 } } : {}),
    ...(options.events ? { events: options.events } : {}),
  });
  limiter.start();
  return { time, limiter, shared };
}

async function refused(promise: Promise<unknown>): Promise<RouterError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RouterError);
  return err as RouterError;
}

describe('Limiter', () => {
  it('leaves a key without limits alone: no lease, no headers', async () => {
    const { limiter } = setup();
    expect(await limiter.admit({ name: 'free' }, 'llama', 10)).toBeUndefined();
    await limiter.stop();
  });

  it("takes the config's defaults for what a key leaves out, and lets a key lift one with `unlimited`", () => {
    const { limiter } = setup({ requestsPerMinute: 60, tokensPerDay: 1000 });
    expect(limiter.limitsOf({ name: 'a' })).toMatchObject({ requestsPerMinute: 60, tokensPerDay: 1000 });
    expect(limiter.limitsOf({ name: 'b', limits: { requestsPerMinute: 5 } })).toMatchObject({ requestsPerMinute: 5, tokensPerDay: 1000 });
    const lifted = limiter.limitsOf({ name: 'c', limits: { tokensPerDay: 'unlimited' } });
    expect(lifted?.tokensPerDay).toBeUndefined();
    expect(lifted?.requestsPerMinute).toBe(60);
  });

  it('holds a key to its requests per minute: OpenAI headers, then a 429 rate_limit_exceeded with Retry-After, then the refill', async () => {
    const { limiter, time } = setup();
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 3 } };
    const first = await limiter.admit(key, 'llama', 0);
    expect(first?.headers).toEqual({ 'x-ratelimit-limit-requests': '3', 'x-ratelimit-remaining-requests': '2', 'x-ratelimit-reset-requests': '20s' });
    await limiter.admit(key, 'llama', 0);
    const third = await limiter.admit(key, 'llama', 0);
    expect(third?.headers['x-ratelimit-remaining-requests']).toBe('0');
    const err = await refused(limiter.admit(key, 'llama', 0));
    expect(err.code).toBe('RATE_LIMIT_EXCEEDED');
    const answer = toErrorResponse(err);
    expect(answer.status).toBe(429);
    expect(answer.body.error).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded', param: null });
    expect(answer.body.error.message).toMatch(/requests per min \(RPM\): Limit 3, Remaining 0\. Please try again in 20s/);
    expect(answer.headers).toMatchObject({ 'retry-after': '20', 'retry-after-ms': '20000', 'x-ratelimit-remaining-requests': '0' });
    await time.advance(20_000);
    expect(await limiter.admit(key, 'llama', 0)).toBeDefined();
    await limiter.stop();
  });

  it('counts streamed tokens as they flow, so the next request sees them before the stream ends, and corrects the estimate at the end', async () => {
    const { limiter, time } = setup();
    const key: LimitedKey = { name: 'team', limits: { tokensPerMinute: 1000 } };
    const lease = await limiter.admit(key, 'llama', 100);
    expect(lease?.headers['x-ratelimit-remaining-tokens']).toBe('900');
    for (let i = 0; i < 500; i++) lease?.streamed();
    await time.advance(250); // one flush
    const during = await limiter.admit(key, 'llama', 0);
    // 1000 - 100 - 500, plus 250 ms of refill at 1000 a minute (4 tokens)
    expect(Number(during?.headers['x-ratelimit-remaining-tokens'])).toBe(404);
    during?.finish(undefined);
    // the engine reports 40 prompt tokens and 600 completion tokens: 640 in all, 600 charged so far
    lease?.finish({ promptTokens: 40, completionTokens: 600 });
    await time.advance(250);
    const after = await limiter.admit(key, 'llama', 0);
    const remaining = Number(after?.headers['x-ratelimit-remaining-tokens']);
    expect(remaining).toBeGreaterThanOrEqual(360);
    expect(remaining).toBeLessThanOrEqual(370); // 1000 - 640 + 500 ms of refill at 1000/min
    await limiter.stop();
  });

  it('learns how far a kind of request’s prompt estimates fall short (a chat template) and charges that up front', async () => {
    const { limiter, time } = setup();
    const key: LimitedKey = { name: 'team', limits: { tokensPerMinute: 100_000 } };
    const remaining = (lease: { headers: Readonly<Record<string, string>> } | undefined): number => Number(lease?.headers['x-ratelimit-remaining-tokens']);
    // nothing learned yet: the caller's estimate alone (100,000 - 10)
    const first = await limiter.admit(key, 'llama', 10, 'llama chat');
    expect(remaining(first)).toBe(99_990);
    // the engine counts 30 prompt tokens for it: 20 more than the estimate
    first?.finish({ promptTokens: 30, completionTokens: 0 });
    await time.advance(250);
    const before = remaining(await limiter.admit(key, 'llama', 0)); // another kind: nothing added
    const second = await limiter.admit(key, 'llama', 10, 'llama chat');
    expect(before - remaining(second)).toBe(30); // 10 + the 20 learned
    // a later request reports 10 more than its estimate: the overhead moves a quarter of the way (20 → 17.5)
    second?.finish({ promptTokens: 20, completionTokens: 0 });
    await time.advance(250);
    const base = remaining(await limiter.admit(key, 'llama', 0));
    expect(base - remaining(await limiter.admit(key, 'llama', 10, 'llama chat'))).toBe(28); // round(10 + 17.5)
    // another kind has learned nothing; usage the router estimated itself teaches nothing
    const other = await limiter.admit(key, 'llama', 10, 'llama completions');
    other?.finish({ promptTokens: 0, completionTokens: 5, estimated: true });
    await time.advance(250);
    const mark = remaining(await limiter.admit(key, 'llama', 0));
    expect(mark - remaining(await limiter.admit(key, 'llama', 10, 'llama completions'))).toBe(10);
    // an overhead below zero (a sparse tokenizer) never makes a charge negative
    const sparse = await limiter.admit(key, 'llama', 100, 'sparse');
    sparse?.finish({ promptTokens: 10, completionTokens: 0 });
    await time.advance(250);
    const at = remaining(await limiter.admit(key, 'llama', 0));
    expect(at - remaining(await limiter.admit(key, 'llama', 50, 'sparse'))).toBe(0);
    await limiter.stop();
  });

  it('learns per key: one key’s unmeasured prompts (token ids counted as nothing) never raise another key’s charge', async () => {
    const { limiter, time } = setup();
    const attacker: LimitedKey = { name: 'attacker', limits: { tokensPerMinute: 1_000_000 } };
    const victim: LimitedKey = { name: 'victim', limits: { tokensPerMinute: 3_000 } };
    const remaining = (lease: { headers: Readonly<Record<string, string>> } | undefined): number => Number(lease?.headers['x-ratelimit-remaining-tokens']);
    // the attacker's prompts look empty to the router (token ids) and the engine counts 7,000 tokens each
    for (let i = 0; i < 12; i++) {
      const lease = await limiter.admit(attacker, 'llama', 0, 'llama completions');
      lease?.finish({ promptTokens: 7_000, completionTokens: 1 });
    }
    await time.advance(250);
    // the victim's small request is charged its own estimate, not the attacker's 7,000
    const victimLease = await limiter.admit(victim, 'llama', 5, 'llama completions');
    expect(remaining(victimLease)).toBe(2_995);
    // the attacker pays for what it taught
    const before = remaining(await limiter.admit(attacker, 'llama', 0));
    expect(before - remaining(await limiter.admit(attacker, 'llama', 0, 'llama completions'))).toBeGreaterThan(6_000);
    await limiter.stop();
  });

  it('keeps what the most recently taught key-and-kind pairs learned when there are more than it remembers (20,000)', async () => {
    const { limiter, time } = setup();
    const remaining = (lease: { headers: Readonly<Record<string, string>> } | undefined): number => Number(lease?.headers['x-ratelimit-remaining-tokens']);
    const key = (name: string): LimitedKey => ({ name, limits: { tokensPerMinute: 1_000_000 } });
    const teach = async (name: string): Promise<void> => (await limiter.admit(key(name), 'llama', 0, 'llama chat'))?.finish({ promptTokens: 100, completionTokens: 0 });
    await teach('first');
    for (let i = 0; i < 20_000; i++) await teach(`k${i}`);
    await time.advance(250);
    const charge = async (name: string): Promise<number> => remaining(await limiter.admit(key(name), 'llama', 0)) - remaining(await limiter.admit(key(name), 'llama', 0, 'llama chat'));
    expect(await charge('k19999')).toBe(100); // the newest learned
    expect(await charge('first')).toBe(0); // the oldest made room
    await limiter.stop();
  });

  it('refuses a tokens-per-minute key in debt until the refill, as a tokens rate limit', async () => {
    const { limiter, time } = setup();
    const key: LimitedKey = { name: 'team', limits: { tokensPerMinute: 600 } };
    (await limiter.admit(key, 'llama', 50))?.finish({ promptTokens: 50, completionTokens: 1150 }); // 600 into debt
    // counted by this router alone, the usage is settled before the next request: no flush to wait for
    const err = await refused(limiter.admit(key, 'llama', 10));
    expect(toErrorResponse(err).body.error).toMatchObject({ type: 'tokens', code: 'rate_limit_exceeded' });
    expect(err.retryAfterSeconds).toBe(61); // 600 tokens of debt and the next request's 10, at 600 a minute
    await time.advance(61_000);
    expect(await limiter.admit(key, 'llama', 10)).toBeDefined();
    await limiter.stop();
  });

  it('answers a spent budget 429 insufficient_quota, tells the SDKs not to retry, and renews at the UTC day', async () => {
    const { limiter, time } = setup();
    const key: LimitedKey = { name: 'team', limits: { tokensPerDay: 1000 } };
    (await limiter.admit(key, 'llama', 10))?.finish({ promptTokens: 10, completionTokens: 990 });
    const err = await refused(limiter.admit(key, 'llama', 10));
    const answer = toErrorResponse(err);
    expect(answer.status).toBe(429);
    expect(answer.body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(answer.body.error.message).toMatch(/budget of 1000 tokens per day \(UTC\) is spent; it renews in 12h0m0s/);
    expect(answer.headers).toMatchObject({ 'x-should-retry': 'false', 'retry-after': String(12 * 3600) });
    await time.advance(12 * 3600_000);
    expect(await limiter.admit(key, 'llama', 10)).toBeDefined();
    await limiter.stop();
  });

  it('holds a key to its concurrent requests until one finishes', async () => {
    const { limiter } = setup({ concurrentRequests: 2 });
    const key: LimitedKey = { name: 'team' };
    const a = await limiter.admit(key, 'llama', 0);
    await limiter.admit(key, 'llama', 0);
    const err = await refused(limiter.admit(key, 'llama', 0));
    expect(err.message).toMatch(/may have 2 in flight at once/);
    a?.finish(undefined);
    expect(await limiter.admit(key, 'llama', 0)).toBeDefined();
    await limiter.stop();
  });

  it('adds per-deployment limits on top of the key-wide ones, and the headers show whichever has less left', async () => {
    const { limiter } = setup();
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 100, deployments: { big: { requestsPerMinute: 2 } } } };
    const first = await limiter.admit(key, 'big', 0);
    expect(first?.headers['x-ratelimit-limit-requests']).toBe('2');
    await limiter.admit(key, 'big', 0);
    const err = await refused(limiter.admit(key, 'big', 0));
    expect(err.message).toMatch(/on this model/);
    const other = await limiter.admit(key, 'small', 0);
    expect(other?.headers).toMatchObject({ 'x-ratelimit-limit-requests': '100', 'x-ratelimit-remaining-requests': '97' });
    await limiter.stop();
  });

  it('finds a deployment’s limits under its ID, model name or an alias, as the key’s `models` names it', async () => {
    const { limiter } = setup();
    const big = { id: 'big-prod', model: 'meta/big', aliases: ['default', 'big'] };
    for (const [name, scope] of [
      ['big', 'alias'],
      ['meta/big', 'model name'],
      ['big-prod', 'ID'],
    ] as const) {
      const key: LimitedKey = { name: `team-${scope}`, limits: { requestsPerMinute: 100, deployments: { [name]: { requestsPerMinute: 1 } } } };
      expect((await limiter.admit(key, big, 0))?.headers['x-ratelimit-limit-requests']).toBe('1');
      expect((await refused(limiter.admit(key, big, 0))).message).toMatch(/on this model/);
      // another deployment is held only to the key-wide limits
      expect((await limiter.admit(key, { id: 'small', model: 'meta/small', aliases: [] }, 0))?.headers['x-ratelimit-limit-requests']).toBe('100');
    }
    // the ID wins over an alias that names the same deployment
    const both: LimitedKey = { name: 'both', limits: { deployments: { default: { requestsPerMinute: 5 }, 'big-prod': { requestsPerMinute: 2 } } } };
    expect((await limiter.admit(both, big, 0))?.headers['x-ratelimit-limit-requests']).toBe('2');
    await limiter.stop();
  });

  it('shows a key its limits and what is left without spending anything', async () => {
    const { limiter } = setup();
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10, tokensPerMonth: 5000 } };
    await limiter.admit(key, 'llama', 30);
    const seen = await limiter.peek(key);
    const again = await limiter.peek(key);
    expect(seen?.verdict.rates).toEqual([expect.objectContaining({ id: 'requests', remaining: 9 })]);
    expect(seen?.verdict.budgets).toEqual([expect.objectContaining({ window: 'month', period: 'month:2026-11', used: 30, limit: 5000 })]);
    expect(again?.verdict).toEqual(seen?.verdict);
    expect(await limiter.peek({ name: 'free' })).toBeUndefined();
    await limiter.stop();
  });
});

describe('Limiter with a shared store', () => {
  it('counts locally with its share of each limit while the store does not answer, logs once, and shares again when it is back', async () => {
    const shared: boolean[] = [];
    const errors: string[] = [];
    const { limiter, time, shared: store } = setup({}, { shared: true, events: { onShared: (up) => shared.push(up), onSharedError: (op) => errors.push(op) } });
    const flaky = store as FlakyShared;
    flaky.routers = 2;
    await time.advance(5_000); // a heartbeat: two routers share the limits
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10 } };
    expect((await limiter.admit(key, 'llama', 0))?.headers['x-ratelimit-limit-requests']).toBe('10');
    flaky.down = true;
    // this router's share while Redis is down: 10 / 2 routers = 5 a minute, starting from its share of
    // what Redis had left (9 / 2 = 4.5), not a full bucket: four requests
    const local = await limiter.admit(key, 'llama', 0);
    expect(local?.headers['x-ratelimit-limit-requests']).toBe('5');
    expect(local?.headers['x-ratelimit-remaining-requests']).toBe('3');
    expect(limiter.shared).toBe(false);
    for (let i = 0; i < 3; i++) await limiter.admit(key, 'llama', 0);
    await refused(limiter.admit(key, 'llama', 0));
    expect(shared).toEqual([false]);
    expect(errors[0]).toBe('admit');
    flaky.down = false;
    await time.advance(1_000);
    // the next request tries Redis again, finds it, and counts there (9 were left of its 10)
    const back = await limiter.admit(key, 'llama', 0);
    expect(back?.headers['x-ratelimit-limit-requests']).toBe('10');
    expect(shared).toEqual([false, true]);
    await limiter.stop();
  });

  it('counts one slow answer’s request locally and stays shared; three in a row count as down', async () => {
    const shared: boolean[] = [];
    const errors: string[] = [];
    const { limiter, shared: store } = setup({}, { shared: true, events: { onShared: (up) => shared.push(up), onSharedError: (op) => errors.push(op) } });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 10 } };
    expect((await limiter.admit(key, 'llama', 0))?.headers['x-ratelimit-remaining-requests']).toBe('9');
    flaky.slow = 1;
    // admitted on this router's share of what Redis had left (9), the store still counted as up
    expect((await limiter.admit(key, 'llama', 0))?.headers['x-ratelimit-remaining-requests']).toBe('8');
    expect(limiter.shared).toBe(true);
    expect(errors).toEqual(['admit']);
    // the next request goes to Redis again, which never saw the slow one here (the stand-in did not apply it)
    expect((await limiter.admit(key, 'llama', 0))?.headers['x-ratelimit-remaining-requests']).toBe('8');
    flaky.slow = 3;
    for (let i = 0; i < 3; i++) await limiter.admit(key, 'llama', 0);
    expect(limiter.shared).toBe(false);
    expect(shared).toEqual([false]);
    await limiter.stop();
  });

  it('gives back in the store the slots of an admission it answered too late, once it counts as down (the key is not locked out after)', async () => {
    const { limiter, time, shared: store } = setup({}, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'pair', limits: { concurrentRequests: 2 } };
    // three admissions Redis runs but answers too late: the third makes the router count locally
    flaky.late = 3;
    for (let i = 0; i < 3; i++) (await limiter.admit(key, 'llama', 0))?.finish(undefined);
    expect(limiter.shared).toBe(false);
    await time.advance(6_000); // a heartbeat finds the store again; flushes follow
    expect(limiter.shared).toBe(true);
    // nothing is in flight: both slots are the key's again, through the store
    const both = [await limiter.admit(key, 'llama', 0), await limiter.admit(key, 'llama', 0)];
    expect(both.every((lease) => lease !== undefined)).toBe(true);
    for (const lease of both) lease?.finish(undefined);
    await limiter.stop();
  });

  it('lets a request far from every limit through on its view of the key, and counts it in the store in the background', async () => {
    const { limiter, time, shared: store } = setup({}, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 1_000, tokensPerMinute: 1_000_000, concurrentRequests: 100, tokensPerDay: 10_000_000 } };
    // the first request waits for the store: nothing is known of the key yet
    const first = await limiter.admit(key, 'llama', 10);
    expect(first?.headers['x-ratelimit-remaining-requests']).toBe('999');
    expect(flaky.forced).toBe(0);
    // the store stops answering for a while: requests far from the limits do not wait for it
    flaky.held = [];
    const leases = [];
    for (let i = 0; i < 5; i++) leases.push(await limiter.admit(key, 'llama', 10));
    expect(leases.map((l) => l?.headers['x-ratelimit-remaining-requests'])).toEqual(['998', '997', '996', '995', '994']);
    expect(flaky.forced).toBe(5); // each was sent to be counted
    for (const answer of flaky.held.splice(0)) answer();
    flaky.held = undefined;
    await time.advance(0);
    expect((await flaky.counts.peek({ key: 'team', rates: [{ id: 'requests', kind: 'requests', perMinute: 1_000 }], budgets: [], concurrency: [] })).rates[0]?.remaining).toBe(994);
    for (const lease of [first, ...leases]) lease?.finish(undefined);
    await limiter.stop();
  });

  it('with strict set, waits for the store on every request', async () => {
    const time = new FakeTime();
    const store = new FlakyShared(time);
    const limiter = new Limiter({ defaults: {}, clock: time, wallNow: () => NOON + time.now(), scheduler: time, shared: { store, flushIntervalMs: 250, expectedRouters: 1, strict: true } });
    limiter.start();
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 1_000_000 } };
    await limiter.admit(key, 'llama', 0);
    const { settledEarly } = await store.whileHeld(() => limiter.admit(key, 'llama', 0));
    expect(settledEarly).toBe(false);
    expect(store.forced).toBe(0);
    await limiter.stop();
  });

  it('waits for the store near a limit, where its answer decides', async () => {
    const { limiter, shared: store } = setup({}, { shared: true });
    const flaky = store as FlakyShared;
    // 5% of 1,000 is 50: a request admitted on the view must leave at least 50
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 1_000 } };
    for (let i = 0; i < 940; i++)
      await flaky.counts.admit({ key: 'team', rates: [{ id: 'requests', kind: 'requests', perMinute: 1_000 }], budgets: [], concurrency: [], tokens: 0, lease: `x${i}`, leaseMs: 1 });
    await limiter.admit(key, 'llama', 0); // seen: 59 left
    for (let i = 0; i < 9; i++) await limiter.admit(key, 'llama', 0); // on the view: 50 left
    expect(flaky.forced).toBe(9);
    // 49 would be left: inside the margin, so the store decides
    const { settledEarly, result } = await flaky.whileHeld(() => limiter.admit(key, 'llama', 0));
    expect(settledEarly).toBe(false);
    expect(flaky.forced).toBe(9);
    expect(result?.headers['x-ratelimit-remaining-requests']).toBe('49');
    await limiter.stop();
  });

  it('adds the tokens spent while the store was down to its budgets once it is back, and to a per-minute bucket only what has not refilled since', async () => {
    const { limiter, time, shared: store } = setup({}, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team', limits: { tokensPerMinute: 100_000, tokensPerDay: 1_000_000 } };
    (await limiter.admit(key, 'llama', 100))?.finish({ promptTokens: 100, completionTokens: 0 });
    await time.advance(250);
    flaky.down = true;
    (await limiter.admit(key, 'llama', 50))?.finish({ promptTokens: 50, completionTokens: 250 });
    await time.advance(250);
    await time.advance(250);
    flaky.settled = [];
    flaky.down = false;
    await time.advance(5_000); // the heartbeat finds Redis again; the next flush sends what waited
    await time.advance(250);
    // 300 tokens of a 100,000-a-minute bucket refilled within 5 s: only the budget still counts them
    expect(flaky.settled).toEqual([]);
    expect(flaky.carried).toEqual([expect.objectContaining({ key: 'team', rates: [], budgets: [expect.objectContaining({ tokens: 300 })] })]);
    const seen = await limiter.peek(key);
    expect(seen?.verdict.budgets[0]?.used).toBe(400);
    await limiter.stop();
  });

  it("gives a finished request's slot back at once; a release the store did not take is sent again with each flush until it is", async () => {
    const { limiter, time, shared: store } = setup({ concurrentRequests: 1 }, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'one-at-a-time' };
    const first = await limiter.admit(key, 'llama', 0);
    first?.finish(undefined);
    await Promise.resolve();
    expect(flaky.released).toEqual([first?.id]); // before the client can send its next request, to any router
    // the connection drops just as the next one ends: its release fails, and is not forgotten
    const second = await limiter.admit(key, 'llama', 0);
    flaky.down = true;
    second?.finish(undefined);
    await time.advance(250);
    expect(flaky.released).toEqual([first?.id]);
    flaky.down = false;
    await time.advance(250);
    expect(flaky.released).toEqual([first?.id, second?.id]);
    expect(await limiter.admit(key, 'llama', 0)).toBeDefined(); // the slot is free in the store
    await limiter.stop();
  });

  it('frees a slot when the answer is whole (before the client has it), once: the end of the response frees nothing more', async () => {
    for (const shared of [false, true]) {
      const { limiter } = setup({ concurrentRequests: 1 }, { shared });
      const key: LimitedKey = { name: `answered-${shared}` };
      const first = await limiter.admit(key, 'llama', 0);
      first?.answered();
      const second = await limiter.admit(key, 'llama', 0); // the first's slot is free already
      expect({ shared, admitted: second !== undefined }).toEqual({ shared, admitted: true });
      first?.finish({ promptTokens: 1, completionTokens: 1 });
      // the second still holds the one slot: the first's end released nothing of it
      expect({ shared, code: (await refused(limiter.admit(key, 'llama', 0))).code }).toEqual({ shared, code: 'RATE_LIMIT_EXCEEDED' });
      await limiter.stop();
    }
  });

  it('stops sending a release again once the lease would have expired in the store by itself', async () => {
    const { limiter, time, shared: store } = setup({ concurrentRequests: 1 }, { shared: true });
    const flaky = store as FlakyShared;
    const lease = await limiter.admit({ name: 'gone-long' }, 'llama', 0);
    flaky.down = true;
    lease?.finish(undefined);
    await time.advance(LEASE_MS + 1_000);
    flaky.down = false;
    await time.advance(6_000); // a heartbeat finds the store again; flushes follow
    expect(flaky.released).toEqual([]);
    await limiter.stop();
  });

  it("holds a burst that reaches two routers at once to the key's limit: each admits on its view only its share of what was left", async () => {
    const time = new FakeTime();
    const store = new FlakyShared(time);
    store.routers = 2;
    const router = (): Limiter => {
      const limiter = new Limiter({ defaults: {}, clock: time, wallNow: () => NOON + time.now(), scheduler: time, shared: { store, flushIntervalMs: 250, expectedRouters: 2 } });
      limiter.start();
      return limiter;
    };
    const [a, b] = [router(), router()];
    for (const [name, limits] of [
      ['requests', { requestsPerMinute: 120 }],
      ['concurrency', { concurrentRequests: 40 }],
    ] as const) {
      const key: LimitedKey = { name, limits };
      // one request through each: each router has its view of the key
      for (const limiter of [a, b]) (await limiter.admit(key, 'llama', 0))?.finish(undefined);
      // 100 at each router at the same moment; Redis's answers come after every one was sent
      store.held = [];
      const burst = Array.from({ length: 100 }, () =>
        [a, b].map((limiter) =>
          limiter.admit(key, 'llama', 0).then(
            () => true,
            () => false,
          ),
        ),
      ).flat();
      await Promise.resolve();
      for (const answer of store.held.splice(0)) answer();
      store.held = undefined;
      const admitted = (await Promise.all(burst)).filter(Boolean).length;
      // before each router's share, each admitted up to what it saw left on its own: 200 of 118 in a run
      expect({ name, admitted }).toEqual({ name, admitted: name === 'requests' ? 118 : 40 });
    }
    await a.stop();
    await b.stop();
  });

  it('starts on local counts when the store did not answer at start', async () => {
    const time = new FakeTime();
    const store = new FlakyShared(time);
    store.down = true;
    const shared: boolean[] = [];
    const limiter = new Limiter({
      defaults: { requestsPerMinute: 10 },
      clock: time,
      wallNow: () => NOON,
      scheduler: time,
      shared: { store, flushIntervalMs: 250, expectedRouters: 2, answering: false },
      events: { onShared: (up) => shared.push(up) },
    });
    limiter.start();
    expect(shared).toEqual([false]);
    expect((await limiter.admit({ name: 'k' }, 'd', 0))?.headers['x-ratelimit-limit-requests']).toBe('5');
    await limiter.stop();
  });
});

describe('Limiter when the shared store lost its data or was away', () => {
  it("takes its requests' leases again in flight, never a freed slot's, once Redis answers after an outage", async () => {
    const { limiter, time, shared: store } = setup({ concurrentRequests: 10 }, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team' };
    const answered = await limiter.admit(key, 'llama', 1);
    const streaming = await limiter.admit(key, 'llama', 1);
    answered?.answered(); // whole: its slot is free, its last bytes still going out
    flaky.down = true;
    await time.advance(70_000); // longer than a lease lives: Redis would have let it expire
    flaky.down = false;
    flaky.renewed = [];
    await time.advance(5_000); // a heartbeat finds Redis again
    expect(flaky.renewed).toEqual([{ leases: [streaming?.id], retake: true }]);
    await time.advance(5_000); // the next one only renews
    expect(flaky.renewed[1]).toEqual({ leases: [streaming?.id], retake: false });
    answered?.finish(undefined);
    streaming?.finish(undefined);
    await limiter.stop();
  });

  it('reports a carry once an outage ends, not the routine one of a lone late answer', async () => {
    const carried: number[] = [];
    const { limiter, time, shared: store } = setup({}, { shared: true, events: { onCarried: (keys) => carried.push(keys) } });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team', limits: { requestsPerMinute: 1_000, tokensPerDay: 10_000_000 } };
    (await limiter.admit(key, 'llama', 10))?.finish(undefined);
    flaky.late = 1; // the next admission, let through on the view, is counted in the background and answered late
    (await limiter.admit(key, 'llama', 10))?.finish(undefined);
    await time.advance(250);
    expect(limiter.shared).toBe(true);
    expect(flaky.carried.map((c) => c.key)).toEqual(['team']);
    expect(carried).toEqual([]);
    flaky.down = true;
    await time.advance(1_000);
    (await limiter.admit({ name: 'other', limits: { requestsPerMinute: 10 } }, 'llama', 10))?.finish(undefined);
    expect(limiter.shared).toBe(false);
    flaky.down = false;
    await time.advance(5_250); // a heartbeat finds it, a flush carries
    expect(carried).toEqual([1]);
    await limiter.stop();
  });

  it('takes a request admitted during the outage in Redis once it answers, and gives its slot back there when it ends', async () => {
    const { limiter, time, shared: store } = setup({ concurrentRequests: 10 }, { shared: true });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team' };
    await time.advance(5_000);
    flaky.down = true;
    const local = await limiter.admit(key, 'llama', 1); // fails over to local counts
    expect(limiter.shared).toBe(false);
    flaky.down = false;
    flaky.renewed = [];
    await time.advance(5_000); // a heartbeat finds Redis again and takes the lease in flight there
    expect(flaky.renewed).toEqual([{ leases: [local?.id], retake: true }]);
    await time.advance(5_000); // and renews it from then on
    expect(flaky.renewed[1]).toEqual({ leases: [local?.id], retake: false });
    local?.finish(undefined);
    await time.advance(0);
    expect(flaky.released).toContain(local?.id);
    await limiter.stop();
  });

  it('puts back its leases and the budgets it saw when the epoch changed (Redis came back empty), and says so once', async () => {
    let lost = 0;
    const { limiter, time, shared: store } = setup({ concurrentRequests: 10, tokensPerDay: 1_000_000 }, { shared: true, events: { onSharedLost: () => (lost += 1) } });
    const flaky = store as FlakyShared;
    const key: LimitedKey = { name: 'team' };
    (await limiter.admit(key, 'llama', 500))?.finish({ promptTokens: 500, completionTokens: 0 });
    const streaming = await limiter.admit(key, 'llama', 100);
    await time.advance(5_000); // a heartbeat reads the epoch
    expect(lost).toBe(0);
    flaky.epochHeld = undefined; // restarted empty
    flaky.renewed = [];
    await time.advance(5_000);
    expect(lost).toBe(1);
    expect(flaky.renewed).toEqual([{ leases: [streaming?.id], retake: true }]);
    expect(flaky.restored).toEqual([{ key: 'team', period: periods(NOON + time.now()).day.period, used: 500 }]);
    await time.advance(5_000);
    expect(lost).toBe(1);
    expect(flaky.restored).toHaveLength(1);
    streaming?.finish(undefined);
    await limiter.stop();
  });
});

describe('periods and durations', () => {
  it('names UTC days and months and how long each has left, across a year end', () => {
    const eve = Date.UTC(2026, 11, 31, 23, 59, 30);
    expect(periods(eve)).toEqual({ day: { period: 'day:2026-12-31', endsInMs: 30_000 }, month: { period: 'month:2026-12', endsInMs: 30_000 } });
    expect(periods(NOON).month).toEqual({ period: 'month:2026-11', endsInMs: (6 * 24 + 12) * 3600_000 });
  });

  it.each([
    [0, '0ms'],
    [17, '17ms'],
    [999.2, '1s'],
    [1000, '1s'],
    [1500, '1.5s'],
    [360_000, '6m0s'],
    [3_723_000, '1h2m3s'],
  ])('formats %p ms as %p', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe('Limiter.unlimited: a key without limits, for the opt-in per-key metrics', () => {
  it("counts it admitted, with the engine's tokens, or the prompt's estimate when the engine reported none (as a limited key's)", () => {
    const time = new FakeTime();
    const seen: string[] = [];
    const limiter = new Limiter({
      defaults: {},
      clock: time,
      wallNow: () => 0,
      scheduler: time,
      events: { onAdmitted: (key) => seen.push(`admitted ${key}`), onTokens: (key, prompt, completion) => seen.push(`tokens ${key} ${prompt}+${completion}`) },
    });
    limiter.unlimited({ name: 'free' }, { promptTokens: 12, completionTokens: 5 }, 0);
    limiter.unlimited({ name: 'free' }, { promptTokens: 0, completionTokens: 40, estimated: true }, 25);
    limiter.unlimited({ name: 'free' }, undefined, 0); // a request that failed before any answer
    expect(seen).toEqual(['admitted free', 'tokens free 12+5', 'admitted free', 'tokens free 25+40', 'admitted free']);
  });
});
