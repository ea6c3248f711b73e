/**
 * Admission control per pool. With `maxConcurrencyPerReplica` set, a request that finds every replica
 * at its limit waits in a bounded FIFO queue until a slot frees, at most `queue.timeoutMs`; a full
 * queue or a wait that runs out is answered 429 with Retry-After. A client that leaves while queued is
 * taken out of the queue at once.
 *
 * Priorities: a `sheddable` request never waits — with no free slot it is answered 429 at once; a
 * `critical` one waits ahead of every `standard` one, and when the queue is full it takes the place
 * of the most recent `standard` waiter (which gets the 429 instead).
 */
import { type Scheduler } from '../core/clock.js';
import { BUSY_RETRY_AFTER_SECONDS, RouterError } from '../core/errors.js';
import { type Priority } from '../core/types.js';

interface Waiter<T> {
  tryTake: () => T | undefined;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
  timer: unknown;
  signal: AbortSignal | undefined;
  onAbort: () => void;
  enqueuedAt: number;
  critical: boolean;
}

export interface AdmissionEvents {
  onQueued?: (pool: string) => void;
  /** Wait in ms, and how it ended. */
  onDequeued?: (pool: string, waitedMs: number, result: 'admitted' | 'timeout' | 'abandoned' | 'displaced') => void;
  onRejected?: (pool: string, reason: 'queue_full' | 'queue_timeout' | 'shed') => void;
}

/** The 429 of a sheddable request that found the pool saturated. */
export function shedError(): RouterError {
  return new RouterError('REQUEST_SHED', 'Every replica of this model is saturated and this request is sheddable; retry later.', { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS });
}

function queueFullError(maxSize: number): RouterError {
  return new RouterError('QUEUE_FULL', `Every replica of this model is busy and ${maxSize} requests are already waiting; retry shortly.`, { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS });
}

function abortError(): Error {
  const err = new Error('The client went away while queued');
  err.name = 'AbortError';
  return err;
}

export class AdmissionQueues {
  private readonly queues = new Map<string, Array<Waiter<unknown>>>();

  constructor(
    private readonly scheduler: Scheduler,
    private readonly now: () => number,
    private readonly events: AdmissionEvents = {},
  ) {}

  depth(pool: string): number {
    return this.queues.get(pool)?.length ?? 0;
  }

  *depths(): IterableIterator<{ pool: string; depth: number }> {
    for (const [pool, waiters] of this.queues) yield { pool, depth: waiters.length };
  }

  /**
   * Runs `tryTake` now, or when a slot frees (see {@link notify}), until it returns a value. Rejects
   * with a 429 RouterError when the queue is full or the wait runs out, or an AbortError when `signal` aborts.
   */
  admit<T>(pool: string, tryTake: () => T | undefined, limits: { maxSize: number; timeoutMs: number }, signal?: AbortSignal, priority: Priority = 'standard'): Promise<T> {
    const first = tryTake();
    if (first !== undefined) return Promise.resolve(first);
    if (signal?.aborted) return Promise.reject(abortError());
    if (priority === 'sheddable') {
      this.events.onRejected?.(pool, 'shed');
      return Promise.reject(shedError());
    }
    const queue = this.queues.get(pool) ?? [];
    const critical = priority === 'critical';
    if (queue.length >= limits.maxSize) {
      const displaced = critical ? queue.findLast((w) => !w.critical) : undefined;
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
        timer: this.scheduler.setTimeout(() => {
          this.remove(pool, waiter as Waiter<unknown>, 'timeout');
          this.events.onRejected?.(pool, 'queue_timeout');
          reject(new RouterError('QUEUE_TIMEOUT', `No replica of this model became free within ${limits.timeoutMs} ms; retry shortly.`, { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS }));
        }, limits.timeoutMs),
        onAbort: () => {
          this.remove(pool, waiter as Waiter<unknown>, 'abandoned');
          reject(abortError());
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      // critical waiters line up behind earlier critical ones, ahead of every standard one
      const at = critical ? queue.findIndex((w) => !w.critical) : -1;
      if (at < 0) queue.push(waiter as Waiter<unknown>);
      else queue.splice(at, 0, waiter as Waiter<unknown>);
      this.events.onQueued?.(pool);
    });
  }

  /** A slot may have freed in `pool`: admit waiters in order for as long as they can take one. */
  notify(pool: string): void {
    const queue = this.queues.get(pool);
    while (queue && queue.length > 0) {
      const waiter = queue[0] as Waiter<unknown>;
      const value = waiter.tryTake();
      if (value === undefined) return;
      this.remove(pool, waiter, 'admitted');
      waiter.resolve(value);
    }
  }

  private remove(pool: string, waiter: Waiter<unknown>, result: 'admitted' | 'timeout' | 'abandoned' | 'displaced'): void {
    const queue = this.queues.get(pool);
    const at = queue?.indexOf(waiter) ?? -1;
    if (!queue || at < 0) return;
    queue.splice(at, 1);
    if (queue.length === 0) this.queues.delete(pool);
    this.scheduler.clearTimeout(waiter.timer);
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    this.events.onDequeued?.(pool, this.now() - waiter.enqueuedAt, result);
  }
}
