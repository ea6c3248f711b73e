/**
 * Where a key's counts live, and the one algorithm every store runs (LocalLimitStore here, in memory
 * for one router; RedisLimitStore, shared by every router through server-side scripts). Both must give
 * the same answers for the same calls; one contract test runs against each.
 *
 * - **Rate buckets** (requests or tokens per minute): a token bucket holding up to `perMinute`,
 *   refilled continuously at `perMinute` a minute; an absent bucket is full. A request is admitted
 *   while the bucket holds at least 1; it then takes 1 (requests) or the request's estimated tokens
 *   (tokens). Tokens settled later are taken as they come (the level may go below zero: the key is
 *   then in debt and waits for the refill); a refund never lifts a bucket above full.
 *   `remaining` is the whole units left, `resetMs` the time until the bucket is full again.
 * - **Budgets** (tokens per day or month): a counter per period, named by the caller (`2026-11-24`,
 *   `2026-11`). A request is admitted while the period's count is below the budget; its estimated
 *   tokens are added at once and settled later like a bucket's.
 * - **Concurrency**: leases with an expiry. A request is admitted while fewer than `limit` unexpired
 *   leases are held; it holds one until released. Leases of a router that died expire by themselves.
 *
 * Admission is all or nothing: when one check refuses, nothing is taken (unless the caller forces the
 * take: it already let the request through). A refusal names the check
 * and how long until it would admit (a budget: the end of its period; concurrency: unknown, 1 s).
 */

export type RateKind = 'requests' | 'tokens';
export type BudgetWindow = 'day' | 'month';
export type RefusalReason = 'requests' | 'tokens' | 'concurrency' | 'budget';

export interface RateSpec {
  /** Unique within the key: e.g. `requests`, `tokens`, `requests:llama-70b`. */
  id: string;
  kind: RateKind;
  perMinute: number;
}

export interface BudgetSpec {
  window: BudgetWindow;
  /** The period's name (its counter's id): `2026-11-24`, `2026-11`. */
  period: string;
  limit: number;
  /** ms from now to the period's end. */
  endsInMs: number;
}

export interface ConcurrencySpec {
  /** Unique within the key: `all`, or a deployment ID. */
  id: string;
  limit: number;
}

/** The checks of one key's request. */
export interface Checks {
  /** The API key's name. */
  key: string;
  rates: readonly RateSpec[];
  budgets: readonly BudgetSpec[];
  concurrency: readonly ConcurrencySpec[];
}

export interface AdmitRequest extends Checks {
  /** Estimated tokens, taken from every tokens bucket and budget. */
  tokens: number;
  /** The concurrency lease's id (unique per request). */
  lease: string;
  /** How long a lease lives unless renewed. */
  leaseMs: number;
  /**
   * Take it even if a check refuses: the router already let the request through on what it last knew
   * of the key (limits/limiter.ts), and the store must count it all the same. The verdict still says
   * whether the checks would have admitted it.
   */
  force?: boolean;
}

export interface RateState {
  id: string;
  kind: RateKind;
  limit: number;
  remaining: number;
  resetMs: number;
}

export interface BudgetState {
  window: BudgetWindow;
  period: string;
  limit: number;
  used: number;
  endsInMs: number;
}

export interface ConcurrencyState {
  id: string;
  limit: number;
  /** Leases held (after this request's, when taken). */
  held: number;
}

export interface Verdict {
  ok: boolean;
  /** Set when not ok: the check that refused, and when it would admit. */
  refused?: { reason: RefusalReason; id: string; retryAfterMs: number };
  /** After this request was taken (or, refused, as they stand). */
  rates: RateState[];
  budgets: BudgetState[];
  concurrency: ConcurrencyState[];
}

/** Tokens to take (or, negative, give back) from a key's tokens buckets and budgets. */
export interface Settlement {
  key: string;
  rates: readonly RateSpec[];
  budgets: readonly BudgetSpec[];
  tokens: number;
}

export interface LimitStore {
  admit(request: AdmitRequest): Promise<Verdict>;
  /** The checks as they stand, taking nothing. */
  peek(checks: Checks): Promise<Verdict>;
  settle(settlements: readonly Settlement[]): Promise<void>;
  release(key: string, concurrency: readonly ConcurrencySpec[], lease: string): Promise<void>;
  /** Extends leases still in use by `leaseMs`. */
  renew(leases: ReadonlyArray<{ key: string; concurrency: readonly ConcurrencySpec[]; lease: string }>, leaseMs: number): Promise<void>;
}

/** The store answered too late (the call may or may not have been applied); every other failure means it could not be reached. */
export class StoreTimeout extends Error {}

/** ms a refused concurrency check asks the client to wait (when a lease frees is unknown). */
export const CONCURRENCY_RETRY_MS = 1000;

const MINUTE_MS = 60_000;

/**
 * How long a budget's count is kept after its period ended (ms). A period is named from the wall
 * clock (a UTC day or month), and a wall clock may step back (NTP) or lag another router's: one that
 * names the ended period again must find its count, not a fresh budget.
 */
export const ENDED_PERIOD_KEPT_MS = 3_600_000;

export interface Bucket {
  level: number;
  /** The store's ms clock when `level` was measured. */
  at: number;
}

/** A bucket's level at `now`. */
export function refill(bucket: Bucket | undefined, perMinute: number, now: number): number {
  if (!bucket) return perMinute;
  return Math.min(perMinute, bucket.level + (Math.max(0, now - bucket.at) * perMinute) / MINUTE_MS);
}

export function rateState(spec: RateSpec, level: number): RateState {
  return {
    id: spec.id,
    kind: spec.kind,
    limit: spec.perMinute,
    remaining: Math.max(0, Math.floor(level)),
    resetMs: Math.ceil(((spec.perMinute - level) * MINUTE_MS) / spec.perMinute),
  };
}

/** ms until a bucket at `level` holds 1. */
export function waitForOne(level: number, perMinute: number): number {
  return Math.max(1, Math.ceil(((1 - level) * MINUTE_MS) / perMinute));
}

/**
 * Which check refuses a request, given the state of each (bucket levels, budgets used, leases held),
 * or undefined when all admit. A spent budget wins (retrying sooner is pointless), the one that renews
 * last; else the rate that refills last; else a full concurrency check.
 */
export function refusalOf(checks: Checks, levels: readonly number[], used: readonly number[], held: readonly number[]): Verdict['refused'] {
  let refused: Verdict['refused'];
  checks.budgets.forEach((spec, i) => {
    if ((used[i] as number) >= spec.limit && (!refused || spec.endsInMs > refused.retryAfterMs)) refused = { reason: 'budget', id: spec.window, retryAfterMs: spec.endsInMs };
  });
  checks.rates.forEach((spec, i) => {
    const level = levels[i] as number;
    if (level >= 1) return;
    const wait = waitForOne(level, spec.perMinute);
    if (refused?.reason !== 'budget' && (!refused || wait > refused.retryAfterMs)) refused = { reason: spec.kind, id: spec.id, retryAfterMs: wait };
  });
  checks.concurrency.forEach((spec, i) => {
    if (!refused && (held[i] as number) >= spec.limit) refused = { reason: 'concurrency', id: spec.id, retryAfterMs: CONCURRENCY_RETRY_MS };
  });
  return refused;
}

/** The counts of one router, in memory. `now` is a monotonic ms clock. */
export class LocalLimitStore implements LimitStore {
  private readonly buckets = new Map<string, Bucket>();
  private readonly budgets = new Map<string, { used: number; expires: number }>();
  private readonly leases = new Map<string, Map<string, number>>();
  private sweeps = 0;

  /**
   * `initial`: a bucket's state before this store's first take (absent: full); the limiter seeds its
   * fallback counts from what Redis last reported, so an outage does not hand every key a fresh burst.
   */
  constructor(
    private readonly now: () => number,
    private readonly initial?: (key: string, rateId: string) => Bucket | undefined,
  ) {}

  private bucket(key: string, rateId: string): Bucket | undefined {
    const id = `${key}\0${rateId}`;
    let bucket = this.buckets.get(id);
    if (!bucket && this.initial) {
      bucket = this.initial(key, rateId);
      if (bucket) this.buckets.set(id, bucket);
    }
    return bucket;
  }

  private verdict(checks: Checks, take: AdmitRequest | undefined): Verdict {
    const now = this.now();
    if (++this.sweeps % 1024 === 0) this.sweep(now);
    const levels = checks.rates.map((spec) => refill(this.bucket(checks.key, spec.id), spec.perMinute, now));
    const used = checks.budgets.map((spec) => this.budgetUsed(checks.key, spec, now));
    const held = checks.concurrency.map((spec) => this.held(checks.key, spec.id, now));
    const refused = refusalOf(
      checks,
      levels,
      used,
      held.map((leases) => leases?.size ?? 0),
    );
    const counts = held.map((leases) => leases?.size ?? 0);
    if (take && (!refused || take.force)) {
      checks.rates.forEach((spec, i) => {
        const level = (levels[i] as number) - (spec.kind === 'requests' ? 1 : take.tokens);
        levels[i] = level;
        this.buckets.set(`${checks.key}\0${spec.id}`, { level, at: now });
      });
      checks.budgets.forEach((spec, i) => {
        used[i] = (used[i] as number) + take.tokens;
        this.budgets.set(`${checks.key}\0${spec.period}`, { used: used[i], expires: now + spec.endsInMs });
      });
      checks.concurrency.forEach((spec, i) => {
        const id = `${checks.key}\0${spec.id}`;
        const leases = this.leases.get(id) ?? new Map<string, number>();
        leases.set(take.lease, now + take.leaseMs);
        this.leases.set(id, leases);
        counts[i] = leases.size;
      });
    }
    return {
      ok: refused === undefined,
      ...(refused ? { refused } : {}),
      rates: checks.rates.map((spec, i) => rateState(spec, levels[i] as number)),
      budgets: checks.budgets.map((spec, i) => ({ window: spec.window, period: spec.period, limit: spec.limit, used: used[i] as number, endsInMs: spec.endsInMs })),
      concurrency: checks.concurrency.map((spec, i) => ({ id: spec.id, limit: spec.limit, held: counts[i] as number })),
    };
  }

  private budgetUsed(key: string, spec: BudgetSpec, now: number): number {
    const entry = this.budgets.get(`${key}\0${spec.period}`);
    return entry && entry.expires + ENDED_PERIOD_KEPT_MS > now ? entry.used : 0;
  }

  /** The unexpired leases of one concurrency check. */
  private held(key: string, id: string, now: number): Map<string, number> | undefined {
    const leases = this.leases.get(`${key}\0${id}`);
    if (!leases) return undefined;
    for (const [lease, expires] of leases) if (expires <= now) leases.delete(lease);
    return leases;
  }

  /** Forgets full buckets, ended periods and empty lease sets (memory stays bounded by active keys). */
  private sweep(now: number): void {
    for (const [id, bucket] of this.buckets) if (now - bucket.at > MINUTE_MS && bucket.level >= 0) this.buckets.delete(id);
    for (const [id, budget] of this.budgets) if (budget.expires + ENDED_PERIOD_KEPT_MS <= now) this.budgets.delete(id);
    for (const [id, leases] of this.leases) {
      for (const [lease, expires] of leases) if (expires <= now) leases.delete(lease);
      if (leases.size === 0) this.leases.delete(id);
    }
  }

  admit(request: AdmitRequest): Promise<Verdict> {
    return Promise.resolve(this.verdict(request, request));
  }

  peek(checks: Checks): Promise<Verdict> {
    return Promise.resolve(this.verdict(checks, undefined));
  }

  settle(settlements: readonly Settlement[]): Promise<void> {
    const now = this.now();
    for (const { key, rates, budgets, tokens } of settlements) {
      for (const spec of rates) {
        if (spec.kind !== 'tokens') continue;
        const id = `${key}\0${spec.id}`;
        this.buckets.set(id, { level: Math.min(spec.perMinute, refill(this.bucket(key, spec.id), spec.perMinute, now) - tokens), at: now });
      }
      for (const spec of budgets) {
        const id = `${key}\0${spec.period}`;
        this.budgets.set(id, { used: Math.max(0, this.budgetUsed(key, spec, now) + tokens), expires: now + spec.endsInMs });
      }
    }
    return Promise.resolve();
  }

  release(key: string, concurrency: readonly ConcurrencySpec[], lease: string): Promise<void> {
    for (const spec of concurrency) this.leases.get(`${key}\0${spec.id}`)?.delete(lease);
    return Promise.resolve();
  }

  renew(leases: ReadonlyArray<{ key: string; concurrency: readonly ConcurrencySpec[]; lease: string }>, leaseMs: number): Promise<void> {
    const now = this.now();
    for (const { key, concurrency, lease } of leases) {
      for (const spec of concurrency) {
        const held = this.leases.get(`${key}\0${spec.id}`);
        const expires = held?.get(lease);
        // an expired lease stays expired (its slot may have been taken since)
        if (held && expires !== undefined && expires > now) held.set(lease, now + leaseMs);
      }
    }
    return Promise.resolve();
  }
}
