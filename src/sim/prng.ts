/** Seeded randomness and hashing for the simulator: same inputs, same text, same vectors. */

/** A generator of floats in [0, 1). */
export type Rng = () => number;

/** mulberry32: tiny, fast, good enough to make synthetic text and vectors reproducible. */
export function createRng(seed: number): Rng {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export { hash53 } from '../core/hash.js';

/** A standard normal sample (Box–Muller). */
export function gaussian(rng: Rng): number {
  const u = 1 - rng();
  const v = rng();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}
