/**
 * Which endpoints the router still keeps state for (breakers, prefix memory, adapter placements,
 * attempt series): those some snapshot lists now, and those a pool that still exists listed less than
 * a grace period ago. A pod replaced or scaled away loses its state once the grace has passed; a pod
 * that failed its readiness for a few seconds (out of the snapshot meanwhile) comes back with the
 * prefix memory its engine's cache still matches and with its breaker as it was. A pool's deletion is
 * no blip: the endpoints it was the last to list are forgotten at once. What is kept is bounded by the
 * endpoints listed within one grace period, however many pods came and went before.
 */
export class ListedEndpoints {
  /** When each endpoint was last listed, and by which pool. */
  private readonly lastListed = new Map<string, { at: number; pool: string }>();

  constructor(
    private readonly graceMs: number,
    private readonly now: () => number,
  ) {}

  /**
   * Notes the endpoints each pool lists now (every pool that exists, each with its snapshot's ids) and
   * answers the ones to keep state for: listed now, or within the grace by a pool that is still listed.
   */
  update(pools: Iterable<readonly [pool: string, ids: Iterable<string>]>): ReadonlySet<string> {
    const at = this.now();
    const keep = new Set<string>();
    const present = new Set<string>();
    for (const [pool, ids] of pools) {
      present.add(pool);
      for (const id of ids) {
        this.lastListed.set(id, { at, pool });
        keep.add(id);
      }
    }
    for (const [id, seen] of this.lastListed) {
      if (keep.has(id)) continue;
      if (at - seen.at >= this.graceMs || !present.has(seen.pool)) this.lastListed.delete(id);
      else keep.add(id);
    }
    return keep;
  }
}
