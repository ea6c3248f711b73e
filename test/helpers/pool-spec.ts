/** Pool specs for the picker's unit tests. */
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type PoolSpec, type RoutingSettings } from '../../src/core/types.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

/**
 * A vLLM chat pool `p` serving `m` with the router's defaults, engine metrics off (nothing to scrape in
 * a unit test) and `routing`'s groups merged over the defaults field by field.
 */
export function chatPool(routing: { prefix?: Partial<RoutingSettings['prefix']>; kvEvents?: Partial<RoutingSettings['kvEvents']> } = {}): PoolSpec {
  return {
    name: 'p',
    engine: 'vllm',
    servedModelName: 'm',
    capabilities: ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: {
      ...ROUTING_DEFAULTS,
      engineMetrics: { ...ROUTING_DEFAULTS.engineMetrics, enabled: false },
      prefix: { ...ROUTING_DEFAULTS.prefix, ...routing.prefix },
      kvEvents: { ...ROUTING_DEFAULTS.kvEvents, ...routing.kvEvents },
    },
  };
}
