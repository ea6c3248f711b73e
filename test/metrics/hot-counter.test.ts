/**
 * HotCounter (src/metrics/hot-counter.ts): the prom-client behaviour it relies on, and that what it
 * exposes is what one prom-client `inc` per event exposes — values to the bit, series in the same
 * order, seeded series at 0, removed series gone until their next event.
 */
import { describe, expect, it } from '@jest/globals';
import { Counter, Registry } from 'prom-client';
import { HotCounter } from '../../src/metrics/hot-counter.js';

/** A deterministic generator (no flaky seeds). */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return state / 0x7fffffff;
  };
}

function hot(registry = new Registry()): HotCounter<'pool' | 'result', [pool: string, result: string]> {
  return new HotCounter({ name: 'hot_total', help: 'h', labelNames: ['pool', 'result'], registers: [registry] });
}

/** The samples as prom-client reads them (this runs `collect`). */
async function values(counter: { get(): Promise<{ values: { labels: object; value: number }[] }> }): Promise<[string, number][]> {
  return (await counter.get()).values.map((v) => [JSON.stringify(v.labels), v.value]);
}

describe('prom-client, as HotCounter uses it', () => {
  it('runs a counter’s collect, and awaits it, before reading its values (registry.metrics, getMetricsAsJSON, get)', async () => {
    const registry = new Registry();
    let pending = 0;
    const counter = new Counter({
      name: 'c_total',
      help: 'h',
      labelNames: ['l'],
      registers: [registry],
      async collect() {
        await Promise.resolve();
        this.inc({ l: 'a' }, pending);
        pending = 0;
      },
    });
    pending = 2;
    expect(await registry.metrics()).toContain('c_total{l="a"} 2');
    pending = 3;
    expect((await registry.getMetricsAsJSON())[0]?.values).toEqual([{ value: 5, labels: { l: 'a' } }]);
    pending = 4;
    expect((await counter.get()).values).toEqual([{ value: 9, labels: { l: 'a' } }]);
  });

  it('creates a series at 0 on inc(labels, 0), shows series in the order they were created with their labels in the object’s order, and remove deletes one', async () => {
    const registry = new Registry();
    const counter = new Counter({ name: 'c_total', help: 'h', labelNames: ['a', 'b'], registers: [registry] });
    counter.inc({ a: 'x', b: 'y' }, 0);
    counter.inc({ b: 'q', a: 'p' });
    expect(await registry.metrics()).toContain('c_total{a="x",b="y"} 0\nc_total{b="q",a="p"} 1\n');
    counter.remove({ a: 'x', b: 'y' });
    expect(await values(counter)).toEqual([[JSON.stringify({ b: 'q', a: 'p' }), 1]]);
    counter.inc({ a: 'x', b: 'y' }, 2);
    expect(await registry.metrics()).toContain('c_total{b="q",a="p"} 1\nc_total{a="x",b="y"} 2\n');
  });
});

describe('HotCounter', () => {
  it('shows every event counted before a scrape, and the same counts again at the next scrape', async () => {
    const registry = new Registry();
    const counter = hot(registry);
    counter.inc(1, 'p', 'hit');
    counter.inc(2, 'p', 'hit');
    counter.inc(1, 'q', 'miss');
    const first = await registry.metrics();
    expect(first).toContain('hot_total{pool="p",result="hit"} 3\nhot_total{pool="q",result="miss"} 1\n');
    expect(await registry.metrics()).toBe(first);
    expect(await values(counter.counter)).toEqual([
      ['{"pool":"p","result":"hit"}', 3],
      ['{"pool":"q","result":"miss"}', 1],
    ]);
    counter.inc(4, 'q', 'miss');
    expect(await values(counter.counter)).toEqual([
      ['{"pool":"p","result":"hit"}', 3],
      ['{"pool":"q","result":"miss"}', 5],
    ]);
  });

  it('seeds a series at 0 that stays 0 until its first event, and seeding again changes nothing', async () => {
    const counter = hot();
    counter.seed('p', 'hit');
    expect(await values(counter.counter)).toEqual([['{"pool":"p","result":"hit"}', 0]]);
    counter.seed('p', 'hit');
    expect(await values(counter.counter)).toEqual([['{"pool":"p","result":"hit"}', 0]]);
    counter.inc(1, 'p', 'hit');
    counter.seed('p', 'hit');
    expect(await values(counter.counter)).toEqual([['{"pool":"p","result":"hit"}', 1]]);
  });

  it('removes a series with its pending events; a later event starts it again from 0, after the series that stayed', async () => {
    const counter = hot();
    counter.inc(5, 'gone', 'hit');
    counter.inc(1, 'kept', 'hit');
    expect(await values(counter.counter)).toHaveLength(2);
    counter.inc(7, 'gone', 'hit'); // pending when removed: must not come back
    counter.removeWhere((labels) => labels.pool === 'gone');
    expect(await values(counter.counter)).toEqual([['{"pool":"kept","result":"hit"}', 1]]);
    expect(await values(counter.counter)).toEqual([['{"pool":"kept","result":"hit"}', 1]]);
    counter.inc(2, 'gone', 'hit');
    expect(await values(counter.counter)).toEqual([
      ['{"pool":"kept","result":"hit"}', 1],
      ['{"pool":"gone","result":"hit"}', 2],
    ]);
  });

  it('removes a seeded series that was never flushed without creating it', async () => {
    const counter = hot();
    counter.seed('gone', 'hit');
    counter.removeWhere(() => true);
    expect(await values(counter.counter)).toEqual([]);
  });

  it('keeps many label sets apart, and takes a number label as its string', async () => {
    const registry = new Registry();
    const counter = new HotCounter<'route' | 'pool' | 'endpoint' | 'code', [route: string, pool: string, endpoint: string, code: number]>({
      name: 'many_total',
      help: 'h',
      labelNames: ['route', 'pool', 'endpoint', 'code'],
      registers: [registry],
    });
    const expected = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      const [route, pool, endpoint, code] = [`r${i % 3}`, `p${i % 5}`, `e${i % 7}`, 200 + (i % 11)] as const;
      counter.inc(i % 4, route, pool, endpoint, code);
      const key = JSON.stringify({ route, pool, endpoint, code: String(code) });
      expected.set(key, (expected.get(key) ?? 0) + (i % 4));
    }
    const got = await values(counter.counter);
    expect(got).toHaveLength(expected.size);
    expect(new Map(got)).toEqual(expected);
    counter.removeWhere((labels) => labels.endpoint === 'e3');
    const left = await values(counter.counter);
    expect(left.every(([labels]) => !labels.includes('"e3"'))).toBe(true);
    expect(left).toHaveLength([...expected.keys()].filter((k) => !k.includes('"e3"')).length);
  });

  it('refuses a counter without labels or with more than four', () => {
    expect(() => new HotCounter({ name: 'none_total', help: 'h', labelNames: [], registers: [] })).toThrow('one to four labels');
    expect(() => new HotCounter({ name: 'five_total', help: 'h', labelNames: ['a', 'b', 'c', 'd', 'e'], registers: [] })).toThrow('one to four labels');
  });

  it('throws on a negative increment, as prom-client does', () => {
    expect(() => hot().inc(-1, 'p', 'hit')).toThrow('It is not possible to decrease a counter');
  });

  it('exposes what one prom-client inc per event exposes, to the bit and in the same series order, across scrapes, seeds and removals', async () => {
    for (const seed of [1, 2, 3, 4]) {
      const next = random(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)] as T;
      const hotRegistry = new Registry();
      const plainRegistry = new Registry();
      const counter = hot(hotRegistry);
      const plain = new Counter({ name: 'hot_total', help: 'h', labelNames: ['pool', 'result'], registers: [plainRegistry] });
      const pools = ['a', 'b', 'c', 'd', ''];
      for (let step = 0; step < 3000; step++) {
        const x = next();
        const pool = pick(pools);
        const result = pick(['hit', 'miss']);
        if (x < 0.6) {
          // whole blocks, power-of-two fractions (batched exactly) and fractions no double holds exactly (counted one by one)
          const value = pick([1, 3, 1000, 2 ** 52]) * (next() < 0.3 ? 0 : 1) + pick([0, 0.25, 17 / 64, 0.1, 1 / 3, 2 / 7]);
          counter.inc(value, pool, result);
          plain.inc({ pool, result }, value);
        } else if (x < 0.75) {
          counter.seed(pool, result);
          plain.inc({ pool, result }, 0);
        } else if (x < 0.8) {
          counter.removeWhere((labels) => labels.pool === pool);
          for (const r of ['hit', 'miss']) plain.remove({ pool, result: r });
        } else if (x < 0.9) {
          expect(await hotRegistry.metrics()).toBe(await plainRegistry.metrics());
        }
      }
      expect(await hotRegistry.metrics()).toBe(await plainRegistry.metrics());
      expect(await hotRegistry.getMetricsAsJSON()).toEqual(await plainRegistry.getMetricsAsJSON());
    }
  });
});
