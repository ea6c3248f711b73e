/**
 * Least outstanding requests by power of two choices: draw two distinct candidates with probability
 * proportional to their weight, send to the one with fewer outstanding requests per unit of weight.
 * A tie goes to the first draw, which is itself random and weighted: so on an idle fleet each endpoint
 * gets exactly its weight's share (a coin flip between the two would under-serve heavy endpoints, a
 * weighted flip would count the weight twice). Pure: the caller supplies loads and randomness.
 */
import { type Endpoint } from '../core/types.js';

function drawWeighted(candidates: readonly Endpoint[], skip: number, random: () => number): number {
  let total = 0;
  for (let i = 0; i < candidates.length; i++) if (i !== skip) total += candidates[i]?.weight ?? 0;
  let r = random() * total;
  for (let i = 0; i < candidates.length; i++) {
    if (i === skip) continue;
    r -= candidates[i]?.weight ?? 0;
    if (r < 0) return i;
  }
  // rounding left r at ~0: take the last eligible candidate
  return skip === candidates.length - 1 ? candidates.length - 2 : candidates.length - 1;
}

export function pickLeastOutstanding(
  candidates: readonly Endpoint[],
  outstanding: (endpoint: Endpoint) => number,
  random: () => number = Math.random,
): Endpoint | undefined {
  if (candidates.length <= 1) return candidates[0];
  const a = candidates[drawWeighted(candidates, -1, random)] as Endpoint;
  const b = candidates[drawWeighted(candidates, candidates.indexOf(a), random)] as Endpoint;
  const loadA = outstanding(a) / a.weight;
  const loadB = outstanding(b) / b.weight;
  return loadB < loadA ? b : a;
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
