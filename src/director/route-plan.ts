/**
 * The pools a request may go to, in the order they are tried: one of the deployment's pools chosen by
 * target weight, the deployment's other pools by weight, then each fallback deployment's pools. Only
 * pools that serve the request's kind and have an endpoint are listed, and pools that scale from zero
 * (a request may wait there for a first replica). A fallback is part of the
 * deployment's definition, so the key's model list is not consulted for it; fallbacks of a fallback
 * are not followed.
 */
import { CAPABILITY_NAMES } from '../api/routes.js';
import { pickWeighted } from '../balancer/weighted.js';
import { noReadyReplica, RouterError } from '../core/errors.js';
import { type Capability, type Deployment, deploymentLabel, type PoolSpec } from '../core/types.js';
import { type ModelCatalog } from '../registry/registry.js';

/** One pool of a route, and the deployment it serves the request for (the asked one, or a fallback). */
export interface PlannedPool {
  pool: PoolSpec;
  /** The deployment's label (core/types.ts `deploymentLabel`), as the metrics and the access log name it. */
  deployment: string;
}

export interface RoutePlanInput {
  catalog: ModelCatalog;
  /** Whether a pool has at least one endpoint (discovery's view; health and breakers come later). */
  hasEndpoints: (pool: string) => boolean;
  random: () => number;
}

/** The deployment's pools that serve `kind` and have an endpoint: one chosen by target weight first, then the rest by weight. */
function poolsOf(input: RoutePlanInput, deployment: Deployment, kind: Capability): { wrongKind: Capability[] | undefined; ready: PoolSpec[] } {
  const known = deployment.targets
    .map((target) => ({ weight: target.weight, pool: input.catalog.targetPool(deployment, target) }))
    .filter((t): t is { weight: number; pool: PoolSpec } => t.pool !== undefined);
  const capable = known.filter((t) => t.pool.capabilities.includes(kind));
  // A pool that scales from zero stays in the route with no endpoint: the request may wait for one.
  const ready = capable.filter((t) => t.weight > 0 && (input.hasEndpoints(t.pool.name) || t.pool.resilience.scaleFromZero.enabled));
  const chosen = pickWeighted(ready, input.random);
  const rest = ready.filter((t) => t !== chosen).sort((a, b) => b.weight - a.weight);
  const wrongKind = known.length > 0 && capable.length === 0 ? [...new Set(known.flatMap((t) => t.pool.capabilities))] : undefined;
  return { wrongKind, ready: [...(chosen ? [chosen] : []), ...rest].map((t) => t.pool) };
}

/**
 * The route of a request for `deployment` (asked for as `asked`). Throws MODEL_CAPABILITY_MISMATCH
 * when the deployment serves only another kind, NO_READY_REPLICA when no pool can be tried at all.
 */
export function planRoute(input: RoutePlanInput, deployment: Deployment, kind: Capability, asked: string): PlannedPool[] {
  // the usual deployment, one pool and no fallback, that can take the request: its route without the general case's lists
  const only = deployment.targets.length === 1 && deployment.fallbacks.length === 0 ? (deployment.targets[0] as Deployment['targets'][number]) : undefined;
  const pool = only && only.weight > 0 ? input.catalog.targetPool(deployment, only) : undefined;
  if (pool?.capabilities.includes(kind) && (input.hasEndpoints(pool.name) || pool.resilience.scaleFromZero.enabled)) return [{ pool, deployment: deploymentLabel(deployment) }];
  const own = poolsOf(input, deployment, kind);
  if (own.wrongKind) {
    const serves = own.wrongKind.map((c) => `${CAPABILITY_NAMES[c]} (${c})`).join(', ');
    throw new RouterError('MODEL_CAPABILITY_MISMATCH', `The model \`${asked}\` does not serve ${CAPABILITY_NAMES[kind]} (capability \`${kind}\`); it serves ${serves}.`, { param: 'model' });
  }
  const label = deploymentLabel(deployment);
  const route: PlannedPool[] = own.ready.map((pool) => ({ pool, deployment: label }));
  for (const id of deployment.fallbacks) {
    // a ModelDeployment's fallbacks are in its own namespace, never another's deployment of that name
    const fallback = input.catalog.fallbackOf(deployment, id);
    if (!fallback || fallback === deployment) continue;
    for (const pool of poolsOf(input, fallback, kind).ready) if (!route.some((r) => r.pool === pool)) route.push({ pool, deployment: deploymentLabel(fallback) });
  }
  // No target pool exists (yet, or any more), or none has a ready replica: both are "try later".
  if (route.length === 0) throw noReadyReplica(asked);
  return route;
}
