/**
 * What one router knows of a key's shared counts between Redis's answers, so that a request far from
 * every limit need not wait for Redis: the limiter lets it through on this view and sends the take to
 * Redis in the background (forced: Redis counts it whatever it would have said). Near a limit, where
 * the answer matters, the limiter waits for Redis as before.
 *
 * - The view is each answer's counts (levels, budgets used, leases held), less what this router has
 *   sent since and not yet seen answered (one connection: answers come back in the order sent).
 * - "Far" means: after this request, every check keeps a margin of at least 5% of its limit and at
 *   least a floor (10 requests, 2,000 tokens, 4 concurrent requests, 10,000 budget tokens), the view
 *   is under a second old, and this router has not taken, on the view since the last answer, more than
 *   its share of what that answer left: what was left divided by the routers (their heartbeats say
 *   how many). Other routers' use since the last answer is not in the view, but each of them is held
 *   to its own share in the same way: a burst that reaches every router at once takes no more, all
 *   together, than what was left (each router admitting up to what it saw left let two routers admit
 *   1.7x a key's requests per minute in one simultaneous burst). Past its share, a router waits for
 *   Redis's answer, which counts every router's takes.
 */
import { rateState, type Checks, type Verdict } from './store.js';

/** How stale a view may be and still admit (ms). */
export const FRESH_MS = 1_000;
/** What every check must have left after a request admitted on the view: the larger of a share of its limit and a floor. */
export const MARGIN = { share: 0.05, requests: 10, tokens: 2_000, concurrency: 4, budget: 10_000 } as const;
/** Most keys with a view (the least recently answered go first). */
const MAX_KEYS = 100_000;

interface KeyView {
  /** The limiter's clock (ms) at the last answer. */
  at: number;
  /** Bucket levels at `at`, less what was taken on the view since. */
  levels: Map<string, number>;
  /** Budget use by period. */
  used: Map<string, number>;
  /** Leases held by concurrency check. */
  held: Map<string, number>;
  /** The tokens of each admission sent to Redis and not answered yet, oldest first. */
  inflight: number[];
  /** What this router may still take on the view before the next answer, by check (`r:`, `b:`, `c:` and its id): its share of what the answer left. */
  allowance: Map<string, number>;
}

const margin = (limit: number, floor: number): number => Math.max(floor, limit * MARGIN.share);

export class SharedView {
  private readonly keys = new Map<string, KeyView>();

  /**
   * The verdict for `checks` taking `tokens` on the view alone, when every check stays far from its
   * limit (the view then counts the take); undefined when Redis must decide.
   */
  tryTake(checks: Checks, tokens: number, now: number): Verdict | undefined {
    const view = this.keys.get(checks.key);
    if (!view || now - view.at > FRESH_MS) return undefined;
    const { allowance } = view;
    /** Whether this router's share still holds `cost` of the check. */
    const within = (check: string, cost: number): boolean => (allowance.get(check) ?? 0) >= cost;
    const levels: number[] = [];
    for (const spec of checks.rates) {
      const seen = view.levels.get(spec.id);
      if (seen === undefined) return undefined;
      const cost = spec.kind === 'requests' ? 1 : tokens;
      const level = Math.min(spec.perMinute, seen + ((now - view.at) * spec.perMinute) / 60_000) - cost;
      if (level < margin(spec.perMinute, spec.kind === 'requests' ? MARGIN.requests : MARGIN.tokens) || !within(`r:${spec.id}`, cost)) return undefined;
      levels.push(level);
    }
    for (const spec of checks.budgets) {
      const used = view.used.get(spec.period);
      if (used === undefined || used + tokens > spec.limit - margin(spec.limit, MARGIN.budget) || !within(`b:${spec.period}`, tokens)) return undefined;
    }
    for (const spec of checks.concurrency) {
      const held = view.held.get(spec.id);
      if (held === undefined || held + 1 > spec.limit - margin(spec.limit, MARGIN.concurrency) || !within(`c:${spec.id}`, 1)) return undefined;
    }
    const take = (check: string, cost: number): void => void allowance.set(check, (allowance.get(check) as number) - cost);
    checks.rates.forEach((spec, i) => {
      view.levels.set(spec.id, (levels[i] as number) - ((now - view.at) * spec.perMinute) / 60_000);
      take(`r:${spec.id}`, spec.kind === 'requests' ? 1 : tokens);
    });
    for (const spec of checks.budgets) {
      view.used.set(spec.period, (view.used.get(spec.period) as number) + tokens);
      take(`b:${spec.period}`, tokens);
    }
    for (const spec of checks.concurrency) {
      view.held.set(spec.id, (view.held.get(spec.id) as number) + 1);
      take(`c:${spec.id}`, 1);
    }
    return {
      ok: true,
      rates: checks.rates.map((spec, i) => rateState(spec, levels[i] as number)),
      budgets: checks.budgets.map((spec) => ({ window: spec.window, period: spec.period, limit: spec.limit, used: view.used.get(spec.period) as number, endsInMs: spec.endsInMs })),
      concurrency: checks.concurrency.map((spec) => ({ id: spec.id, limit: spec.limit, held: view.held.get(spec.id) as number })),
    };
  }

  /** An admission of `tokens` for `key` went to Redis (its answer comes after those sent before it). */
  sent(key: string, tokens: number): void {
    this.keys.get(key)?.inflight.push(tokens);
  }

  /**
   * Redis answered the oldest admission sent for `checks.key`: the view becomes its counts less what is
   * still in flight, and this router's allowance its share (of `routers`) of what they left.
   */
  answered(checks: Checks, verdict: Verdict, now: number, routers = 1): void {
    let view = this.keys.get(checks.key);
    if (view) {
      view.inflight.shift();
      this.keys.delete(checks.key); // re-inserted last: the map's order is least recently answered first
      view.at = now;
      // only this answer's checks are known now (another deployment's limits may have moved meanwhile)
      view.levels.clear();
      view.used.clear();
      view.held.clear();
      view.allowance.clear();
    } else {
      view = { at: now, levels: new Map(), used: new Map(), held: new Map(), inflight: [], allowance: new Map() };
    }
    const { inflight, allowance } = view;
    const tokens = inflight.reduce((sum, t) => sum + t, 0);
    const share = (left: number, sent: number): number => Math.max(0, left) / Math.max(1, routers) - sent;
    checks.rates.forEach((spec, i) => {
      const remaining = verdict.rates[i]?.remaining ?? 0;
      const sent = spec.kind === 'requests' ? inflight.length : tokens;
      view.levels.set(spec.id, remaining - sent);
      allowance.set(`r:${spec.id}`, share(remaining, sent));
    });
    checks.budgets.forEach((spec, i) => {
      const used = verdict.budgets[i]?.used ?? spec.limit;
      view.used.set(spec.period, used + tokens);
      allowance.set(`b:${spec.period}`, share(spec.limit - used, tokens));
    });
    checks.concurrency.forEach((spec, i) => {
      const held = verdict.concurrency[i]?.held ?? spec.limit;
      view.held.set(spec.id, held + inflight.length);
      allowance.set(`c:${spec.id}`, share(spec.limit - held, inflight.length));
    });
    this.keys.set(checks.key, view);
    for (const key of this.keys.keys()) {
      if (this.keys.size <= MAX_KEYS) break;
      this.keys.delete(key);
    }
  }

  /** Redis failed the oldest admission sent for `key`. */
  failed(key: string): void {
    this.keys.get(key)?.inflight.shift();
  }

  /** A request of `key` gave its concurrency slots back. */
  released(key: string, concurrency: Checks['concurrency']): void {
    const view = this.keys.get(key);
    if (!view) return;
    for (const spec of concurrency) {
      const held = view.held.get(spec.id);
      if (held !== undefined) view.held.set(spec.id, Math.max(0, held - 1));
    }
  }

  /** Forgets everything (Redis stopped answering: the view would be stale when it is back). */
  clear(): void {
    this.keys.clear();
  }
}
