/**
 * Least outstanding requests per unit of weight, over every candidate. The counts are this router's
 * own and exact, so sampling two candidates (power of two choices, a guard against stale shared load
 * figures) only loses information: on four replicas it missed the least-loaded one often enough to
 * put p99 time to first token 11% above HAProxy's `leastconn` (bench/results/balance.md). A tie is
 * broken by a weighted random draw among the tied (reservoir sampling), so an idle fleet is shared
 * exactly by weight. Pure: the caller supplies loads and randomness.
 */
import { type Endpoint } from '../core/types.js';

export function pickLeastOutstanding(
  candidates: readonly Endpoint[],
  outstanding: (endpoint: Endpoint) => number,
  random: () => number = Math.random,
): Endpoint | undefined {
  if (candidates.length <= 1) return candidates[0];
  let chosen: Endpoint | undefined;
  let best = Infinity;
  let tiedWeight = 0;
  for (const candidate of candidates) {
    const load = outstanding(candidate) / candidate.weight;
    if (load < best) {
      best = load;
      chosen = candidate;
      tiedWeight = candidate.weight;
    } else if (load === best) {
      // keep each tied candidate with probability weight / (weight of the tied so far)
      tiedWeight += candidate.weight;
      if (random() * tiedWeight < candidate.weight) chosen = candidate;
    }
  }
  return chosen;
}

/** A weighted random choice among items with weight > 0, or undefined when there is none. */
export function pickWeighted<T extends { weight: number }>(items: readonly T[], random: () => number = Math.random): T | undefined {
  let total = 0;
  for (const item of items) total += Math.max(0, item.weight);
  if (total <= 0) return undefined;
  let r = random() * total;
  for (const item of items) {
    r -= Math.max(0, item.weight);
    if (r < 0) return item;
  }
  return items.findLast((item) => item.weight > 0);
}
