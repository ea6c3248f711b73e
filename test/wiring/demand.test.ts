/** Each pool's demand as the autoscaling gauges read it: in flight and waiting, the engines' queues and KV-cache use. */
import { describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type EngineLoad, type PoolSpec } from '../../src/core/types.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { poolDemand } from '../../src/wiring/demand.js';

const pool = (name: string, engineMetrics = true): PoolSpec => ({
  name,
  engine: 'vllm',
  servedModelName: 'm',
  capabilities: ['chat'],
  resilience: RESILIENCE_DEFAULTS,
  routing: { ...ROUTING_DEFAULTS, engineMetrics: { ...ROUTING_DEFAULTS.engineMetrics, enabled: engineMetrics } },
});
const sample = (waiting: number, kvCacheUsage?: number): EngineLoad => ({ waiting, running: 1, at: 0, localAtSample: 0, ...(kvCacheUsage === undefined ? {} : { kvCacheUsage }) });

describe('poolDemand', () => {
  it('sums in flight and the engines’ queues, averages KV-cache use over the replicas that report it, and counts what waits', () => {
    const inFlight = new InFlight();
    inFlight.acquire('a1', 'a');
    inFlight.acquire('a1', 'a');
    inFlight.acquire('a2', 'a');
    const loads = new Map<string, EngineLoad>([
      ['a1', sample(3, 0.5)],
      ['a2', sample(1)],
      ['a3', sample(2, 0.9)],
      ['b1', sample(7, 0.2)],
    ]);
    const endpoints: Record<string, Array<{ id: string }>> = { a: [{ id: 'a1' }, { id: 'a2' }, { id: 'a3' }], b: [{ id: 'b1' }], c: [] };
    const demand = [
      ...poolDemand(
        { pools: () => [pool('a'), pool('b', false), pool('c')], endpoints: { snapshot: (name) => endpoints[name] ?? [] } },
        {
          inFlight,
          admission: { depth: (name) => (name === 'a' ? 4 : name === 'c' ? 2 : 0) },
          picker: { heldRequests: (name) => (name === 'c' ? 2 : 0) },
          engine: { load: (id) => loads.get(id) },
        },
      ),
    ];
    expect(demand).toEqual([
      { pool: 'a', inFlight: 3, waiting: 4, held: 0, engineWaiting: 6, kvCacheUsage: 0.7 },
      { pool: 'b', inFlight: 0, waiting: 0, held: 0 }, // engine metrics off: no engine figures
      { pool: 'c', inFlight: 0, waiting: 2, held: 2 }, // at zero: only what is held
    ]);
  });
});
