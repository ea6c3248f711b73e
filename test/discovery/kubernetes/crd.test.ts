import { RESILIENCE_DEFAULTS } from '../../../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../../../src/balancer/settings.js';
import { describe, expect, it } from '@jest/globals';
import { parseModelDeployment, parseModelPool } from '../../../src/discovery/kubernetes/crd.js';

const meta = { namespace: 'models', name: 'llama', generation: 3, creationTimestamp: '2026-01-02T03:04:05Z' };

describe('parseModelPool', () => {
  it('applies the schema defaults and keys the pool by namespace/name', () => {
    const pool = parseModelPool({ metadata: meta, spec: { service: { name: 'llama-svc', port: 'http' }, servedModelName: 'meta/llama' } }, RESILIENCE_DEFAULTS);
    expect(pool).toEqual({
      key: 'models/llama',
      namespace: 'models',
      name: 'llama',
      generation: 3,
      spec: { name: 'models/llama', engine: 'vllm', servedModelName: 'meta/llama', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS },
      service: { name: 'llama-svc', port: 'http' },
    });
  });

  it.each([
    [{}, 'spec is missing'],
    [{ spec: { servedModelName: 'm' } }, 'spec.service.name is required'],
    [{ spec: { service: { name: 's', port: 70000 }, servedModelName: 'm' } }, 'spec.service.port'],
    [{ spec: { service: { name: 's' } } }, 'spec.servedModelName is required'],
    [{ spec: { service: { name: 's' }, servedModelName: 'm', engine: 'triton' } }, 'spec.engine'],
    [{ spec: { service: { name: 's' }, servedModelName: 'm', capabilities: [] } }, 'spec.capabilities'],
    [{ spec: { service: { name: 's' }, servedModelName: 'm', resilience: { timeouts: { firstByteMs: 'soon' } } } }, 'spec.resilience.timeouts.firstByteMs must be a number'],
    [{ spec: { service: { name: 's' }, servedModelName: 'm', resilience: { retry: {} } } }, 'spec.resilience.retry is not a known field'],
  ])('reports %j as unusable: %s', (obj, problem) => {
    const parsed = parseModelPool({ metadata: meta, ...obj }, RESILIENCE_DEFAULTS);
    expect(parsed.problem).toContain(problem);
    expect(parsed.spec).toBeUndefined();
  });
});

describe('parseModelPool resilience', () => {
  it('applies spec.resilience over the router’s defaults, field by field', () => {
    const pool = parseModelPool({ metadata: meta, spec: { service: { name: 's' }, servedModelName: 'm', resilience: { timeouts: { firstByteMs: 5000 }, maxConcurrencyPerReplica: 8, healthCheck: { enabled: true, path: '/ping' } } } }, RESILIENCE_DEFAULTS);
    expect(pool.spec?.resilience.timeouts).toEqual({ ...RESILIENCE_DEFAULTS.timeouts, firstByteMs: 5000 });
    expect(pool.spec?.resilience.maxConcurrencyPerReplica).toBe(8);
    expect(pool.spec?.resilience.healthCheck).toEqual({ ...RESILIENCE_DEFAULTS.healthCheck, enabled: true, path: '/ping' });
  });
});

describe('parseModelDeployment', () => {
  it('uses the object name as deployment ID, targets pools in its own namespace and its age', () => {
    const parsed = parseModelDeployment({ metadata: meta, spec: { model: 'llama-3', aliases: ['default', 'default'], targets: [{ pool: 'a' }, { pool: 'b', weight: 5 }] } });
    expect(parsed.deployment).toEqual({
      id: 'llama',
      model: 'llama-3',
      aliases: ['default'],
      targets: [{ pool: 'models/a', weight: 100 }, { pool: 'models/b', weight: 5 }],
      fallbacks: [],
      created: Date.parse('2026-01-02T03:04:05Z') / 1000,
    });
  });

  it.each([
    [{ spec: { targets: [{ pool: 'a' }] } }, 'spec.model is required'],
    [{ spec: { model: 'm', targets: [] } }, 'spec.targets needs at least one pool'],
    [{ spec: { model: 'm', targets: [{ weight: 1 }] } }, 'spec.targets[0].pool is required'],
    [{ spec: { model: 'm', targets: [{ pool: 'a', weight: -1 }] } }, 'spec.targets[0].weight'],
    [{ spec: { model: 'm', aliases: [3], targets: [{ pool: 'a' }] } }, 'spec.aliases'],
  ])('reports %j as unusable: %s', (obj, problem) => {
    expect(parseModelDeployment({ metadata: meta, ...obj }).problem).toContain(problem);
  });
});
