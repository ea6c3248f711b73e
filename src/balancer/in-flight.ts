/**
 * Outstanding requests per endpoint, as seen by this router process. A request holds its count from
 * the pick until its response (or stream) has fully ended or the client went away; `release` is
 * idempotent, so no path can release twice and drive a count negative.
 */
export class InFlight {
  private readonly counts = new Map<string, { pool: string; count: number }>();

  count(endpointId: string): number {
    return this.counts.get(endpointId)?.count ?? 0;
  }

  /** Takes one slot on an endpoint; call the returned function (any number of times) to give it back. */
  acquire(endpointId: string, pool = ''): () => void {
    const entry = this.counts.get(endpointId);
    if (entry) entry.count += 1;
    else this.counts.set(endpointId, { pool, count: 1 });
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const current = this.counts.get(endpointId);
      if (!current) return;
      current.count -= 1;
      if (current.count <= 0) this.counts.delete(endpointId);
    };
  }

  total(): number {
    let sum = 0;
    for (const e of this.counts.values()) sum += e.count;
    return sum;
  }

  /** Endpoints with outstanding requests: [endpoint id, count]. */
  *entries(): IterableIterator<[string, number]> {
    for (const [id, e] of this.counts) yield [id, e.count];
  }

  /** Endpoints with outstanding requests, with their pool. */
  *byEndpoint(): IterableIterator<{ endpoint: string; pool: string; count: number }> {
    for (const [endpoint, e] of this.counts) yield { endpoint, pool: e.pool, count: e.count };
  }
}
