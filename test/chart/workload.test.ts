/**
 * The router's Deployment as the chart renders it: locked-down pods, probes on the admin port, a
 * drain whose pieces add up, a config checksum that rolls pods on config changes only, the routing
 * and priority blocks of its config, the keys Secret (or an existing one), autoscaling, the
 * PodDisruptionBudget, and a values schema that rejects typos.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import { parse } from 'yaml';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { parseKeysFile } from '../../src/config/keys-file.js';
import { buildConfig } from '../../src/config/load.js';
import { A_KEY, keysFileText, ofKind, only, render, routerConfigText, type K8sObject, type SetValues, Variants } from '../helpers/helm.js';
import { schemaErrors } from '../helpers/k8s-schemas.js';

const KEYS: SetValues = { 'auth.keys': [A_KEY] };
const ROUTING = {
  scorers: [{ name: 'prefix', weight: 3 }, { name: 'outstanding', weight: 2 }, { name: 'session' }],
  engineMetrics: { path: '/engine/metrics', intervalMs: 2000 },
  session: { header: 'x-conversation-id' },
  saturation: { kvCacheUsage: 0.9 },
};
const SELECTOR = { 'app.kubernetes.io/name': 'modelgate', 'app.kubernetes.io/instance': 'modelgate' };

interface RouterConfig {
  server: { host: string; port: number; shutdownDelayMs: number; gracePeriodMs: number; maxBodyBytes?: number };
  admin: { port: number };
  log: { level: string };
  auth: { keysFile: string; reloadIntervalMs: number };
  resilience?: unknown;
  routing?: unknown;
  priority?: { header: string };
  slo?: unknown;
  tracing?: unknown;
}

const deploymentOf = (objects: K8sObject[]): IDeployment => only(objects, 'Deployment') as unknown as IDeployment;
const podOf = (objects: K8sObject[]): IPodSpec => {
  const pod = deploymentOf(objects).spec?.template.spec;
  if (!pod) throw new Error('no pod spec');
  return pod;
};
const containerOf = (objects: K8sObject[]): IContainer => {
  const [container, ...others] = podOf(objects).containers;
  if (!container || others.length > 0) throw new Error('expected one container');
  return container;
};
const configOf = (objects: K8sObject[]): RouterConfig => parse(routerConfigText(objects)) as RouterConfig;
const checksumOf = (objects: K8sObject[]): string | undefined => deploymentOf(objects).spec?.template.metadata?.annotations?.['checksum/config'];

const variants = new Variants();
const get = (name: string): K8sObject[] => variants.get(name);

beforeAll(async () => {
  const matrix: Record<string, SetValues> = {
    base: {},
    debug: { 'config.logLevel': 'debug' },
    otherKeys: { 'auth.keys': [{ name: 'team-b', keySha256: 'a'.repeat(64), models: ['llama-8b-prod'] }, A_KEY] },
    drain: { drain: { preStopSeconds: 7, shutdownDelaySeconds: 3, gracePeriodSeconds: 50 } },
    noPreStop: { 'drain.preStopSeconds': 0 },
    existingSecret: { 'auth.keys': [], 'auth.existingSecret': 'my-keys' },
    hpa: { autoscaling: { enabled: true, minReplicas: 3, maxReplicas: 9, targetCPUUtilizationPercentage: 65 } },
    noPdb: { 'podDisruptionBudget.enabled': false },
    noSpread: { topologySpreadConstraints: [] },
    ownSpread: { topologySpreadConstraints: [{ maxSkew: 2, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'DoNotSchedule', labelSelector: { matchLabels: { team: 'x' } } }] },
    extras: {
      extraEnv: [{ name: 'NODE_OPTIONS', value: '--max-old-space-size=384' }],
      extraVolumes: [{ name: 'qwen-tokenizer', configMap: { name: 'qwen-tokenizer' } }],
      extraVolumeMounts: [{ name: 'qwen-tokenizer', mountPath: '/etc/modelgate/tokenizers/qwen', readOnly: true }],
      image: { repository: 'registry.example.com/modelgate', tag: '1.2.3', pullPolicy: 'Always' },
      replicaCount: 4,
    },
    ports: { service: { port: 80, adminPort: 9100 } },
    longName: { nameOverride: 'n'.repeat(60) },
    routing: { 'config.routing': ROUTING, 'config.priority.header': 'x-llm-priority' },
    observed: { 'config.slo': { ttftMs: 800, itlMs: 40 }, 'config.tracing': { enabled: true, endpoint: 'http://otel-collector.observability:4318', sampleRatio: 0.25 } },
    priorityKeys: {
      'auth.keys': [
        { ...A_KEY, priority: 'critical' },
        { name: 'batch', key: 'sk-batch-0123456789', priority: 'sheddable' },
      ],
    },
  };
  await variants.render(Object.fromEntries(Object.entries(matrix).map(([name, set]) => [name, [[], { ...KEYS, ...set }]])));
});

describe('chart Deployment: the pod', () => {
  it('runs the image of the appVersion with the config the ConfigMap holds, as the chart ServiceAccount with its token', () => {
    const pod = podOf(get('base'));
    const container = containerOf(get('base'));
    expect(container.image).toBe('modelgate:0.1.0');
    expect(container.imagePullPolicy).toBe('IfNotPresent');
    expect(pod.serviceAccountName).toBe('modelgate');
    expect(pod.automountServiceAccountToken).toBe(true);
    const configMount = container.volumeMounts?.find((m) => m.name === 'config');
    expect(container.args).toEqual(['serve', '--config', `${configMount?.mountPath}/modelgate.yaml`]);
    expect(pod.volumes?.find((v) => v.name === 'config')?.configMap?.name).toBe(only(get('base'), 'ConfigMap').metadata.name);
    expect(deploymentOf(get('base')).spec?.replicas).toBe(2);
  });

  it('has the selector labels on its pods and as the Deployment selector', () => {
    const deployment = deploymentOf(get('base'));
    expect(deployment.spec?.selector.matchLabels).toEqual(SELECTOR);
    expect(deployment.spec?.template.metadata?.labels).toMatchObject(SELECTOR);
  });

  it('runs as uid 1000, non-root, seccomp RuntimeDefault, no privilege escalation, read-only root, no capabilities', () => {
    expect(podOf(get('base')).securityContext).toEqual({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } });
    expect(containerOf(get('base')).securityContext).toEqual({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsNonRoot: true, capabilities: { drop: ['ALL'] } });
  });

  it('names its ports http and admin, and probes /livez and /readyz on admin', () => {
    const container = containerOf(get('base'));
    expect(container.ports).toEqual([
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'admin', containerPort: 9090, protocol: 'TCP' },
    ]);
    expect(container.livenessProbe?.httpGet).toEqual({ path: '/livez', port: 'admin' });
    expect(container.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: 'admin' });
    expect(container.startupProbe?.httpGet).toEqual({ path: '/livez', port: 'admin' });
  });

  it('listens where the config says, on 8080 and 9090 whatever the Service ports (a non-root pod may not bind port 80)', () => {
    for (const variant of ['base', 'ports']) {
      const container = containerOf(get(variant));
      expect(container.ports?.map((p) => [p.name, p.containerPort])).toEqual([
        ['http', 8080],
        ['admin', 9090],
      ]);
      expect(configOf(get(variant)).server).toMatchObject({ host: '0.0.0.0', port: 8080 });
      expect(configOf(get(variant)).admin.port).toBe(9090);
    }
    const service = only(get('ports'), 'Service') as K8sObject & { spec: { ports: Array<{ name: string; port: number; targetPort: string }> } };
    expect(service.spec.ports.map((p) => [p.name, p.port, p.targetPort])).toEqual([
      ['http', 80, 'http'],
      ['admin', 9100, 'admin'],
    ]);
  });

  it('passes its name and namespace from the downward API, then extraEnv', () => {
    expect(containerOf(get('base')).env).toEqual([
      { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
    ]);
    expect(containerOf(get('extras')).env?.map((e) => e.name)).toEqual(['POD_NAME', 'POD_NAMESPACE', 'NODE_OPTIONS']);
    expect(containerOf(get('extras')).image).toBe('registry.example.com/modelgate:1.2.3');
    expect(deploymentOf(get('extras')).spec?.replicas).toBe(4);
  });

  it('mounts extraVolumes where extraVolumeMounts say (a model tokenizer for kvEvents.tokenizer huggingface)', () => {
    const pod = deploymentOf(get('extras')).spec?.template.spec;
    expect(pod?.volumes?.find((v) => v.name === 'qwen-tokenizer')).toEqual({ name: 'qwen-tokenizer', configMap: { name: 'qwen-tokenizer' } });
    expect(containerOf(get('extras')).volumeMounts?.find((m) => m.name === 'qwen-tokenizer')).toEqual({ name: 'qwen-tokenizer', mountPath: '/etc/modelgate/tokenizers/qwen', readOnly: true });
    expect(deploymentOf(get('base')).spec?.template.spec?.volumes?.map((v) => v.name)).not.toContain('qwen-tokenizer');
  });

  it('asks for 500m CPU and 256Mi, limits memory to 512Mi', () => {
    expect(containerOf(get('base')).resources).toEqual({ requests: { cpu: '500m', memory: '256Mi' }, limits: { memory: '512Mi' } });
  });

  it('spreads replicas across nodes by default with the selector labels; [] removes it, a list replaces it', () => {
    expect(podOf(get('base')).topologySpreadConstraints).toEqual([
      { maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: SELECTOR } },
    ]);
    expect(podOf(get('noSpread')).topologySpreadConstraints).toBeUndefined();
    expect(podOf(get('ownSpread')).topologySpreadConstraints).toEqual([
      { maxSkew: 2, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'DoNotSchedule', labelSelector: { matchLabels: { team: 'x' } } },
    ]);
  });

  it('trims the full name to 63 characters (release name, dash, nameOverride)', () => {
    // Suffixed names (modelgate-…-keys, -leader-election) may be longer: Secrets and Roles take DNS subdomains.
    expect(get('longName').flatMap((o) => schemaErrors(o))).toEqual([]);
    expect(deploymentOf(get('longName')).metadata?.name).toBe(`modelgate-${'n'.repeat(53)}`);
    expect(deploymentOf(get('longName')).spec?.selector.matchLabels).toEqual({ 'app.kubernetes.io/name': 'n'.repeat(60), 'app.kubernetes.io/instance': 'modelgate' });
  });
});

describe('chart Deployment: drain', () => {
  it.each([
    ['base', 5, 2, 30],
    ['drain', 7, 3, 50],
  ] as const)('%s: preStop sleeps preStopSeconds, the config gets the delay and grace period, the pod their sum + 5', (variant, preStop, delay, grace) => {
    const objects = get(variant);
    expect(containerOf(objects).lifecycle).toEqual({ preStop: { sleep: { seconds: preStop } } });
    expect(configOf(objects).server).toMatchObject({ shutdownDelayMs: delay * 1000, gracePeriodMs: grace * 1000 });
    expect(podOf(objects).terminationGracePeriodSeconds).toBe(preStop + delay + grace + 5);
  });

  it('has no preStop hook with preStopSeconds 0', () => {
    expect(containerOf(get('noPreStop')).lifecycle).toBeUndefined();
    expect(podOf(get('noPreStop')).terminationGracePeriodSeconds).toBe(0 + 2 + 30 + 5);
  });
});

describe('chart Deployment: config checksum', () => {
  it('is a sha256 that changes with the config', () => {
    expect(checksumOf(get('base'))).toMatch(/^[0-9a-f]{64}$/);
    expect(checksumOf(get('debug'))).not.toBe(checksumOf(get('base')));
    expect(checksumOf(get('drain'))).not.toBe(checksumOf(get('base')));
  });

  it('does not change with the API keys (the router reloads them live)', () => {
    expect(keysFileText(get('otherKeys'))).not.toBe(keysFileText(get('base')));
    expect(checksumOf(get('otherKeys'))).toBe(checksumOf(get('base')));
  });
});

describe('chart router config: routing and priority', () => {
  it('has no routing block by default (the router keeps its defaults) and the default priority header', () => {
    const config = configOf(get('base'));
    expect(config.routing).toBeUndefined();
    expect(config.resilience).toBeUndefined();
    expect(config.priority).toEqual({ header: 'x-modelgate-priority' });
  });

  it("renders config.routing as the config's routing block, unchanged, and config.priority.header", () => {
    const config = configOf(get('routing'));
    expect(config.routing).toEqual(ROUTING);
    expect(config.priority).toEqual({ header: 'x-llm-priority' });
    expect(checksumOf(get('routing'))).not.toBe(checksumOf(get('base')));
  });

  it('hands the router a routing block it merges over ROUTING_DEFAULTS: the scorer list replaced, weights defaulting to 1, other groups field by field', () => {
    const config = buildConfig(parse(routerConfigText(get('routing'))) as unknown, '/etc/modelgate/config', { POD_NAME: 'x', POD_NAMESPACE: 'ns' });
    expect(config.routing).toEqual({
      scorers: [
        { name: 'prefix', weight: 3 },
        { name: 'outstanding', weight: 2 },
        { name: 'session', weight: 1 },
      ],
      engineMetrics: { ...ROUTING_DEFAULTS.engineMetrics, path: '/engine/metrics', intervalMs: 2000 },
      prefix: ROUTING_DEFAULTS.prefix,
      session: { ...ROUTING_DEFAULTS.session, header: 'x-conversation-id' },
      saturation: { ...ROUTING_DEFAULTS.saturation, kvCacheUsage: 0.9 },
      kvEvents: ROUTING_DEFAULTS.kvEvents,
      lora: ROUTING_DEFAULTS.lora,
    });
    expect(config.priority).toEqual({ header: 'x-llm-priority' });
  });
});

describe('chart router config: goodput objective and traces', () => {
  it('has neither by default (the router keeps 2000 / 100 ms and tracing off)', () => {
    const config = configOf(get('base'));
    expect(config.slo).toBeUndefined();
    expect(config.tracing).toBeUndefined();
  });

  it('renders config.slo and config.tracing into the config the router loads', () => {
    const config = buildConfig(parse(routerConfigText(get('observed'))) as unknown, '/etc/modelgate/config', { POD_NAME: 'x', POD_NAMESPACE: 'ns' });
    expect(config.slo).toEqual({ ttftMs: 800, itlMs: 40 });
    expect(config.tracing).toEqual({ enabled: true, endpoint: 'http://otel-collector.observability:4318', sampleRatio: 0.25, serviceName: 'modelgate' });
    expect(checksumOf(get('observed'))).not.toBe(checksumOf(get('base')));
  });
});

describe('chart API keys', () => {
  it('renders auth.keys into a Secret with keys.yaml in the keys-file format, mounted as a directory', () => {
    const secret = only(get('otherKeys'), 'Secret');
    expect(secret.metadata.name).toBe('modelgate-keys');
    expect(parseKeysFile(keysFileText(get('otherKeys')) ?? '', 'keys.yaml')).toEqual([{ name: 'team-b', keySha256: 'a'.repeat(64), models: ['llama-8b-prod'] }, A_KEY]);
    const pod = podOf(get('otherKeys'));
    expect(pod.volumes?.find((v) => v.name === 'keys')?.secret).toEqual({ secretName: 'modelgate-keys', items: [{ key: 'keys.yaml', path: 'keys.yaml' }] });
    const mount = containerOf(get('otherKeys')).volumeMounts?.find((m) => m.name === 'keys');
    expect(mount).toEqual({ name: 'keys', mountPath: '/etc/modelgate/keys', readOnly: true });
    expect(configOf(get('otherKeys')).auth.keysFile).toBe(`${mount?.mountPath}/keys.yaml`);
  });

  it("renders each key's priority into keys.yaml, and none for a key without one", () => {
    expect(parseKeysFile(keysFileText(get('priorityKeys')) ?? '', 'keys.yaml')).toEqual([
      { ...A_KEY, priority: 'critical' },
      { name: 'batch', key: 'sk-batch-0123456789', priority: 'sheddable' },
    ]);
    expect(parseKeysFile(keysFileText(get('base')) ?? '', 'keys.yaml')).toEqual([A_KEY]);
  });

  it('with auth.existingSecret renders no Secret and mounts that one', () => {
    expect(ofKind(get('existingSecret'), 'Secret')).toEqual([]);
    expect(podOf(get('existingSecret')).volumes?.find((v) => v.name === 'keys')?.secret?.secretName).toBe('my-keys');
  });

  it('mounts nothing with subPath, and every mount but /tmp read-only', () => {
    for (const m of containerOf(get('base')).volumeMounts ?? []) {
      expect(m.subPath).toBeUndefined();
      expect({ mount: m.mountPath, readOnly: m.readOnly ?? false }).toEqual({ mount: m.mountPath, readOnly: m.mountPath !== '/tmp' });
    }
  });

  it('fails with a message naming both options when there are neither keys nor an existing Secret', async () => {
    const result = await render([]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('set auth.keys');
    expect(result.stderr).toContain('auth.existingSecret');
  });

  it('fails when both keys and an existing Secret are set, or a key name is used twice', async () => {
    const both = await render([], { ...KEYS, 'auth.existingSecret': 'my-keys' });
    expect(both.code).not.toBe(0);
    expect(both.stderr).toContain('not both');
    const twice = await render([], { 'auth.keys': [A_KEY, { name: A_KEY.name, key: 'sk-other-0123456789' }] });
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toContain('used twice');
  });
});

describe('chart autoscaling and disruption budget', () => {
  it('renders no HPA by default, and replicas on the Deployment', () => {
    expect(ofKind(get('base'), 'HorizontalPodAutoscaler')).toEqual([]);
    expect(deploymentOf(get('base')).spec?.replicas).toBe(2);
  });

  it('with autoscaling renders an autoscaling/v2 HPA on CPU for the Deployment, which then has no replicas', () => {
    const hpa = only(get('hpa'), 'HorizontalPodAutoscaler');
    expect(hpa.apiVersion).toBe('autoscaling/v2');
    expect(hpa.spec).toEqual({
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'modelgate' },
      minReplicas: 3,
      maxReplicas: 9,
      metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 65 } } }],
    });
    expect(deploymentOf(get('hpa')).spec).not.toHaveProperty('replicas');
  });

  it('renders a PodDisruptionBudget of maxUnavailable 1 over the router pods by default, none when disabled', () => {
    const pdb = only(get('base'), 'PodDisruptionBudget');
    expect(pdb.apiVersion).toBe('policy/v1');
    expect(pdb.spec).toEqual({ maxUnavailable: 1, unhealthyPodEvictionPolicy: 'AlwaysAllow', selector: { matchLabels: SELECTOR } });
    expect(ofKind(get('noPdb'), 'PodDisruptionBudget')).toEqual([]);
  });
});

describe('chart values schema', () => {
  it.each([
    ['an unknown top-level key', { replicaCont: 3 }, "additional properties 'replicaCont' not allowed"],
    ['an unknown nested key', { 'service.prot': 80 }, "additional properties 'prot' not allowed"],
    ['server.port (set by service.port)', { 'config.server.port': 80 }, "additional properties 'port' not allowed"],
    ['a misspelt resilience field', { 'config.resilience.retries.maxRetry': 1 }, "additional properties 'maxRetry' not allowed"],
    ['a string for an integer', { replicaCount: 'two' }, 'want integer'],
    ['a string for a boolean', { 'podDisruptionBudget.enabled': 'yes' }, 'want boolean'],
    ['an unknown pull policy', { 'image.pullPolicy': 'Sometimes' }, 'pullPolicy'],
    ['an unknown log level', { 'config.logLevel': 'verbose' }, 'logLevel'],
    ['a short key', { 'auth.keys': [{ name: 'a', key: 'short' }] }, 'minLength'],
    ['a key with both key and keySha256', { 'auth.keys': [{ name: 'a', key: 'sk-0123456789', keySha256: 'a'.repeat(64) }] }, 'oneOf'],
    ['retries above 10', { 'config.resilience.retries.maxRetries': 11 }, 'maximum'],
    [
      'a ModelPool spec with an unknown field',
      { modelPools: [{ name: 'p', spec: { service: { name: 's' }, servedModelName: 'm', servedModel: 'x' } }] },
      "additional properties 'servedModel' not allowed",
    ],
    ['an HTTPRoute without parentRefs', { 'httpRoute.enabled': true }, 'minItems'],
    ['an unknown scorer', { 'config.routing.scorers': [{ name: 'random' }] }, "value must be one of 'outstanding', 'queue', 'kv-cache', 'prefix', 'session'"],
    ['an empty scorer list', { 'config.routing.scorers': [] }, 'minItems'],
    ['a scorer weight above 1000', { 'config.routing.scorers': [{ name: 'queue', weight: 1001 }] }, 'maximum'],
    ['a misspelt routing group', { 'config.routing.sesion': { header: 'x-s' } }, "additional properties 'sesion' not allowed"],
    ['a KV-cache saturation of 0', { 'config.routing.saturation.kvCacheUsage': 0 }, 'exclusiveMinimum'],
    ['a metrics path without a slash', { 'config.routing.engineMetrics.path': 'metrics' }, "does not match pattern '^/'"],
    ['a priority header with a space', { 'config.priority.header': 'x priority' }, 'does not match pattern'],
    ['an unknown key priority', { 'auth.keys': [{ ...A_KEY, priority: 'urgent' }] }, "value must be one of 'critical', 'standard', 'sheddable'"],
    [
      'a ModelPool scorer that does not exist',
      { modelPools: [{ name: 'p', spec: { service: { name: 's' }, servedModelName: 'm', routing: { scorers: [{ name: 'lru' }] } } }] },
      'value must be one of',
    ],
    ['a ModelDeployment fallback with capitals', { modelDeployments: [{ name: 'd', spec: { model: 'm', targets: [{ pool: 'p' }], fallbacks: ['Other'] } }] }, 'does not match pattern'],
  ] as const)('rejects %s', async (_what, set, message) => {
    const result = await render([], { ...KEYS, ...set });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
  });

  it.each([
    ['config.routing lists a scorer twice', { 'config.routing.scorers': [{ name: 'prefix' }, { name: 'prefix', weight: 2 }] }, 'config.routing.scorers: the scorer "prefix" is listed twice'],
    [
      'a ModelPool lists a scorer twice',
      { modelPools: [{ name: 'p', spec: { service: { name: 's' }, servedModelName: 'm', routing: { scorers: [{ name: 'queue' }, { name: 'queue' }] } } }] },
      'modelPools "p": spec.routing.scorers: the scorer "queue" is listed twice',
    ],
    [
      'a ModelDeployment is its own fallback',
      { modelDeployments: [{ name: 'd', spec: { model: 'm', targets: [{ pool: 'p' }], fallbacks: ['e', 'd'] } }] },
      'modelDeployments "d": spec.fallbacks names the deployment itself',
    ],
  ] as const)('fails the render, saying what to fix, when %s (the schema cannot say it)', async (_what, set, message) => {
    const result = await render([], { ...KEYS, ...set });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
  });
});
