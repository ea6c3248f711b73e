/**
 * Chooses the endpoint for one attempt. It takes a snapshot of what it knows about each endpoint of
 * the pool (health checks, breaker, in-flight count, whether this request tried it) and hands it to
 * the balancer: filters (balancer/filters.ts) decide who may take the request, the pool's scheduling
 * profile scores the rest (balancer/scheduler.ts). When every usable endpoint is full, the request
 * waits in the pool's admission queue by priority, taking turns with the other tenants (API keys) of
 * its priority; a sheddable request is turned away instead, and also whenever the engines report every
 * replica saturated.
 *
 * A pick runs over the whole pool, so what changes only with discovery's snapshot or with a breaker or
 * health transition is kept between picks, per pool: the endpoints that can take traffic, and the
 * in-flight counter of each. The snapshot is compared by identity (discovery hands out a new array
 * when a pool's endpoints change), breakers and health checks by their version. What changes from pick
 * to pick — in-flight counts, engine samples, what this request tried, its prompt's prefix matches — is
 * read afresh into buffers the picker reuses, so a pick allocates nothing per endpoint.
 */
import { isUsable, mayPick, skipsTried } from '../balancer/filters.js';
import { type InFlight, type InFlightCounter } from '../balancer/in-flight.js';
import { AdapterPlacements, adapterScore, placementOf, type LoraPlacement } from '../balancer/lora.js';
import { promptBlocks, PrefixIndex, type PrefixHold } from '../balancer/prefix-index.js';
import { choose, scheduleBuffers, type ScheduleBuffers } from '../balancer/scheduler.js';
import { estimatedLoad } from '../balancer/scorers.js';
import { isAbortError, systemScheduler, type Scheduler } from '../core/clock.js';
import { NO_REPLICA_RETRY_AFTER_SECONDS, noReadyReplica, RouterError } from '../core/errors.js';
import {
  type EngineLoad,
  type EngineLoadSource,
  type Endpoint,
  type EndpointSource,
  type HoldEvent,
  type KvPrefixSource,
  type PromptSource,
  type PoolSpec,
  type Priority,
  type ScheduleInfo,
  unprobedCountsHealthy,
} from '../core/types.js';
import { shedError, type AdmissionQueues } from './admission.js';
import { type BreakerRegistry, type BreakerTicket, type FailureSource } from './breaker.js';

export interface Picked {
  endpoint: Endpoint;
  ticket: BreakerTicket;
  /** Gives the concurrency slot back (idempotent) and lets a queued request in. */
  release(): void;
  /** A pool's LoRA adapter: whether the router knew the chosen replica to hold it. */
  adapterHeld?: boolean;
}

/**
 * Loads a pool's LoRA adapter onto a replica before a request goes there (engine-metrics/adapter-loader.ts):
 * resolves at once when `held` and no load is under way; rejects with ADAPTER_LOAD_FAILED.
 */
export interface AdapterLoads {
  ensure(pool: PoolSpec, endpoint: Endpoint, held: boolean, signal?: AbortSignal): Promise<void>;
}

export interface HealthView {
  /** `unknown`: the answer for an endpoint not probed yet (default true). */
  isHealthy(endpointId: string, unknown?: boolean): boolean;
  /**
   * Grows whenever some answer of `isHealthy` may have changed. Without it the picker asks
   * `isHealthy` for every endpoint on every pick.
   */
  readonly version?: number;
}

/** What the scheduler needs to know about the request, beyond its pool. */
export interface PickRequest {
  priority: Priority;
  /** Reported with any breaker transition this request's outcome triggers. */
  requestId?: string;
  /** The rendered prompt (chat), for prefix affinity; called only by pools whose profile uses it. */
  promptText?: () => string;
  /** The request's API and body, for a pool that renders prompts with its model's own template (`kvEvents.tokenizer: huggingface`). */
  prompt?: PromptSource;
  /** The value of a request header (the pool names its session header), if sent. */
  header?: (name: string) => string | undefined;
  /** The only endpoint the request may go to (it holds state the request builds on, e.g. a stored response). */
  only?: string;
  /** The API key's name: queued requests of one priority take turns by tenant. None: the shared anonymous tenant. */
  tenant?: string;
  /** The key's fair-share weight among queued tenants (> 0, default 1). */
  weight?: number;
  /** Hears what the scheduler decided (for the request's trace; only then are the top scores gathered). */
  onScheduled?: (info: ScheduleInfo) => void;
}

export interface PickEvents {
  /**
   * A pick landed in a pool that routes by prefix: how many of the prompt's leading blocks the chosen
   * replica likely had cached, and the prompt's whole length in blocks (its trailing partial block as a
   * fraction, blocks past `maxBlocks` included: engines count every prompt token they are sent).
   */
  onPicked?: (pool: string, prefixMatched: number, promptBlocks: number) => void;
  /** The same pick, with where its prefix match came from: the replica's KV events (complete or partial) or the estimate. */
  onPrefixPredicted?: (pool: string, source: PrefixSource, prefixMatched: number, promptBlocks: number) => void;
  /** A request for a LoRA adapter landed on a replica that held it, had a free adapter slot, or had none (as the router saw it). */
  onAdapterPlaced?: (pool: string, placement: LoraPlacement) => void;
  /** A sheddable request was turned away because the engines report every replica saturated. */
  onShed?: (pool: string) => void;
  /**
   * A request began to wait for a pool at zero (`held`), or stopped: `served` (a replica turned
   * ready and took it), `timeout` (none within `scaleFromZero.maxWaitMs`), `abandoned` (the client
   * left), `rejected` (the queue was full).
   */
  onHold?: (pool: string, event: HoldEvent) => void;
  /** A request gave back its replica's slot, after holding it `ms` (on the picker's clock): what a request occupies a replica. */
  onReleased?: (pool: string, ms: number) => void;
}

/** Where a pick's prefix match came from, by {@link KvPrefixSource.state}. */
export type PrefixSource = 'estimate' | 'events-partial' | 'events';
const PREFIX_SOURCES: readonly PrefixSource[] = ['estimate', 'events-partial', 'events'];

/** Removed pools the picker remembers, so that a request planned before a removal is not held for the pool (see `EndpointPicker.removed`). */
export const REMEMBERED_REMOVALS = 1_000;

/** How often the requests held for a pool at zero look again for a ready replica (discovery, health checks and breakers all change it). */
export const HOLD_POLL_MS = 250;

export interface PickerDeps {
  endpoints: EndpointSource;
  inFlight: InFlight;
  breakers: BreakerRegistry;
  health: HealthView;
  admission: AdmissionQueues;
  /** Engine metrics; without them the engine scorers are neutral. */
  engine?: EngineLoadSource;
  prefixIndex?: PrefixIndex;
  /** The engines' KV-cache events (kv-events/): where fresh, the prefix matches come from them instead of the estimate. */
  kvPrefix?: KvPrefixSource;
  random: () => number;
  events?: PickEvents;
  /** Times the held requests' looks for a ready replica (default: real timers). */
  scheduler?: Scheduler;
  /** Where this router sent each LoRA adapter lately (default: a record of its own). */
  adapterPlacements?: AdapterPlacements;
  /** Loads adapters for pools with `routing.lora.loadOnDemand`; without it nothing is loaded. */
  adapterLoads?: AdapterLoads;
  /** The clock of the adapter record (default: `engine.now`, else `Date.now`). */
  now?: () => number;
}

const NO_ENGINE: EngineLoadSource = { load: () => undefined };

/** The longest `Retry-After` an all-open pool's answer gives: the official SDKs take waits up to 60 s. */
const MAX_BREAKER_WAIT_SECONDS = 60;

/** The answer of a request that waited for a pool whose last ready replica left discovery. */
function noReplicaLeftError(): RouterError {
  return new RouterError('NO_READY_REPLICA', 'The last ready replica of this model left while the request waited for it; retry shortly.', {
    retryAfterSeconds: NO_REPLICA_RETRY_AFTER_SECONDS,
  });
}

/** The answer of a request that waited for a pool that is gone. */
function poolRemovedError(): RouterError {
  return new RouterError('NO_READY_REPLICA', 'The pool serving this model was removed while the request waited for a replica; retry shortly.', {
    retryAfterSeconds: NO_REPLICA_RETRY_AFTER_SECONDS,
  });
}

/**
 * Endpoints that can take traffic (healthy, breaker allows), with their in-flight counters and, when
 * held, their places in the prefix index (none: looked up by id).
 */
interface Usable {
  readonly endpoints: readonly Endpoint[];
  readonly counters: readonly InFlightCounter[];
  readonly prefixes?: readonly PrefixHold[];
}

/** One pool as the last pick saw it: a {@link Usable} kept until the snapshot, a breaker or a health check changes. */
interface PoolView {
  /** Discovery's snapshot the view was built from. */
  readonly snapshot: readonly Endpoint[];
  /** The in-flight counter and prefix-index place of each endpoint of the snapshot, held while the view lives. */
  readonly heldCounters: readonly InFlightCounter[];
  readonly heldPrefixes: readonly PrefixHold[];
  /** 1 where the endpoint's breaker lets a request through, by position in the snapshot. */
  readonly breakerAllows: Uint8Array;
  endpoints: Endpoint[];
  counters: InFlightCounter[];
  prefixes: PrefixHold[];
  /** `breakers.version` when `breakerAllows` was computed, `health.version` when `endpoints` was (NaN: never). */
  breakerVersion: number;
  healthVersion: number | undefined;
}

/** The scheduler's choice, with what the picker records about it. */
interface Chosen {
  endpoint: Endpoint;
  engine: EngineLoad | undefined;
  prefixMatched: number;
  /** For a pool's LoRA adapter: where the request lands, as the router sees it. */
  placement?: LoraPlacement;
}

/** A pick's per-candidate data, reused from pick to pick (picks run one at a time). */
class PickBuffers {
  readonly candidates: Endpoint[];
  readonly local: Float64Array;
  readonly load: Float64Array;
  readonly engine: Array<EngineLoad | undefined>;
  readonly prefixMatched: Float64Array;
  /** 1 where the router's record says the candidate holds the request's LoRA adapter. */
  readonly adapterHeld: Float64Array;
  /** Adapters the router sent to the candidate lately that its engine sample does not show (idle in a slot, or sent since). */
  readonly adaptersUnreported: Float64Array;
  readonly schedule: ScheduleBuffers;

  constructor(readonly capacity: number) {
    this.candidates = new Array<Endpoint>(capacity);
    this.local = new Float64Array(capacity);
    this.load = new Float64Array(capacity);
    this.engine = new Array<EngineLoad | undefined>(capacity).fill(undefined);
    this.prefixMatched = new Float64Array(capacity);
    this.adapterHeld = new Float64Array(capacity);
    this.adaptersUnreported = new Float64Array(capacity);
    this.schedule = scheduleBuffers(capacity);
  }
}

/** The scheduler's decision as a trace shows it: the candidates, the winner, the best three by total score. */
function scheduleInfo(b: PickBuffers, count: number, winner: number): ScheduleInfo {
  const ranked: Array<{ endpoint: string; score: number }> = [];
  // `choose` leaves each candidate's total in the buffer when it scored more than one
  if (count > 1) for (let i = 0; i < count; i++) ranked.push({ endpoint: (b.candidates[i] as Endpoint).id, score: b.schedule.total[i] as number });
  ranked.sort((x, y) => y.score - x.score);
  return { candidates: count, winner: (b.candidates[winner] as Endpoint).id, top: ranked.slice(0, 3) };
}

export class EndpointPicker {
  /** Prompt blocks per request, per block geometry: a queued request is re-scheduled without re-hashing. */
  private readonly blocks = new WeakMap<PickRequest, { key: string; hashes: number[]; length: number; engineText: boolean }>();
  private readonly views = new Map<string, PoolView>();
  private buffers = new PickBuffers(16);
  /** Requests held per pool at zero, and the timer of their next look for a ready replica. */
  private readonly held = new Map<string, number>();
  /**
   * Pools discovery removed (and has not listed again): a request reaching one is not held for it. The
   * newest {@link REMEMBERED_REMOVALS} only, oldest forgotten first: in Kubernetes mode pools with new
   * names come and go for as long as the router runs, and a route planned before a removal reaches the
   * pool within that request's life.
   */
  private readonly removed = new Set<string>();
  private holdTimer: unknown;

  private readonly engine: EngineLoadSource;
  private readonly prefixIndex: PrefixIndex;
  private readonly placements: AdapterPlacements;
  private readonly now: () => number;

  constructor(private readonly deps: PickerDeps) {
    this.engine = deps.engine ?? NO_ENGINE;
    this.prefixIndex = deps.prefixIndex ?? new PrefixIndex();
    this.placements = deps.adapterPlacements ?? new AdapterPlacements();
    const engine = this.engine;
    this.now = deps.now ?? (engine.now ? () => (engine.now as () => number).call(engine) : () => Date.now());
  }

  /**
   * An endpoint for the next attempt at `pool`. Rejects with NO_READY_REPLICA when no endpoint can
   * take traffic at all, with REQUEST_SHED / QUEUE_FULL / QUEUE_TIMEOUT from admission, or with an
   * AbortError. A queued request waits at most `queue.timeoutMs`, and never past `maxWaitMs` (what is
   * left of the request's total timeout).
   */
  pick(pool: PoolSpec, tried: ReadonlySet<string>, signal?: AbortSignal, request: PickRequest = { priority: 'standard' }, maxWaitMs = Infinity, mayHold = false): Promise<Picked> {
    const usable = this.usable(pool, request).endpoints;
    if (usable.length === 0) {
      return mayHold && this.holds(pool, request) ? this.hold(pool, tried, signal, request, maxWaitMs) : Promise.reject(this.noneUsable(pool));
    }
    if (request.priority === 'sheddable' && this.saturated(pool, usable)) {
      this.deps.events?.onShed?.(pool.name);
      return Promise.reject(shedError());
    }
    const { queue } = pool.resilience;
    const limits = maxWaitMs < queue.timeoutMs ? { ...queue, timeoutMs: Math.max(0, maxWaitMs) } : queue;
    const { priority, tenant, weight } = request;
    // a request pinned to one replica, or that has tried some, cannot take every freed slot: it must not hold up those behind it
    const narrow = request.only !== undefined || tried.size > 0;
    const picked = this.deps.admission.admit(pool.name, () => this.take(pool, tried, request), limits, { signal, priority, tenant, weight, narrow });
    const loads = this.deps.adapterLoads;
    return pool.adapter && pool.routing.lora.loadOnDemand && loads ? picked.then((p) => this.withAdapter(loads, pool, p, signal)) : picked;
  }

  /**
   * The picked replica once it has the pool's LoRA adapter (loaded now if the router knows of no copy
   * there). A failed load gives the slot back, settles the breaker ticket as neither success nor
   * failure, forgets the placement and passes the error on.
   */
  private async withAdapter(loads: AdapterLoads, pool: PoolSpec, picked: Picked, signal: AbortSignal | undefined): Promise<Picked> {
    try {
      await loads.ensure(pool, picked.endpoint, picked.adapterHeld === true, signal);
      return picked;
    } catch (err) {
      this.placements.forget((pool.adapter as NonNullable<PoolSpec['adapter']>).name, picked.endpoint.id);
      picked.ticket.settle('backpressure');
      picked.release();
      throw err;
    }
  }

  /**
   * The answer when no replica of the pool can take a request. When every replica passing its health
   * checks is held out by an open breaker (and at least one is), its `Retry-After` is when the first of
   * them turns half-open and lets a probe through (at least 1 s, at most {@link MAX_BREAKER_WAIT_SECONDS}):
   * the official SDKs retry twice after the wait they are told, and with the usual 2 s both retries met
   * breakers shut for their whole cool-down (10 s by default). Otherwise (no replica, none healthy, a
   * half-open probe under way) the usual wait.
   */
  private noneUsable(pool: PoolSpec): RouterError {
    const { endpoints, health, breakers } = this.deps;
    const unknown = unprobedCountsHealthy(pool);
    let soonest = Infinity;
    for (const ep of endpoints.snapshot(pool.name)) {
      if (!health.isHealthy(ep.id, unknown)) continue;
      const left = breakers.find(ep.id)?.cooldownLeftMs();
      if (left === undefined) return noReadyReplica();
      soonest = Math.min(soonest, left);
    }
    if (soonest === Infinity) return noReadyReplica();
    const seconds = Math.min(MAX_BREAKER_WAIT_SECONDS, Math.max(1, Math.ceil(soonest / 1000)));
    return new RouterError('NO_READY_REPLICA', `Every replica of this model failed recently and is held out by its circuit breaker; the first is tried again in ${seconds} s.`, {
      retryAfterSeconds: seconds,
    });
  }

  /**
   * Replicas of the pool that are ready: discovered and passing their health checks (breakers aside:
   * a replica whose breaker is open is failing, not absent). In a pool that scales from zero with
   * health checks, a replica counts once a probe has passed.
   */
  readyReplicas(pool: PoolSpec): number {
    const unknown = unprobedCountsHealthy(pool);
    let ready = 0;
    for (const ep of this.deps.endpoints.snapshot(pool.name)) if (this.deps.health.isHealthy(ep.id, unknown)) ready++;
    return ready;
  }

  /** Requests waiting for a first ready replica of `pool`. */
  heldRequests(pool: string): number {
    return this.held.get(pool) ?? 0;
  }

  /**
   * Whether a request the pool cannot take now waits for it instead: the pool scales from zero and has
   * no ready replica, and the request may wait (not sheddable, not pinned to one replica).
   */
  private holds(pool: PoolSpec, request: PickRequest): boolean {
    return pool.resilience.scaleFromZero.enabled && request.priority !== 'sheddable' && request.only === undefined && this.readyReplicas(pool) === 0 && !this.removed.has(pool.name);
  }

  /**
   * Waits in the pool's admission queue (bounded, by priority and tenant, cancellable) until a replica
   * turns ready and takes the request, at most `scaleFromZero.maxWaitMs`; then a 503 with Retry-After.
   */
  private hold(pool: PoolSpec, tried: ReadonlySet<string>, signal: AbortSignal | undefined, request: PickRequest, maxWaitMs: number): Promise<Picked> {
    const { scaleFromZero, queue } = pool.resilience;
    const waitMs = Math.max(0, Math.min(scaleFromZero.maxWaitMs, maxWaitMs));
    let timedOut: RouterError | undefined;
    const expired = (): RouterError =>
      (timedOut = new RouterError('NO_READY_REPLICA', `No replica of this model became ready within ${Math.round(waitMs / 1000)} s (it is scaling up from zero); retry later.`, {
        retryAfterSeconds: Math.max(NO_REPLICA_RETRY_AFTER_SECONDS, Math.min(60, Math.ceil(scaleFromZero.maxWaitMs / 10_000))),
      }));
    const { priority, tenant, weight } = request;
    this.changeHeld(pool.name, 1, 'held');
    const picked = this.deps.admission.admit(pool.name, () => this.take(pool, tried, request), { maxSize: queue.maxSize, timeoutMs: waitMs }, { signal, priority, tenant, weight, held: { expired } });
    picked.then(
      () => this.changeHeld(pool.name, -1, 'served'),
      (err: unknown) => this.changeHeld(pool.name, -1, isAbortError(err) ? 'abandoned' : err === timedOut ? 'timeout' : 'rejected'),
    );
    return picked;
  }

  /**
   * `pool` is gone from discovery (its ModelPool deleted, or its spec no longer usable): the requests
   * queued or held for it are answered at once, NO_READY_REPLICA, so that a route with another pool
   * moves on to it (exchange.ts) and the rest get a 503 with Retry-After instead of waiting out
   * `queue.timeoutMs` or `scaleFromZero.maxWaitMs`; and its view gives back its endpoints' counters.
   * Returns how many requests were waiting.
   */
  poolRemoved(pool: string): number {
    // a request whose route was planned before the removal may still come to it: it is not held
    this.removed.delete(pool);
    this.removed.add(pool);
    if (this.removed.size > REMEMBERED_REMOVALS) this.removed.delete(this.removed.values().next().value as string);
    const view = this.views.get(pool);
    if (view) {
      this.views.delete(pool);
      this.letGo(view);
    }
    return this.deps.admission.close(pool, poolRemovedError);
  }

  /**
   * Discovery changed `pool` (its endpoints, most often): the requests queued for it are offered a slot
   * again at once, so a replica that just joined takes them rather than waiting for a slot to free on
   * the old ones (a queued request used to wait for that, or for `queue.timeoutMs` and a 429, while the
   * new replica sat idle). When the pool has no ready replica left and does not scale from zero, they
   * are answered NO_READY_REPLICA now, as a new request is (and a route moves on to its next pool),
   * instead of waiting out `queue.timeoutMs` for a 429 `queue_timeout`. Returns how many were answered so.
   */
  endpointsChanged(pool: PoolSpec): number {
    if (this.deps.admission.depth(pool.name) === 0) return 0;
    if (!pool.resilience.scaleFromZero.enabled && this.readyReplicas(pool) === 0) return this.deps.admission.close(pool.name, noReplicaLeftError, 'no_replica');
    this.deps.admission.notify(pool.name);
    return 0;
  }

  /** Removed pools remembered now (at most {@link REMEMBERED_REMOVALS}). */
  get removedPools(): number {
    return this.removed.size;
  }

  /** `pool` is in discovery (again): requests may be held for it. */
  poolAdded(pool: string): void {
    this.removed.delete(pool);
  }

  private changeHeld(pool: string, by: 1 | -1, event: HoldEvent): void {
    const count = (this.held.get(pool) ?? 0) + by;
    if (count > 0) this.held.set(pool, count);
    else this.held.delete(pool);
    this.deps.events?.onHold?.(pool, event);
    if (this.held.size > 0 && this.holdTimer === undefined) this.lookForReplicas();
    if (this.held.size === 0 && this.holdTimer !== undefined) {
      (this.deps.scheduler ?? systemScheduler).clearTimeout(this.holdTimer);
      this.holdTimer = undefined;
    }
  }

  /** While requests are held: every {@link HOLD_POLL_MS}, each held pool's queue tries again. */
  private lookForReplicas(): void {
    const scheduler = this.deps.scheduler ?? systemScheduler;
    this.holdTimer = scheduler.setTimeout(() => {
      this.holdTimer = undefined;
      for (const pool of [...this.held.keys()]) this.deps.admission.notify(pool);
      if (this.held.size > 0) this.lookForReplicas();
    }, HOLD_POLL_MS);
  }

  /** Whether `pool` still has a replica that could take traffic and that this request has not tried. */
  hasUntried(pool: PoolSpec, tried: ReadonlySet<string>, request?: PickRequest): boolean {
    return this.usable(pool, request).endpoints.some((ep) => !tried.has(ep.id));
  }

  /**
   * The replica answered that it does not serve the pool's LoRA adapter (404: never loaded there, or lost
   * with a restart or an unload): it no longer counts as holding it, so the lora scorer stops sending the
   * adapter's requests there and, with `loadOnDemand`, the next pick there loads it again.
   */
  adapterMissing(pool: PoolSpec, endpointId: string): void {
    if (pool.adapter) this.placements.missing(pool.adapter.name, endpointId, this.now());
  }

  /** How an answer that reached the client ended, for its endpoint's breaker: whole, or broken by the engine. */
  recordAnswerEnd(pool: PoolSpec, endpointId: string, outcome: 'success' | 'failure', requestId?: string, source?: FailureSource): void {
    // an endpoint that left discovery meanwhile had its breaker dropped: its answer counts for nothing, and no breaker
    // is made again for it (the snapshot is looked at only when the endpoint has no breaker)
    const { breakers, endpoints } = this.deps;
    const breaker = breakers.find(endpointId) ?? (endpoints.snapshot(pool.name).some((ep) => ep.id === endpointId) ? breakers.get(endpointId, pool.name, pool.resilience.breaker) : undefined);
    breaker?.answerEnded(outcome, requestId, source);
  }

  /** The endpoints of the pool this request may go to (all, or only the one it is pinned to) that can take traffic now. */
  private usable(pool: PoolSpec, request: PickRequest | undefined): Usable {
    const only = request?.only;
    if (only === undefined) return this.view(pool);
    // pinned: one endpoint, looked at directly (no breakers made for the rest of the pool)
    const endpoints = this.deps.endpoints.snapshot(pool.name).filter((ep) => ep.id === only && this.canTakeTraffic(pool, ep));
    const { inFlight } = this.deps;
    return { endpoints, counters: endpoints.map((ep) => ({ count: inFlight.count(ep.id) })) };
  }

  /** The balancer's usable rule for one endpoint. */
  private canTakeTraffic(pool: PoolSpec, ep: Endpoint): boolean {
    const { health, breakers } = this.deps;
    return isUsable({ healthy: health.isHealthy(ep.id, unprobedCountsHealthy(pool)), breakerAvailable: breakers.get(ep.id, pool.name, pool.resilience.breaker).available() });
  }

  /**
   * The pool's view, brought up to date: rebuilt for a new snapshot, its breakers asked again after a
   * breaker changed, its usable endpoints recomputed after that or a health transition — on every pick
   * when the health view has no version.
   */
  private view(pool: PoolSpec): PoolView {
    const { endpoints, breakers, health } = this.deps;
    const snapshot = endpoints.snapshot(pool.name);
    let view = this.views.get(pool.name);
    if (view?.snapshot !== snapshot) view = this.rebuild(pool, snapshot, view);
    const breakerVersion = breakers.version;
    const healthVersion = health.version;
    const breakersMoved = view.breakerVersion !== breakerVersion;
    if (!breakersMoved && healthVersion !== undefined && view.healthVersion === healthVersion) return view;
    if (breakersMoved) {
      for (let i = 0; i < snapshot.length; i++) view.breakerAllows[i] = breakers.get((snapshot[i] as Endpoint).id, pool.name, pool.resilience.breaker).available() ? 1 : 0;
      view.breakerVersion = breakerVersion;
    }
    view.endpoints = [];
    view.counters = [];
    view.prefixes = [];
    const unknown = unprobedCountsHealthy(pool);
    for (let i = 0; i < snapshot.length; i++) {
      const ep = snapshot[i] as Endpoint;
      if (!isUsable({ healthy: health.isHealthy(ep.id, unknown), breakerAvailable: view.breakerAllows[i] === 1 })) continue;
      view.endpoints.push(ep);
      view.counters.push(view.heldCounters[i] as InFlightCounter);
      view.prefixes.push(view.heldPrefixes[i] as PrefixHold);
    }
    view.healthVersion = healthVersion;
    return view;
  }

  /** A view of a new snapshot: its endpoints' in-flight counters and prefix-index places held, those of the view it replaces given back. */
  private rebuild(pool: PoolSpec, snapshot: readonly Endpoint[], old: PoolView | undefined): PoolView {
    const { inFlight } = this.deps;
    const prefixIndex = this.prefixIndex;
    const view: PoolView = {
      snapshot,
      heldCounters: snapshot.map((ep) => inFlight.hold(ep.id, pool.name)),
      heldPrefixes: snapshot.map((ep) => prefixIndex.hold(ep.id)),
      breakerAllows: new Uint8Array(snapshot.length),
      endpoints: [],
      counters: [],
      prefixes: [],
      breakerVersion: NaN,
      healthVersion: NaN,
    };
    if (old) this.letGo(old);
    this.views.set(pool.name, view);
    return view;
  }

  /** Gives back what a view held: its endpoints' in-flight counters and prefix-index places. */
  private letGo(view: PoolView): void {
    for (const ep of view.snapshot) {
      this.deps.inFlight.drop(ep.id);
      this.prefixIndex.drop(ep.id);
    }
  }

  /** Every usable replica has a fresh engine sample over the pool's saturation thresholds. */
  private saturated(pool: PoolSpec, usable: readonly Endpoint[]): boolean {
    const { queueDepth, kvCacheUsage } = pool.routing.saturation;
    const engine = this.engineFor(pool);
    const now = engine.now?.();
    return usable.every((ep) => {
      const load = engine.load(ep.id, now);
      return load !== undefined && (load.waiting >= queueDepth || (load.kvCacheUsage ?? 0) >= kvCacheUsage);
    });
  }

  private engineFor(pool: PoolSpec): EngineLoadSource {
    return pool.routing.engineMetrics.enabled ? this.engine : NO_ENGINE;
  }

  /** The request's prompt blocks for this pool's block geometry (empty when the profile does not use them). */
  private promptBlocksFor(pool: PoolSpec, request: PickRequest): number[] {
    const usesPrefix = pool.routing.scorers.some((s) => s.name === 'prefix' && s.weight > 0);
    if (!usesPrefix || request.promptText === undefined) return [];
    const { blockChars, maxBlocks, isolateKeys } = pool.routing.prefix;
    // a pool rendering with its model's template has its own text: blocks are per pool then
    const templated = pool.routing.kvEvents.enabled && pool.routing.kvEvents.tokenizer === 'huggingface';
    // a pool that isolates keys: a key's blocks are its own (they match none of another key's)
    const scope = isolateKeys ? (request.tenant ?? '') : undefined;
    let key = templated ? `${blockChars}/${maxBlocks}/${pool.name}` : `${blockChars}/${maxBlocks}`;
    if (scope !== undefined) key += `/${scope}`;
    const memo = this.blocks.get(request);
    if (memo?.key === key) return memo.hashes;
    const engineText = templated && request.prompt !== undefined ? this.deps.kvPrefix?.promptText?.(pool.name, request.prompt) : undefined;
    const text = engineText ?? request.promptText();
    const hashes = promptBlocks(text, blockChars, maxBlocks, scope);
    this.blocks.set(request, { key, hashes, length: text.length / blockChars, engineText: engineText !== undefined });
    return hashes;
  }

  /**
   * The engines' KV events as a source of this pick's prefix matches: none when the pool does not
   * subscribe or isolates keys, or when its events speak the model's rendering (`tokenizer:
   * huggingface`) and this request's blocks are in the router's own text. Once per pick, not per candidate.
   */
  private kvSourceFor(pool: PoolSpec, request: PickRequest): KvPrefixSource | undefined {
    const k = pool.routing.kvEvents;
    // the engines' events name blocks of every key alike: a pool that isolates keys matches its own estimate only
    if (!k.enabled || pool.routing.prefix.isolateKeys) return undefined;
    if (k.tokenizer === 'huggingface' && this.blocks.get(request)?.engineText !== true) return undefined;
    return this.deps.kvPrefix;
  }

  /**
   * The leading blocks of `blocks` a candidate likely holds: what its engine's KV events say while they
   * are fresh and complete; the most of them and the estimate while they are partial; else the estimate.
   */
  private prefixMatch(pool: string, ep: Endpoint, hold: PrefixHold | undefined, blocks: readonly number[], kv: KvPrefixSource | undefined): number {
    const state = kv === undefined ? 0 : kv.state(pool, ep.id);
    if (state === 2) return (kv as KvPrefixSource).match(pool, ep.id, blocks);
    const estimate = hold ? this.prefixIndex.matchHeld(hold, blocks) : this.prefixIndex.match(ep.id, blocks);
    return state === 0 ? estimate : Math.max(estimate, (kv as KvPrefixSource).match(pool, ep.id, blocks));
  }

  private sessionKey(pool: PoolSpec, request: PickRequest): string | undefined {
    const usesSession = pool.routing.scorers.some((s) => s.name === 'session' && s.weight > 0);
    const value = usesSession ? request.header?.(pool.routing.session.header) : undefined;
    return value === '' ? undefined : value;
  }

  /**
   * The balancer's filters and scheduler over the usable endpoints, each candidate's data gathered into
   * the reused buffers in one pass: the chosen endpoint, with its engine sample and prefix match.
   */
  private decide(pool: PoolSpec, usable: Usable, tried: ReadonlySet<string>, request: PickRequest, blocks: readonly number[]): Chosen | undefined {
    const { endpoints, counters, prefixes } = usable;
    if (this.buffers.capacity < endpoints.length) this.buffers = new PickBuffers(endpoints.length);
    const b = this.buffers;
    const skipTried = skipsTried(endpoints, tried);
    const limit = pool.resilience.maxConcurrencyPerReplica;
    const engine = this.engineFor(pool);
    const now = engine === NO_ENGINE ? undefined : engine.now?.(); // one clock read per pick, not per endpoint
    const adapter = pool.adapter?.name;
    const forgetBefore = adapter === undefined ? 0 : this.now() - pool.routing.lora.memoryMs;
    const kv = blocks.length > 0 ? this.kvSourceFor(pool, request) : undefined;
    let count = 0;
    for (let i = 0; i < endpoints.length; i++) {
      const ep = endpoints[i] as Endpoint;
      const inFlight = (counters[i] as InFlightCounter).count;
      if (!mayPick(ep, inFlight, skipTried && tried.has(ep.id), skipTried, limit)) continue;
      const sample = engine === NO_ENGINE ? undefined : engine.load(ep.id, now);
      b.candidates[count] = ep;
      b.local[count] = inFlight;
      b.engine[count] = sample;
      b.load[count] = estimatedLoad(inFlight, sample, ep.weight);
      if (blocks.length > 0) b.prefixMatched[count] = this.prefixMatch(pool.name, ep, prefixes?.[i], blocks, kv);
      if (adapter !== undefined) {
        b.adapterHeld[count] = this.placements.lacks(adapter, ep.id, forgetBefore) ? -1 : this.placements.holds(adapter, ep.id, forgetBefore, sample?.lora) ? 1 : 0;
        b.adaptersUnreported[count] = this.placements.unreported(ep.id, forgetBefore, sample?.lora);
      }
      count++;
    }
    const input = {
      candidates: b.candidates,
      count,
      local: b.local,
      load: b.load,
      engine: b.engine,
      prefixMatched: b.prefixMatched,
      prefixTotal: blocks.length,
      sessionKey: this.sessionKey(pool, request),
      lora: adapter === undefined ? undefined : { adapter, held: b.adapterHeld, unreported: b.adaptersUnreported },
      settings: pool.routing,
    };
    const index = choose(input, b.schedule, this.deps.random);
    if (index < 0) return undefined;
    request.onScheduled?.(scheduleInfo(b, count, index));
    const chosen: Chosen = { endpoint: b.candidates[index] as Endpoint, engine: b.engine[index], prefixMatched: blocks.length > 0 ? (b.prefixMatched[index] as number) : 0 };
    if (adapter !== undefined) chosen.placement = placementOf(adapterScore(adapter, b.engine[index]?.lora, b.adapterHeld[index] as number, b.adaptersUnreported[index] as number));
    return chosen;
  }

  private take(pool: PoolSpec, tried: ReadonlySet<string>, request: PickRequest): Picked | undefined {
    const { inFlight, breakers, admission } = this.deps;
    const prefixIndex = this.prefixIndex;
    const blocks = this.promptBlocksFor(pool, request);
    const chosen = this.decide(pool, this.usable(pool, request), tried, request, blocks);
    if (!chosen) return undefined;
    const { endpoint } = chosen;
    const ticket = breakers.get(endpoint.id, pool.name, pool.resilience.breaker).begin(request.requestId);
    if (!ticket) return undefined; // its half-open probe slot was just taken
    if (blocks.length > 0) {
      const cacheTokens = chosen.engine?.cacheTokens;
      if (cacheTokens !== undefined) prefixIndex.tune(endpoint.id, cacheTokens, pool.routing.prefix.blockChars);
      prefixIndex.record(endpoint.id, blocks, pool.routing.prefix.capacityPerEndpoint);
    }
    const prompt = this.blocks.get(request);
    if (prompt?.hashes === blocks) this.deps.events?.onPicked?.(pool.name, chosen.prefixMatched, prompt.length); // this pool's geometry, short prompts too
    if (prompt?.hashes === blocks && this.deps.events?.onPrefixPredicted) {
      this.deps.events.onPrefixPredicted(pool.name, PREFIX_SOURCES[this.kvSourceFor(pool, request)?.state(pool.name, endpoint.id) ?? 0] as PrefixSource, chosen.prefixMatched, prompt.length);
    }
    const { adapter } = pool;
    if (adapter && chosen.placement) {
      this.placements.record(adapter.name, endpoint.id, this.now(), pool.routing.lora.memoryMs);
      this.deps.events?.onAdapterPlaced?.(pool.name, chosen.placement);
    }
    const releaseSlot = inFlight.acquire(endpoint.id, pool.name);
    const onReleased = this.deps.events?.onReleased;
    const takenAt = onReleased ? this.now() : 0;
    let released = false;
    return {
      endpoint,
      ticket,
      ...(chosen.placement ? { adapterHeld: chosen.placement === 'held' } : {}),
      release: () => {
        if (released) return;
        released = true;
        releaseSlot();
        onReleased?.(pool.name, this.now() - takenAt);
        admission.notify(pool.name);
      },
    };
  }
}
