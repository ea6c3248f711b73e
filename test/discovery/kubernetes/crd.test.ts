import { RESILIENCE_DEFAULTS } from '../../../src/resilience/settings.js';
import { ROUTING_DEFAULTS, type RoutingSettings } from '../../../src/balancer/settings.js';
import { describe, expect, it } from '@jest/globals';
import { parseModelDeployment, parseModelPool } from '../../../src/discovery/kubernetes/crd.js';
import { poolResolver } from '../../../src/config/pool-settings.js';

const meta = { namespace: 'models', name: 'llama', generation: 3, creationTimestamp: '2026-01-02T03:04:05Z' };

/** The router-wide settings a ModelPool's overrides merge over: the defaults tables. */
const resolve = poolResolver({ resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS });

describe('parseModelPool', () => {
  it('applies the schema defaults and keys the pool by namespace/name', () => {
    const pool = parseModelPool({ metadata: meta, spec: { service: { name: 'llama-svc', port: 'http' }, servedModelName: 'meta/llama' } }, resolve);
    expect(pool).toEqual({
      key: 'models/llama',
      namespace: 'models',
      name: 'llama',
      generation: 3,
      spec: { name: 'models/llama', engine: 'vllm', servedModelName: 'meta/llama', capabilities: ['chat', 'completions'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS },
      service: { name: 'llama-svc', port: 'http' },
    });
  });

  it.each([
    ['tei', undefined, ['embeddings']],
    ['sglang', undefined, ['chat', 'completions']],
    ['vllm', ['rerank', 'score', 'rerank'], ['rerank', 'score']],
  ])('engine %s with capabilities %j serves %j', (engine, capabilities, expected) => {
    const parsed = parseModelPool({ metadata: meta, spec: { service: { name: 's' }, servedModelName: 'm', engine, ...(capabilities ? { capabilities } : {}) } }, resolve);
    expect(parsed.spec?.capabilities).toEqual(expected);
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
    const parsed = parseModelPool({ metadata: meta, ...obj }, resolve);
    expect(parsed.problem).toContain(problem);
    expect(parsed.spec).toBeUndefined();
  });
});

describe('parseModelPool resilience', () => {
  it('applies spec.resilience over the router’s defaults, field by field', () => {
    const pool = parseModelPool(
      {
        metadata: meta,
        spec: { service: { name: 's' }, servedModelName: 'm', resilience: { timeouts: { firstByteMs: 5000 }, maxConcurrencyPerReplica: 8, healthCheck: { enabled: true, path: '/ping' } } },
      },
      resolve,
    );
    expect(pool.spec?.resilience.timeouts).toEqual({ ...RESILIENCE_DEFAULTS.timeouts, firstByteMs: 5000 });
    expect(pool.spec?.resilience.maxConcurrencyPerReplica).toBe(8);
    expect(pool.spec?.resilience.healthCheck).toEqual({ ...RESILIENCE_DEFAULTS.healthCheck, enabled: true, path: '/ping' });
  });
});

describe('parseModelPool routing', () => {
  const spec = (routing?: unknown): Record<string, unknown> => ({ service: { name: 's' }, servedModelName: 'm', ...(routing === undefined ? {} : { routing }) });
  /** The router's config routing: what a pool without spec.routing gets, and what spec.routing overrides. */
  const CONFIG: RoutingSettings = { ...ROUTING_DEFAULTS, session: { header: 'x-conversation-id', loadFactor: 2 }, saturation: { queueDepth: 10, kvCacheUsage: 0.9 } };

  it.each<[string, unknown, RoutingSettings, RoutingSettings]>([
    ['no spec.routing: ROUTING_DEFAULTS', undefined, ROUTING_DEFAULTS, ROUTING_DEFAULTS],
    ['no spec.routing: the config routing', undefined, CONFIG, CONFIG],
    ['an empty spec.routing: the config routing', {}, CONFIG, CONFIG],
    ['a session header: merged field by field over the config (its loadFactor kept)', { session: { header: 'x-session' } }, CONFIG, { ...CONFIG, session: { header: 'x-session', loadFactor: 2 } }],
    [
      'engine metrics off and a queue depth: only those fields change',
      { engineMetrics: { enabled: false, path: '/stats' }, saturation: { queueDepth: 3 } },
      CONFIG,
      { ...CONFIG, engineMetrics: { ...CONFIG.engineMetrics, enabled: false, path: '/stats' }, saturation: { queueDepth: 3, kvCacheUsage: 0.9 } },
    ],
    [
      'a scorer list: it replaces the default list as a whole, in its order, weights defaulting to 1',
      { scorers: [{ name: 'prefix', weight: 3 }, { name: 'outstanding' }, { name: 'session', weight: 0 }] },
      ROUTING_DEFAULTS,
      {
        ...ROUTING_DEFAULTS,
        scorers: [
          { name: 'prefix', weight: 3 },
          { name: 'outstanding', weight: 1 },
          { name: 'session', weight: 0 },
        ],
      },
    ],
  ])('%s', (_what, routing, defaults, expected) => {
    const pool = parseModelPool({ metadata: meta, spec: spec(routing) }, poolResolver({ resilience: RESILIENCE_DEFAULTS, routing: defaults }));
    expect(pool.problem).toBeUndefined();
    expect(pool.spec?.routing).toEqual(expected);
  });

  it.each([
    ['an unknown scorer', { scorers: [{ name: 'random' }] }, 'spec.routing.scorers.0.name must be equal to one of the allowed values'],
    ['a scorer listed twice', { scorers: [{ name: 'prefix' }, { name: 'queue' }, { name: 'prefix', weight: 2 }] }, 'spec.routing.scorers names a scorer twice'],
    ['an empty scorer list', { scorers: [] }, 'spec.routing.scorers must NOT have fewer than 1 items'],
    ['a weight as a string', { scorers: [{ name: 'queue', weight: '2' }] }, 'spec.routing.scorers.0.weight must be number'],
    ['a block size as a string', { prefix: { blockChars: 'big' } }, 'spec.routing.prefix.blockChars must be integer'],
    ['a fractional scrape interval', { engineMetrics: { intervalMs: 250.5 } }, 'spec.routing.engineMetrics.intervalMs must be integer'],
    ['engine metrics enabled "yes"', { engineMetrics: { enabled: 'yes' } }, 'spec.routing.engineMetrics.enabled must be boolean'],
    ['a KV-cache saturation of 0', { saturation: { kvCacheUsage: 0 } }, 'spec.routing.saturation.kvCacheUsage must be > 0'],
    ['a session header with a space', { session: { header: 'x session' } }, 'spec.routing.session.header must match pattern "^[A-Za-z0-9!#$%&\'*+.^_`|~-]+$"'],
    ['an unknown group', { affinity: {} }, 'spec.routing must NOT have additional properties'],
    ['a string', 'fast', 'spec.routing must be object'],
  ])('reports %s in spec.routing as unusable', (_what, routing, problem) => {
    const pool = parseModelPool({ metadata: meta, spec: spec(routing) }, resolve);
    expect(pool.problem).toBe(problem);
    expect(pool.spec).toBeUndefined();
  });
});

describe('parseModelDeployment', () => {
  it('uses the object name as deployment ID, `namespace/name` as its label, targets pools in its own namespace and its age', () => {
    const parsed = parseModelDeployment({ metadata: meta, spec: { model: 'llama-3', aliases: ['default', 'default'], targets: [{ pool: 'a' }, { pool: 'b', weight: 5 }] } });
    expect(parsed.deployment).toEqual({
      id: 'llama',
      namespace: 'models',
      label: 'models/llama',
      model: 'llama-3',
      aliases: ['default'],
      targets: [
        { pool: 'models/a', weight: 100 },
        { pool: 'models/b', weight: 5 },
      ],
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
    // static mode's config refuses the same: no pool would ever get a request
    [
      {
        spec: {
          model: 'm',
          targets: [
            { pool: 'a', weight: 0 },
            { pool: 'b', weight: 0 },
          ],
        },
      },
      'spec.targets needs a weight above 0 on at least one pool',
    ],
  ])('reports %j as unusable: %s', (obj, problem) => {
    expect(parseModelDeployment({ metadata: meta, ...obj }).problem).toContain(problem);
  });
});

describe('parseModelDeployment fallbacks', () => {
  const spec = (fallbacks?: unknown): Record<string, unknown> => ({ model: 'm', targets: [{ pool: 'a' }], ...(fallbacks === undefined ? {} : { fallbacks }) });

  it.each<[string, unknown, string[]]>([
    ['none', undefined, []],
    ['an empty list', [], []],
    ['names in order', ['llama-70b', 'llama-8b-spot'], ['llama-70b', 'llama-8b-spot']],
    ['a name listed twice, counted once where it first appears', ['b', 'a', 'b', 'c', 'a'], ['b', 'a', 'c']],
  ])('keeps %s', (_what, fallbacks, expected) => {
    const parsed = parseModelDeployment({ metadata: meta, spec: spec(fallbacks) });
    expect(parsed.problem).toBeUndefined();
    expect(parsed.deployment?.fallbacks).toEqual(expected);
  });

  it.each([
    ['the deployment itself', ['other', 'llama'], 'spec.fallbacks must not name the deployment itself'],
    ['a number', ['other', 3], 'spec.fallbacks must be a list of ModelDeployment names'],
    ['an empty name', [''], 'spec.fallbacks must be a list of ModelDeployment names'],
    ['an object', [{ name: 'other' }], 'spec.fallbacks must be a list of ModelDeployment names'],
    ['a string instead of a list', 'other', 'spec.fallbacks must be a list of ModelDeployment names'],
  ])('reports %s in spec.fallbacks as unusable', (_what, fallbacks, problem) => {
    const parsed = parseModelDeployment({ metadata: meta, spec: spec(fallbacks) });
    expect(parsed.problem).toBe(problem);
    expect(parsed.deployment).toBeUndefined();
  });
});
