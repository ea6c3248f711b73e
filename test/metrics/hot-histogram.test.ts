/**
 * HotHistogram (src/metrics/hot-histogram.ts) writes into prom-client's own record of each series:
 * these tests pin that what a scrape shows is what a plain prom-client Histogram fed the same values
 * shows — buckets, sums to the bit, counts, series order — through scrapes, removals and values on and
 * past the bucket bounds. A prom-client release that keeps its series differently fails here.
 */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { Histogram, Registry } from 'prom-client';
import { HotHistogram } from '../../src/metrics/hot-histogram.js';

const BUCKETS = [0.001, 0.0025, 0.01, 0.1, 1, 10];

function pair(): { hot: HotHistogram<'deployment' | 'pool'>; plain: Histogram<'deployment' | 'pool'>; hotRegistry: Registry; plainRegistry: Registry } {
  const hotRegistry = new Registry();
  const plainRegistry = new Registry();
  const config = { name: 'itl_seconds', help: 'gaps', labelNames: ['deployment', 'pool'] as ['deployment', 'pool'], buckets: BUCKETS };
  const hot = new HotHistogram({ ...config, registers: [hotRegistry] });
  const plain = new Histogram({ ...config, registers: [plainRegistry] });
  return { hot, plain, hotRegistry, plainRegistry };
}

/** Both expositions (text and JSON), which must be equal. */
async function scrapes(p: ReturnType<typeof pair>): Promise<[string, string, unknown, unknown]> {
  return [await p.hotRegistry.metrics(), await p.plainRegistry.metrics(), await p.hotRegistry.getMetricsAsJSON(), await p.plainRegistry.getMetricsAsJSON()];
}

describe('HotHistogram', () => {
  it('scrapes as a prom-client Histogram fed the same values, whatever the values, labels and scrapes between them (property)', async () => {
    const value = fc.oneof(fc.constantFrom(0, ...BUCKETS, 10.000001, 60), fc.double({ min: 0, max: 20, noNaN: true }), fc.double({ min: 0, max: 0.01, noNaN: true }));
    const step = fc.oneof(
      { weight: 8, arbitrary: fc.record({ deployment: fc.constantFrom('d1', 'd2'), pool: fc.constantFrom('a', 'b', 'c'), value }) },
      { weight: 1, arbitrary: fc.constant('scrape' as const) },
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 60 }), async (steps) => {
        const p = pair();
        for (const s of steps) {
          if (s === 'scrape') {
            const [hotText, plainText] = await scrapes(p);
            expect(hotText).toBe(plainText);
            continue;
          }
          p.hot.observe(s.deployment, s.pool, s.value);
          p.plain.observe({ deployment: s.deployment, pool: s.pool }, s.value);
        }
        const [hotText, plainText, hotJson, plainJson] = await scrapes(p);
        expect(hotText).toBe(plainText);
        expect(hotJson).toEqual(plainJson);
      }),
      { numRuns: 200 },
    );
  });

  it('keeps a sum of many small gaps to the bit', async () => {
    const p = pair();
    for (let i = 0; i < 10_000; i++) {
      const gap = (i % 97) * 0.000_137 + 0.000_01;
      p.hot.observe('d', 'a', gap);
      p.plain.observe({ deployment: 'd', pool: 'a' }, gap);
    }
    const [hotText, plainText] = await scrapes(p);
    expect(hotText).toContain('itl_seconds_count{deployment="d",pool="a"} 10000');
    expect(hotText).toBe(plainText);
  });

  it('removes the series its predicate names, and a later value starts that series again from nothing', async () => {
    const p = pair();
    for (const [pool, v] of [
      ['a', 0.002],
      ['b', 0.5],
      ['a', 3],
    ] as const) {
      p.hot.observe('d', pool, v);
      p.plain.observe({ deployment: 'd', pool }, v);
    }
    p.hot.removeWhere((labels) => labels.pool === 'a');
    p.plain.remove({ deployment: 'd', pool: 'a' });
    let [hotText, plainText] = await scrapes(p);
    expect(hotText).not.toContain('pool="a"');
    expect(hotText).toContain('pool="b"');
    expect(hotText).toBe(plainText);
    p.hot.observe('d', 'a', 0.05);
    p.plain.observe({ deployment: 'd', pool: 'a' }, 0.05);
    [hotText, plainText] = await scrapes(p);
    expect(hotText).toContain('itl_seconds_count{deployment="d",pool="a"} 1');
    expect(hotText).toBe(plainText);
  });

  it('refuses a value that is not a finite number, as prom-client does, and records nothing for it', async () => {
    const p = pair();
    p.hot.observe('d', 'a', 0.01);
    p.plain.observe({ deployment: 'd', pool: 'a' }, 0.01);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => p.hot.observe('d', 'a', bad)).toThrow(TypeError);
      expect(() => p.plain.observe({ deployment: 'd', pool: 'a' }, bad)).toThrow(TypeError);
    }
    const [hotText, plainText] = await scrapes(p);
    expect(hotText).toBe(plainText);
  });

  it('refuses buckets that do not ascend', () => {
    expect(() => new HotHistogram({ name: 'x_seconds', help: 'h', labelNames: ['deployment', 'pool'], buckets: [0.1, 0.01], registers: [] })).toThrow(/ascend/);
  });
});
