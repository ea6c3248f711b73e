/**
 * What a router admitted and spent while Redis did not count it, kept per API key and limit until
 * Redis answers again, then added there in one pipeline (one script call per key).
 *
 * - **Bounded** by keys × limits, never by requests: per key, one entry per rate bucket (requests or
 *   tokens per minute, key-wide or per deployment) and one per budget period (day, month).
 * - **Rate buckets** keep a deficit: what this router took that a full bucket would not yet have
 *   refilled. It grows by each take and drains at the bucket's full rate, so what was taken more than
 *   a minute's refill ago is gone by itself (a window that ended during the outage is not carried into
 *   the next), and Redis gets `level - deficit` for the rest.
 * - **Budgets** keep the tokens per period; a period that is no longer the current UTC day or month
 *   when Redis answers is dropped, not added to the next.
 * - **Once only.** A key's counts are frozen into a batch with a number (rising per router) before they
 *   are sent; the batch is sent again, with the same number, until Redis takes it. Redis keeps per key
 *   and router the last number it applied (`CARRY` in redis-store.ts) and skips a batch it already
 *   applied, so a call that timed out after Redis ran it does not count twice. What the key spends while
 *   its batch is on its way waits for the next one (never merged into a batch that may be applied).
 */
import { ENDED_PERIOD_KEPT_MS, type BudgetSpec, type RateSpec } from './store.js';

const MINUTE_MS = 60_000;

/** One key's counts as sent to Redis. */
export interface CarriedKey {
  key: string;
  /** The batch's number: Redis applies a router's batch of a key once, and none numbered at or below the last it applied. */
  seq: number;
  /** How long Redis keeps the number (ms): as long as anything in the batch could still be counted. */
  keepMs: number;
  rates: Array<{ id: string; perMinute: number; taken: number }>;
  budgets: Array<{ period: string; tokens: number; endsInMs: number }>;
}

interface RateTaken {
  perMinute: number;
  /** The deficit at `at` (monotonic ms). */
  taken: number;
  at: number;
}

interface KeyCounts {
  rates: Map<string, RateTaken>;
  /** Per period: tokens, and when the period ends (wall-clock ms). */
  budgets: Map<string, { tokens: number; endsAt: number }>;
}

/** The deficit of a bucket at `now`: drained at the bucket's full rate since it was measured. */
function drained(rate: RateTaken, now: number): number {
  return Math.max(0, rate.taken - (Math.max(0, now - rate.at) * rate.perMinute) / MINUTE_MS);
}

export class OutageCarry {
  /** Counts not yet frozen into a batch, per key. */
  private readonly counts = new Map<string, KeyCounts>();
  /** Batches sent (or to send) and not yet taken by Redis, per key: at most one each. */
  private readonly batches = new Map<string, { seq: number; counts: KeyCounts }>();
  private seq = 0;

  /**
   * `maxKeys`: most keys kept (each with its limits' entries); a key beyond it is not carried.
   * `now`: the monotonic ms clock; `wallNow`: wall-clock ms (budget periods).
   */
  constructor(
    private readonly now: () => number,
    private readonly wallNow: () => number,
    private readonly maxKeys: number,
  ) {}

  /** Whether anything waits for Redis. */
  get pending(): boolean {
    return this.counts.size > 0 || this.batches.size > 0;
  }

  /**
   * Records what a request took: `requests` from each requests bucket, `tokens` from each tokens
   * bucket and budget (negative: a refund).
   */
  add(key: string, rates: readonly RateSpec[], budgets: readonly BudgetSpec[], requests: number, tokens: number): void {
    let counts = this.counts.get(key);
    if (!counts) {
      if (this.counts.size >= this.maxKeys) return;
      counts = { rates: new Map(), budgets: new Map() };
      this.counts.set(key, counts);
    }
    const now = this.now();
    for (const spec of rates) {
      const amount = spec.kind === 'requests' ? requests : tokens;
      if (amount === 0) continue;
      const rate = counts.rates.get(spec.id);
      const before = rate ? drained(rate, now) : 0;
      counts.rates.set(spec.id, { perMinute: spec.perMinute, taken: Math.max(0, before + amount), at: now });
    }
    if (tokens === 0) return;
    const wall = this.wallNow();
    for (const spec of budgets) {
      const budget = counts.budgets.get(spec.period);
      if (budget) {
        budget.tokens += tokens;
        continue;
      }
      // a new period (a day began during the outage): the ended ones go, so a long outage keeps a key's current periods only
      for (const [period, ended] of counts.budgets) if (ended.endsAt + ENDED_PERIOD_KEPT_MS <= wall) counts.budgets.delete(period);
      counts.budgets.set(spec.period, { tokens, endsAt: wall + spec.endsInMs });
    }
  }

  /**
   * The batches to send now: each key's batch still on its way, and a new one of every other key's
   * counts. `current`: whether a budget period is still current (the UTC day or month now). A batch
   * with nothing left to count (its deficits drained, its periods ended) is dropped.
   */
  batchesNow(current: (period: string) => boolean): CarriedKey[] {
    for (const [key, counts] of this.counts) {
      if (this.batches.has(key)) continue;
      this.counts.delete(key);
      this.batches.set(key, { seq: ++this.seq, counts });
    }
    const now = this.now();
    const wall = this.wallNow();
    const out: CarriedKey[] = [];
    for (const [key, { seq, counts }] of this.batches) {
      const rates = [...counts.rates].map(([id, rate]) => ({ id, perMinute: rate.perMinute, taken: drained(rate, now) })).filter((r) => r.taken > 0);
      const budgets = [...counts.budgets]
        .filter(([period, b]) => current(period) && b.tokens !== 0)
        .map(([period, b]) => ({ period, tokens: Math.round(b.tokens), endsInMs: Math.max(0, b.endsAt - wall) }))
        .filter((b) => b.tokens !== 0);
      if (rates.length === 0 && budgets.length === 0) {
        this.batches.delete(key);
        continue;
      }
      const relevantMs = Math.max(...rates.map((r) => Math.ceil((r.taken * MINUTE_MS) / r.perMinute)), ...budgets.map((b) => b.endsInMs));
      out.push({ key, seq, keepMs: relevantMs + ENDED_PERIOD_KEPT_MS, rates, budgets });
    }
    return out;
  }

  /** Redis took these batches. */
  taken(batches: readonly CarriedKey[]): void {
    for (const { key, seq } of batches) if (this.batches.get(key)?.seq === seq) this.batches.delete(key);
  }
}
