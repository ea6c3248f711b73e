/** Session affinity: rendezvous hashing with bounded load. */
import { describe, expect, it } from '@jest/globals';
import { sessionTarget } from '../../src/balancer/session-affinity.js';
import { hash53 } from '../../src/core/hash.js';
import { type Endpoint } from '../../src/core/types.js';
import { createRng } from '../../src/sim/prng.js';

const ep = (id: string, weight = 1): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight });
const fleet = (n: number): Endpoint[] => Array.from({ length: n }, (_, i) => ep(`replica-${i + 1}`));
const idle = (): number => 0;
const keys = Array.from({ length: 4000 }, (_, i) => `session-${i}`);

describe('sessionTarget', () => {
  it('maps a key to the same replica every time, and spreads keys evenly', () => {
    const replicas = fleet(4);
    const counts = new Map<number, number>();
    for (const key of keys) {
      const at = sessionTarget(replicas, key, idle, 1.25);
      expect(sessionTarget(replicas, key, idle, 1.25)).toBe(at);
      counts.set(at, (counts.get(at) ?? 0) + 1);
    }
    for (const i of [0, 1, 2, 3]) expect(Math.abs((counts.get(i) ?? 0) / keys.length - 0.25)).toBeLessThan(0.03);
  });

  it('is consistent: removing a replica moves only the sessions it had, adding one takes only a fair share', () => {
    const four = fleet(4);
    const three = four.slice(0, 3);
    const five = fleet(5);
    let moved = 0;
    let joined = 0;
    for (const key of keys) {
      const before = four[sessionTarget(four, key, idle, 1.25)]!.id;
      const after = three[sessionTarget(three, key, idle, 1.25)]!.id;
      if (before !== four[3]!.id) expect(after).toBe(before);
      else moved++;
      const grown = five[sessionTarget(five, key, idle, 1.25)]!.id;
      if (grown !== before) {
        expect(grown).toBe(five[4]!.id);
        joined++;
      }
    }
    expect(moved / keys.length).toBeCloseTo(0.25, 1);
    expect(joined / keys.length).toBeCloseTo(0.2, 1);
  });

  it('follows weights', () => {
    const replicas = [ep('a', 3), ep('b', 1)];
    const onA = keys.filter((key) => sessionTarget(replicas, key, idle, 1.25) === 0).length;
    expect(onA / keys.length).toBeCloseTo(0.75, 1);
  });

  it.each([
    ['stays put with one request in flight on a nearly idle fleet', [1, 0, 0, 0], 'home'],
    ['stays put a little above the mean', [14, 10, 10, 10], 'home'],
    ['moves to its next choice at loadFactor × mean + 1 or more', [16, 10, 10, 10], 'next'],
    ['moves when its replica is buried and the rest are idle', [2, 0, 0, 0], 'next'],
  ])('bounded load: %s', (_name, loads, expected) => {
    const replicas = fleet(4);
    // find a key whose home is replica 0, then load replica 0
    const key = keys.find((k) => sessionTarget(replicas, k, idle, 1.25) === 0)!;
    const at = sessionTarget(replicas, key, (i) => loads[i]!, 1.25);
    if (expected === 'home') expect(at).toBe(0);
    else {
      expect(at).not.toBe(0);
      // the next choice is stable too
      expect(sessionTarget(replicas, key, (i) => loads[i]!, 1.25)).toBe(at);
    }
  });

  it('has no target without candidates', () => {
    expect(sessionTarget([], 'k', idle, 1.25)).toBe(-1);
  });

  it('chooses as ranking every replica would: the best-ranked under the load bound, else the best-ranked', () => {
    // the rule spelled out: rank by rendezvous score (a stable sort), walk the ranking
    const ranked = (candidates: readonly Endpoint[], key: string, load: (i: number) => number, loadFactor: number): number => {
      const rank = candidates.map((c, i) => ({ i, score: -c.weight / Math.log((hash53(c.id, hash53(key) % 4294967296) + 1) / (2 ** 53 + 2)) }));
      rank.sort((a, b) => b.score - a.score);
      const bound = (loadFactor * candidates.reduce((sum, c, i) => sum + load(i) * c.weight, 0)) / candidates.reduce((sum, c) => sum + c.weight, 0) + 1;
      return (rank.find(({ i }) => load(i) < bound) ?? rank[0])?.i ?? -1;
    };
    const rng = createRng(43);
    for (let run = 0; run < 2000; run++) {
      const replicas = Array.from({ length: 1 + Math.floor(rng() * 8) }, (_, i) => ep(`replica-${i}`, [0.5, 1, 2][Math.floor(rng() * 3)]));
      const loads = replicas.map(() => Math.floor(rng() * 6));
      const key = keys[run % keys.length] as string;
      expect(sessionTarget(replicas, key, (i) => loads[i]!, 1.25)).toBe(ranked(replicas, key, (i) => loads[i]!, 1.25));
    }
  });

  it('takes only the first `count` candidates when told how many there are', () => {
    const replicas = fleet(6);
    for (const key of keys.slice(0, 500)) expect(sessionTarget(replicas, key, idle, 1.25, 4)).toBe(sessionTarget(replicas.slice(0, 4), key, idle, 1.25));
  });
});
