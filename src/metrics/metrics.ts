/**
 * The router's Prometheus metrics: one prom-client Registry per router, typed record functions,
 * bounded labels only (route, deployment, pool, endpoint, status code; never a key, user, prompt or
 * request id). Gauges read live state through the sources given at construction. The series are
 * declared by area (`traffic.ts`, `routing.ts`, `resilience.ts`, `control-plane.ts`); callers only
 * see `RouterMetrics`. The labelled counters counted per request are `HotCounter`s (`hot-counter.ts`):
 * they count into cached cells and hand the sums to prom-client when it reads them.
 */
import { Registry } from './prom.js';
import type { Counter, Histogram } from 'prom-client';
import { type HotCounter } from './hot-counter.js';
import { limitsMetrics, type LimitsRecorder } from './limits.js';
import { kvEventsMetrics, type KvEventsMetrics, type KvEventsPoolView, type KvEventsRecorder } from './kv-events.js';
import { demandMetrics, recordHold, seedHolds, type DemandMetrics, type PoolDemand } from './demand.js';
import { type ApiName, type HoldEvent, type PreviousResponseOutcome, type ResumeReason, type ResumeResult } from '../core/types.js';
import {
  PREFIX_RESULTS,
  REJECT_REASONS,
  RESPONSE_ENDS,
  RETRY_REASONS,
  SCRAPE_RESULTS,
  SLO_RESULTS,
  type AttemptOutcome,
  type DiscoveryEventType,
  type LoraLoadResult,
  type LoraPlacement,
  type QueueResult,
  type RejectReason,
  type ResponseEnd,
  type RetryReason,
  type Route,
  type ScrapeResult,
  type SloResult,
  type StatusKind,
  type WatchedKind,
} from './labels.js';
import { openMetricsText } from './openmetrics.js';
import { controlPlaneMetrics, type ControlPlaneMetrics, type ControlPlaneSources } from './control-plane.js';
import { observeResilienceGauges, resilienceMetrics, type AdmissionSources, type ResilienceMetrics, type ResilienceSources } from './resilience.js';
import { registerProcessMetrics } from './process.js';
import { ResumptionMetrics } from './resumption.js';
import { goodputCounter } from './goodput.js';
import { observeRoutingGauges, routingMetrics, type RoutingMetrics, type RoutingSources, type RoutingStateSources } from './routing.js';
import { trafficMetrics, type TrafficMetrics } from './traffic.js';

/** A hop a request can make from one pool of its route to the next (`modelgate_fallbacks_total`'s labels; `fromPool` empty: the route started at a fallback). */
export interface FallbackHop {
  fromDeployment: string;
  fromPool: string;
  toDeployment: string;
  toPool: string;
}

/**
 * What the router already knows at scrape time, so that labelled counters exist before their first
 * event (at 0: `rate()` and `increase()` then see that first event), and the series of deployments,
 * pools and endpoints that left go away.
 */
export interface KnownLabelSources {
  /** Every (deployment, pool) a deployment targets, with the APIs the pool serves. */
  routes(): Iterable<{ deployment: string; pool: string; apis?: readonly ApiName[]; resumable?: boolean }>;
  /** Every pool's name. */
  pools(): Iterable<string>;
  /** Every deployment's id. */
  deployments?(): Iterable<string>;
  /** The pools that scale from zero (requests may be held for them). */
  holdingPools?(): Iterable<string>;
  /** Every hop between two pools of a route that the route plan can make. */
  fallbacks?(): Iterable<FallbackHop>;
  /** The ids of the endpoints whose series are kept: those discovery lists now, or listed within the router's grace (main.ts). */
  liveEndpoints(): ReadonlySet<string>;
}

/** Live state the gauges read at scrape time; each part is declared next to the gauges that read it. */
export interface MetricSources extends RoutingStateSources, AdmissionSources, ControlPlaneSources, Partial<KnownLabelSources> {}

export { REJECT_REASONS, RESPONSE_ENDS, SCRAPE_RESULTS, type Route } from './labels.js';

export interface TrafficLabels {
  deployment: string;
  pool: string;
}

export interface RouterMetricsOptions {
  /** Node's process metrics (default true). */
  processMetrics?: boolean;
  /**
   * Exemplars on the request-duration and time-to-first-token histograms (tracing on). Off, the
   * histograms are plain ones and an observation costs what it did without them.
   */
  exemplars?: boolean;
}

/** What a metric's labels are checked against when pruning the series of deployments and pools that left. */
type Labels = Partial<Record<string, string | number>>;
const DEPLOYMENT_LABELS = ['deployment', 'from_deployment', 'to_deployment'] as const;
const POOL_LABELS = ['pool', 'from_pool', 'to_pool'] as const;

export class RouterMetrics {
  readonly registry = new Registry();
  private readonly traffic: TrafficMetrics;
  private readonly routing: RoutingMetrics;
  private readonly resilience: ResilienceMetrics;
  private readonly controlPlane: ControlPlaneMetrics;
  private demand: DemandMetrics | undefined;
  private kvEvents: KvEventsMetrics | undefined;
  private readonly resumption: ResumptionMetrics;
  private readonly goodput: HotCounter<'deployment' | 'result', [deployment: string, result: SloResult]>;
  private readonly exemplars: boolean;

  constructor(
    private readonly sources: MetricSources,
    options: RouterMetricsOptions = {},
  ) {
    const registers = [this.registry];
    this.exemplars = options.exemplars ?? false;
    this.traffic = trafficMetrics(registers, this.exemplars);
    this.routing = routingMetrics(registers, sources);
    this.resilience = resilienceMetrics(registers, sources);
    this.controlPlane = controlPlaneMetrics(registers, sources);
    this.resumption = new ResumptionMetrics(registers);
    this.goodput = goodputCounter(registers);
    if (options.processMetrics ?? true) registerProcessMetrics(this.registry);
  }

  /**
   * Brings the labelled series up to date with what discovery knows, before a scrape: the label sets
   * of known deployments and pools at 0, the series of deployments and pools that left removed, and
   * the attempts of endpoints that left removed (the gauges are rebuilt at each scrape already).
   */
  private async refreshSeries(): Promise<void> {
    const { routes, pools, holdingPools, fallbacks } = this.sources;
    const { traffic, resilience, routing } = this;
    for (const { deployment, pool, apis, resumable } of routes?.() ?? []) {
      for (const result of SLO_RESULTS) this.goodput.seed(deployment, result);
      if (resumable) this.resumption.seed(deployment);
      for (const end of RESPONSE_ENDS) traffic.streamEnds.seed(deployment, pool, end);
      for (const route of apis ?? []) traffic.requests.seed(route, deployment, pool, 200);
    }
    for (const pool of pools?.() ?? []) {
      for (const reason of REJECT_REASONS) resilience.rejected.seed(pool, reason);
      for (const reason of RETRY_REASONS) resilience.retries.seed(pool, reason);
      for (const result of PREFIX_RESULTS) routing.prefixBlocks.seed(pool, result);
      for (const result of SCRAPE_RESULTS) routing.engineScrapes.seed(pool, result);
    }
    for (const hop of fallbacks?.() ?? []) resilience.fallbacks.seed(hop.fromDeployment, hop.fromPool, hop.toDeployment, hop.toPool);
    if (this.demand) for (const pool of holdingPools?.() ?? []) seedHolds(this.demand, pool);
    await this.pruneGone();
    this.pruneEndpoints();
  }

  /** Removes the series that name a deployment or a pool discovery no longer knows (the unnamed '' stays). */
  private async pruneGone(): Promise<void> {
    const { deployments, pools } = this.sources;
    if (!deployments || !pools) return;
    const knownDeployments = new Set(deployments());
    const knownPools = new Set(pools());
    const gone = (labels: Labels): boolean => DEPLOYMENT_LABELS.some((l) => isGone(labels[l], knownDeployments)) || POOL_LABELS.some((l) => isGone(labels[l], knownPools));
    const { traffic, resilience, routing } = this;
    const counters = [
      traffic.requests,
      traffic.promptTokens,
      traffic.completionTokens,
      traffic.streamEnds,
      resilience.retries,
      resilience.rejected,
      resilience.fallbacks,
      routing.prefixBlocks,
      routing.engineScrapes,
      routing.loraPlacements,
      routing.loraLoads,
      this.goodput,
      this.resumption.counter,
      ...(this.kvEvents ? [this.kvEvents.hot] : []),
    ];
    for (const counter of counters) counter.removeWhere(gone);
    traffic.itl.removeWhere(gone);
    const metrics = [traffic.duration, traffic.ttft, resilience.queueWait, ...(this.demand ? [this.demand.held] : []), ...(this.kvEvents?.counters ?? [])];
    for (const metric of metrics) await prune(metric, gone);
  }

  private pruneEndpoints(): void {
    const { liveEndpoints } = this.sources;
    if (liveEndpoints) this.forgetEndpoints(liveEndpoints());
  }

  /** Removes the series of endpoints not in `live` now (discovery dropped them), not at the next scrape: a router nobody scrapes keeps none either. */
  forgetEndpoints(live: ReadonlySet<string>): void {
    this.resilience.attempts.removeWhere((labels) => !live.has(labels.endpoint));
    this.resilience.usageClamped.removeWhere((labels) => !live.has(labels.endpoint));
  }

  /** Removes the series of deployments and pools discovery no longer knows now (a pool or deployment deleted), not at the next scrape. */
  forgetGone(): Promise<void> {
    return this.pruneGone();
  }

  /** How a request offered to `deployment` fared against its SLO (metrics/goodput.ts). */
  recordGoodput(deployment: string, result: SloResult): void {
    this.goodput.inc(1, deployment, result);
  }

  /** `traceId`: the request's sampled trace, kept as the duration bucket's exemplar. */
  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number, traceId?: string): void {
    this.traffic.requests.inc(1, route, deployment, pool, code);
    if (route !== 'models' && route !== 'limits' && route !== 'other') observe(this.traffic.duration, this.exemplars, { route, deployment, pool }, seconds, traceId);
  }

  /** `traceId`: the request's sampled trace, kept as the TTFT bucket's exemplar. */
  recordTimeToFirstToken(labels: TrafficLabels, seconds: number, traceId?: string): void {
    observe(this.traffic.ttft, this.exemplars, labels, seconds, traceId);
  }

  /** One gap between content events (the label values as arguments: it runs once per token). */
  recordInterToken(deployment: string, pool: string, seconds: number): void {
    this.traffic.itl.observe(deployment, pool, seconds);
  }

  recordTokens(labels: TrafficLabels, prompt: number, completion: number): void {
    this.traffic.promptTokens.inc(prompt, labels.deployment, labels.pool);
    if (completion > 0) this.traffic.completionTokens.inc(completion, labels.deployment, labels.pool);
  }

  recordResponseEnd(labels: TrafficLabels, end: ResponseEnd): void {
    this.traffic.streamEnds.inc(1, labels.deployment, labels.pool, end);
  }

  /** Registers the KV-cache events' metrics (kv-events.ts; `pools`: each pool's feeds at scrape time); the hub and the picker report into what this returns. */
  observeKvEvents(pools: () => Iterable<KvEventsPoolView>): KvEventsRecorder {
    this.kvEvents = kvEventsMetrics([this.registry], pools);
    return this.kvEvents.recorder;
  }

  /** Registers the per-key limits' metrics; the limiter reports into what this returns. */
  observeLimits(options: { redis: boolean; keyMetrics: boolean }): LimitsRecorder {
    return limitsMetrics([this.registry], options);
  }

  recordKeysReload(ok: boolean): void {
    this.controlPlane.keyReloads.inc({ result: ok ? 'success' : 'failure' });
    this.controlPlane.keysFileValid.set(ok ? 1 : 0);
  }

  recordDiscoveryEvent(kind: WatchedKind, type: DiscoveryEventType): void {
    this.controlPlane.discoveryEvents.inc({ kind, type });
  }

  recordWatchRestart(kind: WatchedKind, namespace: string): void {
    this.controlPlane.watchRestarts.inc({ kind, namespace });
  }

  recordAttempt(pool: string, endpoint: string, outcome: AttemptOutcome): void {
    this.resilience.attempts.inc(1, pool, endpoint, outcome);
  }

  /** An answer's engine reported more completion tokens than its request allowed: it was charged that limit. */
  recordUsageClamped(pool: string, endpoint: string): void {
    this.resilience.usageClamped.inc(1, pool, endpoint);
  }

  recordRetry(pool: string, reason: RetryReason): void {
    this.resilience.retries.inc(1, pool, reason);
  }

  recordQueueWait(pool: string, seconds: number, result: QueueResult): void {
    this.resilience.queueWait.observe({ pool, result }, seconds);
  }

  recordRejected(pool: string, reason: RejectReason): void {
    this.resilience.rejected.inc(1, pool, reason);
  }

  /**
   * One routed prompt: `matched` leading blocks the chosen replica likely had cached, of `promptBlocks`,
   * the prompt's whole length in blocks — its trailing partial block as a fraction, as engines count
   * every prompt token — so hit ÷ (hit + miss) compares with the engines' own prefix-cache hit rate.
   */
  recordPrefixBlocks(pool: string, matched: number, promptBlocks: number): void {
    if (matched > 0) this.routing.prefixBlocks.inc(matched, pool, 'hit');
    if (promptBlocks > matched) this.routing.prefixBlocks.inc(promptBlocks - matched, pool, 'miss');
  }

  recordFallback(fromDeployment: string, fromPool: string, toDeployment: string, toPool: string): void {
    this.resilience.fallbacks.inc(1, fromDeployment, fromPool, toDeployment, toPool);
  }

  recordPreviousResponse(outcome: PreviousResponseOutcome): void {
    this.routing.previousResponses.inc(1, outcome);
  }

  recordStreamResumption(deployment: string, result: ResumeResult, reason: ResumeReason): void {
    this.resumption.record(deployment, result, reason);
  }

  recordEngineScrape(pool: string, result: ScrapeResult): void {
    this.routing.engineScrapes.inc(1, pool, result);
  }

  /** A request for a LoRA adapter was sent to a replica that held it, had a free slot, or had none. */
  recordLoraPlacement(pool: string, placement: LoraPlacement): void {
    this.routing.loraPlacements.inc(1, pool, placement);
  }

  /** A LoRA adapter load the router asked an engine for ended. */
  recordLoraLoad(pool: string, result: LoraLoadResult): void {
    this.routing.loraLoads.inc(1, pool, result);
  }

  /** Gauges read from the routing layer at scrape time (registered once). */
  observeRouting(sources: RoutingSources): void {
    observeRoutingGauges([this.registry], sources);
  }

  /**
   * The per-pool demand gauges (autoscaling) read at scrape time, and the held-requests counter
   * (registered once). `namespaced`: pool keys are `namespace/name` (Kubernetes mode).
   */
  observeDemand(demand: () => Iterable<PoolDemand>, namespaced: boolean): void {
    this.demand = demandMetrics([this.registry], demand, namespaced);
  }

  recordHold(pool: string, event: HoldEvent): void {
    if (this.demand) recordHold(this.demand, pool, event);
  }

  /** Gauges read from the resilience layer at scrape time (registered once). */
  observeResilience(sources: ResilienceSources): void {
    observeResilienceGauges([this.registry], { ...sources, queueLimits: () => this.sources.queueLimits() });
  }

  recordStatusWrite(kind: StatusKind, ok: boolean): void {
    this.controlPlane.statusWrites.inc({ kind, result: ok ? 'success' : 'failure' });
  }

  /** The classic Prometheus text format (no exemplars). */
  async metrics(): Promise<string> {
    await this.refreshSeries();
    return this.registry.metrics();
  }

  /** The OpenMetrics text format, with the exemplars of the latency histograms. */
  async openMetrics(): Promise<string> {
    await this.refreshSeries();
    return openMetricsText(this.registry);
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

function isGone(value: string | number | undefined, known: ReadonlySet<string>): boolean {
  return typeof value === 'string' && value !== '' && !known.has(value);
}

/** Removes every series of `metric` whose labels `gone` says name something that left (a histogram's buckets as one). */
async function prune(metric: Counter<string> | Histogram<string>, gone: (labels: Labels) => boolean): Promise<void> {
  const removed = new Set<string>();
  for (const { labels } of (await metric.get()).values) {
    if (!gone(labels)) continue;
    const { le: _le, ...series } = labels;
    const key = JSON.stringify(series);
    if (removed.has(key)) continue;
    removed.add(key);
    metric.remove(series);
  }
}

/**
 * One observation, with the request's trace id as the bucket's exemplar when it has a sampled trace.
 * Without exemplars (tracing off) it is the plain observation: a branch, nothing more.
 */
function observe<L extends string>(histogram: Histogram<L>, exemplars: boolean, labels: Partial<Record<L, string>>, value: number, traceId: string | undefined): void {
  if (!exemplars) histogram.observe(labels, value);
  // prom-client types an exemplar's labels with the histogram's own label names; trace_id is not one
  else if (traceId !== undefined) (histogram as Histogram<string>).observe({ labels, value, exemplarLabels: { trace_id: traceId } });
  else histogram.observe({ labels, value });
}
