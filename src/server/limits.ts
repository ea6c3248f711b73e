/**
 * `GET /v1/limits`: the caller's own limits and what is left of them, read without spending anything.
 * Per-minute limits show what remains and when the bucket is full again; budgets what was used this
 * UTC day or month and when it renews. Per-deployment limits are listed under `deployments`. A key
 * without limits gets `"limited": false`. Only the caller's key is ever shown.
 */
import { type Request, type Response } from 'express';
import { type Principal } from '../auth/key-store.js';
import { formatDuration } from '../limits/headers.js';
import { type KeyLimits } from '../limits/settings.js';
import { type Verdict } from '../limits/store.js';
import { contextOf } from './context.js';

export interface LimitsView {
  peek(key: Principal): Promise<{ limits: KeyLimits; verdict: Verdict } | undefined>;
}

type Rate = { limit: number; remaining: number; reset: string };

function rates(verdict: Verdict, suffix: string): Record<string, Rate> {
  const out: Record<string, Rate> = {};
  for (const rate of verdict.rates) {
    if (rate.id !== `${rate.kind}${suffix}`) continue;
    out[`${rate.kind}_per_minute`] = { limit: Math.floor(rate.limit), remaining: rate.remaining, reset: formatDuration(rate.resetMs) };
  }
  return out;
}

/** The JSON answer for a key's limits. */
export function limitsBody(name: string, found: { limits: KeyLimits; verdict: Verdict } | undefined): Record<string, unknown> {
  if (!found) return { object: 'limits', key: name, limited: false };
  const { limits, verdict } = found;
  const deployments: Record<string, unknown> = {};
  for (const [id, scope] of limits.deployments) {
    deployments[id] = { ...rates(verdict, `:${id}`), ...(scope.concurrentRequests ? { concurrent_requests: { limit: scope.concurrentRequests } } : {}) };
  }
  const budgets = Object.fromEntries(
    verdict.budgets.map((b) => [`tokens_per_${b.window}`, { limit: b.limit, used: b.used, remaining: Math.max(0, b.limit - b.used), renews: formatDuration(b.endsInMs) }]),
  );
  return {
    object: 'limits',
    key: name,
    limited: true,
    ...rates(verdict, ''),
    ...(limits.concurrentRequests ? { concurrent_requests: { limit: limits.concurrentRequests } } : {}),
    ...budgets,
    ...(limits.deployments.size > 0 ? { deployments } : {}),
  };
}

export function getLimits(view: LimitsView | undefined) {
  return async (_req: Request, res: Response): Promise<void> => {
    const principal = contextOf(res).principal as Principal;
    res.json(limitsBody(principal.name, view ? await view.peek(principal) : undefined));
  };
}
