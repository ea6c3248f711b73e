/** The scheduler and its scorers as tables of scenarios: loads, engine samples, prefixes and randomness in, picks out. */
import { describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { choose, schedule, scheduleBuffers } from '../../src/balancer/scheduler.js';
import { estimatedLoads, loadScores, SCORERS, type ScoringInput } from '../../src/balancer/scorers.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { pickWeighted } from '../../src/balancer/weighted.js';
import { SCORER_NAMES, type EngineLoad, type Endpoint, type RoutingSettings, type ScorerName } from '../../src/core/types.js';
import { createRng } from '../../src/sim/prng.js';

const ep = (id: string, weight = 1): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight });
/** Randomness that replays `values` in order. */
const replay = (...values: number[]): (() => number) => {
  let i = 0;
  return () => values[i++ % values.length] ?? 0;
};
const only = (name: ScorerName): RoutingSettings => ({ ...ROUTING_DEFAULTS, scorers: [{ name, weight: 1 }] });
const LOR = only('outstanding');
const sample = (waiting: number, running: number, kvCacheUsage?: number, localAtSample = 0): EngineLoad => ({
  waiting,
  running,
  at: 0,
  localAtSample,
  ...(kvCacheUsage === undefined ? {} : { kvCacheUsage }),
});
const input = (over: Partial<ScoringInput>): ScoringInput => {
  const candidates = over.candidates ?? [ep('a'), ep('b'), ep('c')];
  const local = over.local ?? candidates.map(() => 0);
  const engine = over.engine ?? candidates.map(() => undefined);
  return {
    candidates,
    local,
    engine,
    load: estimatedLoads(candidates, local, engine),
    prefixMatched: candidates.map(() => 0),
    prefixTotal: 0,
    sessionKey: undefined,
    settings: ROUTING_DEFAULTS,
    ...over,
  };
};
const scores = (values: Float64Array): number[] => [...values].map((v) => Math.round(v * 1000) / 1000);

describe('schedule with the outstanding scorer alone (least outstanding requests)', () => {
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
    const picked = schedule(
      candidates,
      candidates.map((c) => load[c.id] ?? 0),
      [],
      {},
      LOR,
      replay(...random),
    );
    expect(picked?.endpoint.id).toBe(expected);
  });

  it('gives each endpoint exactly its weight’s share when loads are equal', () => {
    const candidates = [ep('a', 3), ep('b', 1), ep('c', 1), ep('d', 0.5)];
    const rng = createRng(11);
    const counts: Record<string, number> = {};
    for (let i = 0; i < 20000; i++) {
      const id = schedule(candidates, [0, 0, 0, 0], [], {}, LOR, rng)?.endpoint.id ?? '';
      counts[id] = (counts[id] ?? 0) + 1;
    }
    const total = 3 + 1 + 1 + 0.5;
    for (const c of candidates) expect(Math.abs((counts[c.id] ?? 0) / 20000 - c.weight / total)).toBeLessThan(0.015);
  });

  it('always picks a replica with the fewest outstanding requests per unit of weight', () => {
    const rng = createRng(3);
    for (let i = 0; i < 1000; i++) {
      const candidates = Array.from({ length: 1 + Math.floor(rng() * 12) }, (_, j) => ep(`e${j}`, 1 + Math.floor(rng() * 3)));
      const local = candidates.map(() => Math.floor(rng() * 6));
      const per = candidates.map((c, j) => (local[j] as number) / c.weight);
      const picked = schedule(candidates, local, [], {}, LOR, rng)!;
      expect(per[picked.index]).toBe(Math.min(...per));
    }
  });
});

describe('the default profile', () => {
  it('is least outstanding requests when there are no engine samples, prefixes or sessions', () => {
    const rng = createRng(5);
    for (let i = 0; i < 500; i++) {
      const candidates = Array.from({ length: 2 + Math.floor(rng() * 8) }, (_, j) => ep(`e${j}`));
      const local = candidates.map(() => Math.floor(rng() * 10));
      const picked = schedule(candidates, local, [], {}, ROUTING_DEFAULTS, rng)!;
      expect(local[picked.index]).toBe(Math.min(...local));
    }
  });

  it.each([
    ['a full prefix match beats one request more', { local: [1, 0, 0], prefixMatched: [10, 0, 0], prefixTotal: 10 }, 'a'],
    ['a full prefix match does not beat a load gap above maxLoadGap (4)', { local: [5, 0, 0], prefixMatched: [10, 0, 0], prefixTotal: 10 }, 'b'],
    ['the longer of two matches wins', { local: [0, 0, 0], prefixMatched: [3, 8, 0], prefixTotal: 10 }, 'b'],
    ['a session goes where its key maps, over a prefix match', { local: [0, 0, 0], prefixMatched: [10, 0, 0], prefixTotal: 10, sessionKey: 'conversation-7' }, 'session'],
    ['the engine queue breaks what local counts cannot see (another router’s traffic)', { local: [0, 0, 0], engine: [sample(4, 8), sample(0, 1), sample(0, 8)] }, 'b'],
  ])('%s', (_name, over, expected) => {
    const candidates = [ep('a'), ep('b'), ep('c')];
    const o = over as { local: number[]; engine?: EngineLoad[]; prefixMatched?: number[]; prefixTotal?: number; sessionKey?: string };
    const picked = schedule(candidates, o.local, o.engine ?? [], { prefixMatched: o.prefixMatched, prefixTotal: o.prefixTotal, sessionKey: o.sessionKey }, ROUTING_DEFAULTS, replay(0.5))!;
    if (expected === 'session') {
      const again = schedule(candidates, [0, 0, 0], [], { sessionKey: o.sessionKey }, only('session'), replay(0.5))!;
      expect(picked.endpoint.id).toBe(again.endpoint.id);
      expect(picked.endpoint.id).not.toBe('a'); // the key 'conversation-7' maps elsewhere than the prefix holder
    } else {
      expect(picked.endpoint.id).toBe(expected);
    }
  });

  it('skips scorers of weight 0', () => {
    const settings: RoutingSettings = {
      ...ROUTING_DEFAULTS,
      scorers: [
        { name: 'outstanding', weight: 1 },
        { name: 'prefix', weight: 0 },
      ],
    };
    const picked = schedule([ep('a'), ep('b')], [1, 0], [], { prefixMatched: [10, 0], prefixTotal: 10 }, settings, replay(0.5));
    expect(picked?.endpoint.id).toBe('b');
  });
});

describe('scorers', () => {
  it.each([
    ['lower is better, as a ratio to the least loaded: (min + 1)/(x + 1)', [0, 1, 3], [1, 0.5, 0.25]],
    ['one more in a full batch is a small difference', [7, 8], [1, 0.889]],
    ['all equal: every one scores 1', [3, 3, 3], [1, 1, 1]],
    ['unknown values get the mean of the known scores', [0, undefined, 3], [1, 0.625, 0.25]],
    ['nothing known: every one scores 1', [undefined, undefined], [1, 1]],
  ])('loadScores: %s', (_name, values, expected) => {
    expect(scores(loadScores(values))).toEqual(expected);
  });

  it.each([
    ['no sample: local outstanding per weight', [ep('a'), ep('b', 2)], [2, 2], [undefined, undefined], [2, 1]],
    ['the engine reports more (other routers): its figure, moved by local sends since', [ep('a')], [3], [sample(2, 6, undefined, 1)], [10]],
    ['the engine reports less (a sample from before our sends): the local count', [ep('a')], [5], [sample(0, 1, undefined, 1)], [5]],
  ])('estimatedLoads: %s', (_name, candidates, local, engine, expected) => {
    expect(estimatedLoads(candidates, local, engine)).toEqual(expected);
  });

  it.each<[string, ScorerName, Partial<ScoringInput>, number[]]>([
    ['outstanding: fewest local requests per weight', 'outstanding', { local: [3, 1, 0] }, [0.25, 0.5, 1]],
    ['queue: fewest engine-reported requests', 'queue', { engine: [sample(2, 1), sample(0, 1), sample(0, 0)] }, [0.25, 0.5, 1]],
    ['queue: a replica without a fresh sample is neutral', 'queue', { engine: [sample(0, 3), undefined, sample(0, 0)] }, [0.25, 0.625, 1]],
    ['queue: no samples at all scores everyone the same', 'queue', {}, [1, 1, 1]],
    ['kv-cache: free cache', 'kv-cache', { engine: [sample(0, 0, 0.9), sample(0, 0, 0.2), sample(0, 0)] }, [0.1, 0.8, 0.45]],
    ['prefix: matched share of the prompt', 'prefix', { prefixMatched: [0, 5, 10], prefixTotal: 10 }, [0, 0.5, 1]],
    ['prefix: nothing to match', 'prefix', { prefixMatched: [0, 0, 0], prefixTotal: 0 }, [0, 0, 0]],
    ['prefix: the load guard zeroes a match on a replica more than maxLoadGap above the least loaded', 'prefix', { local: [5, 0, 4], prefixMatched: [10, 0, 10], prefixTotal: 10 }, [0, 0, 1]],
    ['session: no key, no preference', 'session', {}, [0, 0, 0]],
  ])('%s', (_name, scorer, over, expected) => {
    expect(scores(SCORERS[scorer](input(over)))).toEqual(expected);
  });

  it('session: exactly one replica scores 1 for a key, the same one every time', () => {
    const first = scores(SCORERS.session(input({ sessionKey: 'abc' })));
    expect(first.filter((s) => s === 1)).toHaveLength(1);
    expect(scores(SCORERS.session(input({ sessionKey: 'abc' })))).toEqual(first);
  });
});

describe('scorers over a whole fleet: in place, to the same bits as the rule', () => {
  /** Random candidates with random loads, engine samples (some missing, some without KV-cache use) and prefix matches. */
  function fleet(rng: () => number): ScoringInput {
    const candidates = Array.from({ length: 1 + Math.floor(rng() * 9) }, (_, i) => ep(`e${i}`, [0.5, 1, 1, 2, 3][Math.floor(rng() * 5)]));
    const local = candidates.map(() => Math.floor(rng() * 8));
    const engine = candidates.map(() => (rng() < 0.3 ? undefined : sample(Math.floor(rng() * 6), Math.floor(rng() * 6), rng() < 0.3 ? undefined : rng() * 1.2 - 0.1, Math.floor(rng() * 3))));
    const prefixTotal = rng() < 0.3 ? 0 : 10;
    return input({ candidates, local, engine, prefixMatched: candidates.map(() => Math.floor(rng() * 11)), prefixTotal, sessionKey: rng() < 0.3 ? `s${Math.floor(rng() * 9)}` : undefined });
  }

  it('outstanding and queue score as loadScores does, over their signals', () => {
    const rng = createRng(29);
    for (let run = 0; run < 1000; run++) {
      const scoring = fleet(rng);
      const { candidates, local, engine, load } = scoring;
      expect(SCORERS.outstanding(scoring)).toEqual(loadScores(candidates.map((c, i) => (local[i] as number) / c.weight)));
      expect(SCORERS.queue(scoring)).toEqual(loadScores(candidates.map((_, i) => (engine[i] ? load[i] : undefined))));
    }
  });

  it('kv-cache clamps as Math.min and Math.max do', () => {
    const rng = createRng(31);
    for (let run = 0; run < 1000; run++) {
      const scoring = fleet(rng);
      const usage = scoring.candidates.map((_, i) => scoring.engine[i]?.kvCacheUsage);
      const known = usage.filter((u): u is number => u !== undefined);
      const neutral = known.length === 0 ? 1 : known.reduce((a, u) => a + (1 - Math.min(1, u)), 0) / known.length;
      expect(SCORERS['kv-cache'](scoring)).toEqual(Float64Array.from(usage, (u) => (u === undefined ? neutral : 1 - Math.min(1, Math.max(0, u)))));
    }
  });

  it.each(SCORER_NAMES)('%s adds its scores, times a weight, to what is already there', (name) => {
    const rng = createRng(37);
    for (let run = 0; run < 200; run++) {
      const scoring = fleet(rng);
      const scores = SCORERS[name](scoring);
      const base = Float64Array.from(scoring.candidates, () => rng());
      expect(SCORERS[name](scoring, Float64Array.from(base), 2.5)).toEqual(base.map((b, i) => b + 2.5 * (scores[i] as number)));
    }
  });

  it('choose, over the first `count` entries of buffers a pick reuses, decides as schedule does and draws as often', () => {
    const rng = createRng(41);
    const buffers = scheduleBuffers(32);
    const profiles: RoutingSettings[] = [ROUTING_DEFAULTS, LOR, only('queue'), only('kv-cache'), only('prefix'), only('session')];
    for (let run = 0; run < 2000; run++) {
      const { candidates, local, engine, prefixMatched, prefixTotal, sessionKey } = fleet(rng);
      const settings = profiles[run % profiles.length] as RoutingSettings;
      const seed = Math.floor(rng() * 1e9);
      const [drawsA, drawsB] = [createRng(seed), createRng(seed)];
      const expected = schedule(candidates, Array.from(local), engine, { prefixMatched: Array.from(prefixMatched), prefixTotal, sessionKey }, settings, drawsA);
      // stale entries past `count`, as a buffer has after a pick over a larger pool
      buffers.load.fill(7);
      buffers.total.fill(-3);
      const pad = <T>(values: ArrayLike<T>, stale: T): T[] => [...Array.from(values), stale, stale, stale];
      const count = candidates.length;
      const index = choose(
        { candidates: pad(candidates, ep('stale')), count, local: pad(local, 0), engine: pad(engine, sample(0, 0, 0)), prefixMatched: pad(prefixMatched, 10), prefixTotal, sessionKey, settings },
        buffers,
        drawsB,
      );
      expect(index).toBe(expected?.index ?? -1);
      expect(drawsB()).toBe(drawsA());
    }
  });
});

describe('pickWeighted', () => {
  it.each([
    ['nothing when every weight is 0', [{ id: 'a', weight: 0 }], [0.5], undefined],
    [
      'the first item below the drawn point',
      [
        { id: 'a', weight: 1 },
        { id: 'b', weight: 3 },
      ],
      [0.2],
      'a',
    ],
    [
      'later items for higher draws',
      [
        { id: 'a', weight: 1 },
        { id: 'b', weight: 3 },
      ],
      [0.3],
      'b',
    ],
    [
      'skipping zero weights',
      [
        { id: 'a', weight: 0 },
        { id: 'b', weight: 2 },
      ],
      [0.99],
      'b',
    ],
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
