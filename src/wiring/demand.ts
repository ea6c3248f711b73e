/**
 * Scale from zero, as the operator sees it: per-pool demand for the metrics, and the held requests'
 * events turned into a log line per episode (a pool began to hold requests; the episode ended), the
 * held-requests counter, and ModelPool status writes — when a pool begins or stops holding, and every
 * {@link STATUS_REFRESH_MS} while it holds (the status carries the count).
 */
import { type Logger } from 'pino';
import { type Scheduler } from '../core/clock.js';
import { type EngineLoadSource, type HoldEvent, type PoolSpec } from '../core/types.js';
import { type InFlight } from '../balancer/in-flight.js';
import { type PoolDemand } from '../metrics/demand.js';

export const STATUS_REFRESH_MS = 10_000;

/** Seconds of turned-away requests a pool's rate is read over. */
const TURNED_AWAY_WINDOW_S = 60;
/** Weight of each request in a pool's mean time holding a replica. */
const MEAN_WEIGHT = 0.05;

/**
 * The requests a pool was asked to take and the router turned away for want of capacity (a full
 * admission queue, a wait past `queue.timeoutMs`, a sheddable request shed), as the concurrency they
 * would have held: by Little's law, their rate over the last minute times how long the pool's requests
 * hold a replica's slot on average (from the pick to the answer's end, streams whole: not the wait in
 * the queue before it, which would count the saturation twice; 1 s before the first). Without it the demand of a saturated
 * pool stops at what it runs and queues — and a pool whose traffic is sheddable, shed rather than
 * queued, never looks busier than it is already serving. Exactly 0 a minute after the last one.
 */
export class TurnedAway {
  private readonly pools = new Map<string, { counts: number[]; seconds: number[]; meanS: number | undefined }>();

  constructor(private readonly now: () => number) {}

  private pool(name: string): { counts: number[]; seconds: number[]; meanS: number | undefined } {
    let entry = this.pools.get(name);
    if (!entry) {
      entry = { counts: new Array<number>(TURNED_AWAY_WINDOW_S).fill(0), seconds: new Array<number>(TURNED_AWAY_WINDOW_S).fill(-1), meanS: undefined };
      this.pools.set(name, entry);
    }
    return entry;
  }

  rejected(pool: string): void {
    const entry = this.pool(pool);
    const second = Math.floor(this.now() / 1000);
    const slot = second % TURNED_AWAY_WINDOW_S;
    if (entry.seconds[slot] !== second) {
      entry.seconds[slot] = second;
      entry.counts[slot] = 0;
    }
    entry.counts[slot]! += 1;
  }

  /** A request gave back the pool's replica slot it held for `seconds`. */
  served(pool: string, seconds: number): void {
    if (pool === '' || !(seconds >= 0)) return;
    const entry = this.pool(pool);
    entry.meanS = entry.meanS === undefined ? seconds : entry.meanS + MEAN_WEIGHT * (seconds - entry.meanS);
  }

  /** The concurrency the pool's turned-away requests would have held, now. */
  demand(pool: string): number {
    const entry = this.pools.get(pool);
    if (!entry) return 0;
    const second = Math.floor(this.now() / 1000);
    let count = 0;
    for (let i = 0; i < TURNED_AWAY_WINDOW_S; i++) if ((entry.seconds[i] as number) > second - TURNED_AWAY_WINDOW_S) count += entry.counts[i] as number;
    return count === 0 ? 0 : Math.round((count / TURNED_AWAY_WINDOW_S) * (entry.meanS ?? 1) * 1000) / 1000;
  }

  /** Forgets the pools not listed (gone from discovery). */
  retain(pools: ReadonlySet<string>): void {
    for (const name of this.pools.keys()) if (!pools.has(name)) this.pools.delete(name);
  }
}

/** Each pool's demand as the router sees it now (metrics/demand.ts). */
export function* poolDemand(
  discovery: { pools(): readonly PoolSpec[]; endpoints: { snapshot(pool: string): readonly { id: string }[] } },
  sources: {
    inFlight: Pick<InFlight, 'poolCount'>;
    admission: { depth(pool: string): number };
    picker: { heldRequests(pool: string): number };
    engine: EngineLoadSource;
    turnedAway?: Pick<TurnedAway, 'demand'>;
  },
): Iterable<PoolDemand> {
  const now = sources.engine.now?.();
  for (const pool of discovery.pools()) {
    // the pool's own requests: an endpoint it shares with another pool carries both, and one that left
    // discovery (a terminating pod) still carries the streams it had
    const inFlight = sources.inFlight.poolCount(pool.name);
    let engineWaiting: number | undefined;
    let kvSum = 0;
    let kvCount = 0;
    for (const ep of discovery.endpoints.snapshot(pool.name)) {
      const load = pool.routing.engineMetrics.enabled ? sources.engine.load(ep.id, now) : undefined;
      if (!load) continue;
      engineWaiting = (engineWaiting ?? 0) + load.waiting;
      if (load.kvCacheUsage !== undefined) {
        kvSum += load.kvCacheUsage;
        kvCount++;
      }
    }
    yield {
      pool: pool.name,
      inFlight,
      waiting: sources.admission.depth(pool.name),
      held: sources.picker.heldRequests(pool.name),
      turnedAway: sources.turnedAway?.demand(pool.name) ?? 0,
      ...(engineWaiting === undefined ? {} : { engineWaiting }),
      ...(kvCount > 0 ? { kvCacheUsage: kvSum / kvCount } : {}),
    };
  }
}

export interface HoldReporterDeps {
  logger: Logger;
  metrics: { recordHold(pool: string, event: HoldEvent): void };
  /** Requests held for `pool` now (after the event). */
  held: (pool: string) => number;
  /** The ModelPool status may need writing. */
  demandChanged: () => void;
  scheduler: Scheduler;
}

/** What one pool's current episode of held requests did, for its closing log line. */
interface Episode {
  served: number;
  timedOut: number;
  abandoned: number;
  rejected: number;
}

export class HoldReporter {
  private readonly episodes = new Map<string, Episode>();
  private readonly log: Logger;
  private timer: unknown;

  constructor(private readonly deps: HoldReporterDeps) {
    this.log = deps.logger.child({ component: 'scale-from-zero' });
  }

  record(pool: string, event: HoldEvent): void {
    this.deps.metrics.recordHold(pool, event);
    let episode = this.episodes.get(pool);
    if (event === 'held') {
      if (!episode) {
        episode = { served: 0, timedOut: 0, abandoned: 0, rejected: 0 };
        this.episodes.set(pool, episode);
        this.log.warn({ pool }, 'pool has no ready replica: holding its requests until one is ready (scaleFromZero)');
        this.deps.demandChanged();
        this.refresh();
      }
      return;
    }
    if (!episode) return;
    if (event === 'served') episode.served++;
    else if (event === 'timeout') episode.timedOut++;
    else if (event === 'abandoned') episode.abandoned++;
    else episode.rejected++;
    if (this.deps.held(pool) > 0) return;
    this.episodes.delete(pool);
    this.log.info({ pool, ...episode }, episode.served > 0 ? 'pool has a ready replica: held requests sent' : 'no request held now');
    this.deps.demandChanged();
  }

  stop(): void {
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** While some pool holds requests, the status is written again now and then (the count changes). */
  private refresh(): void {
    if (this.timer !== undefined) return;
    this.timer = this.deps.scheduler.setTimeout(() => {
      this.timer = undefined;
      if (this.episodes.size === 0) return;
      this.deps.demandChanged();
      this.refresh();
    }, STATUS_REFRESH_MS);
  }
}
