/**
 * Kubernetes mode glue: rebuilds the registry whenever discovery's state changes, and — on the
 * leader only — writes ModelPool and ModelDeployment status back when it differs from what is stored.
 */
import { type Logger } from 'pino';
import { type Deployment } from '../core/types.js';
import { type DeploymentView, type DiscoveryState, type KubernetesDiscovery } from '../discovery/kubernetes/kubernetes-discovery.js';
import { type KubeApi, type StatusKind } from '../discovery/kubernetes/kube-api.js';
import { Registry, type ModelCatalog } from '../registry/registry.js';
import { canonical, deploymentStatus, poolStatus, type PoolWaiting } from './status.js';

export interface ControllerOptions {
  logger: Logger;
  /** Whether this replica may write status now (the lease holder, or always without leader election). */
  mayWriteStatus: () => boolean;
  now?: () => Date;
  onStatusWrite?: (kind: StatusKind, ok: boolean) => void;
  /** What waits in this router for each pool's replicas, by pool key (none: nothing waits). */
  demand?: (pool: string) => PoolWaiting;
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
  /** What we last wrote per object, and the object's resourceVersion when we did. */
  private readonly written = new Map<string, { status: string; resourceVersion: string | undefined }>();

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
        status: poolStatus(p, now, this.options.demand?.(p.key)),
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

  private async writeAll(): Promise<void> {
    for (const want of this.desired()) {
      const status = canonical(want.status);
      if (status === canonical(want.current ?? {})) continue;
      const last = this.written.get(want.key);
      // Our own last write has not reached the cache yet: do not send it again.
      if (last?.status === status && last.resourceVersion === want.resourceVersion) continue;
      try {
        await this.api.patchStatus(want.kind, want.namespace, want.name, want.status);
        this.written.set(want.key, { status, resourceVersion: want.resourceVersion });
        this.options.onStatusWrite?.(want.kind, true);
      } catch (err) {
        this.options.onStatusWrite?.(want.kind, false);
        this.options.logger.warn({ kind: want.kind, object: `${want.namespace}/${want.name}`, error: (err as Error).message }, 'status write failed; will retry on the next change or resync');
      }
    }
  }
}
