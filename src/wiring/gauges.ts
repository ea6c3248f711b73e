/** What the router's gauges read from discovery, health checks, breakers and the in-flight counts, at each scrape. */
import { type InFlight } from '../balancer/in-flight.js';
import { type ApiName, type Capability, type Deployment, deploymentLabel, type PoolSpec, queueBound, unprobedCountsHealthy } from '../core/types.js';
import { type DiscoveryWiring } from '../discovery/wiring.js';
import { type FallbackHop, type MetricSources } from '../metrics/metrics.js';
import { type ModelCatalog } from '../registry/registry.js';

/** Whether a discovered endpoint can take a request now: its health check and its breaker. */
export interface ReadinessSources {
  /** The health checker's answer; `unknown` for an endpoint not probed yet. */
  isHealthy(endpointId: string, unknown: boolean): boolean;
  /** Every breaker made so far (an endpoint without one has never failed: closed). */
  breakers(): Iterable<{ endpoint: string; state: 'closed' | 'open' | 'half-open' }>;
}

/**
 * The gauges' sources. "Ready" is the picker's usable rule — discovered, passing its health checks
 * (an endpoint not probed yet counts as healthy, except in a pool that scales from zero with health
 * checks), and its breaker not open — so a dead replica leaves the ready counts once its breaker
 * opens or its probe fails, not only when discovery drops it.
 */
export function discoveryGauges(
  discovery: DiscoveryWiring,
  inFlight: InFlight,
  kubernetes: boolean,
  readiness: ReadinessSources,
  apis: readonly { name: ApiName; capability: Capability }[] = [],
): MetricSources {
  const apisOf = (pool: PoolSpec): ApiName[] => apis.filter((a) => pool.capabilities.includes(a.capability)).map((a) => a.name);
  const readyCounts = (): Map<string, number> => {
    const open = new Set<string>();
    for (const b of readiness.breakers()) if (b.state === 'open') open.add(b.endpoint);
    const counts = new Map<string, number>();
    for (const pool of discovery.pools()) counts.set(pool.name, readyIn(pool, open));
    return counts;
  };
  const readyIn = (pool: PoolSpec, open: ReadonlySet<string>): number => {
    const unknown = unprobedCountsHealthy(pool);
    return discovery.endpoints.snapshot(pool.name).filter((ep) => !open.has(ep.id) && readiness.isHealthy(ep.id, unknown)).length;
  };
  return {
    // every discovered endpoint, at 0 when idle: an idle pool shows 0, not an empty panel
    inFlight: () => {
      const counts = new Map<string, { pool: string; endpoint: string; count: number }>();
      for (const pool of discovery.pools()) for (const ep of discovery.endpoints.snapshot(pool.name)) counts.set(ep.id, { pool: pool.name, endpoint: ep.id, count: 0 });
      for (const e of inFlight.byEndpoint()) counts.set(e.endpoint, e);
      return counts.values();
    },
    readyEndpoints: () => [...readyCounts()].map(([pool, count]) => ({ pool, count })),
    discoveredEndpoints: () => discovery.pools().map((pool) => ({ pool: pool.name, count: discovery.endpoints.snapshot(pool.name).length })),
    deploymentReadyEndpoints: () => {
      const counts = readyCounts();
      const catalog = discovery.catalog();
      // a target the route leaves out (no such pool, or one that cannot serve the deployment's adapter) counts nothing
      return catalog
        .deployments()
        .map((d) => ({ deployment: deploymentLabel(d), count: d.targets.filter((t) => t.weight > 0 && catalog.targetPool(d, t)).reduce((n, t) => n + (counts.get(t.pool) ?? 0), 0) }));
    },
    queueLimits: () =>
      discovery.pools().flatMap((p) => {
        const limit = queueBound(p.resilience);
        return limit === undefined ? [] : [{ pool: p.name, limit }];
      }),
    routes: () => {
      const catalog = discovery.catalog();
      return catalog.deployments().flatMap((d) =>
        d.targets.flatMap((t) => {
          const pool = catalog.targetPool(d, t);
          return pool ? [{ deployment: deploymentLabel(d), pool: t.pool, apis: apisOf(pool), resumable: d.resumeStreams === true }] : [];
        }),
      );
    },
    pools: () => discovery.pools().map((p) => p.name),
    deployments: () => discovery.catalog().deployments().map(deploymentLabel),
    holdingPools: () =>
      discovery
        .pools()
        .filter((p) => p.resilience.scaleFromZero.enabled)
        .map((p) => p.name),
    fallbacks: () => fallbackHops(discovery.catalog()),
    ...(kubernetes ? { watches: () => discovery.watches(), leader: () => discovery.isLeader() } : {}),
  };
}

/**
 * Every hop a route can make to its next pool (route-plan.ts's order: the deployment's own pools in
 * whichever order the weights draw, then each fallback's pools): from each step to every later one
 * and between the pools of one deployment, and from "no own pool" ('') to each fallback pool.
 */
export function fallbackHops(catalog: ModelCatalog): FallbackHop[] {
  const hops = new Map<string, FallbackHop>();
  const add = (from: { deployment: string; pool: string }, to: { deployment: string; pool: string }): void => {
    const hop = { fromDeployment: from.deployment, fromPool: from.pool, toDeployment: to.deployment, toPool: to.pool };
    hops.set(`${hop.fromDeployment}\0${hop.fromPool}\0${hop.toDeployment}\0${hop.toPool}`, hop);
  };
  const poolsOf = (d: Deployment): string[] => d.targets.filter((t) => t.weight > 0 && catalog.targetPool(d, t)).map((t) => t.pool);
  for (const deployment of catalog.deployments()) {
    const label = deploymentLabel(deployment);
    const steps = poolsOf(deployment).map((pool) => ({ deployment: label, pool }));
    for (const id of deployment.fallbacks) {
      const fallback = catalog.fallbackOf(deployment, id); // as the route plan finds it
      if (!fallback || fallback === deployment) continue;
      for (const pool of poolsOf(fallback)) if (!steps.some((s) => s.pool === pool)) steps.push({ deployment: deploymentLabel(fallback), pool });
    }
    steps.forEach((from, i) => {
      steps.forEach((to, j) => {
        if (j > i || (j !== i && to.deployment === from.deployment)) add(from, to);
      });
      if (from.deployment !== label) add({ deployment: label, pool: '' }, from);
    });
  }
  return [...hops.values()];
}
