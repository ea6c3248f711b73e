/** The balancer as a table of scenarios: loads and randomness in, picks out. */
import { describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { pickLeastOutstanding, pickWeighted } from '../../src/balancer/least-outstanding.js';
import { type Endpoint } from '../../src/core/types.js';
import { createRng } from '../../src/sim/prng.js';

const ep = (id: string, weight = 1): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight });
/** Randomness that replays `values` in order. */
const replay = (...values: number[]): (() => number) => {
  let i = 0;
  return () => values[i++ % values.length] ?? 0;
};

describe('pickLeastOutstanding', () => {
  it.each([
    ['no candidates', [], {}, [0.1], undefined],
    ['a single candidate, however loaded', [ep('a')], { a: 99 }, [0.1], 'a'],
    ['the least loaded', [ep('a'), ep('b')], { a: 3, b: 1 }, [0.1], 'b'],
    ['the least loaded of many, wherever it sits', [ep('a'), ep('b'), ep('c'), ep('d')], { a: 2, b: 5, c: 0, d: 1 }, [0.1], 'c'],
    ['on a tie, by the draw (keeps the first)', [ep('a'), ep('b')], {}, [0.9], 'a'],
    ['on a tie, by the draw (takes the second)', [ep('a'), ep('b')], {}, [0.1], 'b'],
    ['only among the tied: the busier one is never drawn', [ep('a'), ep('b'), ep('c')], { a: 1, b: 0, c: 0 }, [0.9], 'b'],
    ['load per unit of weight: 4 on weight 4 beats 2 on weight 1', [ep('a', 4), ep('b', 1)], { a: 4, b: 2 }, [0.1], 'a'],
  ])('picks %s', (_name, candidates, loads, random, expected) => {
    const load = loads as Record<string, number>;
    const picked = pickLeastOutstanding(candidates, (e) => load[e.id] ?? 0, replay(...random));
    expect(picked?.id).toBe(expected);
  });

  it('gives each endpoint exactly its weight’s share when loads are equal', () => {
    const candidates = [ep('a', 3), ep('b', 1), ep('c', 1), ep('d', 0.5)];
    const rng = createRng(11);
    const counts: Record<string, number> = {};
    for (let i = 0; i < 20000; i++) {
      const id = pickLeastOutstanding(candidates, () => 0, rng)?.id ?? '';
      counts[id] = (counts[id] ?? 0) + 1;
    }
    const total = 3 + 1 + 1 + 0.5;
    for (const c of candidates) expect(Math.abs((counts[c.id] ?? 0) / 20000 - c.weight / total)).toBeLessThan(0.015);
  });

  it('always picks a replica with the fewest outstanding requests per unit of weight', () => {
    const rng = createRng(3);
    for (let i = 0; i < 1000; i++) {
      const candidates = Array.from({ length: 1 + Math.floor(rng() * 12) }, (_, j) => ep(`e${j}`, 1 + Math.floor(rng() * 3)));
      const load = new Map(candidates.map((c) => [c.id, Math.floor(rng() * 6)]));
      const per = (c: Endpoint): number => load.get(c.id)! / c.weight;
      const picked = pickLeastOutstanding(candidates, (c) => load.get(c.id)!, rng)!;
      expect(per(picked)).toBe(Math.min(...candidates.map(per)));
    }
  });
});

describe('pickWeighted', () => {
  it.each([
    ['nothing when every weight is 0', [{ id: 'a', weight: 0 }], [0.5], undefined],
    ['the first item below the drawn point', [{ id: 'a', weight: 1 }, { id: 'b', weight: 3 }], [0.2], 'a'],
    ['later items for higher draws', [{ id: 'a', weight: 1 }, { id: 'b', weight: 3 }], [0.3], 'b'],
    ['skipping zero weights', [{ id: 'a', weight: 0 }, { id: 'b', weight: 2 }], [0.99], 'b'],
  ])('returns %s', (_name, items, random, expected) => {
    expect(pickWeighted(items, replay(...random))?.id).toBe(expected);
  });
});

describe('InFlight', () => {
  it('counts per endpoint and releases idempotently, never below zero', () => {
    const inFlight = new InFlight();
    const r1 = inFlight.acquire('a');
    const r2 = inFlight.acquire('a');
    inFlight.acquire('b');
    expect([inFlight.count('a'), inFlight.count('b'), inFlight.total()]).toEqual([2, 1, 3]);
    r1();
    r1();
    r1();
    expect(inFlight.count('a')).toBe(1);
    r2();
    expect(inFlight.count('a')).toBe(0);
    expect([...inFlight.entries()]).toEqual([['b', 1]]);
  });
});
