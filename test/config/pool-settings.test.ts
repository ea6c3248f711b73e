import { describe, expect, it } from '@jest/globals';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { poolResolver } from '../../src/config/pool-settings.js';
import { type PoolDeclaration } from '../../src/core/types.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const base = { resilience: { ...RESILIENCE_DEFAULTS, maxConcurrencyPerReplica: 4 }, routing: ROUTING_DEFAULTS };
const declared = (overrides: PoolDeclaration['overrides']): PoolDeclaration => ({ name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], backendKey: 'sk-b', overrides });

describe('poolResolver', () => {
  const resolve = poolResolver(base);

  it('gives a pool without overrides the router-wide settings, and keeps its plain fields', () => {
    expect(resolve(declared({}), 'pools[0]')).toEqual({ spec: { name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], backendKey: 'sk-b', ...base } });
  });

  it('merges overrides field by field over the router-wide settings; a scorers list replaces the whole list', () => {
    const resolved = resolve(declared({ resilience: { timeouts: { idleMs: 5 } }, routing: { scorers: [{ name: 'outstanding' }] } }), 'spec');
    expect('spec' in resolved && resolved.spec.resilience).toEqual({ ...base.resilience, timeouts: { ...base.resilience.timeouts, idleMs: 5 } });
    expect('spec' in resolved && resolved.spec.routing.scorers).toEqual([{ name: 'outstanding', weight: 1 }]);
    expect('spec' in resolved && resolved.spec.routing.prefix).toEqual(ROUTING_DEFAULTS.prefix);
  });

  it.each([
    [{ resilience: { timeouts: { idleMs: 'soon' } } }, 'spec.resilience.timeouts.idleMs must be a number ≥ 0'],
    [{ resilience: { retries: { tries: 3 } } }, 'spec.resilience.retries.tries is not a known field'],
    [{ resilience: { healthCheck: { path: 'health' } } }, 'spec.resilience.healthCheck.path must start with /'],
    [{ resilience: 5 }, 'spec.resilience must be an object'],
    [{ routing: { scorers: [{ name: 'outstanding' }, { name: 'outstanding' }] } }, 'spec.routing.scorers names a scorer twice'],
    [{ routing: { scorers: [{ name: 'vibes' }] } }, 'spec.routing.scorers.0.name'],
  ])('refuses %j with a problem naming the field', (overrides, problem) => {
    const resolved = resolve(declared(overrides), 'spec');
    expect('problem' in resolved && resolved.problem).toContain(problem);
  });

  it('takes prefix.isolateKeys on a vLLM pool only (the engine half is vLLM’s cache_salt)', () => {
    expect('spec' in resolve(declared({ routing: { prefix: { isolateKeys: true } } }), 'spec')).toBe(true);
    const sglang = resolve({ ...declared({ routing: { prefix: { isolateKeys: true } } }), engine: 'sglang' }, 'pools[1]');
    expect('problem' in sglang && sglang.problem).toContain('pools[1].routing: prefix.isolateKeys needs a vLLM pool');
    // a router-wide setting reaches every pool: a pool of another engine is refused as well
    const everywhere = poolResolver({ ...base, routing: { ...ROUTING_DEFAULTS, prefix: { ...ROUTING_DEFAULTS.prefix, isolateKeys: true } } });
    expect('problem' in everywhere({ ...declared({}), engine: 'tgi' }, 'pools[2]')).toBe(true);
    // TEI serves embeddings: nothing cached to tell, nothing to refuse
    expect('spec' in everywhere({ ...declared({}), engine: 'tei' }, 'pools[3]')).toBe(true);
  });
});
