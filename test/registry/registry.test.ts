import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { describe, expect, it } from '@jest/globals';
import { type Deployment, type PoolSpec } from '../../src/core/types.js';
import { Registry } from '../../src/registry/registry.js';

const pool: PoolSpec = { name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
const dep = (id: string, model: string, aliases: string[] = [], created = 0): Deployment => ({ id, model, aliases, targets: [{ pool: 'p', weight: 1 }], fallbacks: [], created });

describe('Registry', () => {
  it('resolves a deployment ID, an alias or a model name, exactly', () => {
    const a = dep('a', 'm1', ['x']);
    const registry = new Registry([pool], [a]);
    expect(registry.resolve('a')).toBe(a);
    expect(registry.resolve('x')).toBe(a);
    expect(registry.resolve('m1')).toBe(a);
    expect(registry.resolve('A')).toBeUndefined();
    expect(registry.resolve('nothing')).toBeUndefined();
    expect(registry.pool('p')).toBe(pool);
  });

  it('keeps a name with the oldest deployment whatever kind each claims it as: a newer ID or alias never takes an older model name or alias', () => {
    // the older deployment's model name and alias, claimed by newer objects (another namespace's, in Kubernetes) as an ID and an alias
    const older = dep('llama-prod', 'llama-3', ['default'], 100);
    const aliasThief = dep('evil-dep', 'evil-model', ['llama-3'], 200);
    const idThief = dep('default', 'other-model', [], 300);
    const registry = new Registry([pool], [idThief, aliasThief, older]);
    expect(registry.resolve('llama-3')).toBe(older);
    expect(registry.resolve('default')).toBe(older);
    expect(registry.resolve('evil-model')).toBe(aliasThief);
    expect(registry.resolve('other-model')).toBe(idThief);
    expect(registry.conflicts).toEqual([
      { kind: 'alias', name: 'llama-3', winner: 'llama-prod', loser: 'evil-dep' },
      { kind: 'id', name: 'default', winner: 'llama-prod', loser: 'default' },
    ]);
    expect(registry.namesOf(older)).toEqual(['llama-prod', 'default', 'llama-3']);
    expect(registry.namesOf(idThief)).toEqual(['other-model']);
    // and the other way round: an older deployment's ID is kept from a newer one's alias and model name
    const first = dep('shared', 'm1', [], 1);
    const second = dep('b', 'shared', ['shared'], 2);
    const both = new Registry([pool], [second, first]);
    expect(both.resolve('shared')).toBe(first);
    expect(both.namesOf(second)).toEqual(['b']);
  });

  it('finds a fallback in the deployment’s own namespace, never another’s deployment of that name', () => {
    const own = { ...dep('llama-prod', 'llama', [], 10), namespace: 'models', fallbacks: ['backup'] };
    const theirs = { ...dep('backup', 'theirs', [], 1), namespace: 'team-b' };
    const registry = new Registry([pool], [own, theirs]);
    expect(registry.fallbackOf(own, 'backup')).toBeUndefined(); // team-b's `backup` holds the bare name, and is not models'
    const ours = { ...dep('backup', 'ours', [], 20), namespace: 'models' };
    const both = new Registry([pool], [own, theirs, ours]);
    expect(both.resolve('backup')).toBe(theirs); // the older keeps the name for clients
    expect(both.fallbackOf(own, 'backup')).toBe(ours); // the fallback is the namespace's own
    // static mode: no namespaces, the config's IDs
    const a = { ...dep('a', 'ma'), fallbacks: ['b'] };
    const b = dep('b', 'mb');
    expect(new Registry([pool], [a, b]).fallbackOf(a, 'b')).toBe(b);
  });

  it('finds a deployment by its label: `namespace/name` for each of two namespaces’ deployments of one name, the ID in static mode', () => {
    const teamA = { ...dep('llama', 'llama-a', [], 10), namespace: 'team-a', label: 'team-a/llama' };
    const teamB = { ...dep('llama', 'llama-b', [], 20), namespace: 'team-b', label: 'team-b/llama' };
    const registry = new Registry([pool], [teamB, teamA]);
    expect(registry.resolve('llama')).toBe(teamA); // the older keeps the bare name for clients
    expect(registry.labelled('team-a/llama')).toBe(teamA);
    expect(registry.labelled('team-b/llama')).toBe(teamB);
    expect(registry.labelled('llama')).toBeUndefined();
    const a = dep('a', 'ma');
    expect(new Registry([pool], [a]).labelled('a')).toBe(a);
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
