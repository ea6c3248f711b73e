/** Each pool's demand as the autoscaling gauges read it: in flight and waiting, the engines' queues and KV-cache use. */
import { describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type EngineLoad, type PoolSpec } from '../../src/core/types.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { poolDemand, TurnedAway } from '../../src/wiring/demand.js';

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
      { pool: 'a', inFlight: 3, waiting: 4, held: 0, turnedAway: 0, engineWaiting: 6, kvCacheUsage: 0.7 },
      { pool: 'b', inFlight: 0, waiting: 0, held: 0, turnedAway: 0 }, // engine metrics off: no engine figures
      { pool: 'c', inFlight: 0, waiting: 2, held: 2, turnedAway: 0 }, // at zero: only what is held
    ]);
  });
});

describe('poolDemand of pools that share a replica', () => {
  it('counts each pool’s own requests, not the other pool’s on the shared replica, nor misses those on a replica that left', () => {
    const inFlight = new InFlight();
    for (let i = 0; i < 6; i++) inFlight.acquire('shared', 'chat');
    inFlight.acquire('terminating', 'chat'); // a stream still running on a pod discovery no longer lists
    const endpoints: Record<string, Array<{ id: string }>> = { chat: [{ id: 'shared' }], completions: [{ id: 'shared' }] };
    const demand = [
      ...poolDemand(
        { pools: () => [pool('chat'), pool('completions')], endpoints: { snapshot: (name) => endpoints[name] ?? [] } },
        { inFlight, admission: { depth: () => 0 }, picker: { heldRequests: () => 0 }, engine: { load: () => undefined } },
      ),
    ];
    expect(demand.map((d) => [d.pool, d.inFlight])).toEqual([
      ['chat', 7],
      ['completions', 0],
    ]);
  });
});

describe('TurnedAway: requests turned away for want of capacity, as the concurrency they would have held', () => {
  it('is their rate over the last minute times the pool’s mean request time, and exactly 0 a minute after the last', () => {
    const time = { at: 5_000 };
    const away = new TurnedAway(() => time.at);
    expect(away.demand('a')).toBe(0);
    away.served('a', 2); // the pool's requests hold a replica 2 s
    for (let s = 0; s < 60; s++) {
      time.at += 1000;
      for (let i = 0; i < 10; i++) away.rejected('a'); // 10 a second for a minute
    }
    // 10 a second, each of which would have held a replica's slot for 2 s: 20 requests' worth
    expect(away.demand('a')).toBe(20);
    expect(away.demand('b')).toBe(0);
    time.at += 30_000; // half the window without any
    expect(away.demand('a')).toBe(10);
    time.at += 30_000;
    expect(away.demand('a')).toBe(0);
  });

  it('weighs the mean toward recent requests; counts 1 s a request before any held a replica; ignores requests of no pool', () => {
    const time = { at: 0 };
    const away = new TurnedAway(() => time.at);
    for (let i = 0; i < 60; i++) away.rejected('cold');
    expect(away.demand('cold')).toBe(1); // 1 a second × 1 s
    away.served('', 100);
    away.served('cold', 4);
    expect(away.demand('cold')).toBe(4);
    away.served('cold', 24); // one answer moves the mean by a twentieth of the difference
    expect(away.demand('cold')).toBe(5);
  });

  it('forgets a pool that left', () => {
    const away = new TurnedAway(() => 0);
    away.rejected('gone');
    away.rejected('kept');
    away.retain(new Set(['kept']));
    expect(away.demand('gone')).toBe(0);
    expect(away.demand('kept')).toBeGreaterThan(0);
  });
});
