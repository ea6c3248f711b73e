/**
 * A weighted random choice among items with weight > 0 (deployment targets → pools), or undefined
 * when there is none. Pure: the caller supplies randomness.
 */
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
