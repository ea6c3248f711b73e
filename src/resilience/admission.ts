/**
 * Admission control per pool. With `maxConcurrencyPerReplica` set, a request that finds every replica
 * at its limit waits in a bounded queue until a slot frees, at most `queue.timeoutMs`; a full queue or
 * a wait that runs out is answered 429 with Retry-After. A client that leaves while queued is taken out
 * of the queue at once.
 *
 * Priorities: a `sheddable` request never waits — with no free slot it is answered 429 at once; every
 * `critical` waiter goes ahead of every `standard` one.
 *
 * A waiter that may take a slot on only some of the pool's replicas (`narrow`: a Responses API follow-up
 * pinned to the replica holding its response, a retry that has tried some) and cannot take one when a
 * slot frees keeps its place and is passed over: the waiters behind it are tried for the slot (up to
 * {@link MAX_PASSED_OVER} passed a release). Any other waiter that cannot take one means no replica has
 * a free slot, and `notify` stops there.
 *
 * Fair sharing: inside each priority class, tenants (API keys) take turns by weighted start-time fair
 * queueing (fair-queue.ts): a tenant's burst is spread out in virtual time, so another tenant's request
 * waits for about one admission per busier tenant, not for the whole burst; a tenant of weight w is
 * admitted w times as often as one of weight 1 while both have requests waiting. Requests without a
 * tenant share one anonymous tenant (all of them alone: plain FIFO). Each pool and class has its own
 * virtual time; `notify` admits the critical class by start tag, then the standard one, and stops at the
 * first waiter that cannot take a slot (a `narrow` one aside, above).
 *
 * A full queue (`maxSize` waiters over both classes) makes room for a newcomer by turning one waiter
 * away with the 429 instead (event `displaced`, then `queue_full`), so neither a lower class nor a
 * flooding key can lock others out:
 * 1. a `critical` newcomer displaces the latest `standard` waiter of the tenant with the most standard
 *    waiters (with one tenant: the most recent standard waiter);
 * 2. otherwise a newcomer whose tenant has fewer waiters in its class than the heaviest tenant of that
 *    class displaces that tenant's latest waiter;
 * 3. otherwise the newcomer gets the 429 (so the heaviest tenant's own newcomers do).
 */
import { type Scheduler } from '../core/clock.js';
import { BUSY_RETRY_AFTER_SECONDS, RouterError } from '../core/errors.js';
import { type Priority } from '../core/types.js';
import { FairQueue, type FairEntry } from './fair-queue.js';

interface Waiter<T> {
  tryTake: () => T | undefined;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
  timer: unknown;
  signal: AbortSignal | undefined;
  onAbort: () => void;
  enqueuedAt: number;
  critical: boolean;
  /** See {@link AdmitOptions.narrow}. */
  narrow: boolean;
  /** Its place in its class's fair queue (set once queued). */
  entry?: FairEntry<Waiter<unknown>>;
}

/** One pool's waiters: the critical class is served before the standard one. */
interface PoolQueue {
  critical: FairQueue<Waiter<unknown>>;
  standard: FairQueue<Waiter<unknown>>;
}

type DequeueResult = 'admitted' | 'timeout' | 'abandoned' | 'displaced' | 'pool_removed' | 'no_replica' | 'shutdown';

export interface AdmissionEvents {
  onQueued?: (pool: string) => void;
  /** Wait in ms, and how it ended. */
  onDequeued?: (pool: string, waitedMs: number, result: DequeueResult) => void;
  onRejected?: (pool: string, reason: RejectReason) => void;
}

/**
 * Why admission turned a request away (`no_replica_timeout`: a request held for a pool at zero waited
 * its whole `scaleFromZero.maxWaitMs`; `pool_removed`: the pool it waited for is gone; `no_replica`:
 * its last ready replica left discovery; `shutdown`: the
 * router's grace period ended while it waited, or it came after).
 */
export type RejectReason = 'queue_full' | 'queue_timeout' | 'shed' | 'no_replica_timeout' | 'pool_removed' | 'no_replica' | 'shutdown';

/** Who is asking, for the order among waiters. */
export interface AdmitOptions {
  /** Aborts when the client leaves: a queued request is taken out at once. */
  signal?: AbortSignal;
  /** Default `standard`. */
  priority?: Priority;
  /** The API key's name; requests without one share one anonymous tenant. */
  tenant?: string;
  /** The tenant's fair share relative to weight 1; must be > 0. Default 1. */
  weight?: number;
  /**
   * The request waits for a replica to turn ready, not for a free slot (a pool scaling from zero):
   * running out of time is answered with `expired()` and counted as `no_replica_timeout`.
   */
  held?: { expired: () => RouterError };
  /**
   * The request may take a slot on only some of the pool's replicas (pinned to one, or some already
   * tried): while it cannot take one, the waiters behind it are tried for a freed slot.
   */
  narrow?: boolean;
}

/** The tenant of requests that name none. Not a valid key name (those come from the keys file), so no key shares it by accident. */
const ANONYMOUS = '\0anonymous';

/**
 * Narrow waiters a freed slot passes over at most before it stops: each is asked with a pick of its
 * own (a retry's over the whole pool, 30 µs at 1,000 endpoints), and a full queue of them (256 by
 * default) asked at every release cost 256 picks a release. Beyond this many, the waiters behind wait
 * for the next release, as every waiter did behind the first that could not take a slot before.
 */
export const MAX_PASSED_OVER = 8;

/** The 429 of a sheddable request that found the pool saturated. */
export function shedError(): RouterError {
  return new RouterError('REQUEST_SHED', 'Every replica of this model is saturated and this request is sheddable; retry later.', { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS });
}

function queueFullError(maxSize: number): RouterError {
  return new RouterError('QUEUE_FULL', `Every replica of this model is busy and ${maxSize} requests are already waiting; retry shortly.`, { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS });
}

/**
 * The answer of a request still waiting for a replica when the router's grace period ends on SIGTERM:
 * a 503 another router (or this one's replacement) can take on retry, instead of a connection cut
 * without an answer.
 */
export function shuttingDownError(): RouterError {
  return new RouterError('ROUTER_SHUTTING_DOWN', 'This router is shutting down and the request was still waiting for a replica; retry (another router will take it).', {
    retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS,
  });
}

function abortError(): Error {
  const err = new Error('The client went away while queued');
  err.name = 'AbortError';
  return err;
}

/** The waiter that makes room for a newcomer of `tenant` in a full queue, if any (rules in the module comment). */
function displaceable(queue: PoolQueue, critical: boolean, tenant: string): Waiter<unknown> | undefined {
  if (critical) {
    const standard = queue.standard.heaviest();
    if (standard) return standard.entry.value;
  }
  const own = critical ? queue.critical : queue.standard;
  const heaviest = own.heaviest();
  return heaviest && own.count(tenant) < heaviest.count ? heaviest.entry.value : undefined;
}

export class AdmissionQueues {
  private readonly queues = new Map<string, PoolQueue>();
  /** Set by {@link closeAll}: every request from then on is refused with it. */
  private closedWith: (() => Error) | undefined;

  constructor(
    private readonly scheduler: Scheduler,
    private readonly now: () => number,
    private readonly events: AdmissionEvents = {},
  ) {}

  depth(pool: string): number {
    const queue = this.queues.get(pool);
    return queue ? queue.critical.size + queue.standard.size : 0;
  }

  *depths(): IterableIterator<{ pool: string; depth: number }> {
    for (const [pool, queue] of this.queues) yield { pool, depth: queue.critical.size + queue.standard.size };
  }

  /**
   * Runs `tryTake` now, or when a slot frees (see {@link notify}), until it returns a value. Rejects
   * with a 429 RouterError when the queue is full or the wait runs out, an AbortError when `signal`
   * aborts, or a RangeError for a weight that is not a positive number.
   */
  admit<T>(pool: string, tryTake: () => T | undefined, limits: { maxSize: number; timeoutMs: number }, options: AdmitOptions = {}): Promise<T> {
    const { signal, priority = 'standard', tenant = ANONYMOUS, weight = 1, held, narrow = false } = options;
    if (!(weight > 0 && Number.isFinite(weight))) return Promise.reject(new RangeError(`A fair-share weight must be a positive number (got ${weight}).`));
    if (this.closedWith) {
      this.events.onRejected?.(pool, 'shutdown');
      return Promise.reject(this.closedWith());
    }
    const first = tryTake();
    if (first !== undefined) return Promise.resolve(first);
    if (signal?.aborted) return Promise.reject(abortError());
    if (priority === 'sheddable') {
      this.events.onRejected?.(pool, 'shed');
      return Promise.reject(shedError());
    }
    const queue = this.queues.get(pool) ?? { critical: new FairQueue(), standard: new FairQueue() };
    const critical = priority === 'critical';
    if (queue.critical.size + queue.standard.size >= limits.maxSize) {
      const displaced = displaceable(queue, critical, tenant);
      if (!displaced) {
        this.events.onRejected?.(pool, 'queue_full');
        return Promise.reject(queueFullError(limits.maxSize));
      }
      this.remove(pool, displaced, 'displaced');
      this.events.onRejected?.(pool, 'queue_full');
      displaced.reject(queueFullError(limits.maxSize));
    }
    this.queues.set(pool, queue);
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = {
        tryTake,
        resolve,
        reject,
        signal,
        enqueuedAt: this.now(),
        critical,
        narrow,
        timer: this.scheduler.setTimeout(() => {
          this.remove(pool, waiter as Waiter<unknown>, 'timeout');
          this.events.onRejected?.(pool, held ? 'no_replica_timeout' : 'queue_timeout');
          reject(
            held
              ? held.expired()
              : new RouterError('QUEUE_TIMEOUT', `No replica of this model became free within ${limits.timeoutMs} ms; retry shortly.`, { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS }),
          );
        }, limits.timeoutMs),
        onAbort: () => {
          this.remove(pool, waiter as Waiter<unknown>, 'abandoned');
          reject(abortError());
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      waiter.entry = (critical ? queue.critical : queue.standard).push(waiter as Waiter<unknown>, tenant, weight);
      this.events.onQueued?.(pool);
    });
  }

  /**
   * A slot may have freed in `pool`: admit waiters in order for as long as they can take one (a `narrow`
   * waiter that cannot is passed over, keeping its place; see the module comment).
   */
  notify(pool: string): void {
    let passed = 0;
    for (;;) {
      if (passed > MAX_PASSED_OVER) return; // each costs a pick (a retry's, over the pool): bounded a slot
      const queue = this.queues.get(pool);
      if (!queue) return;
      const inCritical = passed < queue.critical.size;
      const waiter = (inCritical ? queue.critical.at(passed) : queue.standard.at(passed - queue.critical.size))?.value;
      if (!waiter) return;
      const value = waiter.tryTake();
      if (value === undefined) {
        if (!waiter.narrow) return;
        passed += 1;
        continue;
      }
      this.remove(pool, waiter, 'admitted');
      waiter.resolve(value);
    }
  }

  /**
   * `pool` is gone (its ModelPool deleted, or its spec no longer one the router can use): every waiter,
   * queued or held, is turned away at once with `error()` (event `pool_removed`) rather than left to
   * wait out its timeout for a replica that will not come. Returns how many waited.
   */
  close(pool: string, error: () => Error, reason: 'pool_removed' | 'no_replica' | 'shutdown' = 'pool_removed'): number {
    const queue = this.queues.get(pool);
    let closed = 0;
    for (;;) {
      const waiter = (queue?.critical.head() ?? queue?.standard.head())?.value;
      if (!waiter) return closed;
      this.remove(pool, waiter, reason);
      this.events.onRejected?.(pool, reason);
      waiter.reject(error());
      closed += 1;
    }
  }

  /**
   * The router is shutting down and its grace period is over: every waiter of every pool, queued or
   * held, is answered `error()` at once (event `shutdown`), and so is every request that asks from now
   * on (one moving on to its fallback pool, or a retry), rather than having its connection cut with no
   * answer. Returns how many waited.
   */
  closeAll(error: () => Error): number {
    this.closedWith = error;
    let closed = 0;
    for (const pool of [...this.queues.keys()]) closed += this.close(pool, error, 'shutdown');
    return closed;
  }

  private remove(pool: string, waiter: Waiter<unknown>, result: DequeueResult): void {
    const queue = this.queues.get(pool);
    const { entry } = waiter;
    if (!queue || !entry) return;
    const removed = (waiter.critical ? queue.critical : queue.standard).remove(entry, result === 'admitted' ? 'served' : 'dropped');
    if (!removed) return;
    if (queue.critical.size + queue.standard.size === 0) this.queues.delete(pool);
    this.scheduler.clearTimeout(waiter.timer);
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    this.events.onDequeued?.(pool, this.now() - waiter.enqueuedAt, result);
  }
}
