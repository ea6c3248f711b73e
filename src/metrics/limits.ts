/**
 * Per-key limits: requests refused and why, whether Redis answers, its round trip, how many routers
 * share the limits — and, opt-in (`limits.keyMetrics`), requests, tokens and budgets by key *name*.
 * Key names are the operator's (the keys file), so the set is bounded; still, a fleet with thousands
 * of keys leaves the per-key series off.
 */
import { Counter, Gauge, Histogram } from './prom.js';
import type { Registry } from 'prom-client';
import { LIMIT_REASONS, REDIS_OPS, type LimitReason, type RedisOp } from './labels.js';

/** What the limiter reports (limits/limiter.ts `LimiterEvents` is the same shape). */
export interface LimitsRecorder {
  onAdmitted?: (key: string) => void;
  onRejected?: (key: string, reason: LimitReason) => void;
  onTokens?: (key: string, prompt: number, completion: number) => void;
  onBudget?: (key: string, budget: { window: 'day' | 'month'; period: string; limit: number; remaining: number; endsInMs: number }) => void;
  onBudgetSpent?: (key: string, budget: { window: 'day' | 'month'; period: string }, tokens: number) => void;
  /** The keys file now names these keys (at start, then at each reload): the series of a key it named before and no longer does are removed. */
  keysNow?: (names: ReadonlySet<string>) => void;
  onShared?: (up: boolean) => void;
  onSharedError?: (op: RedisOp) => void;
  onRoundTrip?: (seconds: number) => void;
  onRouters?: (routers: number) => void;
  onSharedLost?: () => void;
}

/** A budget gauge's value as last set, and the period it belongs to (ended: the gauge shows the next period's whole budget). */
interface BudgetShown {
  period: string;
  remaining: number;
  limit: number;
  /** Wall clock ms when the period ends. */
  endsAt: number;
}

/** `wallNow`: the wall clock budget periods end on (tests pass their own). */
export function limitsMetrics(registers: Registry[], options: { redis: boolean; keyMetrics: boolean; wallNow?: () => number }): LimitsRecorder {
  const wallNow = options.wallNow ?? Date.now;
  const rejections = new Counter({
    name: 'modelgate_limit_rejections_total',
    help: "Requests refused by their API key's limits, by the limit that refused (requests, tokens, concurrency, budget).",
    labelNames: ['reason'],
    registers,
  });
  for (const reason of LIMIT_REASONS) rejections.inc({ reason }, 0);
  const events: LimitsRecorder = { onRejected: (_key, reason) => rejections.inc({ reason }) };
  if (options.redis) {
    const up = new Gauge({
      name: 'modelgate_limits_redis_up',
      help: 'Whether Redis answers for the shared limits (1), or the router counts locally with its share of each limit (0).',
      registers,
    });
    up.set(1);
    const errors = new Counter({
      name: 'modelgate_limits_redis_errors_total',
      help: "Redis calls that failed or timed out, by operation: the limits' (admit, settle, release, heartbeat) and the Responses API records' (record, lookup).",
      labelNames: ['op'],
      registers,
    });
    for (const op of REDIS_OPS) errors.inc({ op }, 0);
    const seconds = new Histogram({
      name: 'modelgate_limits_redis_seconds',
      help: "Round trip of a request's limit check in Redis.",
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
      registers,
    });
    const routers = new Gauge({ name: 'modelgate_limits_routers', help: "Routers sharing the limits (their heartbeats in Redis): each router's share of a limit while Redis is down.", registers });
    routers.set(1);
    events.onShared = (answering) => up.set(answering ? 1 : 0);
    events.onSharedError = (op) => errors.inc({ op });
    events.onRoundTrip = (s) => seconds.observe(s);
    events.onRouters = (n) => routers.set(n);
    const lost = new Counter({
      name: 'modelgate_limits_redis_data_lost_total',
      help: 'Times this router found that Redis had lost the shared counts (restarted empty, failed over to an empty replica, flushed or evicted): budgets and leases it knew were put back.',
      registers,
    });
    lost.inc(0);
    events.onSharedLost = () => lost.inc();
  }
  if (options.keyMetrics) {
    const requests = new Counter({
      name: 'modelgate_key_requests_total',
      help: 'Requests by API key name and how its limits answered (admitted, rate_limited, quota_exceeded). Opt-in: limits.keyMetrics.',
      labelNames: ['key', 'outcome'],
      registers,
    });
    const tokens = new Counter({
      name: 'modelgate_key_tokens_total',
      help: 'Tokens by API key name and type (prompt, completion). Opt-in: limits.keyMetrics.',
      labelNames: ['key', 'type'],
      registers,
    });
    /** Each key's budget as last set, per window (to take a request's settlement off it). */
    const shown = new Map<string, BudgetShown>();
    const budget = new Gauge({
      name: 'modelgate_key_budget_remaining_tokens',
      help: "Tokens left of each API key's budget (window: day, month), as of its last request's end on this router; the whole budget once the period it was counted in has ended. Opt-in: limits.keyMetrics.",
      labelNames: ['key', 'window'],
      registers,
      // A period that ended since the key's last request: the gauge would show what was left of it
      // (0 for a key that spent its day) until the key's next request, though the new period's budget is whole.
      collect() {
        const now = wallNow();
        for (const [id, b] of shown) {
          if (now < b.endsAt) continue;
          const [key, window] = id.split('\0') as [string, string];
          shown.set(id, { period: `after ${b.period}`, remaining: b.limit, limit: b.limit, endsAt: Infinity });
          this.set({ key, window }, b.limit);
        }
      },
    });
    // a key removed from the file (revoked, renamed) would keep its series, and its budget gauge, for
    // good. Only a key of the file has series (requests are authenticated first): the names the file
    // had before are the keys that may have them. A request of a removed key still under way (a long
    // stream) does not write them again: they came back when it ended, and no later reload removed them.
    let known: ReadonlySet<string> = new Set();
    events.onAdmitted = (key) => {
      if (known.has(key)) requests.inc({ key, outcome: 'admitted' });
    };
    events.onRejected = (key, reason) => {
      rejections.inc({ reason });
      if (known.has(key)) requests.inc({ key, outcome: reason === 'budget' ? 'quota_exceeded' : 'rate_limited' });
    };
    events.onTokens = (key, prompt, completion) => {
      if (!known.has(key)) return;
      if (prompt > 0) tokens.inc({ key, type: 'prompt' }, prompt);
      if (completion > 0) tokens.inc({ key, type: 'completion' }, completion);
    };
    events.onBudget = (key, { window, period, limit, remaining, endsInMs }) => {
      if (!known.has(key)) return;
      shown.set(`${key}\0${window}`, { period, remaining, limit, endsAt: wallNow() + endsInMs });
      budget.set({ key, window }, remaining);
    };
    events.onBudgetSpent = (key, { window, period }, tokens) => {
      if (!known.has(key)) return;
      const id = `${key}\0${window}`;
      const before = shown.get(id);
      // a request admitted in a period that has since ended is charged to that period, not to the one the gauge shows
      if (before?.period !== period) return;
      before.remaining = Math.max(0, before.remaining - tokens);
      budget.set({ key, window }, before.remaining);
    };
    events.keysNow = (names) => {
      for (const key of known) {
        if (names.has(key)) continue;
        for (const outcome of ['admitted', 'rate_limited', 'quota_exceeded']) requests.remove({ key, outcome });
        for (const type of ['prompt', 'completion']) tokens.remove({ key, type });
        for (const window of ['day', 'month']) {
          budget.remove({ key, window });
          shown.delete(`${key}\0${window}`);
        }
      }
      known = names;
    };
  }
  return events;
}
