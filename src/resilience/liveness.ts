/**
 * When each replica last showed that it works: bytes of an answer to any of this router's requests
 * (an answer begun, a stream's events, at most once a second each), or its engine's own counters of
 * tokens processed going up between two scrapes of its `/metrics` (vLLM, which adds to them every
 * scheduler step; marked at the earlier scrape's time). An error status is no sign: a broken replica
 * may answer some requests at once and hang the rest.
 *
 * A stream that goes silent past `timeouts.idleMs` at a replica that worked after its last bytes went
 * silent on its own (its text held back for a stop string, which any tenant can ask for) and moves no
 * breaker: counted as failures, ten such streams of one tenant opened every breaker of a pool and every
 * other tenant got 503. A replica that hung shows nothing, and its silent streams count as before.
 */

/** Marks older than this are dropped (no timeout is that long: the longest default is 30 minutes). */
const KEEP_MS = 60 * 60_000;
/** Marks between sweeps for old entries (replicas gone long ago). */
const SWEEP_EVERY = 4096;

export class Liveness {
  private readonly at = new Map<string, number>();
  private marks = 0;

  /** `endpoint` showed it works at `now` (the router's clock, ms). */
  mark(endpoint: string, now: number): void {
    const before = this.at.get(endpoint);
    if (before === undefined || now > before) this.at.set(endpoint, now);
    if (++this.marks % SWEEP_EVERY === 0) this.sweep(now);
  }

  /** Whether `endpoint` showed it works after `since` (strictly: a mark at `since` itself is the request's own). */
  workedAfter(endpoint: string, since: number): boolean {
    const at = this.at.get(endpoint);
    return at !== undefined && at > since;
  }

  /** Replicas with a mark (for tests). */
  get size(): number {
    return this.at.size;
  }

  private sweep(now: number): void {
    for (const [endpoint, at] of this.at) if (now - at > KEEP_MS) this.at.delete(endpoint);
  }
}
