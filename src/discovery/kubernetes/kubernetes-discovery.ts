/**
 * Kubernetes discovery: watches EndpointSlices, ModelPools and ModelDeployments (in the configured
 * namespaces, or all) and keeps, per pool, an immutable snapshot of its routable endpoints. It only
 * writes its own state; what to do with it (the registry, status) is for its listeners.
 */
import { type KubernetesObject } from '@kubernetes/client-node';
import { type Scheduler } from '../../core/clock.js';
import { type Endpoint, type EndpointSource, type PoolResolver, type Syncable } from '../../core/types.js';
import { parseModelDeployment, parseModelPool, type CustomObject, type ParsedDeployment, type ParsedPool } from './crd.js';
import { poolEndpoints, type EndpointSliceLike } from './endpoint-slices.js';
import { SERVICE_NAME_LABEL, type KubeApi, type WatchedKind } from './kube-api.js';
import { ResilientWatch, type WatchState } from './resilient-watch.js';

export interface DiscoveryOptions {
  /** Empty: every namespace (one cluster-wide watch per kind). */
  namespaces: readonly string[];
  /** Turns a ModelPool's declaration into a PoolSpec: checks and merges its overrides (config/pool-settings.ts). */
  resolvePool: PoolResolver;
  resyncIntervalMs: number;
  backoff: { initialMs: number; maxMs: number };
  scheduler: Scheduler;
  random: () => number;
  /** Health of one watch changed; `error` is set when it failed. */
  onWatchState?: (kind: WatchedKind, namespace: string, state: Readonly<WatchState>, error?: unknown) => void;
  onEvent?: (kind: WatchedKind, type: 'add' | 'update' | 'delete') => void;
}

/** What discovery knows about one pool. */
export interface PoolView extends ParsedPool {
  /** Endpoints listed for its Service, ready or not. */
  replicas: number;
  readyReplicas: number;
  /** The object as last seen (its current status included). */
  object: CustomObject;
}

export interface DeploymentView extends ParsedDeployment {
  object: CustomObject;
}

export interface DiscoveryState {
  pools: readonly PoolView[];
  deployments: readonly DeploymentView[];
}

const NONE: readonly Endpoint[] = Object.freeze([]);
const WATCHED: readonly WatchedKind[] = ['endpointslices', 'modelpools', 'modeldeployments'];

export class KubernetesDiscovery implements EndpointSource, Syncable {
  private readonly watches: Array<{ kind: WatchedKind; namespace: string; watch: ResilientWatch<KubernetesObject> }> = [];
  private snapshots = new Map<string, readonly Endpoint[]>();
  private current: DiscoveryState = { pools: [], deployments: [] };
  private readonly listeners: Array<(state: DiscoveryState) => void> = [];
  private rebuildQueued = false;

  constructor(
    api: KubeApi,
    private readonly options: DiscoveryOptions,
  ) {
    const namespaces = options.namespaces.length > 0 ? options.namespaces : [undefined];
    for (const namespace of namespaces) {
      for (const kind of WATCHED) {
        const watch = new ResilientWatch<KubernetesObject>(() => api.informer(kind, namespace), {
          kind,
          namespace: namespace ?? '',
          resyncIntervalMs: options.resyncIntervalMs,
          backoff: options.backoff,
          scheduler: options.scheduler,
          random: options.random,
          onChange: () => this.queueRebuild(),
          onEvent: (type) => options.onEvent?.(kind, type),
          onState: (state, error) => options.onWatchState?.(kind, namespace ?? '', state, error),
        });
        this.watches.push({ kind, namespace: namespace ?? '', watch });
      }
    }
  }

  start(): void {
    for (const { watch } of this.watches) watch.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.watches.map(({ watch }) => watch.stop()));
  }

  /** True once every watched kind in every namespace has listed at least once. */
  hasSynced(): boolean {
    return this.watches.every(({ watch }) => watch.state.synced);
  }

  /** Health of every watch, for readiness reasons, logs and metrics. */
  watchStates(): Array<{ kind: WatchedKind; namespace: string; state: Readonly<WatchState> }> {
    return this.watches.map(({ kind, namespace, watch }) => ({ kind, namespace, state: watch.state }));
  }

  snapshot(pool: string): readonly Endpoint[] {
    return this.snapshots.get(pool) ?? NONE;
  }

  state(): DiscoveryState {
    return this.current;
  }

  /** `listener` runs after every rebuild (coalesced: one per burst of events). */
  onChange(listener: (state: DiscoveryState) => void): void {
    this.listeners.push(listener);
  }

  private items(kind: WatchedKind): KubernetesObject[] {
    return this.watches.filter((w) => w.kind === kind).flatMap((w) => [...w.watch.items()]);
  }

  private queueRebuild(): void {
    if (this.rebuildQueued) return;
    this.rebuildQueued = true;
    queueMicrotask(() => {
      this.rebuildQueued = false;
      this.rebuild();
    });
  }

  /** Recomputes every snapshot from the caches. Cost: one pass over slices, one over pools. */
  private rebuild(): void {
    const slicesByService = new Map<string, EndpointSliceLike[]>();
    for (const slice of this.items('endpointslices') as EndpointSliceLike[]) {
      const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
      if (!service) continue;
      const key = `${slice.metadata?.namespace ?? ''}/${service}`;
      const list = slicesByService.get(key);
      if (list) list.push(slice);
      else slicesByService.set(key, [slice]);
    }
    const snapshots = new Map<string, readonly Endpoint[]>();
    const pools: PoolView[] = (this.items('modelpools') as CustomObject[]).map((object) => {
      const parsed = parseModelPool(object, this.options.resolvePool);
      if (!parsed.spec || !parsed.service) return { ...parsed, object, replicas: 0, readyReplicas: 0 };
      // A pool's Service is always looked up in the pool's own namespace.
      const found = poolEndpoints(parsed.key, parsed.service.port, slicesByService.get(`${parsed.namespace}/${parsed.service.name}`) ?? []);
      snapshots.set(parsed.key, Object.freeze(found.ready.map((e) => Object.freeze(e))));
      return { ...parsed, object, replicas: found.total, readyReplicas: found.ready.length };
    });
    const deployments: DeploymentView[] = (this.items('modeldeployments') as CustomObject[]).map((object) => ({ ...parseModelDeployment(object), object }));
    this.snapshots = snapshots;
    this.current = { pools, deployments };
    for (const listener of this.listeners) listener(this.current);
  }
}
