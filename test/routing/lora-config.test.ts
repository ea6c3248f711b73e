/** How a deployment names a LoRA adapter, in the config file and in a ModelDeployment, and the pool view the registry routes it to. */
import { describe, expect, it } from '@jest/globals';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import { poolResolver } from '../../src/config/pool-settings.js';
import { type Deployment, type PoolSpec } from '../../src/core/types.js';
import { parseModelDeployment, parseModelPool } from '../../src/discovery/kubernetes/crd.js';
import { Registry } from '../../src/registry/registry.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const minimal = { auth: { keysFile: 'keys.yaml' } };
const pools = [
  { name: 'llama', servedModelName: 'meta/llama', endpoints: ['http://127.0.0.1:9001'] },
  { name: 'tgi', engine: 'tgi', servedModelName: 'meta/llama', endpoints: ['http://127.0.0.1:9002'] },
];

function error(deployments: unknown[]): string {
  try {
    buildConfig({ ...minimal, pools, deployments }, '/etc/modelgate');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('deployments[].adapter in the config file', () => {
  it('is optional; set, it keeps its name and path', () => {
    const config = buildConfig({ ...minimal, pools, deployments: [{ id: 'bot', model: 'bot', targets: [{ pool: 'llama' }], adapter: { name: 'support', path: '/adapters/support' } }] }, '/x');
    expect(config.deployments[0]?.adapter).toEqual({ name: 'support', path: '/adapters/support' });
    expect(config.routing.lora).toEqual({ memoryMs: 30_000, maxLoadGap: 8, loadOnDemand: false, maxConcurrentLoads: 4, maxLoadsPerReplica: 1, loadTimeoutMs: 30_000 });
    expect(config.routing.scorers).toContainEqual({ name: 'lora', weight: 10 });
  });

  it.each([
    ['an adapter without a name', { path: '/a' }, /adapter.*name/],
    ['an unknown field', { name: 'a', rank: 8 }, /rank/],
    ['an adapter named like the base model', { name: 'meta/llama' }, /deployments\[0\]\.adapter\.name: the adapter is named like pool "llama"'s base model/],
  ])('refuses %s', (_what, adapter, message) => {
    expect(error([{ id: 'bot', model: 'bot', targets: [{ pool: 'llama' }], adapter }])).toMatch(message);
  });

  it('refuses an adapter on a pool whose engine is not vLLM, naming the target', () => {
    expect(error([{ id: 'bot', model: 'bot', targets: [{ pool: 'tgi' }], adapter: { name: 'a' } }])).toBe(
      'deployments[0].targets[0].pool: LoRA adapters are served by vLLM pools only; pool "tgi" runs tgi',
    );
  });

  it('refuses bad routing.lora settings', () => {
    expect(() => buildConfig({ ...minimal, routing: { lora: { maxLoadsPerReplica: 0 } } }, '/x')).toThrow(/maxLoadsPerReplica/);
    expect(() => buildConfig({ ...minimal, routing: { lora: { loadOnDemand: 'yes' } } }, '/x')).toThrow(/loadOnDemand/);
  });
});

describe('ModelDeployment spec.adapter', () => {
  const meta = { namespace: 'models', name: 'bot', generation: 1 };
  it('is read into the deployment', () => {
    const parsed = parseModelDeployment({ metadata: meta, spec: { model: 'bot', targets: [{ pool: 'llama' }], adapter: { name: 'support', path: 's3://adapters/support' } } });
    expect(parsed.deployment?.adapter).toEqual({ name: 'support', path: 's3://adapters/support' });
    expect(parseModelDeployment({ metadata: meta, spec: { model: 'bot', targets: [{ pool: 'llama' }] } }).deployment).not.toHaveProperty('adapter');
  });

  it.each([[{ path: '/a' }], [{ name: '' }], [{ name: 'two words' }], [{ name: 'a', path: '' }], ['support']])('refuses spec.adapter %j', (adapter) => {
    expect(parseModelDeployment({ metadata: meta, spec: { model: 'bot', targets: [{ pool: 'llama' }], adapter } }).problem).toMatch(/^spec\.adapter needs a name/);
  });

  it('takes routing.lora on a ModelPool', () => {
    const resolve = poolResolver({ resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS });
    const pool = parseModelPool({ metadata: meta, spec: { service: { name: 'svc' }, servedModelName: 'meta/llama', routing: { lora: { loadOnDemand: true } } } }, resolve);
    expect(pool.spec?.routing.lora).toEqual({ ...ROUTING_DEFAULTS.lora, loadOnDemand: true });
  });
});

describe('the registry', () => {
  const base: PoolSpec = { name: 'llama', engine: 'vllm', servedModelName: 'meta/llama', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
  const dep = (id: string, adapter?: string): Deployment => ({
    id,
    model: id,
    aliases: [],
    targets: [{ pool: 'llama', weight: 1 }],
    fallbacks: [],
    created: 0,
    ...(adapter ? { adapter: { name: adapter } } : {}),
  });

  it("routes an adapter's deployment to a view of its pool that serves the adapter, the same object every time", () => {
    const registry = new Registry([base], [dep('llama'), dep('bot', 'support'), dep('bot2', 'support')]);
    const [plain, bot, bot2] = ['llama', 'bot', 'bot2'].map((id) => registry.resolve(id)!).map((d) => registry.targetPool(d, d.targets[0]!));
    expect(plain).toBe(base);
    expect(bot).toMatchObject({ name: 'llama', servedModelName: 'support', adapter: { name: 'support', baseModel: 'meta/llama' } });
    expect(bot2).toBe(bot);
    expect(registry.targetPool(registry.resolve('bot')!, { pool: 'gone', weight: 1 })).toBeUndefined();
  });
});
