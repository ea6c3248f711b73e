/**
 * Outstanding requests per endpoint, as seen by this router process. A request holds its count from
 * the pick until its response (or stream) has fully ended or the client went away; `release` is
 * idempotent, so no path can release twice and drive a count negative.
 */
export class InFlight {
  private readonly counts = new Map<string, number>();

  count(endpointId: string): number {
    return this.counts.get(endpointId) ?? 0;
  }

  /** Takes one slot on `endpointId`; call the returned function (any number of times) to give it back. */
  acquire(endpointId: string): () => void {
    this.counts.set(endpointId, this.count(endpointId) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const next = this.count(endpointId) - 1;
      if (next <= 0) this.counts.delete(endpointId);
      else this.counts.set(endpointId, next);
    };
  }

  total(): number {
    let sum = 0;
    for (const n of this.counts.values()) sum += n;
    return sum;
  }

  entries(): IterableIterator<[string, number]> {
    return this.counts.entries();
  }
}
