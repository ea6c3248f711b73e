/**
 * Kubernetes mode glue: rebuilds the registry whenever discovery's state changes, and — on the
 * leader only — writes ModelPool and ModelDeployment status back when it differs from what is stored.
 *
 * Writes are paced per object: at most one every {@link MIN_GAP_MS} (a pool's `requestsWaiting` moves
 * with every queued request), and when another writer keeps replacing what this router wrote (a
 * second install of the router under another Lease, or an older version that computes another
 * status) the gap doubles up to {@link MAX_GAP_MS} and a warning says so, instead of the two trading
 * PATCHes as fast as the API server answers. What a gap holds back is written when it ends.
 */
import { type Logger } from 'pino';
import { systemScheduler, type Scheduler } from '../core/clock.js';
import { type Deployment, type PoolSpec } from '../core/types.js';
import { type DeploymentView, type DiscoveryState, type KubernetesDiscovery } from '../discovery/kubernetes/kubernetes-discovery.js';
import { statusOf, type KubeApi, type StatusKind } from '../discovery/kubernetes/kube-api.js';
import { describeKubeError } from '../discovery/kubernetes/resilient-watch.js';
import { Registry, type ModelCatalog } from '../registry/registry.js';
import { canonical, deploymentStatus, poolStatus, type PoolMismatch, type PoolWaiting } from './status.js';

export interface ControllerOptions {
  logger: Logger;
  /** Whether this replica may write status now (the lease holder, or always without leader election). */
  mayWriteStatus: () => boolean;
  now?: () => Date;
  onStatusWrite?: (kind: StatusKind, ok: boolean) => void;
  /** What waits in this router for each pool's replicas, by pool key (none: nothing waits). */
  demand?: (pool: string) => PoolWaiting;
  /** The replicas of each pool that answered this router that they do not serve its `servedModelName` (none: none did). */
  servedModel?: (pool: PoolSpec) => PoolMismatch | undefined;
  /** Monotonic ms and timers for the pacing of writes (default: the process's). */
  clock?: () => number;
  scheduler?: Scheduler;
}

/** The least time between two status writes of one object. */
export const MIN_GAP_MS = 1_000;
/** The most, while another writer keeps replacing this router's status of it. */
export const MAX_GAP_MS = 60_000;

/** The resourceVersions of an object's latest writes that are remembered as this router's own. */
const OURS_KEPT = 4;

/** When an object's status may be written next, and how far apart its writes are now. */
interface Pace {
  notBefore: number;
  gapMs: number;
  /** Another writer replaced what this router wrote last (warned once until it stops). */
  contended: boolean;
}

interface Desired {
  kind: StatusKind;
  namespace: string;
  name: string;
  key: string;
  status: object;
  current: unknown;
  resourceVersion: string | undefined;
}

export class KubernetesController {
  private registry = new Registry([], []);
  private writing: Promise<void> | undefined;
  private writeAgain = false;
  /**
   * What we last wrote per object, the object's resourceVersion when we did, and the resourceVersions
   * our latest writes gave it (a watch that lags shows them late: they are ours, not another writer's).
   */
  private readonly written = new Map<string, { status: string; resourceVersion: string | undefined; ours: string[] }>();
  private readonly pace = new Map<string, Pace>();
  /**
   * Objects whose last status write was answered 404: deleted after the cache last showed them (the watch's
   * DELETED event is on its way), the usual case when ModelDeployments come and go. A second 404 for an
   * object the cache still holds a second later is not that, and is warned of (a CRD without its status
   * subresource answers every write so).
   */
  private readonly gone = new Set<string>();
  /** A sync set for when the earliest held-back write may go. */
  private later: { at: number; timer: unknown } | undefined;

  constructor(
    private readonly discovery: KubernetesDiscovery,
    private readonly api: Pick<KubeApi, 'patchStatus'>,
    private readonly options: ControllerOptions,
  ) {
    discovery.onChange((state) => {
      this.rebuild(state);
      this.syncStatus();
    });
  }

  catalog(): ModelCatalog {
    return this.registry;
  }

  /** Writes whatever status differs (no-op unless this replica may write). Coalesces concurrent calls. */
  syncStatus(): void {
    if (!this.options.mayWriteStatus()) return;
    if (this.writing) {
      this.writeAgain = true;
      return;
    }
    this.writing = this.writeAll().finally(() => {
      this.writing = undefined;
      if (this.writeAgain) {
        this.writeAgain = false;
        this.syncStatus();
      }
    });
  }

  /** Resolves when no status write is in flight (for shutdown and tests). */
  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private rebuild(state: DiscoveryState): void {
    const pools = state.pools.flatMap((p) => (p.spec ? [p.spec] : []));
    const deployments = state.deployments.flatMap((d) => (d.deployment ? [d.deployment] : []));
    const before = new Set(this.registry.conflicts.map((c) => `${c.kind}:${c.name}:${c.loser}`));
    this.registry = new Registry(pools, deployments);
    for (const c of this.registry.conflicts) {
      if (!before.has(`${c.kind}:${c.name}:${c.loser}`))
        this.options.logger.warn({ name: c.name, kind: c.kind, winner: c.winner, loser: c.loser }, 'model name conflict: the oldest deployment keeps it');
    }
  }

  private desired(): Desired[] {
    const now = (this.options.now ?? (() => new Date()))();
    const state = this.discovery.state();
    const views = new Map<Deployment, DeploymentView>();
    for (const view of state.deployments) if (view.deployment) views.set(view.deployment, view);
    const invalidPools = new Set(state.pools.filter((p) => !p.spec).map((p) => p.key));
    const invalidDeployments = new Set(state.deployments.filter((d) => !d.deployment).map((d) => d.key));
    return [
      ...state.pools.map((p): Desired => ({
        kind: 'modelpools',
        namespace: p.namespace,
        name: p.name,
        key: `modelpools/${p.key}`,
        status: poolStatus(p, now, this.options.demand?.(p.key), p.spec ? this.options.servedModel?.(p.spec) : undefined),
        current: p.object.status,
        resourceVersion: p.object.metadata?.resourceVersion,
      })),
      ...state.deployments.map((d): Desired => ({
        kind: 'modeldeployments',
        namespace: d.namespace,
        name: d.name,
        key: `modeldeployments/${d.key}`,
        status: deploymentStatus(d, this.registry, views, now, invalidPools, invalidDeployments),
        current: d.object.status,
        resourceVersion: d.object.metadata?.resourceVersion,
      })),
    ];
  }

  private now(): number {
    return this.options.clock?.() ?? performance.now();
  }

  /** Syncs again at `at` (the earliest time a held-back write may go). */
  private syncAt(at: number): void {
    if (this.later && this.later.at <= at) return;
    const scheduler = this.options.scheduler ?? systemScheduler;
    if (this.later) scheduler.clearTimeout(this.later.timer);
    this.later = {
      at,
      timer: scheduler.setTimeout(
        () => {
          this.later = undefined;
          this.syncStatus();
        },
        Math.max(0, at - this.now()),
      ),
    };
  }

  /** Stops the timer of a held-back write (at shutdown). */
  stop(): void {
    if (this.later) (this.options.scheduler ?? systemScheduler).clearTimeout(this.later.timer);
    this.later = undefined;
  }

  private async writeAll(): Promise<void> {
    const wanted = this.desired();
    // objects gone: forget what was written to them
    const keys = new Set(wanted.map((w) => w.key));
    for (const key of this.written.keys()) if (!keys.has(key)) this.written.delete(key);
    for (const key of this.pace.keys()) if (!keys.has(key)) this.pace.delete(key);
    for (const key of this.gone) if (!keys.has(key)) this.gone.delete(key);
    for (const want of wanted) {
      const status = canonical(want.status);
      const current = canonical(want.current ?? {});
      if (status === current) continue;
      const last = this.written.get(want.key);
      // the cache shows the object as it was before our last write, or at one of our earlier writes
      const behindOurs =
        last !== undefined &&
        (want.resourceVersion === last.resourceVersion || (want.resourceVersion !== undefined && last.ours.includes(want.resourceVersion) && want.resourceVersion !== last.ours.at(-1)));
      // Our own last write has not reached the cache yet: do not send it again.
      if (last?.status === status && behindOurs) continue;
      const pace = this.pace.get(want.key);
      if (pace && this.now() < pace.notBefore) {
        this.syncAt(pace.notBefore);
        continue;
      }
      // the object changed since our write, not by one of ours, and its status is no longer ours: another writer's
      const contended =
        last !== undefined && last.resourceVersion !== want.resourceVersion && !(want.resourceVersion !== undefined && last.ours.includes(want.resourceVersion)) && current !== last.status;
      if (contended && !pace?.contended) {
        this.options.logger.warn(
          { kind: want.kind, object: `${want.namespace}/${want.name}` },
          'another writer keeps replacing this status (a second modelgate install under another leader-election Lease, or another version?): writing it less and less often',
        );
      }
      const gapMs = contended ? Math.min(MAX_GAP_MS, (pace?.gapMs ?? MIN_GAP_MS) * 2) : MIN_GAP_MS;
      try {
        const version = await this.api.patchStatus(want.kind, want.namespace, want.name, want.status);
        const ours = [...(last?.ours ?? []), ...(version === undefined ? [] : [version])].slice(-OURS_KEPT);
        this.written.set(want.key, { status, resourceVersion: want.resourceVersion, ours });
        this.pace.set(want.key, { notBefore: this.now() + gapMs, gapMs, contended });
        this.gone.delete(want.key);
        this.options.onStatusWrite?.(want.kind, true);
      } catch (err) {
        // paced too: an API server that refuses every write is not asked at every change
        this.pace.set(want.key, { notBefore: this.now() + MIN_GAP_MS, gapMs: MIN_GAP_MS, contended: pace?.contended ?? false });
        if (statusOf(err) === 404 && !this.gone.has(want.key)) {
          // deleted since the cache showed it: nothing to write to, and nothing failed
          this.gone.add(want.key);
          this.options.logger.debug({ kind: want.kind, object: `${want.namespace}/${want.name}` }, 'status not written: the object was deleted');
          continue;
        }
        this.options.onStatusWrite?.(want.kind, false);
        this.options.logger.warn({ kind: want.kind, object: `${want.namespace}/${want.name}`, error: describeKubeError(err) }, 'status write failed; will retry on the next change or resync');
      }
    }
  }
}
