/**
 * Node's process metrics (`process_*`, `nodejs_*`): prom-client's default set, less three kinds of
 * series.
 *
 * - **Series whose collection walks every open handle.** With 5,000 streams open (10,000 sockets)
 *   those walks held the event loop for 30–50 ms at each /metrics scrape, against 1–4 ms without them
 *   (issue 18): listing every handle for `nodejs_active_handles` and `nodejs_active_resources` (and
 *   their `_total`), and a synchronous read of /proc/self/fd for `process_open_fds`. The handle and
 *   resource series are left out (the router's in-flight gauges count what matters there);
 *   `process_open_fds` is kept, read on the thread pool.
 * - **`nodejs_active_requests_total`**: a gauge named like a counter, which `promtool check metrics`
 *   rejects (and the sum of `nodejs_active_requests` by type).
 * - **`nodejs_gc_duration_seconds`.** prom-client times collections with a `gc` PerformanceObserver,
 *   and while one observes, Node builds an entry for every collection with two deprecated accessors
 *   (`kind`, `flags`, each a `util.deprecate` wrapper whose prototype is set): new hidden classes and
 *   objects that outlive the young generation, at every minor GC. At 500 streams/s that was 30–40% of the
 *   old generation's growth (205–241 → 142–149 KB/s, `--trace-gc-nvp`), so full collections — 5–9 ms pauses —
 *   came that much more often. A collection's pause still shows as event-loop lag
 *   (`nodejs_eventloop_lag_*`), and the heap's size in `nodejs_heap_*`.
 *
 * prom-client registers its default set only in one go (`collectDefaultMetrics`, which would start the
 * GC observer), so the collectors are run one by one from its `lib/metrics/` files, the one place the
 * router leans on prom-client's layout; `test/metrics/process-metrics.test.ts` pins the list against
 * `collectDefaultMetrics.metricsList` and the series against what `collectDefaultMetrics` registers.
 */
import { readdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { Gauge, Registry } from './prom.js';

/** Default series whose collection costs a walk over every open handle at each scrape. */
export const PER_HANDLE_SERIES: readonly string[] = ['nodejs_active_handles', 'nodejs_active_handles_total', 'nodejs_active_resources', 'nodejs_active_resources_total', 'process_open_fds'];
/** Default gauges named `_total` (a counter's suffix), which Prometheus' linter rejects. */
export const MISNAMED_SERIES: readonly string[] = ['nodejs_active_requests_total'];
/** The default histogram whose collection costs old-generation garbage at every GC. */
export const GC_SERIES: readonly string[] = ['nodejs_gc_duration_seconds'];

/**
 * prom-client's default collectors the router runs, by their names in `collectDefaultMetrics.metricsList`
 * (each its file in `prom-client/lib/metrics/`). Left out: `processOpenFileDescriptors`,
 * `processHandles` and `processResources` (per-handle walks; the first replaced below) and `gc`.
 */
export const DEFAULT_COLLECTORS: readonly string[] = [
  'processCpuTotal',
  'processStartTime',
  'osMemoryHeap',
  'processMaxFileDescriptors',
  'eventLoopLag',
  'processRequests',
  'heapSizeAndUsed',
  'heapSpacesSizeAndUsed',
  'version',
];
/** prom-client's default collectors left out. */
export const SKIPPED_COLLECTORS: readonly string[] = ['processOpenFileDescriptors', 'processHandles', 'processResources', 'gc'];

type Collector = (registry: Registry, config: { eventLoopMonitoringPrecision: number }) => void;
const require = createRequire(import.meta.url);

/** Registers Node's process metrics in `registry`: the per-handle series left out or made cheap, no GC histogram. */
export function registerProcessMetrics(registry: Registry): void {
  // built aside, then the misnamed gauge dropped (its collector registers it with the one kept)
  const defaults = new Registry();
  // collectDefaultMetrics' own default for the event-loop delay histogram's resolution (ms)
  for (const name of DEFAULT_COLLECTORS) (require(`prom-client/lib/metrics/${name}.js`) as Collector)(defaults, { eventLoopMonitoringPrecision: 10 });
  for (const { name } of defaults.getMetricsAsArray()) {
    const metric = defaults.getSingleMetric(name);
    if (metric && !MISNAMED_SERIES.includes(name)) registry.registerMetric(metric);
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
