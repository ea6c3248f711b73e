/**
 * The status page's data: a {@link StatusSnapshot} of the fleet (deployments → pools → replicas),
 * built on demand from narrow, injected views of the router's live state, plus {@link RecentTraffic},
 * a small ring buffer of per-pool request outcomes and latencies fed from each request's completion.
 *
 * Nothing secret goes in: no keys or key names, no prompts, no backend credentials — only what the
 * Prometheus series already expose (pool, deployment and replica names, counts, states).
 * The JSON shape is documented in the README ("Status page") and versioned by `version`.
 */
import { type EngineLoad, type EndpointSource, type PoolSpec, queueBound, unprobedCountsHealthy } from '../core/types.js';
import { type ModelCatalog } from '../registry/registry.js';
import { type RequestMetrics } from './access-log.js';

/** Bump when a member changes meaning or goes away; adding members does not. */
export const STATUS_VERSION = 1;

/** Defaults of the recent-traffic window (one table, quoted by the README). */
export const RECENT_TRAFFIC_DEFAULTS = {
  /** Width of one latency bucket. */
  bucketMs: 10_000,
  /** Buckets kept per pool: 30 × 10 s = the last five minutes. */
  buckets: 30,
  /** The error rate covers this many most recent buckets (the last minute). */
  errorWindowBuckets: 6,
} as const;

/** Latency histogram bins: geometric, 1 ms × 1.25^i, the last one open-ended (about 10 min and up). */
const BIN_BASE_MS = 1;
const BIN_GROWTH = 1.25;
const BINS = 64;
const LOG_GROWTH = Math.log(BIN_GROWTH);
const binOf = (ms: number): number => (ms <= BIN_BASE_MS ? 0 : Math.min(BINS - 1, Math.ceil(Math.log(ms / BIN_BASE_MS) / LOG_GROWTH)));
const binUpperMs = (bin: number): number => BIN_BASE_MS * BIN_GROWTH ** bin;

/** A replica's circuit breaker, as `resilience/breaker.ts` names its states (declared here: the server layer does not import resilience). */
export type BreakerState = 'closed' | 'open' | 'half-open';

export type ReplicaHealth = 'passing' | 'failing' | 'unprobed' | 'off';

export interface ReplicaStatus {
  /** The replica's id, as the `endpoint` label of the metrics: the pod (`namespace/name`) or the URL. */
  id: string;
  /** Discovered and passing its health checks (as the picker counts ready replicas; breakers aside). */
  ready: boolean;
  health: ReplicaHealth;
  /** `closed` also for a replica whose breaker has not been created yet (no traffic so far). */
  breaker: BreakerState;
  /** Requests this router has outstanding to the replica. */
  inFlight: number;
  /** The engine's last fresh sample; null when none (scraping off, failing, or stale). */
  engine: { waiting: number; running: number; kvCacheUsage: number | null; ageMs: number } | null;
}

export interface LatencyBucket {
  /** Requests completed in the bucket. */
  requests: number;
  /** Approximate percentiles (upper bound of a 25 %-wide histogram bin), null without requests. */
  p50Ms: number | null;
  p95Ms: number | null;
}

export interface PoolStatus {
  name: string;
  engine: string;
  readyReplicas: number;
  /** Requests this router has outstanding to the pool's replicas. */
  inFlight: number;
  /** Requests waiting in the pool's admission queue; `limit` is `queue.maxSize` when the pool limits concurrency or scales from zero, else null. */
  queue: { depth: number; limit: number | null };
  /** Requests waiting for a first ready replica (scale from zero). */
  held: number;
  /** Requests answered over the last `windowSeconds`: all of them, and those answered 5xx. `errorRate` is null without requests. */
  recent: { windowSeconds: number; requests: number; errors: number; errorRate: number | null };
  /** Oldest first, `RECENT_TRAFFIC_DEFAULTS.buckets` buckets of `bucketSeconds`; the last is the current, partial one. */
  latency: LatencyBucket[];
  /**
   * Replicas of the pool answered that they do not serve its `servedModelName` (a misconfigured pool: its
   * requests are answered 502 `served_model_mismatch` when no replica serves it): when the latest did, which,
   * and every one that has not answered the pool since. Null when none has (or since the name changed).
   */
  servedModelMismatch: { seenAt: string; replica: string; replicas: string[] } | null;
  replicas: ReplicaStatus[];
}

export interface DeploymentStatus {
  name: string;
  /** The ModelDeployment's namespace (Kubernetes mode, where two namespaces may each have a deployment of one name); absent in static mode. */
  namespace?: string;
  model: string;
  targets: Array<{ pool: string; weight: number }>;
  fallbacks: string[];
}

export interface StatusSnapshot {
  version: typeof STATUS_VERSION;
  /** Wall-clock time of the snapshot, ISO 8601. */
  generatedAt: string;
  /** Reasons the router is not ready (as /readyz); empty when ready. */
  notReady: string[];
  /** Prompt block hashes the prefix index remembers, over all replicas (router-wide). */
  prefixIndexBlocks: number;
  bucketSeconds: number;
  deployments: DeploymentStatus[];
  pools: PoolStatus[];
}

/** The live state a snapshot reads; each member is a narrow view of one of the router's objects. */
export interface StatusSources {
  /** Monotonic ms, the clock the engine samples are stamped with. */
  now(): number;
  /** Wall-clock ms, for `generatedAt`. */
  wallNow(): number;
  catalog(): Pick<ModelCatalog, 'deployments'>;
  pools(): readonly PoolSpec[];
  endpoints: EndpointSource;
  health: { isHealthy(endpointId: string, unknown?: boolean): boolean };
  breakers: { states(): Iterable<{ endpoint: string; state: BreakerState }> };
  inFlight: { count(endpointId: string): number; poolCount(pool: string): number };
  engine: { samples(): Iterable<{ endpoint: string; load: EngineLoad }> };
  admission: { depth(pool: string): number };
  held(pool: string): number;
  prefixIndexBlocks(): number;
  notReady(): string[];
  recent: RecentTraffic;
  /** Replicas that said they lack their pool's `servedModelName` (wiring/served-model-watch.ts); `at` is wall-clock ms. */
  servedModel: { of(pool: PoolSpec): { at: number; replica: string; replicas: string[] } | undefined };
}

interface Bucket {
  /** Index of the bucket (`floor(now / bucketMs)`); a slot whose index is stale is empty. */
  index: number;
  requests: number;
  errors: number;
  bins: Uint32Array;
}

/**
 * Per pool, a ring of fixed-width time buckets, each counting requests, 5xx answers and a coarse
 * latency histogram. Fed by {@link recordRequest} (the access log's hook, once per finished request);
 * costs one small allocation per pool and bucket, none per request.
 */
export class RecentTraffic implements RequestMetrics {
  private readonly rings = new Map<string, Bucket[]>();

  constructor(
    private readonly now: () => number,
    private readonly settings: { bucketMs: number; buckets: number; errorWindowBuckets: number } = RECENT_TRAFFIC_DEFAULTS,
  ) {}

  /** Requests without a pool (refused before routing) are left out: the page is about pools. */
  recordRequest(_route: string, _deployment: string, pool: string, code: number, seconds: number): void {
    if (pool === '') return;
    const index = Math.floor(this.now() / this.settings.bucketMs);
    let ring = this.rings.get(pool);
    if (!ring) {
      ring = Array.from({ length: this.settings.buckets }, () => ({ index: -1, requests: 0, errors: 0, bins: new Uint32Array(BINS) }));
      this.rings.set(pool, ring);
    }
    const bucket = ring[index % this.settings.buckets]!;
    if (bucket.index !== index) {
      bucket.index = index;
      bucket.requests = 0;
      bucket.errors = 0;
      bucket.bins.fill(0);
    }
    bucket.requests += 1;
    if (code >= 500) bucket.errors += 1;
    bucket.bins[binOf(seconds * 1000)]! += 1;
  }

  /** Forgets pools no longer listed (called when discovery's pools change, and by each snapshot). */
  retain(pools: ReadonlySet<string>): void {
    for (const pool of this.rings.keys()) if (!pools.has(pool)) this.rings.delete(pool);
  }

  /** Pools with a ring (about 8 KiB each). */
  get size(): number {
    return this.rings.size;
  }

  /** The pool's buckets, oldest first, ending with the current one; and its totals over the error window. */
  summary(pool: string): { latency: LatencyBucket[]; recent: PoolStatus['recent'] } {
    const { bucketMs, buckets, errorWindowBuckets } = this.settings;
    const current = Math.floor(this.now() / bucketMs);
    const ring = this.rings.get(pool);
    const latency: LatencyBucket[] = [];
    let requests = 0;
    let errors = 0;
    for (let index = current - buckets + 1; index <= current; index++) {
      const bucket = ring?.[index % buckets];
      const live = bucket !== undefined && bucket.index === index;
      latency.push(live ? { requests: bucket.requests, p50Ms: percentile(bucket, 0.5), p95Ms: percentile(bucket, 0.95) } : { requests: 0, p50Ms: null, p95Ms: null });
      if (live && index > current - errorWindowBuckets) {
        requests += bucket.requests;
        errors += bucket.errors;
      }
    }
    const windowSeconds = (errorWindowBuckets * bucketMs) / 1000;
    return { latency, recent: { windowSeconds, requests, errors, errorRate: requests === 0 ? null : errors / requests } };
  }

  get bucketSeconds(): number {
    return this.settings.bucketMs / 1000;
  }
}

function percentile(bucket: Bucket, q: number): number | null {
  if (bucket.requests === 0) return null;
  const rank = Math.ceil(q * bucket.requests);
  let seen = 0;
  for (let bin = 0; bin < BINS; bin++) {
    seen += bucket.bins[bin]!;
    if (seen >= rank) return Math.round(binUpperMs(bin) * 10) / 10;
  }
  return null;
}

function healthOf(sources: StatusSources, pool: PoolSpec, id: string): ReplicaHealth {
  if (!pool.resilience.healthCheck.enabled) return 'off';
  const ifUnknown = sources.health.isHealthy(id, true);
  // the checker answers the default only for an endpoint it has not probed yet
  if (ifUnknown !== sources.health.isHealthy(id, false)) return 'unprobed';
  return ifUnknown ? 'passing' : 'failing';
}

/** Builds the snapshot; reads every source once per call (a few map lookups per replica). */
export function buildStatusSnapshot(sources: StatusSources): StatusSnapshot {
  const now = sources.now();
  const breakers = new Map<string, BreakerState>();
  for (const b of sources.breakers.states()) breakers.set(b.endpoint, b.state);
  const engine = new Map<string, EngineLoad>();
  for (const s of sources.engine.samples()) engine.set(s.endpoint, s.load);
  const poolSpecs = sources.pools();
  sources.recent.retain(new Set(poolSpecs.map((p) => p.name)));

  const pools = poolSpecs.map((pool): PoolStatus => {
    const unknown = unprobedCountsHealthy(pool);
    const replicas = sources.endpoints.snapshot(pool.name).map((ep): ReplicaStatus => {
      const load = engine.get(ep.id);
      return {
        id: ep.id,
        ready: sources.health.isHealthy(ep.id, unknown),
        health: healthOf(sources, pool, ep.id),
        breaker: breakers.get(ep.id) ?? 'closed',
        inFlight: sources.inFlight.count(ep.id),
        engine: load ? { waiting: load.waiting, running: load.running, kvCacheUsage: load.kvCacheUsage ?? null, ageMs: Math.max(0, Math.round(now - load.at)) } : null,
      };
    });
    const mismatch = sources.servedModel.of(pool);
    return {
      name: pool.name,
      engine: pool.engine,
      readyReplicas: replicas.filter((r) => r.ready).length,
      // the pool's own requests (a replica another pool shares carries both pools')
      inFlight: sources.inFlight.poolCount(pool.name),
      queue: { depth: sources.admission.depth(pool.name), limit: queueBound(pool.resilience) ?? null },
      held: sources.held(pool.name),
      ...sources.recent.summary(pool.name),
      servedModelMismatch: mismatch ? { seenAt: new Date(mismatch.at).toISOString(), replica: mismatch.replica, replicas: mismatch.replicas } : null,
      replicas,
    };
  });

  return {
    version: STATUS_VERSION,
    generatedAt: new Date(sources.wallNow()).toISOString(),
    notReady: sources.notReady(),
    prefixIndexBlocks: sources.prefixIndexBlocks(),
    bucketSeconds: sources.recent.bucketSeconds,
    deployments: sources
      .catalog()
      .deployments()
      .map((d) => ({
        name: d.id,
        ...(d.namespace !== undefined ? { namespace: d.namespace } : {}),
        model: d.model,
        targets: d.targets.map((t) => ({ pool: t.pool, weight: t.weight })),
        fallbacks: [...d.fallbacks],
      })),
    pools,
  };
}

/** What the app takes for the status page: the snapshot, and the feed of finished requests into its recent traffic. */
export interface StatusBoard extends RequestMetrics {
  snapshot(): StatusSnapshot;
}

export function statusBoard(sources: StatusSources): StatusBoard {
  return {
    snapshot: () => buildStatusSnapshot(sources),
    recordRequest: (route, deployment, pool, code, seconds) => sources.recent.recordRequest(route, deployment, pool, code, seconds),
  };
}
