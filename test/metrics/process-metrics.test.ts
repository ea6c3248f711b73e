/**
 * Node's process metrics as the router registers them (metrics/process.ts): prom-client's default
 * set without the series that walk every open handle at each scrape and without the GC histogram,
 * and `process_open_fds` read without blocking. The collectors are run one by one from prom-client's
 * files: these tests pin that against prom-client's own list and what collectDefaultMetrics registers.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { DEFAULT_COLLECTORS, GC_SERIES, MISNAMED_SERIES, PER_HANDLE_SERIES, registerProcessMetrics, SKIPPED_COLLECTORS } from '../../src/metrics/process.js';

const registry = new Registry();
beforeAll(() => registerProcessMetrics(registry));
const scrape = (): Promise<string> => registry.metrics();

describe('registerProcessMetrics', () => {
  it('keeps the default series that cost nothing per connection', async () => {
    const text = await scrape();
    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'process_max_fds',
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_heap_space_size_used_bytes',
      'nodejs_version_info',
    ]) {
      expect(text).toContain(`# TYPE ${name} `);
    }
  });

  it('runs every default collector prom-client lists but the four left out, so a new one in an upgrade is noticed', () => {
    expect([...DEFAULT_COLLECTORS, ...SKIPPED_COLLECTORS].sort()).toEqual([...collectDefaultMetrics.metricsList].sort());
  });

  it('registers exactly what collectDefaultMetrics would, less the series left out, each of the same type', async () => {
    const all = new Registry();
    collectDefaultMetrics({ register: all });
    const types = (text: string): string[] =>
      text
        .split('\n')
        .filter((line) => line.startsWith('# TYPE '))
        .sort();
    const left = new Set([...PER_HANDLE_SERIES.filter((n) => n !== 'process_open_fds'), ...MISNAMED_SERIES, ...GC_SERIES]);
    const expected = types(await all.metrics()).filter((line) => !left.has(line.split(' ')[2] ?? ''));
    expect(types(await scrape())).toEqual(expected);
  });

  it('has no GC histogram (its PerformanceObserver costs old-generation garbage at every collection)', async () => {
    expect(await scrape()).not.toContain('nodejs_gc_duration_seconds');
  });

  it('leaves out the series that list every open handle', async () => {
    const text = await scrape();
    for (const name of PER_HANDLE_SERIES.filter((n) => n !== 'process_open_fds')) expect(text).not.toContain(`# TYPE ${name} `);
  });

  it('leaves out the gauges named like counters (`_total`), which promtool check metrics rejects', async () => {
    const text = await scrape();
    for (const name of MISNAMED_SERIES) expect(text).not.toContain(`# TYPE ${name} `);
    expect(text).not.toMatch(/^# TYPE \S+_total gauge$/m);
  });

  it('still counts open file descriptors on Linux', async () => {
    if (process.platform !== 'linux') return;
    const value = /^process_open_fds (\d+)$/m.exec(await scrape())?.[1];
    expect(Number(value)).toBeGreaterThan(0);
  });
});
