/**
 * The model registry: what a client's `model` means. Resolution order is deployment ID, then alias,
 * then model name; exact and case-sensitive. The same code serves the static config and the
 * Kubernetes CRDs: it is rebuilt from scratch whenever its inputs change and replaced as a whole.
 */
import { type Deployment, type DeploymentTarget, type PoolSpec } from '../core/types.js';

/** Read side used by the request path. */
export interface ModelCatalog {
  resolve(model: string): Deployment | undefined;
  pool(name: string): PoolSpec | undefined;
  /**
   * The pool a deployment's target sends requests to: the pool itself, or — for a deployment of a LoRA
   * adapter — the pool's view with the adapter as its served model (the same object every time).
   */
  targetPool(deployment: Deployment, target: DeploymentTarget): PoolSpec | undefined;
  deployments(): readonly Deployment[];
  /** The client-facing names a deployment holds (ID, aliases, model name), without names it lost to a conflict. */
  namesOf(deployment: Deployment): string[];
}

/** A name two deployments claim; the older one (then the smaller ID) keeps it. */
export interface Conflict {
  kind: 'id' | 'alias' | 'model';
  name: string;
  winner: string;
  loser: string;
}

export class Registry implements ModelCatalog {
  private readonly byId = new Map<string, Deployment>();
  private readonly byAlias = new Map<string, Deployment>();
  private readonly byModel = new Map<string, Deployment>();
  private readonly pools: ReadonlyMap<string, PoolSpec>;
  /** Each pool's views for the LoRA adapters deployed on it, by pool, then adapter name. */
  private readonly adapterPools = new Map<string, Map<string, PoolSpec>>();
  private readonly ordered: readonly Deployment[];
  readonly conflicts: readonly Conflict[];

  constructor(pools: readonly PoolSpec[], deployments: readonly Deployment[]) {
    this.pools = new Map(pools.map((p) => [p.name, p]));
    this.ordered = [...deployments].sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const conflicts: Conflict[] = [];
    const claim = (map: Map<string, Deployment>, kind: Conflict['kind'], name: string, dep: Deployment): void => {
      const holder = map.get(name);
      if (holder === undefined) map.set(name, dep);
      else if (holder !== dep) conflicts.push({ kind, name, winner: holder.id, loser: dep.id });
    };
    for (const dep of this.ordered) {
      claim(this.byId, 'id', dep.id, dep);
      for (const alias of dep.aliases) claim(this.byAlias, 'alias', alias, dep);
      claim(this.byModel, 'model', dep.model, dep);
    }
    this.conflicts = conflicts;
  }

  resolve(model: string): Deployment | undefined {
    return this.byId.get(model) ?? this.byAlias.get(model) ?? this.byModel.get(model);
  }

  pool(name: string): PoolSpec | undefined {
    return this.pools.get(name);
  }

  targetPool(deployment: Deployment, target: DeploymentTarget): PoolSpec | undefined {
    const pool = this.pools.get(target.pool);
    const adapter = deployment.adapter;
    if (!pool || !adapter) return pool;
    let views = this.adapterPools.get(pool.name);
    if (!views) this.adapterPools.set(pool.name, (views = new Map<string, PoolSpec>()));
    let view = views.get(adapter.name);
    if (!view) {
      view = { ...pool, servedModelName: adapter.name, adapter: { ...adapter, baseModel: pool.servedModelName } };
      views.set(adapter.name, view);
    }
    return view;
  }

  /** Oldest first. */
  deployments(): readonly Deployment[] {
    return this.ordered;
  }

  namesOf(dep: Deployment): string[] {
    const names = [dep.id, ...dep.aliases, dep.model].filter((n) => this.resolve(n) === dep);
    return [...new Set(names)];
  }
}
