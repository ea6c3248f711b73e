/**
 * The model registry: what a client's `model` means: the deployment whose ID, alias or model name it
 * is, exact and case-sensitive. A name is one namespace across the three kinds: the oldest deployment
 * (then the smaller ID) that claims it, whichever kind of name it is there, keeps it, and a younger one
 * loses just that name. (A younger deployment's ID or alias must never take an older one's model name
 * or alias: a new object in one namespace would capture another's traffic.) Static mode's config
 * refuses every such overlap up front. The same code serves the static config and the Kubernetes CRDs: it is
 * rebuilt from scratch whenever its inputs change and replaced as a whole.
 */
import { adapterProblem, type Deployment, type DeploymentTarget, deploymentLabel, type PoolSpec } from '../core/types.js';

/** Read side used by the request path. */
export interface ModelCatalog {
  resolve(model: string): Deployment | undefined;
  pool(name: string): PoolSpec | undefined;
  /**
   * The pool a deployment's target sends requests to: the pool itself, or — for a deployment of a LoRA
   * adapter — the pool's view with the adapter as its served model (the same object every time); none
   * for a pool that does not exist or cannot serve the adapter (core/types.ts `adapterProblem`).
   */
  targetPool(deployment: Deployment, target: DeploymentTarget): PoolSpec | undefined;
  deployments(): readonly Deployment[];
  /** The client-facing names a deployment holds (ID, aliases, model name), without names it lost to a conflict. */
  namesOf(deployment: Deployment): readonly string[];
  /** The fallback `id` of `deployment`: the deployment of that ID in the same namespace (in Kubernetes mode; the config has one). */
  fallbackOf(deployment: Deployment, id: string): Deployment | undefined;
  /** The deployment of a label (core/types.ts `deploymentLabel`: `namespace/name`, or the config's ID), as the metrics and the access log name it. */
  labelled(label: string): Deployment | undefined;
}

/** A name two deployments claim; the older one (then the smaller ID) keeps it. */
export interface Conflict {
  kind: 'id' | 'alias' | 'model';
  name: string;
  winner: string;
  loser: string;
}

export class Registry implements ModelCatalog {
  /** Every client-facing name (ID, alias, model name) and the deployment that holds it. */
  private readonly byName = new Map<string, Deployment>();
  /** Each deployment by its namespace and ID (unique there), for fallbacks. */
  private readonly byKey = new Map<string, Deployment>();
  /** Each deployment by its label (unique: `namespace/name`, or the config's ID). */
  private readonly byLabel = new Map<string, Deployment>();
  private readonly pools: ReadonlyMap<string, PoolSpec>;
  /** Each pool's views for the LoRA adapters deployed on it, by pool, then adapter name. */
  private readonly adapterPools = new Map<string, Map<string, PoolSpec>>();
  private readonly ordered: readonly Deployment[];
  /** The names each deployment holds (namesOf), made once: a key's model list is checked against them on every request. */
  private readonly held = new Map<Deployment, readonly string[]>();
  readonly conflicts: readonly Conflict[];

  constructor(pools: readonly PoolSpec[], deployments: readonly Deployment[]) {
    this.pools = new Map(pools.map((p) => [p.name, p]));
    this.ordered = [...deployments].sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const conflicts: Conflict[] = [];
    const claim = (kind: Conflict['kind'], name: string, dep: Deployment): void => {
      const holder = this.byName.get(name);
      if (holder === undefined) this.byName.set(name, dep);
      else if (holder !== dep) conflicts.push({ kind, name, winner: holder.id, loser: dep.id });
    };
    for (const dep of this.ordered) {
      const key = `${dep.namespace ?? ''}/${dep.id}`;
      if (!this.byKey.has(key)) this.byKey.set(key, dep);
      const label = deploymentLabel(dep);
      if (!this.byLabel.has(label)) this.byLabel.set(label, dep);
      claim('id', dep.id, dep);
      for (const alias of dep.aliases) claim('alias', alias, dep);
      claim('model', dep.model, dep);
    }
    this.conflicts = conflicts;
    for (const dep of this.ordered) this.held.set(dep, this.heldBy(dep));
  }

  resolve(model: string): Deployment | undefined {
    return this.byName.get(model);
  }

  pool(name: string): PoolSpec | undefined {
    return this.pools.get(name);
  }

  targetPool(deployment: Deployment, target: DeploymentTarget): PoolSpec | undefined {
    const pool = this.pools.get(target.pool);
    const adapter = deployment.adapter;
    if (!pool || !adapter) return pool;
    if (adapterProblem(adapter, pool) !== undefined) return undefined;
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

  fallbackOf(deployment: Deployment, id: string): Deployment | undefined {
    return this.byKey.get(`${deployment.namespace ?? ''}/${id}`);
  }

  labelled(label: string): Deployment | undefined {
    return this.byLabel.get(label);
  }

  namesOf(dep: Deployment): readonly string[] {
    return this.held.get(dep) ?? this.heldBy(dep);
  }

  private heldBy(dep: Deployment): readonly string[] {
    return [...new Set([dep.id, ...dep.aliases, dep.model].filter((n) => this.resolve(n) === dep))];
  }
}
