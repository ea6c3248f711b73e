/**
 * Node's process metrics as the router registers them (metrics/process.ts): prom-client's default
 * set without the series that walk every open handle at each scrape, and `process_open_fds` read
 * without blocking.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { Registry } from 'prom-client';
import { MISNAMED_SERIES, PER_HANDLE_SERIES, registerProcessMetrics } from '../../src/metrics/process.js';

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
      'nodejs_gc_duration_seconds',
      'nodejs_version_info',
    ]) {
      expect(text).toContain(`# TYPE ${name} `);
    }
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
