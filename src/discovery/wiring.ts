/** What the composition root needs from either discovery mode. */
import { type EndpointSource, type PoolSpec } from '../core/types.js';
import { type ModelCatalog } from '../registry/registry.js';

export interface DiscoveryWiring {
  endpoints: EndpointSource;
  catalog(): ModelCatalog;
  /** Every usable pool (health checks, breaker pruning, the ready-endpoints gauge). */
  pools(): readonly PoolSpec[];
  /** Why the router is not ready yet; empty when discovery has synced. */
  notReadyReasons(): string[];
  /** Health of each watch (Kubernetes mode; empty otherwise). */
  watches(): Array<{ kind: string; namespace: string; up: boolean; lastSyncAt: number | undefined }>;
  /** Whether this replica writes CRD status (Kubernetes mode with leader election). */
  isLeader(): boolean;
  /** What waits for each pool's replicas, for the ModelPool status (Kubernetes mode; ignored otherwise). */
  observeDemand(source: (pool: string) => { waiting: number; held: number }): void;
  /** `listener` runs after the pools may have changed (Kubernetes mode; the config's pools never change). */
  onPoolsChanged(listener: () => void): void;
  /** The replicas of each pool that said they do not serve its `servedModelName`, for the ModelPool status (Kubernetes mode; ignored otherwise). */
  observeServedModel(source: (pool: PoolSpec) => { replicas: readonly string[] } | undefined): void;
  /** Something a ModelPool status shows changed (requests began or stopped being held, a replica said it lacks the pool's model or answered it since): the status may need writing. */
  demandChanged(): void;
  start(): void;
  stop(): Promise<void>;
}
