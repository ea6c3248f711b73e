import { type Clock, type Scheduler, type Sleep } from '../../src/core/clock.js';

interface Timer {
  at: number;
  resolve: () => void;
}

/** Manual clock, sleep and timers: time moves only when a test calls {@link FakeTime.advance}. */
export class FakeTime implements Clock, Scheduler {
  private current = 0;
  private timers: Timer[] = [];

  now(): number {
    return this.current;
  }

  get pendingTimers(): number {
    return this.timers.length;
  }

  /** Milliseconds until the earliest pending timer is due; undefined when none is pending. */
  get nextDueIn(): number | undefined {
    if (this.timers.length === 0) return undefined;
    return Math.max(0, Math.min(...this.timers.map((t) => t.at)) - this.current);
  }

  readonly sleep: Sleep = (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      const abort = (): void => {
        this.timers = this.timers.filter((t) => t !== timer);
        const err = new Error('The operation was aborted');
        err.name = 'AbortError';
        reject(err);
      };
      const timer: Timer = {
        at: this.current + ms,
        resolve: () => {
          signal?.removeEventListener('abort', abort);
          resolve();
        },
      };
      if (signal?.aborted) return abort();
      signal?.addEventListener('abort', abort, { once: true });
      this.timers.push(timer);
    });

  setTimeout(fn: () => void, ms: number): unknown {
    const timer: Timer = { at: this.current + ms, resolve: fn };
    this.timers.push(timer);
    return timer;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t !== handle);
  }

  /** Moves time forward, firing due timers in order and letting their continuations run. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await flush();
    for (;;) {
      const due = this.timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.current = Math.max(this.current, due.at);
      due.resolve();
      await flush();
    }
    this.current = target;
  }
}

/**
 * Lets `work` (which crosses real sockets) run on fake time: whenever a timer is pending, time jumps to
 * it; otherwise the real event loop gets a turn. Time stops moving once `work` has settled.
 */
export async function runOnFakeTime<T>(time: FakeTime, work: Promise<T>): Promise<T> {
  let settled = false;
  const done = work.finally(() => (settled = true));
  done.catch(() => undefined); // the caller sees the rejection; it must not count as unhandled meanwhile
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 0));
    if (settled) return done;
    const next = time.nextDueIn;
    if (next !== undefined) await time.advance(next);
  }
}

/** Runs every queued promise continuation. */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
