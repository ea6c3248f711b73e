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
    ['the less loaded of the two drawn', [ep('a'), ep('b')], { a: 3, b: 1 }, [0.1, 0.9], 'b'],
    ['the less loaded, whichever is drawn first', [ep('a'), ep('b')], { a: 1, b: 3 }, [0.9, 0.1], 'a'],
    ['on a tie, the first drawn (a)', [ep('a'), ep('b')], {}, [0.1, 0.9], 'a'],
    ['on a tie, the first drawn (b)', [ep('a'), ep('b')], {}, [0.9, 0.1], 'b'],
    ['load per unit of weight: 4 on weight 4 beats 2 on weight 1', [ep('a', 4), ep('b', 1)], { a: 4, b: 2 }, [0.1, 0.5], 'a'],
    ['only the two drawn: an idle third replica is not seen', [ep('a'), ep('b'), ep('c')], { a: 2, b: 5, c: 0 }, [0.1, 0.4], 'a'],
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

  it('never picks the busiest replica when there are two', () => {
    const rng = createRng(3);
    for (let i = 0; i < 1000; i++) expect(pickLeastOutstanding([ep('a'), ep('b')], (e) => (e.id === 'a' ? 5 : 1), rng)?.id).toBe('b');
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
