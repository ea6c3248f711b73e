/**
 * Chooses the endpoint for one attempt. It takes a snapshot of what it knows about each endpoint of
 * the pool (health checks, breaker, in-flight count, whether this request tried it) and hands it to
 * the balancer: filters (balancer/filters.ts) decide who may take the request, the pool's scheduling
 * profile scores the rest (balancer/scheduler.ts). When every usable endpoint is full, the request
 * waits in the pool's admission queue by priority, taking turns with the other tenants (API keys) of
 * its priority; a sheddable request is turned away instead, and also whenever the engines report every
 * replica saturated.
 */
import { isUsable, pickable, type CandidateState } from '../balancer/filters.js';
import { type InFlight } from '../balancer/in-flight.js';
import { promptBlocks, PrefixIndex } from '../balancer/prefix-index.js';
import { schedule } from '../balancer/scheduler.js';
import { noReadyReplica } from '../core/errors.js';
import { type EngineLoad, type EngineLoadSource, type Endpoint, type EndpointSource, type PoolSpec, type Priority } from '../core/types.js';
import { shedError, type AdmissionQueues } from './admission.js';
import { type BreakerRegistry, type BreakerTicket } from './breaker.js';

export interface Picked {
  endpoint: Endpoint;
  ticket: BreakerTicket;
  /** Gives the concurrency slot back (idempotent) and lets a queued request in. */
  release(): void;
}

export interface HealthView {
  isHealthy(endpointId: string): boolean;
}

/** What the scheduler needs to know about the request, beyond its pool. */
export interface PickRequest {
  priority: Priority;
  /** Reported with any breaker transition this request's outcome triggers. */
  requestId?: string;
  /** The rendered prompt (chat), for prefix affinity; called only by pools whose profile uses it. */
  promptText?: () => string;
  /** The value of a request header (the pool names its session header), if sent. */
  header?: (name: string) => string | undefined;
  /** The only endpoint the request may go to (it holds state the request builds on, e.g. a stored response). */
  only?: string;
  /** The API key's name: queued requests of one priority take turns by tenant. None: the shared anonymous tenant. */
  tenant?: string;
  /** The key's fair-share weight among queued tenants (> 0, default 1). */
  weight?: number;
}

export interface PickEvents {
  /** A pick landed: how many of the prompt's blocks the chosen replica likely had cached. */
  onPicked?: (pool: string, prefixMatched: number, prefixTotal: number) => void;
  /** A sheddable request was turned away because the engines report every replica saturated. */
  onShed?: (pool: string) => void;
}

export interface PickerDeps {
  endpoints: EndpointSource;
  inFlight: InFlight;
  breakers: BreakerRegistry;
  health: HealthView;
  admission: AdmissionQueues;
  /** Engine metrics; without them the engine scorers are neutral. */
  engine?: EngineLoadSource;
  prefixIndex?: PrefixIndex;
  random: () => number;
  events?: PickEvents;
}

const NO_ENGINE: EngineLoadSource = { load: () => undefined };

export class EndpointPicker {
  /** Prompt blocks per request, per block geometry: a queued request is re-scheduled without re-hashing. */
  private readonly blocks = new WeakMap<PickRequest, { key: string; hashes: number[] }>();

  private readonly engine: EngineLoadSource;
  private readonly prefixIndex: PrefixIndex;

  constructor(private readonly deps: PickerDeps) {
    this.engine = deps.engine ?? NO_ENGINE;
    this.prefixIndex = deps.prefixIndex ?? new PrefixIndex();
  }

  /**
   * An endpoint for the next attempt at `pool`. Rejects with NO_READY_REPLICA when no endpoint can
   * take traffic at all, with REQUEST_SHED / QUEUE_FULL / QUEUE_TIMEOUT from admission, or with an
   * AbortError. A queued request waits at most `queue.timeoutMs`, and never past `maxWaitMs` (what is
   * left of the request's total timeout).
   */
  pick(pool: PoolSpec, tried: ReadonlySet<string>, signal?: AbortSignal, request: PickRequest = { priority: 'standard' }, maxWaitMs = Infinity): Promise<Picked> {
    const all = this.endpointsFor(pool, request);
    if (!all.some((ep) => this.usable(pool, ep))) return Promise.reject(noReadyReplica());
    if (
      request.priority === 'sheddable' &&
      this.saturated(
        pool,
        all.filter((ep) => this.usable(pool, ep)),
      )
    ) {
      this.deps.events?.onShed?.(pool.name);
      return Promise.reject(shedError());
    }
    const { queue } = pool.resilience;
    const limits = maxWaitMs < queue.timeoutMs ? { ...queue, timeoutMs: Math.max(0, maxWaitMs) } : queue;
    const { priority, tenant, weight } = request;
    return this.deps.admission.admit(pool.name, () => this.take(pool, tried, request), limits, { signal, priority, tenant, weight });
  }

  /** Whether `pool` still has a replica that could take traffic and that this request has not tried. */
  hasUntried(pool: PoolSpec, tried: ReadonlySet<string>, request?: PickRequest): boolean {
    return this.endpointsFor(pool, request).some((ep) => !tried.has(ep.id) && this.usable(pool, ep));
  }

  /** The pool's endpoints this request may go to: all, or only the one it is pinned to. */
  private endpointsFor(pool: PoolSpec, request: PickRequest | undefined): readonly Endpoint[] {
    const all = this.deps.endpoints.snapshot(pool.name);
    const only = request?.only;
    return only === undefined ? all : all.filter((ep) => ep.id === only);
  }

  /**
   * The balancer's usable rule for one endpoint, without a snapshot: the checks before admission run
   * on every attempt. A pick itself filters the snapshot (take).
   */
  private usable(pool: PoolSpec, ep: Endpoint): boolean {
    const { health, breakers } = this.deps;
    return isUsable({ healthy: health.isHealthy(ep.id), breakerAvailable: breakers.get(ep.id, pool.name, pool.resilience.breaker).available() });
  }

  /** A committed stream that the engine broke counts against its endpoint's breaker. */
  recordStreamFailure(pool: PoolSpec, endpointId: string, requestId?: string): void {
    this.deps.breakers.get(endpointId, pool.name, pool.resilience.breaker).recordFailure(requestId);
  }

  /** Every usable replica has a fresh engine sample over the pool's saturation thresholds. */
  private saturated(pool: PoolSpec, usable: readonly Endpoint[]): boolean {
    const { queueDepth, kvCacheUsage } = pool.routing.saturation;
    return usable.every((ep) => {
      const load = this.engineLoad(pool, ep.id);
      return load !== undefined && (load.waiting >= queueDepth || (load.kvCacheUsage ?? 0) >= kvCacheUsage);
    });
  }

  private engineLoad(pool: PoolSpec, endpointId: string): EngineLoad | undefined {
    return (pool.routing.engineMetrics.enabled ? this.engine : NO_ENGINE).load(endpointId);
  }

  /** What the picker knows about each endpoint of the pool right now, as plain data for the filters. */
  private snapshot(pool: PoolSpec, tried: ReadonlySet<string>, request: PickRequest): CandidateState[] {
    return this.endpointsFor(pool, request).map((endpoint) => this.state(pool, endpoint, tried.has(endpoint.id)));
  }

  private state(pool: PoolSpec, endpoint: Endpoint, tried: boolean): CandidateState {
    const { health, breakers, inFlight } = this.deps;
    return {
      endpoint,
      healthy: health.isHealthy(endpoint.id),
      breakerAvailable: breakers.get(endpoint.id, pool.name, pool.resilience.breaker).available(),
      inFlight: inFlight.count(endpoint.id),
      tried,
    };
  }

  /** The request's prompt blocks for this pool's block geometry (empty when the profile does not use them). */
  private promptBlocksFor(pool: PoolSpec, request: PickRequest): number[] {
    const usesPrefix = pool.routing.scorers.some((s) => s.name === 'prefix' && s.weight > 0);
    if (!usesPrefix || request.promptText === undefined) return [];
    const { blockChars, maxBlocks } = pool.routing.prefix;
    const key = `${blockChars}/${maxBlocks}`;
    const memo = this.blocks.get(request);
    if (memo?.key === key) return memo.hashes;
    const hashes = promptBlocks(request.promptText(), blockChars, maxBlocks);
    this.blocks.set(request, { key, hashes });
    return hashes;
  }

  private sessionKey(pool: PoolSpec, request: PickRequest): string | undefined {
    const usesSession = pool.routing.scorers.some((s) => s.name === 'session' && s.weight > 0);
    const value = usesSession ? request.header?.(pool.routing.session.header) : undefined;
    return value === '' ? undefined : value;
  }

  private take(pool: PoolSpec, tried: ReadonlySet<string>, request: PickRequest): Picked | undefined {
    const { inFlight, breakers, admission, random } = this.deps;
    const prefixIndex = this.prefixIndex;
    const states = pickable(this.snapshot(pool, tried, request), pool.resilience.maxConcurrencyPerReplica);
    const candidates = states.map((c) => c.endpoint);
    const blocks = this.promptBlocksFor(pool, request);
    const prefixMatched = blocks.length === 0 ? undefined : candidates.map((ep) => prefixIndex.match(ep.id, blocks));
    const engine = candidates.map((ep) => this.engineLoad(pool, ep.id));
    const decision = schedule(
      candidates,
      states.map((c) => c.inFlight),
      engine,
      { prefixMatched, prefixTotal: blocks.length, sessionKey: this.sessionKey(pool, request) },
      pool.routing,
      random,
    );
    if (!decision) return undefined;
    const { endpoint } = decision;
    const ticket = breakers.get(endpoint.id, pool.name, pool.resilience.breaker).begin(request.requestId);
    if (!ticket) return undefined; // its half-open probe slot was just taken
    if (blocks.length > 0) {
      const cacheTokens = engine[decision.index]?.cacheTokens;
      if (cacheTokens !== undefined) prefixIndex.tune(endpoint.id, cacheTokens, pool.routing.prefix.blockChars);
      prefixIndex.record(endpoint.id, blocks, pool.routing.prefix.capacityPerEndpoint);
      this.deps.events?.onPicked?.(pool.name, prefixMatched?.[decision.index] ?? 0, blocks.length);
    }
    const releaseSlot = inFlight.acquire(endpoint.id, pool.name);
    let released = false;
    return {
      endpoint,
      ticket,
      release: () => {
        if (released) return;
        released = true;
        releaseSlot();
        admission.notify(pool.name);
      },
    };
  }
}
