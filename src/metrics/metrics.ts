/**
 * The router's Prometheus metrics: one prom-client Registry per router, typed record functions,
 * bounded labels only (route, deployment, pool, endpoint, status code; never a key, user, prompt or
 * request id). Gauges read live state through the sources given at construction. The series are
 * declared by area (`traffic.ts`, `routing.ts`, `resilience.ts`, `control-plane.ts`); callers only
 * see `RouterMetrics`.
 */
import { Registry } from 'prom-client';
import { limitsMetrics, type LimitsRecorder } from './limits.js';
import { demandMetrics, recordHold, type DemandMetrics, type PoolDemand } from './demand.js';
import { type ApiName, type HoldEvent, type PreviousResponseOutcome } from '../core/types.js';
import { controlPlaneMetrics, type ControlPlaneMetrics, type ControlPlaneSources } from './control-plane.js';
import { observeResilienceGauges, resilienceMetrics, type AdmissionSources, type ResilienceMetrics, type ResilienceSources } from './resilience.js';
import { registerProcessMetrics } from './process.js';
import { observeRoutingGauges, routingMetrics, type RoutingMetrics, type RoutingSources, type RoutingStateSources } from './routing.js';
import { trafficMetrics, type TrafficMetrics } from './traffic.js';

/**
 * What the router already knows at scrape time, so that labelled counters exist before their first
 * event (at 0: `rate()` and `increase()` then see that first event) and series of endpoints that left
 * go away.
 */
export interface KnownLabelSources {
  /** Every (deployment, pool) a deployment targets. */
  routes(): Iterable<{ deployment: string; pool: string }>;
  /** Every pool's name. */
  pools(): Iterable<string>;
  /** The ids of the endpoints discovery lists now. */
  liveEndpoints(): ReadonlySet<string>;
}

/** Live state the gauges read at scrape time; each part is declared next to the gauges that read it. */
export interface MetricSources extends RoutingStateSources, AdmissionSources, ControlPlaneSources, Partial<KnownLabelSources> {}

/** How a started response can end (`modelgate_response_ends_total{end}`). */
export const RESPONSE_ENDS = ['complete', 'client_gone', 'client_stalled', 'upstream_broken', 'idle_timeout', 'deadline'] as const;
/** Why admission turns a request away (`modelgate_rejected_requests_total{reason}`). */
export const REJECT_REASONS = ['queue_full', 'queue_timeout', 'shed', 'no_replica_timeout'] as const;
/** Results of engine-metrics scrapes (`modelgate_engine_scrapes_total{result}`). */
export const SCRAPE_RESULTS = ['ok', 'error', 'timeout', 'unparsable'] as const;

/** An inference API's name (the route table's), `models` (GET /v1/models…), or `other` (everything else). */
export type Route = ApiName | 'models' | 'limits' | 'other';

export interface TrafficLabels {
  deployment: string;
  pool: string;
}

export class RouterMetrics {
  readonly registry = new Registry();
  private readonly traffic: TrafficMetrics;
  private readonly routing: RoutingMetrics;
  private readonly resilience: ResilienceMetrics;
  private readonly controlPlane: ControlPlaneMetrics;
  private demand: DemandMetrics | undefined;
  /** The (pool, outcome) label sets each endpoint's attempts have been counted under, to remove them when it leaves. */
  private readonly attemptLabels = new Map<string, Set<string>>();

  constructor(
    private readonly sources: MetricSources,
    options: { processMetrics?: boolean } = {},
  ) {
    const registers = [this.registry];
    this.traffic = trafficMetrics(registers);
    this.routing = routingMetrics(registers, sources);
    this.resilience = resilienceMetrics(registers, sources);
    this.controlPlane = controlPlaneMetrics(registers, sources);
    if (options.processMetrics ?? true) registerProcessMetrics(this.registry);
  }

  /**
   * Brings the labelled series up to date with what discovery knows, before a scrape: the label sets
   * of known deployments and pools at 0, the attempts of endpoints that left removed (the gauges
   * labelled by endpoint are rebuilt at each scrape already).
   */
  private refreshSeries(): void {
    const { routes, pools, liveEndpoints } = this.sources;
    for (const labels of routes?.() ?? []) for (const end of RESPONSE_ENDS) this.traffic.streamEnds.inc({ ...labels, end }, 0);
    for (const pool of pools?.() ?? []) {
      for (const reason of REJECT_REASONS) this.resilience.rejected.inc({ pool, reason }, 0);
      for (const result of ['hit', 'miss']) this.routing.prefixBlocks.inc({ pool, result }, 0);
      for (const result of SCRAPE_RESULTS) this.routing.engineScrapes.inc({ pool, result }, 0);
    }
    if (!liveEndpoints) return;
    const live = liveEndpoints();
    for (const [endpoint, sets] of this.attemptLabels) {
      if (live.has(endpoint)) continue;
      for (const set of sets) {
        const [pool = '', outcome = ''] = set.split('\0');
        this.resilience.attempts.remove({ pool, endpoint, outcome });
      }
      this.attemptLabels.delete(endpoint);
    }
  }

  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number): void {
    this.traffic.requests.inc({ route, deployment, pool, code: String(code) });
    if (route !== 'models' && route !== 'limits' && route !== 'other') this.traffic.duration.observe({ route, deployment, pool }, seconds);
  }

  recordTimeToFirstToken(labels: TrafficLabels, seconds: number): void {
    this.traffic.ttft.observe(labels, seconds);
  }

  recordInterToken(labels: TrafficLabels, seconds: number): void {
    this.traffic.itl.observe(labels, seconds);
  }

  recordTokens(labels: TrafficLabels, prompt: number, completion: number): void {
    this.traffic.promptTokens.inc(labels, prompt);
    if (completion > 0) this.traffic.completionTokens.inc(labels, completion);
  }

  recordResponseEnd(labels: TrafficLabels, end: string): void {
    this.traffic.streamEnds.inc({ ...labels, end });
  }

  /** Registers the per-key limits' metrics; the limiter reports into what this returns. */
  observeLimits(options: { redis: boolean; keyMetrics: boolean }): LimitsRecorder {
    return limitsMetrics([this.registry], options);
  }

  recordKeysReload(ok: boolean): void {
    this.controlPlane.keyReloads.inc({ result: ok ? 'success' : 'failure' });
  }

  recordDiscoveryEvent(kind: string, type: string): void {
    this.controlPlane.discoveryEvents.inc({ kind, type });
  }

  recordWatchRestart(kind: string, namespace: string): void {
    this.controlPlane.watchRestarts.inc({ kind, namespace });
  }

  recordAttempt(pool: string, endpoint: string, outcome: string): void {
    this.resilience.attempts.inc({ pool, endpoint, outcome });
    const key = `${pool}\0${outcome}`;
    const sets = this.attemptLabels.get(endpoint);
    if (!sets) this.attemptLabels.set(endpoint, new Set([key]));
    else sets.add(key);
  }

  recordRetry(pool: string, reason: string): void {
    this.resilience.retries.inc({ pool, reason });
  }

  recordQueueWait(pool: string, seconds: number, result: string): void {
    this.resilience.queueWait.observe({ pool, result }, seconds);
  }

  recordRejected(pool: string, reason: string): void {
    this.resilience.rejected.inc({ pool, reason });
  }

  recordPrefixBlocks(pool: string, matched: number, total: number): void {
    if (matched > 0) this.routing.prefixBlocks.inc({ pool, result: 'hit' }, matched);
    if (total > matched) this.routing.prefixBlocks.inc({ pool, result: 'miss' }, total - matched);
  }

  recordFallback(fromDeployment: string, fromPool: string, toDeployment: string, toPool: string): void {
    this.resilience.fallbacks.inc({ from_deployment: fromDeployment, from_pool: fromPool, to_deployment: toDeployment, to_pool: toPool });
  }

  recordPreviousResponse(outcome: PreviousResponseOutcome): void {
    this.routing.previousResponses.inc({ outcome });
  }

  recordEngineScrape(pool: string, result: string): void {
    this.routing.engineScrapes.inc({ pool, result });
  }

  /** Gauges read from the routing layer at scrape time (registered once). */
  observeRouting(sources: RoutingSources): void {
    observeRoutingGauges([this.registry], sources);
  }

  /** The per-pool demand gauges (autoscaling) read at scrape time, and the held-requests counter (registered once). */
  observeDemand(demand: () => Iterable<PoolDemand>): void {
    this.demand = demandMetrics([this.registry], demand);
  }

  recordHold(pool: string, event: HoldEvent): void {
    if (this.demand) recordHold(this.demand, pool, event);
  }

  /** Gauges read from the resilience layer at scrape time (registered once). */
  observeResilience(sources: ResilienceSources): void {
    observeResilienceGauges([this.registry], { ...sources, queueLimits: () => this.sources.queueLimits() });
  }

  recordStatusWrite(kind: string, ok: boolean): void {
    this.controlPlane.statusWrites.inc({ kind, result: ok ? 'success' : 'failure' });
  }

  metrics(): Promise<string> {
    this.refreshSeries();
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
