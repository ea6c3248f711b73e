/** What the router's gauges read from discovery and the in-flight counts, at each scrape. */
import { type InFlight } from '../balancer/in-flight.js';
import { type DiscoveryWiring } from '../discovery/wiring.js';
import { type MetricSources } from '../metrics/metrics.js';

export function discoveryGauges(discovery: DiscoveryWiring, inFlight: InFlight, kubernetes: boolean): MetricSources {
  return {
    inFlight: () => [...inFlight.byEndpoint()],
    readyEndpoints: () => discovery.pools().map((pool) => ({ pool: pool.name, count: discovery.endpoints.snapshot(pool.name).length })),
    deploymentReadyEndpoints: () => {
      const catalog = discovery.catalog();
      return catalog.deployments().map((d) => ({
        deployment: d.id,
        count: d.targets.filter((t) => t.weight > 0 && catalog.pool(t.pool)).reduce((n, t) => n + discovery.endpoints.snapshot(t.pool).length, 0),
      }));
    },
    queueLimits: () =>
      discovery
        .pools()
        .filter((p) => p.resilience.maxConcurrencyPerReplica > 0)
        .map((p) => ({ pool: p.name, limit: p.resilience.queue.maxSize })),
    ...(kubernetes ? { watches: () => discovery.watches(), leader: () => discovery.isLeader() } : {}),
  };
}
