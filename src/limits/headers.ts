/**
 * OpenAI's rate-limit headers, read from a store's verdict: `x-ratelimit-{limit,remaining,reset}-requests`
 * and the same three for tokens. Where a key is limited both key-wide and on the deployment, the
 * headers show whichever has less left. Resets are OpenAI's durations: `20ms`, `1s`, `6m0s`, `1h2m3s`.
 */
import { type RateKind, type RateState, type Verdict } from './store.js';

/** A duration in OpenAI's header form. */
export function formatDuration(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1000) return `${whole}ms`;
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const seconds = (whole % 60_000) / 1000;
  const s = `${Number.isInteger(seconds) ? seconds : seconds.toFixed(3).replace(/0+$/, '')}s`;
  if (hours > 0) return `${hours}h${minutes}m${s}`;
  if (minutes > 0) return `${minutes}m${s}`;
  return s;
}

/** The state of `kind` that has the least left. */
export function tightest(rates: readonly RateState[], kind: RateKind): RateState | undefined {
  let found: RateState | undefined;
  for (const rate of rates) if (rate.kind === kind && (!found || rate.remaining < found.remaining)) found = rate;
  return found;
}

export function rateLimitHeaders(verdict: Pick<Verdict, 'rates'>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const kind of ['requests', 'tokens'] as const) {
    const state = tightest(verdict.rates, kind);
    if (!state) continue;
    headers[`x-ratelimit-limit-${kind}`] = String(Math.floor(state.limit));
    headers[`x-ratelimit-remaining-${kind}`] = String(state.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatDuration(state.resetMs);
  }
  return headers;
}
