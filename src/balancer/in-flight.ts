/**
 * Outstanding requests per endpoint, as seen by this router process. A request holds its count from
 * the pick until its response (or stream) has fully ended or the client went away; `release` is
 * idempotent, so no path can release twice and drive a count negative.
 *
 * A reader that needs every endpoint's count on every pick (the picker) holds the endpoints' counters
 * instead of looking each id up: {@link hold} returns an object whose `count` stays live, kept (at 0
 * too) until the matching {@link drop}. An endpoint nobody holds is forgotten when its count reaches 0.
 */

/** One endpoint's outstanding requests; `count` follows every acquire and release. */
export interface InFlightCounter {
  readonly count: number;
}

interface Entry extends InFlightCounter {
  pool: string;
  count: number;
  /** Readers holding this entry: it stays at count 0 while one does. */
  holds: number;
}

export class InFlight {
  private readonly counts = new Map<string, Entry>();
  /**
   * Outstanding requests per pool. An endpoint two pools share (one engine serving both, or two
   * ModelPools selecting the same pods) carries both pools' requests, and a pool's demand is its own.
   */
  private readonly pools = new Map<string, number>();

  count(endpointId: string): number {
    return this.counts.get(endpointId)?.count ?? 0;
  }

  /** The pool's outstanding requests, whichever of its endpoints carry them (one that left discovery too). */
  poolCount(pool: string): number {
    return this.pools.get(pool) ?? 0;
  }

  /** Takes one slot on an endpoint; call the returned function (any number of times) to give it back. */
  acquire(endpointId: string, pool = ''): () => void {
    const entry = this.counts.get(endpointId);
    if (!entry) this.counts.set(endpointId, { pool, count: 1, holds: 0 });
    else {
      // the pool is that of the request that made the endpoint busy, as when idle entries did not exist
      if (entry.count === 0) entry.pool = pool;
      entry.count += 1;
    }
    this.pools.set(pool, (this.pools.get(pool) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (this.pools.get(pool) ?? 1) - 1;
      if (left > 0) this.pools.set(pool, left);
      else this.pools.delete(pool);
      const current = this.counts.get(endpointId);
      if (!current) return;
      current.count -= 1;
      if (current.count <= 0 && current.holds === 0) this.counts.delete(endpointId);
    };
  }

  /** The endpoint's live counter, kept until as many {@link drop}s as holds. */
  hold(endpointId: string, pool = ''): InFlightCounter {
    let entry = this.counts.get(endpointId);
    if (!entry) {
      entry = { pool, count: 0, holds: 0 };
      this.counts.set(endpointId, entry);
    }
    entry.holds += 1;
    return entry;
  }

  /** Gives back one {@link hold} of the endpoint's counter. */
  drop(endpointId: string): void {
    const entry = this.counts.get(endpointId);
    if (!entry || entry.holds === 0) return;
    entry.holds -= 1;
    if (entry.holds === 0 && entry.count <= 0) this.counts.delete(endpointId);
  }

  total(): number {
    let sum = 0;
    for (const e of this.counts.values()) sum += e.count;
    return sum;
  }

  /** Endpoints with outstanding requests: [endpoint id, count]. */
  *entries(): IterableIterator<[string, number]> {
    for (const [id, e] of this.counts) if (e.count > 0) yield [id, e.count];
  }

  /** Endpoints with outstanding requests, with their pool. */
  *byEndpoint(): IterableIterator<{ endpoint: string; pool: string; count: number }> {
    for (const [endpoint, e] of this.counts) if (e.count > 0) yield { endpoint, pool: e.pool, count: e.count };
  }
}
