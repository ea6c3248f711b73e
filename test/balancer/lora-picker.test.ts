/**
 * LoRA-aware picks through the real EndpointPicker (InFlight, breakers, admission on fake time), with
 * fakes only for discovery's endpoints, the engines' samples and the adapter loads.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { type LoraPlacement } from '../../src/balancer/lora.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RouterError } from '../../src/core/errors.js';
import { type Endpoint, type EngineLoad, type LoraLoad, type PoolSpec, type RoutingSettings } from '../../src/core/types.js';
import { AdmissionQueues } from '../../src/resilience/admission.js';
import { BreakerRegistry } from '../../src/resilience/breaker.js';
import { EndpointPicker, type AdapterLoads, type Picked } from '../../src/resilience/picker.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { FakeTime } from '../helpers/fake-time.js';

const endpoint = (id: string): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight: 1 });

function adapterPool(adapter: string, lora: Partial<RoutingSettings['lora']> = {}): PoolSpec {
  return {
    name: 'p',
    engine: 'vllm',
    servedModelName: adapter,
    capabilities: ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: { ...ROUTING_DEFAULTS, lora: { ...ROUTING_DEFAULTS.lora, ...lora } },
    adapter: { name: adapter, baseModel: 'base' },
  };
}

const opened: BreakerRegistry[] = [];
afterEach(() => {
  for (const breakers of opened.splice(0)) breakers.shutdown();
});

function setup(ids: string[], adapterLoads?: AdapterLoads) {
  const time = new FakeTime();
  const snapshot = ids.map(endpoint);
  const loads = new Map<string, EngineLoad>();
  const inFlight = new InFlight();
  const breakers = new BreakerRegistry(undefined, time);
  opened.push(breakers);
  const placements: Array<[string, LoraPlacement]> = [];
  const picker = new EndpointPicker({
    endpoints: { snapshot: (name) => (name === 'p' ? snapshot : []) },
    inFlight,
    breakers,
    health: { isHealthy: () => true },
    admission: new AdmissionQueues(time, () => time.now()),
    engine: { load: (id) => loads.get(id), now: () => time.now() },
    random: () => 0,
    scheduler: time,
    now: () => time.now(),
    ...(adapterLoads ? { adapterLoads } : {}),
    events: { onAdapterPlaced: (pool, placement) => placements.push([pool, placement]) },
  });
  /** An engine sample taken now, listing `running` adapters with `maxLora` slots. */
  const report = (id: string, running: string[], maxLora = 1): void => {
    const lora: LoraLoad = { running, waiting: [], maxLora };
    loads.set(id, { waiting: 0, running: running.length, at: time.now(), localAtSample: inFlight.count(id), lora });
  };
  const pick = (adapter: string, lora?: Partial<RoutingSettings['lora']>): Promise<Picked> => picker.pick(adapterPool(adapter, lora), new Set());
  return { time, picker, inFlight, report, pick, placements };
}

describe('LoRA-aware picks', () => {
  it('spreads distinct adapters over free slots, then sends each adapter back to its replica', async () => {
    const { pick, report, placements } = setup(['r0', 'r1']);
    report('r0', []);
    report('r1', []);
    const x = await pick('x');
    const y = await pick('y'); // x took the only slot of its replica since the sample: y goes to the other
    expect(y.endpoint.id).not.toBe(x.endpoint.id);
    const again = await pick('x'); // busier by one request, but it holds x
    expect(again.endpoint.id).toBe(x.endpoint.id);
    expect(placements.map(([, p]) => p)).toEqual(['free_slot', 'free_slot', 'held']);
  });

  it('follows the engines: a replica reporting the adapter wins, even with more requests', async () => {
    const { pick, report, inFlight } = setup(['r0', 'r1', 'r2']);
    report('r0', []);
    report('r1', ['x'], 2);
    report('r2', []);
    const held = inFlight.acquire('r1', 'p');
    expect((await pick('x')).endpoint.id).toBe('r1');
    held();
  });

  it('without engine samples, spreads by its own record and keeps each adapter where it went', async () => {
    const { pick } = setup(['r0', 'r1', 'r2']);
    const first = await Promise.all(['a', 'b', 'c'].map((a) => pick(a)));
    expect(new Set(first.map((p) => p.endpoint.id)).size).toBe(3);
    for (const [i, adapter] of ['a', 'b', 'c'].entries()) expect((await pick(adapter)).endpoint.id).toBe(first[i]?.endpoint.id);
  });

  it('forgets a placement after routing.lora.memoryMs: the adapter then goes by load', async () => {
    const { pick, time, report } = setup(['r0', 'r1']);
    const first = await pick('x', { memoryMs: 1000 });
    first.release();
    const other = first.endpoint.id === 'r0' ? 'r1' : 'r0';
    await time.advance(1001);
    report(first.endpoint.id, ['busy1', 'busy2'], 4);
    report(other, [], 4);
    expect((await pick('x', { memoryMs: 1000 })).endpoint.id).toBe(other);
  });
});

describe('loading adapters on demand', () => {
  function loads(fail?: RouterError) {
    const calls: Array<{ endpoint: string; held: boolean }> = [];
    const adapterLoads: AdapterLoads = {
      ensure: (pool, ep, held) => {
        calls.push({ endpoint: ep.id, held });
        return fail ? Promise.reject(fail) : Promise.resolve();
      },
    };
    return { calls, adapterLoads };
  }

  it('asks for a load where the router knows of no copy, and not again once the adapter is there', async () => {
    const { calls, adapterLoads } = loads();
    const { pick } = setup(['r0'], adapterLoads);
    await pick('x', { loadOnDemand: true });
    await pick('x', { loadOnDemand: true });
    expect(calls).toEqual([
      { endpoint: 'r0', held: false },
      { endpoint: 'r0', held: true },
    ]);
  });

  it('loads nothing unless the pool turns loadOnDemand on', async () => {
    const { calls, adapterLoads } = loads();
    const { pick } = setup(['r0'], adapterLoads);
    await pick('x');
    expect(calls).toEqual([]);
  });

  it('a failed load fails the pick, gives the slot back and forgets the placement', async () => {
    const failure = new RouterError('ADAPTER_LOAD_FAILED', 'no such adapter');
    const { calls, adapterLoads } = loads(failure);
    const { pick, inFlight } = setup(['r0'], adapterLoads);
    await expect(pick('x', { loadOnDemand: true })).rejects.toBe(failure);
    expect(inFlight.count('r0')).toBe(0);
    await expect(pick('x', { loadOnDemand: true })).rejects.toBe(failure);
    expect(calls.map((c) => c.held)).toEqual([false, false]);
  });
});
