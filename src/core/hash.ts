/** Non-cryptographic string hashing shared by the balancer (prefix blocks, sessions) and the simulator. */

/**
 * A 53-bit hash of `text[from, to)` (two 32-bit multiplicative lanes, cyrb53-style). 53 bits keep
 * collisions negligible for the millions of prompt blocks a router remembers, the result is a plain
 * number (a cheap Map key), and hashing a range avoids slicing a long prompt into substrings.
 */
export function hash53(text: string, seed = 0, from = 0, to = text.length): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}
