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

/** Each pool's demand as the router sees it now (metrics/demand.ts). */
export function* poolDemand(
  discovery: { pools(): readonly PoolSpec[]; endpoints: { snapshot(pool: string): readonly { id: string }[] } },
  sources: { inFlight: Pick<InFlight, 'count'>; admission: { depth(pool: string): number }; picker: { heldRequests(pool: string): number }; engine: EngineLoadSource },
): Iterable<PoolDemand> {
  const now = sources.engine.now?.();
  for (const pool of discovery.pools()) {
    let inFlight = 0;
    let engineWaiting: number | undefined;
    let kvSum = 0;
    let kvCount = 0;
    for (const ep of discovery.endpoints.snapshot(pool.name)) {
      inFlight += sources.inFlight.count(ep.id);
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
