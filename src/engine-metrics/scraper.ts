/**
 * Scrapes each replica's own `/metrics` (queue, running batch, KV-cache use) so the balancer can see
 * load that other routers, or clients going around this one, put on a replica. A sample is served
 * only while fresh; a failed, timed-out or unparsable scrape, or a page without the engine's load
 * series (even an idle TGI's), drops it at once, so a stuck replica is never judged by its last good
 * answer, nor a broken one's empty page read as an idle replica.
 */
import { type Scheduler } from '../core/clock.js';
import { type Endpoint, type EndpointSource, type EngineLoad, type EngineLoadSource, type PoolSpec } from '../core/types.js';
import { ENGINE_SERIES, idlePage, readEngineLoad, type EngineSeries } from './engine-maps.js';
import { createMetricsFetcher, ScrapeError, type FetchText, type MetricsFetcher } from './fetch-text.js';

/**
 * `empty`: a TGI or TEI page without its queue gauges, as before the replica's first request (or from a
 * broken replica): no sample, like a failure, but not logged as one ({@link idlePage}).
 */
export type ScrapeResult = 'ok' | 'error' | 'timeout' | 'unparsable' | 'empty';

export interface EngineMetricsScraperDeps {
  endpoints: EndpointSource;
  pools: () => readonly PoolSpec[];
  scheduler: Scheduler;
  now: () => number;
  /** This router's outstanding requests to a replica, stored with each sample. */
  localCount: (endpointId: string) => number;
  /** Defaults to `node:http`/`node:https` over keep-alive agents the scraper owns. */
  fetchText?: FetchText;
  /** Called once per finished scrape; not for scrapes cut short by `stop()` or a removed endpoint. */
  onScrape?: (pool: string, endpoint: string, result: ScrapeResult) => void;
  /** Scrapes in flight at once over all pools (default 16). */
  maxConcurrent?: number;
  /**
   * A replica's scrapes fail: {@link FAILING_AFTER} in a row, the last one's result and why. Said once;
   * a replica that keeps failing is not said again until a scrape works.
   */
  onFailing?: (pool: string, endpoint: string, result: Exclude<ScrapeResult, 'ok'>, why: string) => void;
  /** A replica said to be failing answered again, after `failed` failed scrapes. */
  onRecovered?: (pool: string, endpoint: string, failed: number) => void;
}

const DEFAULT_MAX_CONCURRENT = 16;
/** Failed scrapes in a row before a replica is said to be failing: one that fails now and then (a slow answer) is not. */
export const FAILING_AFTER = 3;
const DEFAULT_PATH = '/metrics';
/** The tick follows the most frequent enabled pool, within these bounds (the upper one notices new pools). */
const MIN_TICK_MS = 100;
const MAX_TICK_MS = 5_000;

interface Sample {
  pool: string;
  load: EngineLoad;
  staleAfterMs: number;
}

/** One endpoint's scrape from dispatch to its end; `abort` cancels it queued or in flight. */
interface Scrape {
  pool: PoolSpec;
  series: EngineSeries;
  endpoint: Endpoint;
  controller: AbortController;
  timedOut: boolean;
  finish: () => void;
}

/**
 * Periodically scrapes every endpoint of every pool whose engine has a series map and whose
 * `routing.engineMetrics.enabled` is set. Per replica: at most one scrape at a time (a replica still
 * answering is skipped, so a slow one never holds the others back), each bounded by the pool's
 * `timeoutMs`. Overall: at most `maxConcurrent` scrapes in flight, the rest wait in order.
 */
export class EngineMetricsScraper implements EngineLoadSource {
  private readonly current = new Map<string, Sample>();
  private readonly lastStart = new Map<string, number>();
  /** Replicas whose scrapes are failing: how many have failed in a row. */
  private readonly failing = new Map<string, number>();
  /** Every endpoint with a scrape queued or in flight. */
  private readonly busy = new Map<string, Scrape>();
  private readonly queue: Scrape[] = [];
  private readonly maxConcurrent: number;
  private active = 0;
  private fetcher: MetricsFetcher | undefined;
  private timer: unknown;
  /** `idle` until `start()`; `runOnce()` works in `idle` and `running`, and does nothing once `stopped`. */
  private state: 'idle' | 'running' | 'stopped' = 'idle';

  constructor(private readonly deps: EngineMetricsScraperDeps) {
    this.maxConcurrent = Math.max(1, deps.maxConcurrent ?? DEFAULT_MAX_CONCURRENT);
  }

  /** The replica's last sample while `now() - at <= staleAfterMs` of its pool; otherwise undefined. */
  load(endpointId: string, now = this.deps.now()): EngineLoad | undefined {
    const sample = this.current.get(endpointId);
    return sample && now - sample.load.at <= sample.staleAfterMs ? sample.load : undefined;
  }

  now(): number {
    return this.deps.now();
  }

  /** Every fresh sample, for gauges. */
  *samples(): Iterable<{ pool: string; endpoint: string; load: EngineLoad }> {
    for (const [endpoint, sample] of this.current) if (this.isFresh(sample)) yield { pool: sample.pool, endpoint, load: sample.load };
  }

  /** Scrapes now and then on every tick; `start()` after `stop()` resumes. */
  start(): void {
    if (this.state === 'running') return;
    this.state = 'running';
    this.schedule(0);
  }

  /** Clears the timer, drops queued scrapes, aborts those in flight and closes the scraper's connections. */
  stop(): void {
    this.state = 'stopped';
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
    for (const scrape of [...this.busy.values()]) scrape.controller.abort();
    // An aborted scrape did not happen: after `start()` every replica is due again.
    this.lastStart.clear();
    this.fetcher?.close();
    this.fetcher = undefined;
  }

  /**
   * One round: dispatches a scrape for every due endpoint (its interval, to the nearest tick, passed
   * since its last scrape began; none in flight) and forgets endpoints no enabled pool lists any more. Resolves when the
   * scrapes it dispatched have ended; never rejects.
   */
  runOnce(): Promise<void> {
    if (this.state === 'stopped') return Promise.resolve();
    const now = this.deps.now();
    // A replica is due at the tick nearest its interval: a timer may fire a hair before the interval
    // has passed on this clock, and "next tick" would then double the interval.
    const slack = this.tickMs() / 2;
    const eligible = new Set<string>();
    const dispatched: Array<Promise<void>> = [];
    for (const pool of this.deps.pools()) {
      const series = ENGINE_SERIES[pool.engine];
      if (!series || !pool.routing.engineMetrics.enabled) continue;
      for (const endpoint of this.deps.endpoints.snapshot(pool.name)) {
        if (eligible.has(endpoint.id)) continue;
        eligible.add(endpoint.id);
        if (this.busy.has(endpoint.id) || now - (this.lastStart.get(endpoint.id) ?? -Infinity) < pool.routing.engineMetrics.intervalMs - slack) continue;
        this.lastStart.set(endpoint.id, now);
        dispatched.push(this.enqueue(pool, series, endpoint));
      }
    }
    this.forgetExcept(eligible);
    this.pump();
    return Promise.all(dispatched).then(() => undefined);
  }

  private isFresh(sample: Sample): boolean {
    return this.deps.now() - sample.load.at <= sample.staleAfterMs;
  }

  private forgetExcept(eligible: ReadonlySet<string>): void {
    for (const id of this.current.keys()) if (!eligible.has(id)) this.current.delete(id);
    for (const id of this.lastStart.keys()) if (!eligible.has(id)) this.lastStart.delete(id);
    for (const id of this.failing.keys()) if (!eligible.has(id)) this.failing.delete(id);
    for (const [id, scrape] of this.busy) if (!eligible.has(id)) scrape.controller.abort();
  }

  private enqueue(pool: PoolSpec, series: EngineSeries, endpoint: Endpoint): Promise<void> {
    return new Promise((finish) => {
      const scrape: Scrape = { pool, series, endpoint, controller: new AbortController(), timedOut: false, finish };
      this.busy.set(endpoint.id, scrape);
      // Aborted while queued: leave at once; in flight, `run` sees the abort.
      scrape.controller.signal.addEventListener('abort', () => {
        const at = this.queue.indexOf(scrape);
        if (at >= 0) {
          this.queue.splice(at, 1);
          this.end(scrape);
        }
      });
      this.queue.push(scrape);
    });
  }

  private pump(): void {
    while (this.active < this.maxConcurrent && this.state !== 'stopped') {
      const scrape = this.queue.shift();
      if (!scrape) return;
      this.active++;
      // `run` settles every scrape itself; only a throwing `onScrape` could reject, and that must not stop the scraper.
      void this.run(scrape)
        .catch(() => undefined)
        .finally(() => {
          this.active--;
          this.end(scrape);
          this.pump();
        });
    }
  }

  private end(scrape: Scrape): void {
    if (this.busy.get(scrape.endpoint.id) === scrape) this.busy.delete(scrape.endpoint.id);
    scrape.finish();
  }

  private async run(scrape: Scrape): Promise<void> {
    const { pool, endpoint, controller } = scrape;
    const settings = pool.routing.engineMetrics;
    const watchdog = this.deps.scheduler.setTimeout(() => {
      scrape.timedOut = true;
      controller.abort();
    }, settings.timeoutMs);
    controller.signal.addEventListener('abort', () => this.deps.scheduler.clearTimeout(watchdog), { once: true });
    let result: ScrapeResult;
    let why = '';
    try {
      const fetchText = this.deps.fetchText ?? (this.fetcher ??= createMetricsFetcher()).fetchText;
      const url = new URL(settings.path ?? DEFAULT_PATH, endpoint.url);
      const res = await untilAborted(fetchText(url, settings.timeoutMs, controller.signal), controller.signal);
      if (controller.signal.aborted && !scrape.timedOut) return;
      result = this.record(scrape, res.status, res.text);
      if (result === 'error') why = `${url.pathname} answered HTTP ${res.status}`;
      else if (result === 'unparsable') why = `${url.pathname} has none of the ${pool.engine} series the router reads`;
    } catch (err) {
      if (controller.signal.aborted && !scrape.timedOut) return;
      result = scrape.timedOut || (err instanceof ScrapeError && err.code === 'SCRAPE_TIMEOUT') ? 'timeout' : 'error';
      why = result === 'timeout' ? `no whole answer within ${settings.timeoutMs} ms` : errorText(err);
    } finally {
      this.deps.scheduler.clearTimeout(watchdog);
    }
    if (result !== 'ok') this.current.delete(endpoint.id);
    // an empty page is no signal, but the replica answered: its scrapes work, as an idle TGI's do
    this.note(pool.name, endpoint.id, result === 'empty' ? 'ok' : result, why);
    this.deps.onScrape?.(pool.name, endpoint.id, result);
  }

  /** Tells when a replica's scrapes begin to fail, and when they work again. */
  private note(pool: string, endpoint: string, result: ScrapeResult, why: string): void {
    const failed = this.failing.get(endpoint);
    if (result === 'ok') {
      if (failed === undefined) return;
      this.failing.delete(endpoint);
      if (failed >= FAILING_AFTER) this.deps.onRecovered?.(pool, endpoint, failed);
      return;
    }
    const now = (failed ?? 0) + 1;
    this.failing.set(endpoint, now);
    if (now === FAILING_AFTER) this.deps.onFailing?.(pool, endpoint, result, why);
  }

  /** Stores the sample of a finished response; what went wrong otherwise. */
  private record(scrape: Scrape, status: number, text: string): ScrapeResult {
    if (status < 200 || status > 299) return 'error';
    const at = this.deps.now();
    const localAtSample = this.deps.localCount(scrape.endpoint.id);
    const parsed = readEngineLoad(scrape.series, text);
    if (!parsed) return idlePage(scrape.series, text) ? 'empty' : 'unparsable';
    const load: EngineLoad = { ...parsed, at, localAtSample };
    this.current.set(scrape.endpoint.id, { pool: scrape.pool.name, load: Object.freeze(load), staleAfterMs: scrape.pool.routing.engineMetrics.staleAfterMs });
    return 'ok';
  }

  private schedule(ms: number): void {
    if (this.state !== 'running') return;
    this.timer = this.deps.scheduler.setTimeout(() => {
      this.timer = undefined;
      // Dispatch is synchronous, so rounds never overlap; the tick does not wait for slow scrapes.
      void this.runOnce();
      this.schedule(this.tickMs());
    }, ms);
  }

  private tickMs(): number {
    const intervals = this.deps
      .pools()
      .filter((p) => p.routing.engineMetrics.enabled && ENGINE_SERIES[p.engine] !== undefined)
      .map((p) => p.routing.engineMetrics.intervalMs);
    return Math.max(MIN_TICK_MS, Math.min(MAX_TICK_MS, ...intervals));
  }
}

/**
 * What went wrong, in words: an error's message, else its code. A connection refused at every address
 * of a host name (Node's AggregateError, whose own message is empty) says each address's.
 */
export function errorText(err: unknown): string {
  if (err instanceof AggregateError && err.message === '') {
    const each = err.errors.map(errorText).filter((text) => text !== '');
    if (each.length > 0) return each.join('; ');
  }
  if (err instanceof Error) return err.message || String((err as NodeJS.ErrnoException).code ?? err.name);
  return String(err);
}

/** `work`, or a rejection as soon as `signal` aborts: an injected fetch may ignore the signal. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    void work.finally(() => signal.removeEventListener('abort', onAbort)).then(resolve, reject);
  });
}
