/**
 * The router's Prometheus metrics: one prom-client Registry per router, typed record functions,
 * bounded labels only (route, deployment, pool, endpoint, status code; never a key, user, prompt or
 * request id). Gauges read live state through the sources given at construction.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { type EngineLoad } from '../core/types.js';

export interface MetricSources {
  /** Outstanding requests per endpoint. */
  inFlight(): Iterable<{ pool: string; endpoint: string; count: number }>;
  /** Routable endpoints per pool. */
  readyEndpoints(): Iterable<{ pool: string; count: number }>;
  /** Routable endpoints per deployment, over the pools it targets with a weight above 0. */
  deploymentReadyEndpoints(): Iterable<{ deployment: string; count: number }>;
  /** Admission queue size of each pool that has a concurrency limit. */
  queueLimits(): Iterable<{ pool: string; limit: number }>;
  /** Kubernetes mode: every watch (kind × namespace) and its health. */
  watches?(): Iterable<{ kind: string; namespace: string; up: boolean; lastSyncAt: number | undefined }>;
  /** Kubernetes mode: whether this replica holds the status-writer lease. */
  leader?(): boolean;
}

export type Route = 'chat' | 'embeddings' | 'models' | 'other';

/** Seconds; from a few ms (an embedding) to several minutes (a long generation). */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
/** Time to first token: 10 ms (a cached prefix) to 60 s (a long prompt on a busy engine). */
const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 30, 60];
/** Inter-token latency: 10 ms (a small model) upward; a long gap means a stall. */
const ITL_BUCKETS = [0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 10, 60];

export interface TrafficLabels {
  deployment: string;
  pool: string;
}

export class RouterMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'route' | 'deployment' | 'pool' | 'code'>;
  private readonly duration: Histogram<'route' | 'deployment' | 'pool'>;
  private readonly keyReloads: Counter<'result'>;
  private readonly ttft: Histogram<'deployment' | 'pool'>;
  private readonly itl: Histogram<'deployment' | 'pool'>;
  private readonly promptTokens: Counter<'deployment' | 'pool'>;
  private readonly completionTokens: Counter<'deployment' | 'pool'>;
  private readonly streamEnds: Counter<'deployment' | 'pool' | 'end'>;
  private readonly discoveryEvents: Counter<'kind' | 'type'>;
  private readonly watchRestarts: Counter<'kind' | 'namespace'>;
  private readonly statusWrites: Counter<'kind' | 'result'>;
  private readonly attempts: Counter<'pool' | 'endpoint' | 'outcome'>;
  private readonly retries: Counter<'pool' | 'reason'>;
  private readonly queueWait: Histogram<'pool' | 'result'>;
  private readonly rejected: Counter<'pool' | 'reason'>;
  private readonly prefixBlocks: Counter<'pool' | 'result'>;
  private readonly fallbacks: Counter<'from_deployment' | 'from_pool' | 'to_deployment' | 'to_pool'>;
  private readonly engineScrapes: Counter<'pool' | 'result'>;

  constructor(sources: MetricSources, options: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: 'modelgate_requests_total',
      help: 'Requests answered, by route, deployment, pool and HTTP status code.',
      labelNames: ['route', 'deployment', 'pool', 'code'],
      registers,
    });
    this.duration = new Histogram({
      name: 'modelgate_request_duration_seconds',
      help: 'Time from the request arriving to its response (or stream) ending.',
      labelNames: ['route', 'deployment', 'pool'],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.ttft = new Histogram({
      name: 'modelgate_time_to_first_token_seconds',
      help: 'Streams: from the request sent to the engine to the first event carrying content.',
      labelNames: ['deployment', 'pool'],
      buckets: TTFT_BUCKETS,
      registers,
    });
    this.itl = new Histogram({
      name: 'modelgate_inter_token_latency_seconds',
      help: 'Streams: time between consecutive content events.',
      labelNames: ['deployment', 'pool'],
      buckets: ITL_BUCKETS,
      registers,
    });
    this.promptTokens = new Counter({
      name: 'modelgate_prompt_tokens_total',
      help: 'Prompt tokens, from the usage the engines report (a stream that ended without usage adds none).',
      labelNames: ['deployment', 'pool'],
      registers,
    });
    this.completionTokens = new Counter({
      name: 'modelgate_completion_tokens_total',
      help: 'Completion tokens, from the usage the engines report; for a stream that ended without usage (client gone, stream broken), estimated as one per content event delivered.',
      labelNames: ['deployment', 'pool'],
      registers,
    });
    this.streamEnds = new Counter({
      name: 'modelgate_response_ends_total',
      help: 'How responses that had started ended: complete, client_gone, client_stalled (the client accepted no bytes for server.clientStallTimeoutMs), upstream_broken, idle_timeout, deadline.',
      labelNames: ['deployment', 'pool', 'end'],
      registers,
    });
    new Gauge({
      name: 'modelgate_deployment_ready_endpoints',
      help: 'Routable endpoints across the pools each deployment targets.',
      labelNames: ['deployment'],
      registers,
      collect() {
        this.reset();
        for (const d of sources.deploymentReadyEndpoints()) this.set({ deployment: d.deployment }, d.count);
      },
    });
    new Gauge({
      name: 'modelgate_queue_limit',
      help: 'Admission queue size of each pool with a concurrency limit (queue.maxSize).',
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const q of sources.queueLimits()) this.set({ pool: q.pool }, q.limit);
      },
    });
    this.keyReloads = new Counter({
      name: 'modelgate_keys_reloads_total',
      help: 'Reloads of the API keys file, by result (success or failure).',
      labelNames: ['result'],
      registers,
    });
    new Gauge({
      name: 'modelgate_endpoint_in_flight_requests',
      help: 'Requests this router has outstanding on each endpoint.',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const e of sources.inFlight()) this.set({ pool: e.pool, endpoint: e.endpoint }, e.count);
      },
    });
    new Gauge({
      name: 'modelgate_pool_ready_endpoints',
      help: 'Endpoints of each pool that can take traffic.',
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const p of sources.readyEndpoints()) this.set({ pool: p.pool }, p.count);
      },
    });
    this.discoveryEvents = new Counter({
      name: 'modelgate_discovery_events_total',
      help: 'Watch events applied, by kind (endpointslices, modelpools, modeldeployments) and type (add, update, delete).',
      labelNames: ['kind', 'type'],
      registers,
    });
    this.watchRestarts = new Counter({
      name: 'modelgate_discovery_watch_restarts_total',
      help: 'Watches restarted after an error or a failed relist.',
      labelNames: ['kind', 'namespace'],
      registers,
    });
    this.statusWrites = new Counter({
      name: 'modelgate_status_writes_total',
      help: 'Status writes to ModelPool and ModelDeployment objects, by result.',
      labelNames: ['kind', 'result'],
      registers,
    });
    this.attempts = new Counter({
      name: 'modelgate_upstream_attempts_total',
      help: 'Attempts to forward a request to an endpoint, by outcome (committed, upstream_<status>, connect, reset, first_byte_timeout, …).',
      labelNames: ['pool', 'endpoint', 'outcome'],
      registers,
    });
    this.retries = new Counter({
      name: 'modelgate_retries_total',
      help: 'Requests retried on another endpoint, by the reason the attempt before failed.',
      labelNames: ['pool', 'reason'],
      registers,
    });
    this.queueWait = new Histogram({
      name: 'modelgate_queue_wait_seconds',
      help: 'Time requests waited in a pool\'s admission queue, by how the wait ended (admitted, timeout, abandoned).',
      labelNames: ['pool', 'result'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.rejected = new Counter({
      name: 'modelgate_rejected_requests_total',
      help: 'Requests turned away by admission control, by reason (queue_full, queue_timeout, shed).',
      labelNames: ['pool', 'reason'],
      registers,
    });
    this.prefixBlocks = new Counter({
      name: 'modelgate_prefix_blocks_total',
      help: 'Prompt blocks of routed chat requests, by whether the chosen replica likely had them cached (hit) or not (miss).',
      labelNames: ['pool', 'result'],
      registers,
    });
    this.fallbacks = new Counter({
      name: 'modelgate_fallbacks_total',
      help: 'Requests that moved on to the next pool of their route: no replica of a pool could take them, or every attempt in it failed before the first byte.',
      labelNames: ['from_deployment', 'from_pool', 'to_deployment', 'to_pool'],
      registers,
    });
    this.engineScrapes = new Counter({
      name: 'modelgate_engine_scrapes_total',
      help: "Scrapes of replicas' engine metrics, by result (ok, error, timeout, unparsable).",
      labelNames: ['pool', 'result'],
      registers,
    });
    if (sources.watches) {
      const watches = sources.watches.bind(sources);
      new Gauge({
        name: 'modelgate_discovery_watch_up',
        help: '1 while a watch is healthy, 0 while it is failing (the last known state keeps serving).',
        labelNames: ['kind', 'namespace'],
        registers,
        collect() {
          this.reset();
          for (const w of watches()) this.set({ kind: w.kind, namespace: w.namespace }, w.up ? 1 : 0);
        },
      });
      new Gauge({
        name: 'modelgate_discovery_last_sync_timestamp_seconds',
        help: 'When each watch last completed a full list (Unix seconds).',
        labelNames: ['kind', 'namespace'],
        registers,
        collect() {
          this.reset();
          for (const w of watches()) if (w.lastSyncAt !== undefined) this.set({ kind: w.kind, namespace: w.namespace }, w.lastSyncAt / 1000);
        },
      });
    }
    if (sources.leader) {
      const leader = sources.leader.bind(sources);
      new Gauge({
        name: 'modelgate_leader',
        help: '1 on the replica that holds the status-writer lease.',
        registers,
        collect() {
          this.set(leader() ? 1 : 0);
        },
      });
    }
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number): void {
    this.requests.inc({ route, deployment, pool, code: String(code) });
    if (route === 'chat' || route === 'embeddings') this.duration.observe({ route, deployment, pool }, seconds);
  }

  recordTimeToFirstToken(labels: TrafficLabels, seconds: number): void {
    this.ttft.observe(labels, seconds);
  }

  recordInterToken(labels: TrafficLabels, seconds: number): void {
    this.itl.observe(labels, seconds);
  }

  recordTokens(labels: TrafficLabels, prompt: number, completion: number): void {
    this.promptTokens.inc(labels, prompt);
    if (completion > 0) this.completionTokens.inc(labels, completion);
  }

  recordResponseEnd(labels: TrafficLabels, end: string): void {
    this.streamEnds.inc({ ...labels, end });
  }

  recordKeysReload(ok: boolean): void {
    this.keyReloads.inc({ result: ok ? 'success' : 'failure' });
  }

  recordDiscoveryEvent(kind: string, type: string): void {
    this.discoveryEvents.inc({ kind, type });
  }

  recordWatchRestart(kind: string, namespace: string): void {
    this.watchRestarts.inc({ kind, namespace });
  }

  recordAttempt(pool: string, endpoint: string, outcome: string): void {
    this.attempts.inc({ pool, endpoint, outcome });
  }

  recordRetry(pool: string, reason: string): void {
    this.retries.inc({ pool, reason });
  }

  recordQueueWait(pool: string, seconds: number, result: string): void {
    this.queueWait.observe({ pool, result }, seconds);
  }

  recordRejected(pool: string, reason: string): void {
    this.rejected.inc({ pool, reason });
  }

  recordPrefixBlocks(pool: string, matched: number, total: number): void {
    if (matched > 0) this.prefixBlocks.inc({ pool, result: 'hit' }, matched);
    if (total > matched) this.prefixBlocks.inc({ pool, result: 'miss' }, total - matched);
  }

  recordFallback(fromDeployment: string, fromPool: string, toDeployment: string, toPool: string): void {
    this.fallbacks.inc({ from_deployment: fromDeployment, from_pool: fromPool, to_deployment: toDeployment, to_pool: toPool });
  }

  recordEngineScrape(pool: string, result: string): void {
    this.engineScrapes.inc({ pool, result });
  }

  /** Gauges read from the routing layer at scrape time (registered once). */
  observeRouting(sources: {
    engine: () => Iterable<{ pool: string; endpoint: string; load: EngineLoad }>;
    prefixBlocks: () => number;
  }): void {
    const registers = [this.registry];
    new Gauge({
      name: 'modelgate_engine_requests',
      help: 'Requests each replica reports on its own metrics (fresh samples only), by state: waiting or running.',
      labelNames: ['pool', 'endpoint', 'state'],
      registers,
      collect() {
        this.reset();
        for (const { pool, endpoint, load } of sources.engine()) {
          this.set({ pool, endpoint, state: 'waiting' }, load.waiting);
          this.set({ pool, endpoint, state: 'running' }, load.running);
        }
      },
    });
    new Gauge({
      name: 'modelgate_engine_kv_cache_usage_ratio',
      help: 'KV-cache use each replica reports (0..1; fresh samples only).',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const { pool, endpoint, load } of sources.engine()) if (load.kvCacheUsage !== undefined) this.set({ pool, endpoint }, load.kvCacheUsage);
      },
    });
    new Gauge({
      name: 'modelgate_prefix_index_blocks',
      help: 'Prompt block hashes the prefix-affinity index remembers, over all replicas.',
      registers,
      collect() {
        this.set(sources.prefixBlocks());
      },
    });
  }

  /** Gauges read from the resilience layer at scrape time (registered once). */
  observeResilience(sources: {
    breakers: () => Iterable<{ pool: string; endpoint: string; state: 'closed' | 'open' | 'half-open' }>;
    queues: () => Iterable<{ pool: string; depth: number }>;
  }): void {
    const registers = [this.registry];
    const code = { closed: 0, 'half-open': 1, open: 2 } as const;
    new Gauge({
      name: 'modelgate_breaker_state',
      help: 'Circuit breaker of each endpoint: 0 closed, 1 half-open, 2 open.',
      labelNames: ['pool', 'endpoint'],
      registers,
      collect() {
        this.reset();
        for (const b of sources.breakers()) this.set({ pool: b.pool, endpoint: b.endpoint }, code[b.state]);
      },
    });
    new Gauge({
      name: 'modelgate_queue_depth',
      help: 'Requests waiting in each pool\'s admission queue.',
      labelNames: ['pool'],
      registers,
      collect() {
        this.reset();
        for (const q of sources.queues()) this.set({ pool: q.pool }, q.depth);
      },
    });
  }

  recordStatusWrite(kind: string, ok: boolean): void {
    this.statusWrites.inc({ kind, result: ok ? 'success' : 'failure' });
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
