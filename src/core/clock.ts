import { setTimeout as delay } from 'node:timers/promises';

/** Monotonic time in milliseconds. Injected wherever timing matters so tests can drive it. */
export interface Clock {
  now(): number;
}

/**
 * Waits `ms` milliseconds. Rejects with an `AbortError` when `signal` aborts first.
 * Injected next to {@link Clock} so timing logic runs on fake time in unit tests.
 */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

export const systemClock: Clock = { now: () => performance.now() };

export const systemSleep: Sleep = (ms, signal) => delay(ms, undefined, signal ? { signal } : undefined);

/**
 * True for the error a {@link Sleep} or fetch rejects with when its signal aborts. Checks the name,
 * not `instanceof Error`: errors made by Node internals come from another realm under test runners.
 */
export function isAbortError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'AbortError';
}

/** Timers for periodic and delayed work (restarts, resyncs, lease renewals); injected for tests. */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Real timers, unref'd: a pending restart or resync never keeps the process alive by itself. */
export const systemScheduler: Scheduler = {
  setTimeout: (fn, ms) => {
    const handle = setTimeout(fn, ms);
    handle.unref();
    return handle;
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};
