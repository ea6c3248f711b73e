/**
 * Start-time fair queueing (SFQ, Goyal et al. 1996) over tenants, for one priority class of one pool.
 * Each entry gets a start tag `max(V, lastFinish[tenant])` and a finish tag `start + 1/weight`; entries
 * leave in order of start tag, ties in arrival order. V, the virtual time, is the start tag of the entry
 * served last. A tenant that queues a burst therefore spreads its entries out in virtual time, and one
 * that arrives later lines up near V, next to the burst's first entries instead of behind all of them;
 * over a backlog a tenant of weight w is served w times as often as one of weight 1.
 *
 * Entries that leave unserved (timeout, abort, displacement) give their virtual time back when they were
 * their tenant's latest (its next entry starts after its latest queued or served one). A tenant with no entries is forgotten once V passes its finish tag, and the
 * whole state is dropped when the queue empties (nobody is behind anybody then), so memory is bounded by
 * the entries queued plus the tenants served recently. Insertion and removal are a binary search plus a
 * splice: O(n) with a small constant, for queues of at most a few thousand.
 */

/** One queued item with its tags. The queue hands it out as the handle to remove it by. */
export interface FairEntry<T> {
  readonly value: T;
  readonly tenant: string;
  readonly start: number;
  readonly finish: number;
  /** Arrival order, the tie-break between equal start tags. */
  readonly seq: number;
}

interface TenantState<T> {
  /** Its queued entries, in arrival order (which is also their start-tag order). */
  entries: Array<FairEntry<T>>;
  /** The finish tag of its latest entry, queued or served: where its next entry starts (unless V is past it). */
  lastFinish: number;
  /** The finish tag of its latest served entry. */
  servedFinish: number;
}

const before = <T>(a: FairEntry<T>, b: FairEntry<T>): boolean => a.start < b.start || (a.start === b.start && a.seq < b.seq);

export class FairQueue<T> {
  private readonly order: Array<FairEntry<T>> = [];
  private readonly tenants = new Map<string, TenantState<T>>();
  /** Tenants with no entries whose finish tag V has not passed yet. */
  private readonly idle = new Set<string>();
  private virtualTime = 0;
  private arrivals = 0;

  get size(): number {
    return this.order.length;
  }

  /** The entry to serve next. */
  head(): FairEntry<T> | undefined {
    return this.order[0];
  }

  /** The entry `i` places behind the head (0: the head), in serving order. */
  at(i: number): FairEntry<T> | undefined {
    return this.order[i];
  }

  /** Tenants it keeps state for: those with entries and those V has not passed yet (bounded memory). */
  get trackedTenants(): number {
    return this.tenants.size;
  }

  /** Entries of `tenant` queued now. */
  count(tenant: string): number {
    return this.tenants.get(tenant)?.entries.length ?? 0;
  }

  /** Queues `value` for `tenant`; `weight` (> 0) is the tenant's share relative to weight 1. */
  push(value: T, tenant: string, weight: number): FairEntry<T> {
    const state = this.tenants.get(tenant) ?? { entries: [], lastFinish: 0, servedFinish: 0 };
    const start = Math.max(this.virtualTime, state.lastFinish);
    const entry: FairEntry<T> = { value, tenant, start, finish: start + 1 / weight, seq: this.arrivals++ };
    state.entries.push(entry);
    state.lastFinish = entry.finish;
    this.tenants.set(tenant, state);
    this.idle.delete(tenant);
    // the newcomer has the latest arrival: it goes after every entry whose start tag is not later than its own
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.order[mid] as FairEntry<T>).start <= start) lo = mid + 1;
      else hi = mid;
    }
    this.order.splice(lo, 0, entry);
    return entry;
  }

  /**
   * The latest entry of the tenant with the most entries (ties: the one of those served last), with
   * that count; undefined when the queue is empty.
   */
  heaviest(): { entry: FairEntry<T>; count: number } | undefined {
    let best: { entry: FairEntry<T>; count: number } | undefined;
    for (const { entries } of this.tenants.values()) {
      const latest = entries.at(-1);
      if (!latest) continue;
      if (!best || entries.length > best.count || (entries.length === best.count && before(best.entry, latest))) best = { entry: latest, count: entries.length };
    }
    return best;
  }

  /**
   * Takes `entry` out: `served` moves V to its start tag; `dropped` (it leaves unserved) gives its
   * tenant the virtual time back when it was the tenant's latest, so that entries turned away (timed
   * out, abandoned, displaced) do not push the tenant's later ones back. False when it was not queued.
   */
  remove(entry: FairEntry<T>, how: 'served' | 'dropped'): boolean {
    const at = this.indexOf(entry);
    const state = this.tenants.get(entry.tenant);
    if (at < 0 || !state) return false;
    this.order.splice(at, 1);
    const own = state.entries.indexOf(entry);
    state.entries.splice(own, 1);
    if (how === 'served') {
      this.virtualTime = Math.max(this.virtualTime, entry.start);
      state.servedFinish = Math.max(state.servedFinish, entry.finish);
    } else if (own === state.entries.length) {
      state.lastFinish = state.entries.at(-1)?.finish ?? state.servedFinish;
    }
    if (this.order.length === 0) return this.reset();
    if (state.entries.length === 0) this.idle.add(entry.tenant);
    // amortised: the sweep runs once the idle tenants outnumber the entries
    if (this.idle.size > this.order.length) this.forgetIdle();
    return true;
  }

  private indexOf(entry: FairEntry<T>): number {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (before(this.order[mid] as FairEntry<T>, entry)) lo = mid + 1;
      else hi = mid;
    }
    return this.order[lo] === entry ? lo : -1;
  }

  private forgetIdle(): void {
    for (const tenant of this.idle) {
      const state = this.tenants.get(tenant);
      if (state && state.entries.length > 0) this.idle.delete(tenant);
      else if (!state || state.lastFinish <= this.virtualTime) {
        this.idle.delete(tenant);
        this.tenants.delete(tenant);
      }
    }
  }

  private reset(): true {
    this.tenants.clear();
    this.idle.clear();
    this.virtualTime = 0;
    return true;
  }
}
