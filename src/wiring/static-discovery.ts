/** Static mode: pools, deployments and endpoints from the config file; nothing watched, nothing written. */
import { ConfigError } from '../config/load.js';
import { type Config } from '../config/schema.js';
import { defaultCapabilities, type Deployment, type PoolDeclaration, type PoolResolver, type PoolSpec } from '../core/types.js';
import { StaticEndpoints } from '../discovery/static.js';
import { type DiscoveryWiring } from '../discovery/wiring.js';
import { Registry } from '../registry/registry.js';

/**
 * The config's pools, resolved like any other pool declaration; a pool the router could not serve is a
 * ConfigError naming it (`modelgate validate` runs this too, so it passes only what `serve` starts with).
 */
export function staticPools(config: Config, resolve: PoolResolver): PoolSpec[] {
  return config.pools.map((p, i) => {
    const declared: PoolDeclaration = {
      name: p.name,
      engine: p.engine,
      servedModelName: p.servedModelName,
      capabilities: p.capabilities ?? defaultCapabilities(p.engine),
      ...(p.backendKey ? { backendKey: p.backendKey } : {}),
      overrides: { ...(p.resilience ? { resilience: p.resilience } : {}), ...(p.routing ? { routing: p.routing } : {}) },
    };
    const resolved = resolve(declared, `pools[${i}]`);
    if ('problem' in resolved) throw new ConfigError(resolved.problem);
    const { scaleFromZero, healthCheck } = resolved.spec.resilience;
    // Kubernetes says when a pod is ready; in static mode only the health checks can.
    if (scaleFromZero.enabled && !healthCheck.enabled) {
      throw new ConfigError('scaleFromZero needs resilience.healthCheck.enabled in static mode: the health checks are how the router learns a replica is ready', `pools[${i}].resilience`);
    }
    return resolved.spec;
  });
}

function deploymentsOf(config: Config, created: number): Deployment[] {
  return config.deployments.map((d) => ({
    id: d.id,
    model: d.model,
    aliases: d.aliases,
    targets: d.targets,
    fallbacks: d.fallbacks,
    created,
    ...(d.slo ? { slo: d.slo } : {}),
    ...(d.resumeStreams ? { resumeStreams: true } : {}),
    ...(d.adapter ? { adapter: d.adapter } : {}),
  }));
}

export function staticDiscovery(config: Config, created: number, resolve: PoolResolver): DiscoveryWiring {
  const endpoints = new StaticEndpoints(config.pools);
  const pools = staticPools(config, resolve);
  const registry = new Registry(pools, deploymentsOf(config, created));
  return {
    endpoints,
    catalog: () => registry,
    pools: () => pools,
    notReadyReasons: () => (endpoints.hasSynced() ? [] : ['discovery has not synced']),
    watches: () => [],
    isLeader: () => false,
    observeDemand: () => undefined,
    observeServedModel: () => undefined,
    demandChanged: () => undefined,
    onPoolsChanged: () => undefined,
    start: () => undefined,
    stop: () => Promise.resolve(),
  };
}
