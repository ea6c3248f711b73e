/**
 * When each replica last showed that it works: bytes of an answer to any of this router's requests,
 * an error status it answered with, or its engine's own counter of tokens processed going up between
 * two scrapes of its `/metrics` (vLLM, SGLang).
 *
 * A timeout tells the breaker nothing about a replica that worked meanwhile: the request was what
 * took long (a long non-streamed generation past `timeouts.firstByteMs`, a stream whose text the
 * engine holds back for a stop string past `timeouts.idleMs`), and any tenant can send such
 * requests. Counted as failures, a few of them opened every breaker of a pool, and every other
 * tenant got 503. A replica that hung shows nothing, and its timeouts count as before.
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
