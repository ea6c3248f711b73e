/**
 * When to log that a replica does not have its pool's `servedModelName` (exchange.ts `servesNotModel`):
 * at most once per pool and replica every {@link SERVED_MODEL_WARNING_INTERVAL_MS}, so a misconfigured
 * pool under load writes a line a replica a minute, not one a request. Touched only by such an attempt.
 */

/** How often a replica without its pool's model is logged again while it keeps refusing requests. */
export const SERVED_MODEL_WARNING_INTERVAL_MS = 60_000;

/** Pool and replica pairs remembered; past it, the pairs last warned over an interval ago are forgotten (a pool's replicas come and go). */
const MAX_REMEMBERED = 1024;

export class ServedModelWarnings {
  private readonly warnedAt = new Map<string, number>();

  constructor(private readonly intervalMs = SERVED_MODEL_WARNING_INTERVAL_MS) {}

  /** Whether a mismatch of `pool` at `endpoint` at `now` (ms, monotonic) is to be logged; if so, it is remembered as logged. */
  due(pool: string, endpoint: string, now: number): boolean {
    const key = `${pool}\u0000${endpoint}`;
    const last = this.warnedAt.get(key);
    if (last !== undefined && now - last < this.intervalMs) return false;
    if (last === undefined && this.warnedAt.size >= MAX_REMEMBERED) this.forget(now);
    this.warnedAt.set(key, now);
    return true;
  }

  /** Drops the pairs whose interval has passed (and, were every one still recent, the oldest half). */
  private forget(now: number): void {
    for (const [key, at] of this.warnedAt) if (now - at >= this.intervalMs) this.warnedAt.delete(key);
    if (this.warnedAt.size < MAX_REMEMBERED) return;
    let drop = this.warnedAt.size / 2;
    for (const key of this.warnedAt.keys()) {
      if (drop-- <= 0) break;
      this.warnedAt.delete(key);
    }
  }
}
