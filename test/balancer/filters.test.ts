/** The pure filters over a pick's snapshot: who may take the request, in input order. */
import { describe, expect, it } from '@jest/globals';
import { breakerAllows, healthy, mayPick, pickable, skipsTried, underConcurrencyLimit, untried, usable, type CandidateState } from '../../src/balancer/filters.js';
import { createRng } from '../../src/sim/prng.js';

function candidate(id: string, state: Partial<Omit<CandidateState, 'endpoint'>> & { weight?: number } = {}): CandidateState {
  const { weight = 1, ...rest } = state;
  return {
    endpoint: { id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight },
    healthy: true,
    breakerAvailable: true,
    inFlight: 0,
    tried: false,
    ...rest,
  };
}

const ids = (candidates: readonly CandidateState[]): string[] => candidates.map((c) => c.endpoint.id);

describe('healthy', () => {
  it.each([
    { case: 'all healthy: all, in order', input: [candidate('c'), candidate('a'), candidate('b')], out: ['c', 'a', 'b'] },
    { case: 'unhealthy ones out', input: [candidate('a', { healthy: false }), candidate('b'), candidate('c', { healthy: false }), candidate('d')], out: ['b', 'd'] },
    { case: 'none healthy: none', input: [candidate('a', { healthy: false })], out: [] },
    { case: 'ignores the other fields', input: [candidate('a', { breakerAvailable: false, tried: true, inFlight: 99 })], out: ['a'] },
    { case: 'empty in, empty out', input: [], out: [] },
  ])('$case', ({ input, out }) => {
    expect(ids(healthy(input))).toEqual(out);
  });
});

describe('breakerAllows', () => {
  it.each([
    { case: 'all closed: all, in order', input: [candidate('b'), candidate('a')], out: ['b', 'a'] },
    { case: 'open ones out', input: [candidate('a'), candidate('b', { breakerAvailable: false }), candidate('c')], out: ['a', 'c'] },
    { case: 'none available: none', input: [candidate('a', { breakerAvailable: false }), candidate('b', { breakerAvailable: false })], out: [] },
    { case: 'ignores health', input: [candidate('a', { healthy: false })], out: ['a'] },
  ])('$case', ({ input, out }) => {
    expect(ids(breakerAllows(input))).toEqual(out);
  });
});

describe('untried', () => {
  it.each([
    { case: 'none tried: all', input: [candidate('a'), candidate('b')], out: ['a', 'b'] },
    { case: 'tried ones out', input: [candidate('a', { tried: true }), candidate('b'), candidate('c', { tried: true }), candidate('d')], out: ['b', 'd'] },
    { case: 'every candidate tried: all may be tried again, in order', input: [candidate('b', { tried: true }), candidate('a', { tried: true })], out: ['b', 'a'] },
    { case: 'empty in, empty out', input: [], out: [] },
  ])('$case', ({ input, out }) => {
    expect(ids(untried(input))).toEqual(out);
  });

  it('returns a new array, never its input', () => {
    const input = [candidate('a', { tried: true })];
    const out = untried(input);
    expect(out).toEqual(input);
    expect(out).not.toBe(input);
  });
});

describe('underConcurrencyLimit', () => {
  it.each([
    { case: 'under the limit: in', limit: 2, input: [candidate('a', { inFlight: 0 }), candidate('b', { inFlight: 1 })], out: ['a', 'b'] },
    { case: 'at the limit: out', limit: 2, input: [candidate('a', { inFlight: 2 }), candidate('b', { inFlight: 1 })], out: ['b'] },
    { case: 'over the limit: out', limit: 1, input: [candidate('a', { inFlight: 5 })], out: [] },
    { case: 'weight 2 doubles the limit', limit: 2, input: [candidate('a', { inFlight: 3, weight: 2 }), candidate('b', { inFlight: 3 })], out: ['a'] },
    { case: 'weight 2 at twice the limit: out', limit: 2, input: [candidate('a', { inFlight: 4, weight: 2 })], out: [] },
    { case: 'weight 0.5 halves the limit', limit: 2, input: [candidate('a', { inFlight: 1, weight: 0.5 }), candidate('b', { inFlight: 0, weight: 0.5 })], out: ['b'] },
    { case: 'limit 0 is no limit', limit: 0, input: [candidate('a', { inFlight: 1_000 }), candidate('b', { inFlight: 0 })], out: ['a', 'b'] },
    { case: 'order preserved', limit: 3, input: [candidate('c'), candidate('x', { inFlight: 3 }), candidate('a'), candidate('b')], out: ['c', 'a', 'b'] },
  ])('$case', ({ limit, input, out }) => {
    expect(ids(underConcurrencyLimit(limit)(input))).toEqual(out);
  });
});

describe('usable', () => {
  it.each([
    { case: 'healthy and breaker available', input: [candidate('a'), candidate('b', { healthy: false }), candidate('c', { breakerAvailable: false }), candidate('d')], out: ['a', 'd'] },
    { case: 'tried and busy ones stay usable', input: [candidate('a', { tried: true, inFlight: 50 })], out: ['a'] },
    { case: 'nothing usable', input: [candidate('a', { healthy: false }), candidate('b', { breakerAvailable: false })], out: [] },
  ])('$case', ({ input, out }) => {
    expect(ids(usable(input))).toEqual(out);
  });
});

describe('pickable', () => {
  it.each([
    { case: 'all fine: all, in order', limit: 0, input: [candidate('b'), candidate('a')], out: ['b', 'a'] },
    { case: 'unusable out before the tried check', limit: 0, input: [candidate('a', { tried: true }), candidate('b', { healthy: false }), candidate('c', { breakerAvailable: false })], out: ['a'] },
    { case: 'untried preferred', limit: 0, input: [candidate('a', { tried: true }), candidate('b'), candidate('c')], out: ['b', 'c'] },
    { case: 'every usable one tried: any usable again', limit: 0, input: [candidate('a', { tried: true }), candidate('b', { tried: true }), candidate('c', { healthy: false })], out: ['a', 'b'] },
    { case: 'concurrency limit applied to the untried', limit: 1, input: [candidate('a', { tried: true }), candidate('b', { inFlight: 1 }), candidate('c')], out: ['c'] },
    { case: 'untried but full: nothing (a tried free one is not taken instead)', limit: 1, input: [candidate('a', { tried: true }), candidate('b', { inFlight: 1 })], out: [] },
    { case: 'every one full: nothing', limit: 1, input: [candidate('a', { inFlight: 1 }), candidate('b', { inFlight: 2 })], out: [] },
    { case: 'weight raises an endpoint’s limit', limit: 1, input: [candidate('a', { inFlight: 1 }), candidate('b', { inFlight: 1, weight: 2 })], out: ['b'] },
  ])('$case', ({ limit, input, out }) => {
    expect(ids(pickable(input, limit))).toEqual(out);
  });

  it('keeps the candidates’ own objects (the picker reads inFlight from them)', () => {
    const a = candidate('a', { inFlight: 1 });
    expect(pickable([a], 2)[0]).toBe(a);
  });
});

describe('skipsTried and mayPick: pickable over endpoints already known to be usable', () => {
  it('leave out what pickable leaves out, over random pools', () => {
    const rng = createRng(23);
    for (let run = 0; run < 2000; run++) {
      const limit = [0, 1, 2][Math.floor(rng() * 3)] as number;
      const input = Array.from({ length: Math.floor(rng() * 6) }, (_, i) =>
        candidate(`e${i}`, { tried: rng() < 0.4, inFlight: Math.floor(rng() * 4), weight: [0.5, 1, 2][Math.floor(rng() * 3)] as number }),
      );
      const tried = new Set(input.filter((c) => c.tried).map((c) => c.endpoint.id));
      const skip = skipsTried(
        input.map((c) => c.endpoint),
        tried,
      );
      const kept = input.filter((c) => mayPick(c.endpoint, c.inFlight, tried.has(c.endpoint.id), skip, limit));
      expect(ids(kept)).toEqual(ids(pickable(input, limit)));
    }
  });

  it.each([
    { case: 'nothing tried', tried: [], skip: false },
    { case: 'one of two tried', tried: ['a'], skip: true },
    { case: 'both tried', tried: ['a', 'b'], skip: false },
    { case: 'only ids that are not in the pool tried', tried: ['gone'], skip: true },
  ])('skipsTried: $case → $skip', ({ tried, skip }) => {
    expect(skipsTried([candidate('a').endpoint, candidate('b').endpoint], new Set(tried))).toBe(skip);
  });
});
