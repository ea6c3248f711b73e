import { describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig, ConfigError, loadConfig, parseYaml } from '../../src/config/load.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const minimal = { auth: { keysFile: 'keys.yaml' } };
const pools = [{ name: 'p', servedModelName: 'm', endpoints: ['http://127.0.0.1:9001', { url: 'http://127.0.0.1:9002', weight: 3 }] }];

function error(data: unknown): string {
  try {
    buildConfig(data, '/etc/modelgate');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('buildConfig', () => {
  it('fills the defaults of the contract (API 8080, admin 9090, static discovery)', () => {
    const config = buildConfig(minimal, '/etc/modelgate');
    expect(config.server).toEqual({
      host: '0.0.0.0',
      port: 8080,
      maxBodyBytes: 10 * 1024 * 1024,
      maxUploadBytes: 25 * 1024 * 1024,
      rememberedResponses: 100_000,
      maxJsonDepth: 64,
      headersTimeoutMs: 15_000,
      requestTimeoutMs: 60_000,
      keepAliveTimeoutMs: 65_000,
      shutdownDelayMs: 5_000,
      gracePeriodMs: 30_000,
      clientStallTimeoutMs: 30_000,
      trustedProxies: [],
      forwardHeaders: [],
    });
    expect(config.resilience).toEqual(RESILIENCE_DEFAULTS);
    expect(config.admin).toEqual({ host: '0.0.0.0', port: 9090 });
    expect(config.discovery.mode).toBe('static');
    expect(config.log.level).toBe('info');
    expect(config.auth).toEqual({ keysFile: '/etc/modelgate/keys.yaml', reloadIntervalMs: 2000 });
    expect(config.pools).toEqual([]);
  });

  it('normalises endpoints and fills pool and deployment defaults', () => {
    const config = buildConfig({ ...minimal, pools, deployments: [{ id: 'd', model: 'm', targets: [{ pool: 'p' }] }] }, '/x');
    expect(config.pools[0]).toEqual({
      name: 'p',
      engine: 'vllm',
      servedModelName: 'm',
      // no capabilities: the pool gets its engine's (core/types defaultCapabilities) when it is resolved
      endpoints: [
        { url: 'http://127.0.0.1:9001', weight: 1 },
        { url: 'http://127.0.0.1:9002', weight: 3 },
      ],
    });
    expect(config.deployments[0]).toEqual({ id: 'd', model: 'm', aliases: [], targets: [{ pool: 'p', weight: 100 }], fallbacks: [] });
  });

  it('returns a frozen config', () => {
    const config = buildConfig({ ...minimal, pools }, '/x');
    expect(Object.isFrozen(config.pools[0]?.endpoints[0])).toBe(true);
  });

  it.each([
    [{}, 'auth is required'],
    [{ ...minimal, server: { prot: 1 } }, 'server.prot is not a known field'],
    [{ ...minimal, server: { port: 70000 } }, 'server.port must be <= 65535'],
    [{ ...minimal, log: { level: 'loud' } }, 'log.level must be one of'],
    [{ ...minimal, discovery: { mode: 'dns' } }, 'discovery.mode must be one of: "static"'],
    [{ ...minimal, pools: [{ name: 'p' }] }, 'pools[0].servedModelName is required'],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', engine: 'triton' }] }, 'pools[0].engine must be one of'],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', capabilities: ['chat', 'video'] }] }, 'pools[0].capabilities[1] must be one of'],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: [5] }] }, 'pools[0].endpoints[0] must be an http(s) URL or {url, weight}'],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: ['ftp://10.0.0.1:21'] }] }, 'pools[0].endpoints[0]: "ftp://10.0.0.1:21" must use http or https'],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: ['not a url'] }] }, 'pools[0].endpoints[0]: "not a url" is not a URL'],
    [{ ...minimal, pools: [...pools, ...pools] }, 'pools[1].name: pool "p" is defined twice'],
    // credentials in a URL are never sent, and the URL is the endpoint's label, log field and status id: the message does not repeat them
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: ['http://admin:hunter2@10.0.0.1:8000'] }] }, 'pools[0].endpoints[0]: "http://…@10.0.0.1:8000" must not hold credentials'],
    [
      { ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: ['http://10.0.0.1:8000', { url: 'http://10.0.0.1:8000', weight: 2 }] }] },
      'pools[0].endpoints[1]: "http://10.0.0.1:8000" is listed twice in the pool',
    ],
    [{ ...minimal, pools, deployments: [{ id: 'd', model: 'm', targets: [{ pool: 'q' }] }] }, 'deployments[0].targets[0].pool: pool "q" is not defined'],
    [{ ...minimal, pools, deployments: [{ id: 'd', model: 'm', targets: [] }] }, 'deployments[0].targets must have at least 1 item'],
    [{ ...minimal, pools, deployments: [{ id: 'd', model: 'm', targets: [{ pool: 'p', weight: 0 }] }] }, 'deployments[0].targets: at least one target needs a weight above 0'],
    [
      {
        ...minimal,
        pools,
        deployments: [
          { id: 'a', model: 'm', targets: [{ pool: 'p' }] },
          { id: 'b', model: 'n', aliases: ['m'], targets: [{ pool: 'p' }] },
        ],
      },
      'deployments[1].aliases[0]: "m" already names deployment "a"',
    ],
    [{ ...minimal, pools: [{ name: 'p', servedModelName: 'm', backendKeyFile: '/nonexistent/key' }] }, 'pools[0].backendKeyFile: cannot read /nonexistent/key: ENOENT'],
  ])('rejects %j: %s', (data, message) => {
    expect(error(data)).toContain(message);
  });

  it('does not repeat the password of an endpoint URL it refuses', () => {
    expect(error({ ...minimal, pools: [{ name: 'p', servedModelName: 'm', endpoints: ['https://user:s3cret-token@gw.example/replica-1'] }] })).not.toMatch(/s3cret|user:/);
  });
});

describe('resilience settings', () => {
  it('apply the config-wide block over the defaults, and a pool’s own block over that', () => {
    const config = buildConfig({ ...minimal, resilience: { timeouts: { firstByteMs: 1000 }, maxConcurrencyPerReplica: 4 }, pools: [{ ...pools[0], resilience: { timeouts: { idleMs: 50 } } }] }, '/x');
    expect(config.resilience.timeouts).toEqual({ ...RESILIENCE_DEFAULTS.timeouts, firstByteMs: 1000 });
    expect(config.resilience.maxConcurrencyPerReplica).toBe(4);
    expect(config.pools[0]?.resilience).toEqual({ timeouts: { idleMs: 50 } });
  });

  it.each([
    [{ ...minimal, resilience: { retries: { maxRetries: 50 } } }, 'resilience.retries.maxRetries must be <= 10'],
    [{ ...minimal, resilience: { timeout: {} } }, 'resilience.timeout is not a known field'],
    [{ ...minimal, server: { headersTimeoutMs: 70_000 } }, 'server.headersTimeoutMs: must not exceed server.requestTimeoutMs'],
  ])('rejects %j: %s', (data, message) => {
    expect(error(data)).toContain(message);
  });
});

describe('routing settings, fallbacks and priority', () => {
  it('apply the config-wide routing block over the defaults; a scorer list replaces the profile, weights default to 1', () => {
    const config = buildConfig(
      { ...minimal, routing: { prefix: { maxLoadGap: 8 }, scorers: [{ name: 'prefix', weight: 3 }, { name: 'outstanding' }] }, pools: [{ ...pools[0], routing: { session: { header: 'x-conv' } } }] },
      '/x',
    );
    expect(config.routing.prefix).toEqual({ ...ROUTING_DEFAULTS.prefix, maxLoadGap: 8 });
    expect(config.routing.scorers).toEqual([
      { name: 'prefix', weight: 3 },
      { name: 'outstanding', weight: 1 },
    ]);
    expect(config.routing.engineMetrics).toEqual(ROUTING_DEFAULTS.engineMetrics);
    expect(config.pools[0]?.routing).toEqual({ session: { header: 'x-conv' } });
    expect(config.priority).toEqual({ header: 'x-modelgate-priority' });
  });

  it('keeps fallbacks in order', () => {
    const deployments = [
      { id: 'a', model: 'ma', targets: [{ pool: 'p' }], fallbacks: ['c', 'b'] },
      { id: 'b', model: 'mb', targets: [{ pool: 'p' }] },
      { id: 'c', model: 'mc', targets: [{ pool: 'p' }] },
    ];
    expect(buildConfig({ ...minimal, pools, deployments }, '/x').deployments[0]?.fallbacks).toEqual(['c', 'b']);
  });

  it.each([
    [{ ...minimal, routing: { scorers: [{ name: 'random' }] } }, 'routing.scorers[0].name must be one of'],
    [{ ...minimal, routing: { scorers: [] } }, 'routing.scorers must have at least 1 item'],
    [{ ...minimal, routing: { scorers: [{ name: 'prefix' }, { name: 'prefix', weight: 2 }] } }, 'routing.scorers[1]: scorer "prefix" is listed twice'],
    [{ ...minimal, pools: [{ ...pools[0], routing: { scorers: [{ name: 'queue' }, { name: 'queue' }] } }] }, 'pools[0].routing.scorers[1]: scorer "queue" is listed twice'],
    [{ ...minimal, routing: { engineMetrics: { intervalMs: 10 } } }, 'routing.engineMetrics.intervalMs must be >= 100'],
    [{ ...minimal, routing: { saturation: { kvCacheUsage: 1.5 } } }, 'routing.saturation.kvCacheUsage must be <= 1'],
    [{ ...minimal, routing: { session: { header: 'bad header' } } }, 'routing.session.header must match pattern'],
    [{ ...minimal, priority: { header: 'x p' } }, 'priority.header must match pattern'],
    [{ ...minimal, pools, deployments: [{ id: 'llama 8b', model: 'm', targets: [{ pool: 'p' }] }] }, 'deployments[0].id must be a name without spaces, tabs or line breaks (got "llama 8b")'],
    [
      { ...minimal, pools, deployments: [{ id: 'a', model: 'm', aliases: ['default\n'], targets: [{ pool: 'p' }] }] },
      'deployments[0].aliases[0] must be a name without spaces, tabs or line breaks (got "default\\n")',
    ],
    [{ ...minimal, pools, deployments: [{ id: 'a', model: 'm', targets: [{ pool: 'p' }], fallbacks: ['zz'] }] }, 'deployments[0].fallbacks[0]: deployment "zz" is not defined'],
    [{ ...minimal, pools, deployments: [{ id: 'a', model: 'm', targets: [{ pool: 'p' }], fallbacks: ['a'] }] }, 'deployments[0].fallbacks[0]: a deployment cannot be its own fallback'],
  ])('rejects %j: %s', (data, message) => {
    expect(error(data)).toContain(message);
  });
});

describe('kubernetes mode', () => {
  it('fills discovery defaults, taking the identity and lease namespace from the downward API', () => {
    const config = buildConfig({ ...minimal, discovery: { mode: 'kubernetes', kubeconfig: 'kube.yaml' } }, '/etc/mg', { POD_NAME: 'modelgate-7d9f', POD_NAMESPACE: 'gateway' });
    expect(config.discovery).toEqual({
      mode: 'kubernetes',
      namespaces: [],
      kubeconfig: '/etc/mg/kube.yaml',
      resyncIntervalMs: 30000,
      restartBackoffMs: { initialMs: 500, maxMs: 30000 },
      leaderElection: { enabled: true, leaseName: 'modelgate', leaseNamespace: 'gateway', leaseDurationMs: 15000, renewIntervalMs: 5000 },
      identity: 'modelgate-7d9f',
    });
  });

  it.each([
    [{ ...minimal, discovery: { mode: 'kubernetes' }, pools }, 'pools: in kubernetes mode pools and deployments come from ModelPool and ModelDeployment objects'],
    [{ ...minimal, discovery: { mode: 'kubernetes', namespaces: ['Bad_NS'] } }, 'discovery.namespaces[0] must match pattern'],
    [{ ...minimal, discovery: { mode: 'kubernetes', restartBackoffMs: { initialMs: 5000, maxMs: 100 } } }, 'discovery.restartBackoffMs: initialMs must not exceed maxMs'],
    [{ ...minimal, discovery: { mode: 'kubernetes', leaderElection: { leaseDurationMs: 2000, renewIntervalMs: 2000 } } }, 'renewIntervalMs must be shorter than leaseDurationMs'],
  ])('rejects %j: %s', (data, message) => {
    expect(error(data)).toContain(message);
  });
});

describe('loadConfig', () => {
  it('reads the file named by --config or MODELGATE_CONFIG, resolving paths next to it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'modelgate-config-'));
    try {
      const file = join(dir, 'modelgate.yaml');
      await writeFile(file, 'auth:\n  keysFile: ./keys.yaml\nserver: { port: 8081 }\n');
      expect(loadConfig(file, {}).server.port).toBe(8081);
      expect(loadConfig(undefined, { MODELGATE_CONFIG: file }).auth.keysFile).toBe(join(dir, 'keys.yaml'));
      expect(() => loadConfig(undefined, {})).toThrow('pass --config FILE or set MODELGATE_CONFIG');
      expect(() => loadConfig(join(dir, 'missing.yaml'), {})).toThrow(/cannot read config file .*missing.yaml: ENOENT/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('names the line of a YAML syntax error and refuses duplicate keys', () => {
    expect(() => parseYaml('a: 1\nb: [1, 2\n', 'c.yaml')).toThrow(/c\.yaml: .* at line \d+, column \d+$/);
    expect(() => parseYaml('a: 1\na: 2\n', 'c.yaml')).toThrow(ConfigError);
  });
});
