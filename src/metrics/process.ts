/**
 * Node's process metrics (`process_*`, `nodejs_*`): prom-client's default set, less the series whose
 * collection walks every open handle. With 5,000 streams open (10,000 sockets) those walks held the
 * event loop for 30–50 ms at each /metrics scrape, against 1–4 ms without them (issue 18):
 * listing every handle for `nodejs_active_handles` and `nodejs_active_resources` (and their `_total`),
 * and a synchronous read of /proc/self/fd for `process_open_fds`. The handle and resource series are
 * left out (the router's in-flight gauges count what matters there); `process_open_fds` is kept, read
 * on the thread pool. `nodejs_active_requests_total` is left out as well: a gauge named like a counter,
 * which `promtool check metrics` rejects (and the sum of `nodejs_active_requests` by type).
 */
import { readdir } from 'node:fs/promises';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';

/** Default series whose collection costs a walk over every open handle at each scrape. */
export const PER_HANDLE_SERIES: readonly string[] = ['nodejs_active_handles', 'nodejs_active_handles_total', 'nodejs_active_resources', 'nodejs_active_resources_total', 'process_open_fds'];
/** Default gauges named `_total` (a counter's suffix), which Prometheus' linter rejects. */
export const MISNAMED_SERIES: readonly string[] = ['nodejs_active_requests_total'];

/** Registers Node's process metrics in `registry`, the per-handle series left out or made cheap. */
export function registerProcessMetrics(registry: Registry): void {
  // prom-client registers its set in one go: build it aside, then keep what is cheap to collect.
  const defaults = new Registry();
  collectDefaultMetrics({ register: defaults });
  for (const { name } of defaults.getMetricsAsArray()) {
    const metric = defaults.getSingleMetric(name);
    if (metric && !PER_HANDLE_SERIES.includes(name) && !MISNAMED_SERIES.includes(name)) registry.registerMetric(metric);
  }
  if (process.platform === 'linux') {
    new Gauge({
      name: 'process_open_fds',
      help: 'Number of open file descriptors.',
      registers: [registry],
      // a readdir of 10,000 entries takes 7–12 ms: on the thread pool, the event loop does not wait for it
      async collect() {
        try {
          this.set((await readdir('/proc/self/fd')).length - 1); // less the descriptor readdir itself held
        } catch {
          // /proc not mounted: the series stays at its last value
        }
      },
    });
  }
}
