import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { describe, expect, it } from '@jest/globals';
import { type Deployment, type PoolSpec } from '../../src/core/types.js';
import { Registry } from '../../src/registry/registry.js';

const pool: PoolSpec = { name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
const dep = (id: string, model: string, aliases: string[] = [], created = 0): Deployment => ({ id, model, aliases, targets: [{ pool: 'p', weight: 1 }], fallbacks: [], created });

describe('Registry', () => {
  it('resolves a deployment ID before an alias before a model name', () => {
    const byId = dep('shared', 'm1');
    const byAlias = dep('a', 'm2', ['shared', 'x']);
    const byModel = dep('b', 'shared');
    const registry = new Registry([pool], [byModel, byAlias, byId]);
    expect(registry.resolve('shared')).toBe(byId);
    expect(registry.resolve('x')).toBe(byAlias);
    expect(registry.resolve('m2')).toBe(byAlias);
    expect(registry.resolve('nothing')).toBeUndefined();
    expect(registry.pool('p')).toBe(pool);
  });

  it('gives a contested alias or model name to the oldest deployment and reports the conflict', () => {
    const older = dep('older', 'llama', ['default'], 100);
    const newer = dep('newer', 'llama', ['default', 'fresh'], 200);
    const registry = new Registry([pool], [newer, older]);
    expect(registry.resolve('default')).toBe(older);
    expect(registry.resolve('llama')).toBe(older);
    expect(registry.resolve('fresh')).toBe(newer);
    expect(registry.conflicts).toEqual([
      { kind: 'alias', name: 'default', winner: 'older', loser: 'newer' },
      { kind: 'model', name: 'llama', winner: 'older', loser: 'newer' },
    ]);
    expect(registry.namesOf(newer)).toEqual(['newer', 'fresh']);
    expect(registry.deployments().map((d) => d.id)).toEqual(['older', 'newer']);
  });

  it('breaks an age tie by ID, so the outcome never depends on input order', () => {
    const a = dep('a', 'same', [], 5);
    const b = dep('b', 'same', [], 5);
    expect(new Registry([pool], [b, a]).resolve('same')).toBe(a);
    expect(new Registry([pool], [a, b]).resolve('same')).toBe(a);
  });
});
