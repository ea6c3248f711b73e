/**
 * Which endpoints the router still keeps state for (breakers, prefix memory, adapter placements,
 * attempt series): those some snapshot lists now, and those it listed less than a grace period ago.
 * A pod replaced or scaled away loses its state once the grace has passed; a pod that failed its
 * readiness for a few seconds (out of the snapshot meanwhile) comes back with the prefix memory its
 * engine's cache still matches and with its breaker as it was. What is kept is bounded by the
 * endpoints listed within one grace period, however many pods came and went before.
 */
export class ListedEndpoints {
  private readonly lastListed = new Map<string, number>();

  constructor(
    private readonly graceMs: number,
    private readonly now: () => number,
  ) {}

  /** Notes the endpoints listed now and answers the ones to keep state for: listed now or within the grace. */
  update(listed: Iterable<string>): ReadonlySet<string> {
    const at = this.now();
    const keep = new Set<string>();
    for (const id of listed) {
      this.lastListed.set(id, at);
      keep.add(id);
    }
    for (const [id, seen] of this.lastListed) {
      if (keep.has(id)) continue;
      if (at - seen >= this.graceMs) this.lastListed.delete(id);
      else keep.add(id);
    }
    return keep;
  }
}
