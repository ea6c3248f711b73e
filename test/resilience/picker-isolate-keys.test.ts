/**
 * A pool that isolates keys (`routing.prefix.isolateKeys`): prefix affinity matches only the blocks of
 * the same key's earlier prompts, so one key's guess at another's prompt is not steered to the replica
 * holding it; and the engines' KV events (which name every key's blocks alike) are not consulted.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { type Endpoint, type KvPrefixSource, type PoolSpec } from '../../src/core/types.js';
import { AdmissionQueues } from '../../src/resilience/admission.js';
import { BreakerRegistry } from '../../src/resilience/breaker.js';
import { EndpointPicker, type PrefixSource } from '../../src/resilience/picker.js';
import { FakeTime } from '../helpers/fake-time.js';
import { chatPool } from '../helpers/pool-spec.js';

const SECRET = 'You are the support bot of team A. Internal escalation code: 7731-ALPHA. '.repeat(6);
const BLOCKS = Math.floor(SECRET.length / 64);

const poolOf = (isolateKeys: boolean, kvEvents = false): PoolSpec => chatPool({ prefix: { isolateKeys }, kvEvents: { enabled: kvEvents } });
const endpoints: Endpoint[] = ['a', 'b', 'c'].map((id) => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight: 1 }));

const registries: BreakerRegistry[] = [];
afterEach(() => {
  for (const r of registries.splice(0)) r.shutdown();
});

function setup(kvPrefix?: KvPrefixSource): { picker: EndpointPicker; matched: number[]; sources: PrefixSource[]; draw: (r: number) => void } {
  const time = new FakeTime();
  const breakers = new BreakerRegistry(undefined, time);
  registries.push(breakers);
  const matched: number[] = [];
  const sources: PrefixSource[] = [];
  let random = 0;
  const picker = new EndpointPicker({
    endpoints: { snapshot: () => endpoints },
    inFlight: new InFlight(),
    breakers,
    health: { isHealthy: () => true },
    admission: new AdmissionQueues(time, () => time.now()),
    ...(kvPrefix ? { kvPrefix } : {}),
    random: () => random,
    events: { onPicked: (_pool, m) => matched.push(m), onPrefixPredicted: (_pool, source) => sources.push(source) },
    scheduler: time,
  });
  return { picker, matched, sources, draw: (r) => (random = r) };
}

async function pickFor(picker: EndpointPicker, pool: PoolSpec, tenant: string): Promise<string> {
  const picked = await picker.pick(pool, new Set(), undefined, { priority: 'standard', tenant, promptText: () => SECRET });
  picked.release();
  return picked.endpoint.id;
}

describe('EndpointPicker in a pool that isolates keys', () => {
  it('matches a key’s prompt only against that key’s blocks: another key’s same prompt finds nothing', async () => {
    const { picker, matched, draw } = setup();
    const pool = poolOf(true);
    draw(0.99); // team-a's first request lands on the last replica (ties go by the draw)
    const home = await pickFor(picker, pool, 'team-a');
    draw(0);
    // team-b sends the same text: no match, so it is not steered to team-a's replica
    expect(await pickFor(picker, pool, 'team-b')).not.toBe(home);
    // team-a again: its own blocks match, and it goes home
    expect(await pickFor(picker, pool, 'team-a')).toBe(home);
    expect(matched).toEqual([0, 0, BLOCKS]);
  });

  it('without isolation the same prompt from another key matches (the default: one cache for all keys)', async () => {
    const { picker, matched, draw } = setup();
    const pool = poolOf(false);
    draw(0.99);
    const home = await pickFor(picker, pool, 'team-a');
    draw(0);
    expect(await pickFor(picker, pool, 'team-b')).toBe(home);
    expect(matched).toEqual([0, BLOCKS]);
  });

  it('does not ask the engines’ KV events, which name every key’s blocks alike', async () => {
    let asked = 0;
    const kvPrefix: KvPrefixSource = {
      state: () => 2,
      match: () => {
        asked += 1;
        return BLOCKS;
      },
    };
    const { picker, sources } = setup(kvPrefix);
    await pickFor(picker, poolOf(true, true), 'team-b');
    expect(asked).toBe(0);
    expect(sources).toEqual(['estimate']);
    // the same pool without isolation asks them
    await pickFor(picker, poolOf(false, true), 'team-b');
    expect(asked).toBeGreaterThan(0);
  });
});
