/**
 * Per-key limits on the request path. `admit` makes one store call (one Redis round trip when Redis is
 * configured) that checks every limit of the key and takes the request and its estimated prompt
 * tokens; the answer gives the rate-limit headers, or a 429. With Redis, a request far from every
 * limit does not wait for that round trip: it is let through on what the router last heard from Redis
 * about the key, and counted there in the background (view.ts). The prompt estimate learns: a key's
 * requests of one kind (a deployment's API) add the amount by which the engine's reported prompt tokens
 * have lately exceeded the estimate for that key (a chat template's tokens, a tokenizer denser than four
 * characters a token), so settlement corrects little and a busy key's bucket does not swing into debt.
 * What one key's requests teach is charged to that key alone: a prompt the router cannot measure (token
 * ids) or one made to look small would otherwise raise every other key's charge.
 * The lease it returns follows the response:
 * each streamed content event is one more token, and the engine's usage corrects the estimate at the
 * end. Tokens reach the store in batches every `flushIntervalMs`, off the request path, so a long
 * stream is counted while it flows and the key's next requests see it.
 *
 * With Redis configured the counts are shared by every router. When Redis cannot answer (down,
 * or slower than its timeout), the router keeps serving: it counts locally with the limits divided
 * by the number of routers (known from their heartbeats in Redis, else `expectedRouters`), logs
 * once, and tries Redis again at most once a second. Each bucket and budget starts the outage at
 * this router's share of what was left of it when Redis last answered (a Redis hiccup hands no key a
 * fresh burst), and what it admitted and spent meanwhile is added to Redis's buckets and budgets once it
 * is back (outage-carry.ts), its requests in flight taken there. Nothing is ever written over Redis's
 * counts: it is only added to.
 */
import { randomUUID } from 'node:crypto';
import { type Clock, type Scheduler } from '../core/clock.js';
import { RouterError } from '../core/errors.js';
import { formatDuration, rateLimitHeaders } from './headers.js';
import { SharedView } from './view.js';
import { OutageCarry, type CarriedKey } from './outage-carry.js';
import { keyLimits, type KeyLimitFields, type KeyLimits, type LimitFields, type ScopeLimits } from './settings.js';
import {
  LocalLimitStore,
  StoreTimeout,
  type AdmitRequest,
  type Bucket,
  type BudgetSpec,
  type Checks,
  type ConcurrencySpec,
  type LimitStore,
  type RateSpec,
  type Settlement,
  type Verdict,
} from './store.js';

/** What a response used, as the director reports it (proxy/usage.ts `TokenUsage`). */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  /** Counted from the streamed content events, not reported by the engine (promptTokens is then 0). */
  estimated?: true;
}

/** What the limiter knows of the caller. */
export interface LimitedKey {
  name: string;
  limits?: KeyLimitFields;
}

/** How fast the learned prompt overhead follows the engines' usage (weight of the newest request). */
const OVERHEAD_WEIGHT = 0.25;
/** Most bucket levels remembered for an outage (keys × rates; the least recently seen go first). */
const MAX_LEVELS_SEEN = 100_000;
/** Most kinds of request whose overhead is learned (keys × deployments × APIs; beyond it, the least recently taught is forgotten). */
const MAX_KINDS = 20_000;

/** What a heartbeat answers: how many routers beat lately, and the store's epoch when asked and kept. */
export interface Heartbeat {
  routers: number;
  /** Set to the candidate when the store held none: a change means the store lost its data (Redis restarted empty). */
  epoch?: string;
}

/** The shared store (Redis), with the routers' heartbeat. */
export interface SharedLimitStore extends LimitStore {
  /** Records `router` alive (routers that beat within `ttlMs` are counted) and reads the epoch, set to `epochCandidate` when the store holds none, in one round trip. */
  heartbeat(router: string, ttlMs: number, epochCandidate?: string): Promise<Heartbeat>;
  /** `retake`: also add the leases the store does not hold (it lost its data; the requests are in flight). */
  renew(leases: ReadonlyArray<{ key: string; concurrency: readonly ConcurrencySpec[]; lease: string }>, leaseMs: number, retake?: boolean): Promise<void>;
  /** Raises budget counters to `used`, never lowering one (after the store lost its data). */
  restore?(budgets: ReadonlyArray<{ key: string; period: string; used: number; endsInMs: number }>): Promise<void>;
  /** Adds what `router` counted while the store did not answer, each key's batch once however often it is sent (outage-carry.ts). */
  carry?(router: string, batches: readonly CarriedKey[]): Promise<void>;
}

export type RedisOp = 'admit' | 'settle' | 'release' | 'heartbeat';

/** What {@link LimiterEvents.onBudget} reports of a budget. */
export interface BudgetLeft {
  window: 'day' | 'month';
  period: string;
  limit: number;
  remaining: number;
  endsInMs: number;
}

export interface LimiterEvents {
  onAdmitted?: (key: string) => void;
  onRejected?: (key: string, reason: 'requests' | 'tokens' | 'concurrency' | 'budget') => void;
  onTokens?: (key: string, prompt: number, completion: number) => void;
  /** A budget of the key as a request's admission found it: `remaining` of `limit` in `period`, which ends in `endsInMs` (wall clock). */
  onBudget?: (key: string, budget: BudgetLeft) => void;
  /** A request of the key ended having spent `tokens` more of its budget (the period it was admitted in) than its admission charged (fewer when negative). */
  onBudgetSpent?: (key: string, budget: { window: 'day' | 'month'; period: string }, tokens: number) => void;
  /** Redis answered again (true), or stopped answering (false). */
  onShared?: (up: boolean, error?: Error) => void;
  onSharedError?: (op: RedisOp) => void;
  onRoundTrip?: (seconds: number) => void;
  onRouters?: (routers: number) => void;
  /** Redis lost its data (restarted empty, failed over to an empty replica, flushed, evicted): its epoch changed. */
  onSharedLost?: () => void;
  /** Redis took what this router counted while it did not answer: the counts of `keys` API keys (once an outage: the first carry after it). */
  onCarried?: (keys: number) => void;
}

export interface LimiterOptions {
  defaults: LimitFields;
  /** Monotonic ms (the local counts and the lease clock). */
  clock: Clock;
  /** Wall-clock ms (budget periods are UTC days and months). */
  wallNow: () => number;
  scheduler: Scheduler;
  shared?: {
    store: SharedLimitStore;
    flushIntervalMs: number;
    /** Routers assumed until their heartbeats say. */
    expectedRouters: number;
    /** Whether Redis answered at start (default true); when not, counts start local. */
    answering?: boolean;
    /** Every request waits for Redis's answer (default: only near a limit; see view.ts). */
    strict?: boolean;
  };
  events?: LimiterEvents;
}

/** How long a concurrency lease lives unless renewed (renewed every third of it while in use). */
export const LEASE_MS = 60_000;
const HEARTBEAT_MS = 5_000;
const HEARTBEAT_TTL_MS = 3 * HEARTBEAT_MS;
/** After Redis failed a request, the next try waits this long (meanwhile: local counts). */
const RETRY_SHARED_MS = 1_000;
/**
 * Timeouts in a row after which Redis counts as down. One slow answer (a busy host) sends only that
 * call's request to local counts; a refused or lost connection counts as down at once.
 */
const TIMEOUTS_BEFORE_DOWN = 3;
/** Budget counters restored in one pipeline after Redis lost its data. */
const RESTORE_BATCH = 1_000;
/** Budget settlements kept for Redis while it is down (per key and period, so bounded by keys × 2). */
const MAX_PENDING = 100_000;
const LOCAL_FLUSH_MS = 250;

/** A UTC period's name and its end. */
export function periods(wallMs: number): { day: { period: string; endsInMs: number }; month: { period: string; endsInMs: number } } {
  const now = new Date(wallMs);
  const y = now.getUTCFullYear();
  const m = now.getUTCMonth();
  const d = now.getUTCDate();
  const pad = (n: number): string => String(n).padStart(2, '0');
  return {
    day: { period: `day:${y}-${pad(m + 1)}-${pad(d)}`, endsInMs: Date.UTC(y, m, d + 1) - wallMs },
    month: { period: `month:${y}-${pad(m + 1)}`, endsInMs: Date.UTC(y, m + 1, 1) - wallMs },
  };
}

/** A deployment as the keys file may name it: its ID, its model name or one of its aliases. */
export interface DeploymentNames {
  id: string;
  model: string;
  aliases: readonly string[];
}

/**
 * The name under which the key's per-deployment limits hold the deployment: its ID, else its model
 * name, else an alias (a key's `models` takes any of them, and so do its limits); the ID when none has limits.
 * `held`: the names the deployment holds (`ModelCatalog.namesOf`). In Kubernetes mode two namespaces'
 * deployments may share a name, which the older holds: a limit under that name is the older's, never
 * the younger's too (they shared one count). A deployment none of whose limited names it holds gets none
 * (`''`, which no entry has).
 */
export function scopeOf(limits: KeyLimits, named: string | DeploymentNames, held?: readonly string[]): string {
  if (typeof named === 'string') return named;
  if (limits.deployments.size === 0) return named.id;
  const limited = (name: string): boolean => limits.deployments.has(name) && (held === undefined || held.includes(name));
  if (limited(named.id)) return named.id;
  if (limited(named.model)) return named.model;
  return named.aliases.find(limited) ?? (limits.deployments.has(named.id) ? '' : named.id);
}

/** What `tokens` more (or fewer) of a request settle: its token buckets and budgets; undefined when it has none, or nothing to settle. */
function settlementOf(checks: Pick<Checks, 'key' | 'rates' | 'budgets'>, tokens: number): Settlement | undefined {
  if (tokens === 0 || (checks.budgets.length === 0 && !checks.rates.some((r) => r.kind === 'tokens'))) return undefined;
  return { key: checks.key, rates: checks.rates.filter((r) => r.kind === 'tokens'), budgets: checks.budgets, tokens };
}

/** The checks of a key's request on `deployment` (all deployments when undefined: what GET /v1/limits shows). */
export function checksFor(key: string, limits: KeyLimits, deployment: string | undefined, wallMs: number): Checks {
  const rates: RateSpec[] = [];
  const concurrency: ConcurrencySpec[] = [];
  if (limits.requestsPerMinute) rates.push({ id: 'requests', kind: 'requests', perMinute: limits.requestsPerMinute });
  if (limits.tokensPerMinute) rates.push({ id: 'tokens', kind: 'tokens', perMinute: limits.tokensPerMinute });
  if (limits.concurrentRequests) concurrency.push({ id: 'all', limit: limits.concurrentRequests });
  const scopes = deployment === undefined ? [...limits.deployments] : limits.deployments.has(deployment) ? [[deployment, limits.deployments.get(deployment) as ScopeLimits] as const] : [];
  for (const [id, scope] of scopes) {
    if (scope.requestsPerMinute) rates.push({ id: `requests:${id}`, kind: 'requests', perMinute: scope.requestsPerMinute });
    if (scope.tokensPerMinute) rates.push({ id: `tokens:${id}`, kind: 'tokens', perMinute: scope.tokensPerMinute });
    if (scope.concurrentRequests) concurrency.push({ id: `deployment:${id}`, limit: scope.concurrentRequests });
  }
  const budgets: BudgetSpec[] = [];
  if (limits.tokensPerDay || limits.tokensPerMonth) {
    const { day, month } = periods(wallMs);
    if (limits.tokensPerDay) budgets.push({ window: 'day', ...day, limit: limits.tokensPerDay });
    if (limits.tokensPerMonth) budgets.push({ window: 'month', ...month, limit: limits.tokensPerMonth });
  }
  return { key, rates, budgets, concurrency };
}

function refusal(verdict: Verdict, limits: KeyLimits): RouterError {
  const refused = verdict.refused as NonNullable<Verdict['refused']>;
  const wait = formatDuration(refused.retryAfterMs);
  const headers = { ...rateLimitHeaders(verdict), 'retry-after-ms': String(refused.retryAfterMs) };
  const retryAfterSeconds = Math.max(1, Math.ceil(refused.retryAfterMs / 1000));
  if (refused.reason === 'budget') {
    const budget = verdict.budgets.find((b) => b.window === refused.id);
    const per = refused.id === 'day' ? 'day (UTC)' : 'month (UTC)';
    return new RouterError('INSUFFICIENT_QUOTA', `You exceeded your current quota: this API key's budget of ${budget?.limit ?? '?'} tokens per ${per} is spent; it renews in ${wait}.`, {
      retryAfterSeconds,
      // the official SDKs retry every 429 unless told not to; a spent budget will not come back in seconds
      headers: { ...headers, 'x-should-retry': 'false' },
    });
  }
  if (refused.reason === 'concurrency') {
    const limit = refused.id === 'all' ? limits.concurrentRequests : limits.deployments.get(refused.id.slice('deployment:'.length))?.concurrentRequests;
    const scope = refused.id === 'all' ? '' : ` on this model`;
    return new RouterError('RATE_LIMIT_EXCEEDED', `Too many concurrent requests: this API key may have ${limit ?? '?'} in flight at once${scope}. Retry when one has finished.`, {
      retryAfterSeconds,
      headers,
    });
  }
  const state = verdict.rates.find((r) => r.id === refused.id);
  const unit = refused.reason === 'requests' ? 'requests per min (RPM)' : 'tokens per min (TPM)';
  const scope = refused.id.includes(':') ? ' on this model' : '';
  return new RouterError(
    'RATE_LIMIT_EXCEEDED',
    `Rate limit reached for this API key${scope} on ${unit}: Limit ${Math.floor(state?.limit ?? 0)}, Remaining ${state?.remaining ?? 0}. Please try again in ${wait}.`,
    {
      retryAfterSeconds,
      type: refused.reason,
      headers,
    },
  );
}

/** Local limits while Redis is down: each router takes its share of what the key may spend. */
function scaled(checks: Checks, routers: number, budgetUsed: (period: string) => number): Checks {
  if (routers <= 1 && checks.budgets.every((b) => budgetUsed(b.period) === 0)) return checks;
  return {
    key: checks.key,
    rates: checks.rates.map((r) => ({ ...r, perMinute: r.perMinute / routers })),
    concurrency: checks.concurrency.map((c) => ({ ...c, limit: Math.max(1, Math.floor(c.limit / routers)) })),
    budgets: checks.budgets.map((b) => ({ ...b, limit: Math.max(0, b.limit - budgetUsed(b.period)) / routers })),
  };
}

/** One admitted request's hold on its key's limits. */
export class Lease {
  /** Content events streamed and not yet sent to the store. */
  unsent = 0;
  /** Tokens the store has been charged for this request so far (estimate + streamed). */
  charged: number;
  private done = false;
  /** Its concurrency slot went back already (`answered`). */
  slotFreed = false;
  /** Its concurrency slots are held in Redis (admitted there, or during an outage and taken there since). */
  sharedSlot = false;

  constructor(
    private readonly limiter: Limiter,
    readonly store: LimitStore,
    readonly checks: Checks,
    readonly id: string,
    readonly estimate: number,
    /** The caller's own estimate, before the learned overhead; and the kind that learns from this request. */
    readonly learn: { estimate: number; kind: string } | undefined,
    /** OpenAI's rate-limit headers for the response. */
    readonly headers: Readonly<Record<string, string>>,
    readonly startedAt: number,
  ) {
    this.charged = estimate;
  }

  /** One content event went to the client. */
  streamed(): void {
    if (!this.done) this.unsent += 1;
  }

  /**
   * The whole answer came and is about to reach the client: its concurrency slot is freed now, so
   * that a client sending its next request the moment it has this answer, to any router, finds it free.
   */
  answered(): void {
    if (!this.done && !this.slotFreed) this.limiter.freeSlot(this);
  }

  /** The response ended; `usage` is what it used (undefined when the engine produced nothing). */
  finish(usage: TokenUsage | undefined): void {
    if (this.done) return;
    this.done = true;
    this.limiter.finished(this, usage);
  }
}

/** What a release needs of a lease: where it was taken, the key's concurrency limits, its id. */
type Releasable = Pick<Lease, 'store' | 'id'> & { checks: Pick<Checks, 'key' | 'concurrency'> };

export class Limiter {
  private readonly limits = new WeakMap<LimitedKey, KeyLimits | null>();
  private readonly local: LocalLimitStore;
  /** Counts while Redis is down (a fresh one each outage). */
  private fallback: LocalLimitStore | undefined;
  private sharedUp = true;
  private retrySharedAt = 0;
  private routers: number;
  private readonly router = randomUUID();
  private sequence = 0;
  /** Leases of requests not yet finished (their streamed tokens are flushed; their concurrency slots renewed). */
  private readonly active = new Set<Lease>();
  /** Tokens waiting for the next flush, per store and key and checks. */
  private readonly pending = new Map<string, { store: LimitStore; settlement: Settlement }>();
  /** Budget use Redis last reported, per key and period: the base of the local budgets while it is down (at most MAX_LEVELS_SEEN, least recently seen first out). */
  private readonly budgetSeen = new Map<string, number>();
  /** Bucket levels Redis last reported, per key and rate (with when, on the clock): where the local buckets start while it is down. */
  private readonly levelSeen = new Map<string, Bucket>();
  private timers: unknown[] = [];
  /** Shared leases whose release Redis did not take (down, or slow), with when they would expire there anyway: sent again with each flush. */
  private unreleased = new Map<Releasable, number>();
  private flushing = false;
  /** What this router knows of keys' shared counts, to admit requests far from every limit without waiting for Redis. */
  private readonly view = new SharedView();
  /** Redis's timeouts in a row (see TIMEOUTS_BEFORE_DOWN). */
  private timeouts = 0;
  /** Per key and kind of request: how many prompt tokens the engines report beyond the caller's estimate, lately. */
  private readonly overhead = new Map<string, number>();
  /** Redis's epoch as last read (see {@link Heartbeat}); undefined before the first read. */
  private epoch: string | undefined;
  /** Redis lost its data and this router has not yet put back the budgets it saw. */
  private lostPending = false;
  /**
   * This router's leases in flight are to be taken again in Redis at the next heartbeat, where Redis
   * does not hold them: Redis lost its data, or answers again after an outage (one longer than a
   * lease's life let them expire there, while their requests still held the engine).
   */
  private retakePending = false;
  /** What this router counted while Redis did not (with Redis configured): added there once it answers. */
  private readonly carried: OutageCarry | undefined;
  /** Redis was down since the last carry it took: the next one is reported (a lone late answer's is not, it is routine). */
  private downSinceCarry = false;

  constructor(private readonly options: LimiterOptions) {
    this.local = new LocalLimitStore(() => options.clock.now());
    if (options.shared) this.carried = new OutageCarry(() => options.clock.now(), options.wallNow, MAX_PENDING);
    this.routers = Math.max(1, options.shared?.expectedRouters ?? 1);
    if (options.shared?.answering === false) {
      this.sharedUp = false;
      this.downSinceCarry = true;
      this.fallback = new LocalLimitStore(() => options.clock.now());
    }
  }

  /** Whether counts are shared right now (false without Redis, or while it is down). */
  get shared(): boolean {
    return this.options.shared !== undefined && this.sharedUp;
  }

  start(): void {
    const { scheduler, shared } = this.options;
    if (!this.sharedUp) this.options.events?.onShared?.(false);
    const flushEvery = shared?.flushIntervalMs ?? LOCAL_FLUSH_MS;
    const loop = (ms: number, run: () => Promise<void>): void => {
      const tick = (): void => {
        void run().finally(() => {
          if (this.timers.length > 0) this.timers[index] = scheduler.setTimeout(tick, ms);
        });
      };
      const index = this.timers.length;
      this.timers.push(scheduler.setTimeout(tick, ms));
    };
    loop(flushEvery, () => this.flush());
    if (shared) {
      loop(HEARTBEAT_MS, () => this.beat());
      void this.beat();
    }
  }

  /** Stops the timers and sends what is pending. */
  async stop(): Promise<void> {
    const timers = this.timers;
    this.timers = [];
    for (const timer of timers) this.options.scheduler.clearTimeout(timer);
    await this.flush();
  }

  /** The key's limits in force, or undefined when it has none. */
  limitsOf(key: LimitedKey): KeyLimits | undefined {
    let limits = this.limits.get(key);
    if (limits === undefined) {
      limits = keyLimits(key.limits, this.options.defaults) ?? null;
      this.limits.set(key, limits);
    }
    return limits ?? undefined;
  }

  /** A request of a key without limits ended: the opt-in per-key metrics count it (no limit is checked or moved). */
  unlimited(key: { name: string }, usage: TokenUsage | undefined, estimate: number): void {
    const { events } = this.options;
    events?.onAdmitted?.(key.name);
    // the engine's counts, or (a stream that ended without usage) the prompt's estimate, as a limited key's
    if (usage) events?.onTokens?.(key.name, usage.estimated ? estimate : usage.promptTokens, usage.completionTokens);
  }

  /**
   * Takes a request of `key` on `deployment` with `estimate` prompt tokens (plus the overhead learned
   * from the key's requests of `kind`, when given; `held`: the names the deployment holds, see
   * {@link scopeOf}). Resolves with its lease (undefined for a key
   * without limits); rejects with a 429 RouterError when a limit refuses it.
   */
  async admit(key: LimitedKey, named: string | DeploymentNames, given: number, kind?: string, held?: readonly string[]): Promise<Lease | undefined> {
    const limits = this.limitsOf(key);
    if (!limits) return undefined;
    const deployment = scopeOf(limits, named, held);
    const learns = kind === undefined ? undefined : `${key.name}\0${kind}`;
    const estimate = learns === undefined ? given : Math.max(0, Math.round(given + (this.overhead.get(learns) ?? 0)));
    const { clock, events } = this.options;
    const checks = checksFor(key.name, limits, deployment, this.options.wallNow());
    const request: AdmitRequest = { ...checks, tokens: estimate, lease: `${this.router}:${++this.sequence}`, leaseMs: LEASE_MS };
    let store: LimitStore = this.storeNow();
    let verdict: Verdict;
    const shared = this.options.shared?.store;
    if (store === shared && shared) {
      const onView = this.sharedUp && !this.options.shared?.strict ? this.view.tryTake(request, request.tokens, clock.now()) : undefined;
      this.view.sent(key.name, request.tokens);
      const started = clock.now();
      try {
        if (onView) {
          // far from every limit: let it through now, and count it in Redis in the background
          verdict = onView;
          void shared.admit({ ...request, force: true }).then(
            (answer) => this.sharedAdmitted(request, answer, true, started),
            (err: unknown) => {
              this.view.failed(key.name);
              this.sharedFailed('admit', err as Error);
              // Redis may never have counted it: it is added there once Redis answers, like a request admitted while it is down
              this.carried?.add(request.key, request.rates, request.budgets, 1, request.tokens);
            },
          );
        } else {
          verdict = await store.admit(request);
          this.sharedAdmitted(request, verdict, verdict.ok, started);
        }
      } catch (err) {
        this.view.failed(key.name);
        this.sharedFailed('admit', err as Error);
        const local = this.localNow();
        verdict = await local.admit(this.localChecks(request));
        // after one slow answer Redis may have taken the request all the same: what it uses is settled there
        if (!this.sharedUp) {
          store = local;
          // Counted here now, but the admission Redis did not answer in time was sent and may still take
          // the request's concurrency slots there, where nothing would give them back for LEASE_MS: a key
          // of 2 slots was refused for a minute after Redis came back. They are released there (taken or
          // not), and again with each flush until Redis takes the release.
          if (request.concurrency.length > 0) this.release({ store: shared, checks: request, id: request.lease });
        }
      }
    } else {
      verdict = await store.admit(store === this.local ? request : this.localChecks(request));
    }
    if (events?.onBudget) {
      for (const b of verdict.budgets) events.onBudget(key.name, { window: b.window, period: b.period, limit: b.limit, remaining: Math.max(0, b.limit - b.used), endsInMs: b.endsInMs });
    }
    if (!verdict.ok) {
      events?.onRejected?.(key.name, verdict.refused?.reason ?? 'requests');
      throw refusal(verdict, limits);
    }
    // admitted on the outage's local counts: Redis gets it once it answers
    if (shared && store !== shared) this.carried?.add(request.key, request.rates, request.budgets, 1, request.tokens);
    events?.onAdmitted?.(key.name);
    const learn = learns === undefined ? undefined : { estimate: given, kind: learns };
    const lease = new Lease(this, store, request, request.lease, estimate, learn, rateLimitHeaders(verdict), clock.now());
    this.active.add(lease);
    return lease;
  }

  /** Redis answered an admission (`taken`: it took the request). */
  private sharedAdmitted(request: AdmitRequest, verdict: Verdict, taken: boolean, started: number): void {
    const now = this.options.clock.now();
    this.options.events?.onRoundTrip?.((now - started) / 1000);
    this.sharedAnswered();
    this.view.answered(request, verdict, now, this.routers);
    for (const budget of verdict.budgets) {
      const id = `${request.key}\0${budget.period}`;
      this.budgetSeen.delete(id); // re-inserted last: the least recently seen (a past day's, a quiet key's) go first
      this.budgetSeen.set(id, budget.used - (taken ? request.tokens : 0));
    }
    for (const id of this.budgetSeen.keys()) {
      if (this.budgetSeen.size <= MAX_LEVELS_SEEN) break;
      this.budgetSeen.delete(id);
    }
    this.sawLevels(request.key, verdict, now);
  }

  /** The key's limits and what is left of them, taking nothing (GET /v1/limits). */
  async peek(key: LimitedKey): Promise<{ limits: KeyLimits; verdict: Verdict } | undefined> {
    const limits = this.limitsOf(key);
    if (!limits) return undefined;
    const checks = checksFor(key.name, limits, undefined, this.options.wallNow());
    const store = this.storeNow();
    if (store !== this.options.shared?.store) return { limits, verdict: await store.peek(store === this.local ? checks : this.localChecksOf(checks)) };
    try {
      const verdict = await store.peek(checks);
      this.sharedAnswered();
      return { limits, verdict };
    } catch (err) {
      this.sharedFailed('admit', err as Error);
      return { limits, verdict: await this.localNow().peek(this.localChecksOf(checks)) };
    }
  }

  /**
   * A finished shared lease's slot goes back to Redis at once, in a write of its own (the store's
   * client leaves releases out of its auto-pipelining): a client that sends its next request as soon
   * as it has this answer, through another router, must find the slot free. A release Redis does not take is kept and
   * sent again with every flush until it is taken or the lease would have expired there by itself:
   * dropped, it held the key's slot for up to LEASE_MS after a blip of the connection.
   */
  private release(lease: Releasable, expiresAt = this.options.clock.now() + LEASE_MS): void {
    this.unreleased.delete(lease);
    lease.store.release(lease.checks.key, lease.checks.concurrency, lease.id).catch(() => {
      this.options.events?.onSharedError?.('release');
      if (this.options.clock.now() < expiresAt && this.unreleased.size < MAX_PENDING) this.unreleased.set(lease, expiresAt);
    });
  }

  /** Sends the releases Redis did not take again (from the flush). */
  private releaseAgain(): void {
    const now = this.options.clock.now();
    for (const [lease, expiresAt] of this.unreleased) {
      if (now >= expiresAt) this.unreleased.delete(lease);
      else this.release(lease, expiresAt);
    }
  }

  /** Gives a lease's concurrency slots back (Lease.answered, or Lease.finish when that did not). */
  freeSlot(lease: Lease): void {
    lease.slotFreed = true;
    if (lease.checks.concurrency.length === 0) return;
    const shared = this.options.shared?.store;
    if (lease.store === shared) {
      this.view.released(lease.checks.key, lease.checks.concurrency);
      this.release(lease);
    } else {
      void lease.store.release(lease.checks.key, lease.checks.concurrency, lease.id);
      // admitted during an outage, and taken in Redis since it answered again
      if (shared && lease.sharedSlot) this.release({ store: shared, checks: lease.checks, id: lease.id });
    }
  }

  /** Called by Lease.finish. */
  finished(lease: Lease, usage: TokenUsage | undefined): void {
    this.active.delete(lease);
    if (usage && !usage.estimated && lease.learn) this.learn(lease.learn.kind, usage.promptTokens - lease.learn.estimate);
    const used = usage ? Math.round((usage.estimated ? lease.estimate : usage.promptTokens) + usage.completionTokens) : 0;
    if (usage) this.options.events?.onTokens?.(lease.checks.key, usage.estimated ? lease.estimate : usage.promptTokens, usage.completionTokens);
    const local = lease.store !== this.options.shared?.store;
    // A count only this router keeps is settled at once: batched, a key's next request (sent as soon
    // as this one's answer came) was admitted on counts up to a flush interval old, past its budget.
    if (local) this.settleNow(lease.store, lease, used - lease.charged);
    else this.queue(lease.store, lease, used - lease.charged);
    // the budget left as of this request's end, not its admission (which counted its estimate alone):
    // the gauge lagged by its completion tokens
    if (used !== lease.estimate) for (const budget of lease.checks.budgets) this.options.events?.onBudgetSpent?.(lease.checks.key, budget, used - lease.estimate);
    lease.charged = used;
    lease.unsent = 0;
    if (!lease.slotFreed) this.freeSlot(lease);
  }

  private learn(kind: string, excess: number): void {
    const before = this.overhead.get(kind);
    // least recently taught first out: a key removed from the file, or one quiet for long, makes room
    if (before !== undefined) this.overhead.delete(kind);
    else if (this.overhead.size >= MAX_KINDS) this.overhead.delete(this.overhead.keys().next().value as string);
    this.overhead.set(kind, before === undefined ? excess : before + OVERHEAD_WEIGHT * (excess - before));
  }

  /** Settles `tokens` in a store that is this router's own (in memory: applied before this returns). */
  private settleNow(store: LimitStore, lease: Pick<Lease, 'checks'>, tokens: number): void {
    const settlement = settlementOf(lease.checks, tokens);
    if (!settlement) return;
    if (this.outageCounted(store, settlement)) return;
    store.settle([settlement]).catch(() => undefined); // in memory: it does not fail
  }

  /**
   * With Redis configured, what a settlement of a request counted outside Redis becomes: while Redis
   * does not answer it is carried there once it does (`true`: Redis's own lease, nothing more to do;
   * a request admitted on the outage's local counts is also settled there); once Redis answers, a
   * request admitted during the outage is settled in Redis like any other.
   */
  private outageCounted(store: LimitStore, settlement: Settlement): boolean {
    const shared = this.options.shared?.store;
    if (!shared || store === this.local) return false;
    if (!this.sharedUp) {
      this.carried?.add(settlement.key, settlement.rates, settlement.budgets, 0, settlement.tokens);
      return store === shared;
    }
    if (store === shared) return false;
    this.queue(shared, { checks: settlement }, settlement.tokens);
    return true;
  }

  private queue(store: LimitStore, lease: { checks: Pick<Checks, 'key' | 'rates' | 'budgets'> }, tokens: number): void {
    const { checks } = lease;
    const settlement = settlementOf(checks, tokens);
    if (!settlement) return;
    if (store !== this.options.shared?.store || !this.sharedUp) {
      if (this.outageCounted(store, settlement)) return;
    }
    const id = `${store === this.local ? 'l' : store === this.fallback ? 'f' : store === this.options.shared?.store ? 's' : 'o'}\0${checks.key}\0${checks.rates.map((r) => `${r.id}=${r.perMinute}`).join(',')}\0${checks.budgets.map((b) => `${b.period}=${b.limit}`).join(',')}`;
    const entry = this.pending.get(id);
    if (entry) entry.settlement.tokens += tokens;
    else if (this.pending.size < MAX_PENDING) this.pending.set(id, { store, settlement });
  }

  /** Sends the tokens streamed since the last flush and those of finished requests. */
  async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      if (this.unreleased.size > 0 && this.sharedUp) this.releaseAgain();
      for (const lease of this.active) {
        if (lease.unsent === 0) continue;
        this.queue(lease.store, lease, lease.unsent);
        lease.charged += lease.unsent;
        lease.unsent = 0;
      }
      const shared = this.options.shared?.store;
      if (shared && !this.sharedUp) this.carryPending(shared);
      const byStore = new Map<LimitStore, Settlement[]>();
      for (const { store, settlement } of this.pending.values()) {
        const list = byStore.get(store) ?? [];
        list.push(settlement);
        byStore.set(store, list);
      }
      const sharedItems = shared ? byStore.get(shared) : undefined;
      for (const [id, { store }] of this.pending) if (store !== shared || this.sharedUp) this.pending.delete(id);
      for (const [store, settlements] of byStore) {
        if (store !== shared) await store.settle(settlements);
      }
      if (shared && sharedItems && this.sharedUp) {
        try {
          await shared.settle(sharedItems);
        } catch (err) {
          this.sharedFailed('settle', err as Error);
          for (const item of sharedItems) this.queue(shared, { checks: { key: item.key, rates: [], budgets: item.budgets } }, item.tokens);
        }
      }
      if (shared && this.sharedUp) {
        if (this.carried?.pending) await this.sendCarried(shared, this.carried);
        else this.downSinceCarry = false; // nothing of the outage left to carry (its minutes refilled): the next carry is routine
      }
    } finally {
      this.flushing = false;
    }
  }

  /** While Redis is down, the settlements that were waiting for it are carried there once it answers (outage-carry.ts). */
  private carryPending(shared: LimitStore): void {
    for (const [id, { store, settlement }] of this.pending) {
      if (store !== shared) continue;
      this.pending.delete(id);
      this.carried?.add(settlement.key, settlement.rates, settlement.budgets, 0, settlement.tokens);
    }
  }

  /**
   * Adds to Redis what this router counted while it did not answer: one pipeline, a script call per
   * key. A batch Redis did not take is sent again, unchanged in number, with the next flush; Redis
   * applies each once (outage-carry.ts).
   */
  private async sendCarried(shared: SharedLimitStore, carried: OutageCarry): Promise<void> {
    if (!shared.carry) return;
    const { day, month } = periods(this.options.wallNow());
    const batches = carried.batchesNow((period) => period === day.period || period === month.period);
    if (batches.length === 0) {
      this.downSinceCarry = false;
      return;
    }
    try {
      await shared.carry(this.router, batches);
      carried.taken(batches);
      if (this.downSinceCarry) this.options.events?.onCarried?.(batches.length);
      this.downSinceCarry = false;
    } catch (err) {
      this.sharedFailed('settle', err as Error);
    }
  }

  /** The routers' heartbeat: how many routers share the key's limits (and whether Redis answers). */
  private async beat(): Promise<void> {
    const shared = this.options.shared;
    if (!shared) return;
    try {
      const beat = await shared.store.heartbeat(this.router, HEARTBEAT_TTL_MS, randomUUID());
      this.routers = Math.max(1, beat.routers);
      this.options.events?.onRouters?.(this.routers);
      this.sharedAnswered();
      if (beat.epoch !== undefined) this.sawEpoch(beat.epoch);
      const retake = this.retakePending;
      const lost = this.lostPending;
      // a freed slot's lease (its answer is whole, its last bytes still going out) is not to be taken again;
      // one admitted on the outage's local counts is taken in Redis too once it answers, and held there from then on
      const leases = [...this.active].filter((l) => (l.store === shared.store || l.sharedSlot || (retake && l.store !== this.local)) && l.checks.concurrency.length > 0 && !l.slotFreed);
      for (const l of leases) l.sharedSlot = true;
      if (leases.length > 0)
        await shared.store.renew(
          leases.map((l) => ({ key: l.checks.key, concurrency: l.checks.concurrency, lease: l.id })),
          LEASE_MS,
          retake,
        );
      this.retakePending = false;
      if (lost) {
        await this.restoreBudgets(shared.store);
        this.lostPending = false;
        // reported once what could be put back is: the log line and the metric say it is done
        this.options.events?.onSharedLost?.();
      }
    } catch (err) {
      this.sharedFailed('heartbeat', err as Error);
    }
  }

  /**
   * Whether Redis lost its data since the last heartbeat (restarted without persistence, a failover to
   * an empty replica, FLUSHALL, eviction): its epoch key changed. Its counts are gone: every key's
   * budgets would be fresh and the requests in flight would hold no concurrency slot there, so the
   * router puts back its own leases and raises each budget it saw this period to what it saw.
   */
  private sawEpoch(held: string): void {
    if (this.epoch !== undefined && held !== this.epoch) this.lostPending = this.retakePending = true;
    this.epoch = held;
  }

  /** Raises Redis's budget counters of the current periods to what this router last saw of them (the largest any router saw wins). */
  private async restoreBudgets(store: SharedLimitStore): Promise<void> {
    if (!store.restore) return;
    const { day, month } = periods(this.options.wallNow());
    let batch: Array<{ key: string; period: string; used: number; endsInMs: number }> = [];
    // a copy: admissions answered while a batch is on its way re-insert their entries, which a live
    // iteration would visit again, without end on a busy router
    for (const [id, used] of [...this.budgetSeen]) {
      const at = id.lastIndexOf('\0');
      const period = id.slice(at + 1);
      const endsInMs = period === day.period ? day.endsInMs : period === month.period ? month.endsInMs : undefined;
      if (endsInMs === undefined || used <= 0) continue;
      batch.push({ key: id.slice(0, at), period, used, endsInMs });
      if (batch.length >= RESTORE_BATCH) {
        await store.restore(batch);
        batch = [];
      }
    }
    if (batch.length > 0) await store.restore(batch);
  }

  /** The store this request goes to: Redis when configured and answering (or due a retry), else local counts. */
  private storeNow(): LimitStore {
    const shared = this.options.shared;
    if (!shared) return this.local;
    if (this.sharedUp) return shared.store;
    if (this.options.clock.now() >= this.retrySharedAt) {
      // one request a second tries Redis again; the rest count locally meanwhile
      this.retrySharedAt = this.options.clock.now() + RETRY_SHARED_MS;
      return shared.store;
    }
    this.fallback ??= this.fallbackStore();
    return this.fallback;
  }

  /** Where a request goes when Redis failed it: the outage's local counts, or (Redis still up after one slow answer) counts for that request alone. */
  private localNow(): LocalLimitStore {
    return this.sharedUp ? this.fallbackStore() : (this.fallback ??= this.fallbackStore());
  }

  /** Local counts for an outage: each bucket starts at this router's share of the level Redis last reported. */
  private fallbackStore(): LocalLimitStore {
    return new LocalLimitStore(
      () => this.options.clock.now(),
      (key, rateId) => {
        const seen = this.levelSeen.get(`${key}\0${rateId}`);
        return seen && { level: seen.level / this.routers, at: seen.at };
      },
    );
  }

  private sawLevels(key: string, verdict: Verdict, now: number): void {
    for (const rate of verdict.rates) {
      const id = `${key}\0${rate.id}`;
      this.levelSeen.delete(id); // re-inserted last: the map's order is least recently seen first
      this.levelSeen.set(id, { level: rate.remaining, at: now });
    }
    for (const id of this.levelSeen.keys()) {
      if (this.levelSeen.size <= MAX_LEVELS_SEEN) break;
      this.levelSeen.delete(id);
    }
  }

  private localChecks(request: AdmitRequest): AdmitRequest {
    return { ...request, ...this.localChecksOf(request) };
  }

  private localChecksOf(checks: Checks): Checks {
    return scaled(checks, this.routers, (period) => this.budgetSeen.get(`${checks.key}\0${period}`) ?? 0);
  }

  private sharedAnswered(): void {
    this.timeouts = 0;
    if (this.sharedUp) return;
    this.sharedUp = true;
    this.retakePending = true;
    this.fallback = undefined;
    this.options.events?.onShared?.(true);
  }

  private sharedFailed(op: RedisOp, error: Error): void {
    this.options.events?.onSharedError?.(op);
    if (this.sharedUp && error instanceof StoreTimeout && ++this.timeouts < TIMEOUTS_BEFORE_DOWN) return;
    this.timeouts = 0;
    this.retrySharedAt = this.options.clock.now() + RETRY_SHARED_MS;
    if (!this.sharedUp) return;
    this.sharedUp = false;
    this.downSinceCarry = true;
    this.view.clear();
    this.fallback = this.fallbackStore();
    this.options.events?.onShared?.(false, error);
  }
}
