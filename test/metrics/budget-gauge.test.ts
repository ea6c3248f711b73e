/**
 * The per-key budget gauge across a period's end: it shows the budget left as of the key's last
 * request, and once the period that was counted in has ended, the next period's whole budget (it showed
 * yesterday's 0 until the key's next request). A request admitted before the end and settled after it
 * is charged to its own period, not taken off the new one.
 */
import { describe, expect, it } from '@jest/globals';
import { limitsMetrics } from '../../src/metrics/limits.js';
import { Registry } from '../../src/metrics/prom.js';
import { metricSum } from '../helpers/router.js';

const HOUR = 3_600_000;

function setup() {
  let wall = Date.UTC(2026, 10, 29, 23, 0);
  const registry = new Registry();
  const events = limitsMetrics([registry], { redis: false, keyMetrics: true, wallNow: () => wall });
  events.keysNow?.(new Set(['team-a', 'team-b']));
  const left = async (key: string, window = 'day'): Promise<number> => metricSum(await registry.metrics(), 'modelgate_key_budget_remaining_tokens', { key, window });
  return { events, left, advance: (ms: number) => (wall += ms) };
}

describe('modelgate_key_budget_remaining_tokens across a period’s end', () => {
  it('shows the whole budget once the day it was counted in has ended, and the day’s count again at the next request', async () => {
    const t = setup();
    t.events.onBudget?.('team-a', { window: 'day', period: 'day:2026-11-29', limit: 1000, remaining: 0, endsInMs: HOUR });
    t.events.onBudget?.('team-a', { window: 'month', period: 'month:2026-11', limit: 50_000, remaining: 20_000, endsInMs: HOUR });
    t.events.onBudget?.('team-b', { window: 'day', period: 'day:2026-11-29', limit: 500, remaining: 120, endsInMs: HOUR });
    expect(await t.left('team-a')).toBe(0);
    t.advance(HOUR - 1);
    expect(await t.left('team-a')).toBe(0);
    expect(await t.left('team-a', 'month')).toBe(20_000);
    t.advance(1); // midnight, the first of the month: no request since
    expect(await t.left('team-a')).toBe(1000);
    expect(await t.left('team-a', 'month')).toBe(50_000);
    expect(await t.left('team-b')).toBe(500);
    // the key's next request says what the new day holds
    t.events.onBudget?.('team-a', { window: 'day', period: 'day:2026-11-30', limit: 1000, remaining: 940, endsInMs: 24 * HOUR });
    expect(await t.left('team-a')).toBe(940);
  });

  it('a request admitted yesterday and ended today is not taken off today’s budget', async () => {
    const t = setup();
    t.events.onBudget?.('team-a', { window: 'day', period: 'day:2026-11-29', limit: 1000, remaining: 600, endsInMs: HOUR });
    t.events.onBudgetSpent?.('team-a', { window: 'day', period: 'day:2026-11-29' }, 100);
    expect(await t.left('team-a')).toBe(500);
    t.advance(HOUR);
    expect(await t.left('team-a')).toBe(1000);
    // a stream admitted before midnight ends now: charged to the 29th (limits/limiter.ts), not to the gauge's new day
    t.events.onBudgetSpent?.('team-a', { window: 'day', period: 'day:2026-11-29' }, 300);
    expect(await t.left('team-a')).toBe(1000);
    // today's requests move it as before
    t.events.onBudget?.('team-a', { window: 'day', period: 'day:2026-11-30', limit: 1000, remaining: 990, endsInMs: 23 * HOUR });
    t.events.onBudgetSpent?.('team-a', { window: 'day', period: 'day:2026-11-30' }, 40);
    expect(await t.left('team-a')).toBe(950);
  });
});
