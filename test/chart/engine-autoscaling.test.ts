/**
 * Engine autoscaling (modelPools[].autoscaling): per pool, in the pool's namespace, a KEDA
 * ScaledObject or an autoscaling/v2 HPA on the routers' modelgate_pool_demand_requests gauge, with
 * target = targetRequestsPerReplica so that desired replicas = ceil(sum(demand) / target). Off by
 * default; zero replicas only with KEDA for a pool that opts into scale from zero, and a render that
 * would strand requests at zero replicas fails with the fix.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { parse } from 'yaml';
import { A_KEY, CHART_DIR, helm, NAMESPACE, ofKind, only, render, RELEASE, REPO_ROOT, type K8sObject, type SetValues, Variants } from '../helpers/helm.js';
import { schemaErrors } from '../helpers/k8s-schemas.js';

type Obj = Record<string, unknown>;

const DEFAULT_PROMETHEUS = 'http://prometheus-operated.monitoring.svc:9090';
const poolSpec = (resilience?: Obj): Obj => ({ service: { name: 'llama-8b', port: 'http' }, servedModelName: 'meta-llama/Llama-3.1-8B-Instruct', ...(resilience ? { resilience } : {}) });
const FROM_ZERO = { scaleFromZero: { enabled: true, maxWaitMs: 600000 } };
/** One pool llama-8b in namespace models, the router watching it. */
const onePool = (pool: Obj, more: SetValues = {}): SetValues => ({
  'auth.keys': [A_KEY],
  'watch.namespaces': [NAMESPACE, 'models'],
  modelPools: [{ name: 'llama-8b', namespace: 'models', spec: poolSpec(), ...pool }],
  ...more,
});
const autoscaled = (autoscaling: Obj, resilience?: Obj, more: SetValues = {}): SetValues =>
  onePool({ spec: poolSpec(resilience), autoscaling: { enabled: true, scaleTargetRef: { name: 'llama-8b' }, ...autoscaling } }, more);

/** Whether PromQL parses with Prometheus' own grammar. */
function parses(expr: string): boolean {
  let ok = true;
  parser.parse(expr).iterate({
    enter: (n) => {
      if (n.type.isError) ok = false;
    },
  });
  return ok;
}

const specOf = (o: K8sObject): Obj => o.spec as Obj;
/** The engine autoscalers of a render: ScaledObjects, and HPAs that do not scale the router's Deployment. */
function engineScalers(objects: K8sObject[]): K8sObject[] {
  const router = only(objects, 'Deployment').metadata.name;
  return objects.filter((o) => o.kind === 'ScaledObject' || (o.kind === 'HorizontalPodAutoscaler' && (specOf(o).scaleTargetRef as Obj).name !== router));
}

const variants = new Variants();
const get = (name: string): K8sObject[] => variants.get(name);

beforeAll(async () => {
  await variants.render({
    base: [[], { 'auth.keys': [A_KEY] }],
    disabled: [[], onePool({ autoscaling: { enabled: false, scaleTargetRef: { name: 'llama-8b' } } })],
    routerHpa: [[], onePool({}, { 'autoscaling.enabled': true })],
    kedaFromZero: [[], autoscaled({}, FROM_ZERO)],
    kedaFromZeroFloor: [[], autoscaled({ minReplicas: 1 }, FROM_ZERO)],
    kedaFromOne: [
      [],
      autoscaled(
        { maxReplicas: 6, pollingInterval: 5, cooldownPeriod: 600, behavior: { scaleDown: { stabilizationWindowSeconds: 900 } } },
        { timeouts: { firstByteMs: 60000 } },
        { 'engineAutoscaling.prometheus.serverAddress': 'https://prometheus.example.internal', 'engineAutoscaling.defaults.targetRequestsPerReplica': 16 },
      ),
    ],
    hpa: [
      [],
      autoscaled({
        kind: 'hpa',
        scaleTargetRef: { apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'llama-8b-engine' },
        minReplicas: 2,
        maxReplicas: 6,
        targetRequestsPerReplica: 32,
        behavior: { scaleUp: { stabilizationWindowSeconds: 0 } },
      }),
    ],
    hpaFromZeroPool: [[], autoscaled({ kind: 'hpa' }, FROM_ZERO)],
    hpaByDefault: [[], autoscaled({}, undefined, { 'engineAutoscaling.defaults.kind': 'hpa' })],
    releaseNamespace: [[], { 'auth.keys': [A_KEY], modelPools: [{ name: 'bge-small', spec: poolSpec(), autoscaling: { enabled: true, scaleTargetRef: { name: 'bge-small' } } }] }],
    full: [['ci/full-values.yaml'], {}],
  });
});

describe('chart engine autoscaling: what renders', () => {
  it('renders no ScaledObject and no engine HPA by default, nor for a pool whose autoscaling is not enabled', () => {
    for (const name of ['base', 'disabled', 'routerHpa']) expect({ name, scalers: engineScalers(get(name)) }).toEqual({ name, scalers: [] });
    // The router's own HPA is untouched by engine autoscaling.
    expect((specOf(only(get('routerHpa'), 'HorizontalPodAutoscaler')).scaleTargetRef as Obj).name).toBe('modelgate');
  });

  it('renders only objects that pass their Kubernetes or KEDA schema, each in the namespace of its ModelPool and named after it', () => {
    const rendered = ['kedaFromZero', 'kedaFromZeroFloor', 'kedaFromOne', 'hpa', 'hpaFromZeroPool', 'hpaByDefault', 'releaseNamespace', 'full'];
    for (const name of rendered) {
      const objects = get(name);
      expect({ name, errors: objects.flatMap((o) => schemaErrors(o)) }).toEqual({ name, errors: [] });
      const pools = ofKind(objects, 'ModelPool').map((p) => `${p.metadata.namespace}/${p.metadata.name}`);
      const scalers = engineScalers(objects);
      expect(scalers.length).toBeGreaterThan(0);
      for (const s of scalers) expect({ name, scaler: s.kind, pool: pools.includes(`${s.metadata.namespace}/${s.metadata.name}`) }).toEqual({ name, scaler: s.kind, pool: true });
    }
    expect(only(get('releaseNamespace'), 'ScaledObject').metadata.namespace).toBe(NAMESPACE);
  });

  it('scales a pool that opts into scale from zero with a KEDA ScaledObject from 0 replicas, active on any demand', () => {
    const so = only(get('kedaFromZero'), 'ScaledObject');
    expect(so.apiVersion).toBe('keda.sh/v1alpha1');
    expect(so.metadata).toMatchObject({ name: 'llama-8b', namespace: 'models' });
    expect(specOf(so)).toEqual({
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'llama-8b' },
      minReplicaCount: 0,
      maxReplicaCount: 4,
      pollingInterval: 15,
      cooldownPeriod: 300,
      triggers: [
        {
          type: 'prometheus',
          metricType: 'AverageValue',
          metadata: { serverAddress: DEFAULT_PROMETHEUS, query: 'sum(modelgate_pool_demand_requests{pool="models/llama-8b"})', threshold: '8', activationThreshold: '0' },
        },
      ],
    });
  });

  it('queries the demand of exactly its pool with PromQL that parses', () => {
    const scaledObjects = [...ofKind(get('kedaFromZero'), 'ScaledObject'), ...ofKind(get('full'), 'ScaledObject')];
    expect(scaledObjects.length).toBe(3);
    for (const so of scaledObjects) {
      const [trigger] = specOf(so).triggers as Array<{ metadata: { query: string } }>;
      const query = trigger?.metadata.query ?? '';
      expect({ query, parses: parses(query) }).toEqual({ query, parses: true });
      expect(query).toBe(`sum(modelgate_pool_demand_requests{pool="${so.metadata.namespace}/${so.metadata.name}"})`);
    }
  });

  it('keeps an explicit minReplicas above zero for a pool that scales from zero', () => {
    expect(specOf(only(get('kedaFromZeroFloor'), 'ScaledObject')).minReplicaCount).toBe(1);
  });

  it('starts a pool without scale from zero at 1 replica, and takes the timing, behavior, Prometheus and chart-wide defaults from the values', () => {
    const spec = specOf(only(get('kedaFromOne'), 'ScaledObject'));
    expect(spec).toMatchObject({ minReplicaCount: 1, maxReplicaCount: 6, pollingInterval: 5, cooldownPeriod: 600 });
    expect(spec.advanced).toEqual({ horizontalPodAutoscalerConfig: { behavior: { scaleDown: { stabilizationWindowSeconds: 900 } } } });
    expect((spec.triggers as Array<{ metadata: Obj }>)[0]?.metadata).toMatchObject({ serverAddress: 'https://prometheus.example.internal', threshold: '16' });
  });

  it('scales with an autoscaling/v2 HPA on the External metric, selected by pool namespace and name, AverageValue = target per replica', () => {
    const hpa = only(get('hpa'), 'HorizontalPodAutoscaler');
    expect(hpa.metadata).toMatchObject({ name: 'llama-8b', namespace: 'models' });
    expect(specOf(hpa)).toEqual({
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'llama-8b-engine' },
      minReplicas: 2,
      maxReplicas: 6,
      metrics: [
        {
          type: 'External',
          external: {
            metric: { name: 'modelgate_pool_demand_requests', selector: { matchLabels: { pool_namespace: 'models', pool_name: 'llama-8b' } } },
            target: { type: 'AverageValue', averageValue: '32' },
          },
        },
      ],
      behavior: { scaleUp: { stabilizationWindowSeconds: 0 } },
    });
    expect(ofKind(get('hpa'), 'ScaledObject')).toEqual([]);
  });

  it('keeps an HPA at 1 replica or more even for a pool that scales from zero, and takes kind hpa from the chart-wide defaults', () => {
    expect(specOf(only(get('hpaFromZeroPool'), 'HorizontalPodAutoscaler')).minReplicas).toBe(1);
    expect(ofKind(get('hpaByDefault'), 'ScaledObject')).toEqual([]);
    expect(specOf(only(get('hpaByDefault'), 'HorizontalPodAutoscaler'))).toMatchObject({ minReplicas: 1, maxReplicas: 4 });
  });

  it('exercises KEDA from zero, KEDA from a floor and an HPA in ci/full-values.yaml', () => {
    const values = parse(readFileSync(join(CHART_DIR, 'ci/full-values.yaml'), 'utf8')) as { modelPools: Array<{ name: string; autoscaling?: Obj }> };
    expect(values.modelPools.filter((p) => p.autoscaling?.enabled === true).map((p) => p.name)).toEqual(['llama-8b', 'llama-8b-spot', 'bge-small']);
    const scalers = engineScalers(get('full')).map((s) => [s.kind, s.metadata.name, specOf(s).minReplicaCount ?? specOf(s).minReplicas]);
    expect(scalers.sort()).toEqual([
      ['HorizontalPodAutoscaler', 'bge-small', 1],
      ['ScaledObject', 'llama-8b', 2],
      ['ScaledObject', 'llama-8b-spot', 0],
    ]);
  });
});

describe('chart engine autoscaling: what it refuses', () => {
  const cases: Array<[string, SetValues, string]> = [
    [
      'zero replicas for a pool without scale from zero (its requests would get 503)',
      autoscaled({ minReplicas: 0 }),
      "modelPools[llama-8b].autoscaling: minReplicas is 0, but the pool does not opt into scale from zero, so with no replica its requests would fail at once with 503; set the pool's spec.resilience.scaleFromZero.enabled to true, or minReplicas to 1 or more",
    ],
    [
      'zero replicas for a pool whose scale from zero is off',
      autoscaled({ minReplicas: 0 }, { scaleFromZero: { enabled: false } }),
      'minReplicas is 0, but the pool does not opt into scale from zero',
    ],
    [
      'zero replicas with an HPA, even for a pool that scales from zero',
      autoscaled({ kind: 'hpa', minReplicas: 0 }, FROM_ZERO),
      'modelPools[llama-8b].autoscaling: minReplicas is 0, but a HorizontalPodAutoscaler cannot scale to zero replicas; set minReplicas to 1 or more, or use kind keda',
    ],
    ['chart-wide zero replicas with an HPA', autoscaled({ kind: 'hpa' }, FROM_ZERO, { 'engineAutoscaling.defaults.minReplicas': 0 }), 'a HorizontalPodAutoscaler cannot scale to zero replicas'],
    ['a KEDA setting on an HPA', autoscaled({ kind: 'hpa', cooldownPeriod: 60 }), 'modelPools[llama-8b].autoscaling.cooldownPeriod: a KEDA setting, which kind hpa ignores'],
    [
      'no scale target',
      onePool({ autoscaling: { enabled: true } }),
      "modelPools[llama-8b].autoscaling.scaleTargetRef.name: empty; name the Deployment in namespace models that runs the pool's engine (the one its Service llama-8b selects)",
    ],
    ['maxReplicas below minReplicas', autoscaled({ minReplicas: 3, maxReplicas: 2 }), 'modelPools[llama-8b].autoscaling: maxReplicas (2) is below minReplicas (3)'],
    ['an unknown kind (values schema)', autoscaled({ kind: 'vpa' }), "at '/modelPools/0/autoscaling/kind': value must be one of 'keda', 'hpa'"],
    ['an unknown field (values schema)', autoscaled({ minReplica: 1 }), "at '/modelPools/0/autoscaling': additional properties 'minReplica' not allowed"],
    [
      'a scale-from-zero wait under a second (the CRD schema, in the values schema)',
      autoscaled({}, { scaleFromZero: { enabled: true, maxWaitMs: 500 } }),
      "at '/modelPools/0/spec/resilience/scaleFromZero/maxWaitMs': minimum: got 500, want 1,000",
    ],
  ];

  it.each(cases)('refuses %s', async (_name, set, message) => {
    const result = await render([], set);
    expect({ code: result.code === 0 ? 0 : 1, message: result.stderr.includes(message) ? message : result.stderr }).toEqual({ code: 1, message });
  });
});

describe('chart engine autoscaling: docs', () => {
  it("quotes values.yaml's engineAutoscaling defaults in the README's table", () => {
    const values = parse(readFileSync(join(CHART_DIR, 'values.yaml'), 'utf8')) as { engineAutoscaling: { prometheus: { serverAddress: string }; defaults: Obj } };
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const section = readme.split('### Autoscaling engines (KEDA or HPA)\n')[1]?.split('\n## ')[0] ?? '';
    const rows = Object.entries(values.engineAutoscaling.defaults).map(([key, value]) => `| \`engineAutoscaling.defaults.${key}\` | \`${JSON.stringify(value).replaceAll('"', '')}\` |`);
    rows.push(`| \`engineAutoscaling.prometheus.serverAddress\` | \`${values.engineAutoscaling.prometheus.serverAddress}\` |`);
    expect(rows).toHaveLength(8);
    for (const row of rows) expect(section).toContain(row);
  });
});

describe('chart engine autoscaling: NOTES.txt', () => {
  const notesOf = async (set: SetValues): Promise<string> => {
    const args = ['install', RELEASE, CHART_DIR, '--namespace', NAMESPACE, '--dry-run=client', ...Object.entries(set).flatMap(([k, v]) => ['--set-json', `${k}=${JSON.stringify(v)}`])];
    const result = await helm(args);
    expect(result.code).toBe(0);
    return result.stdout.slice(result.stdout.indexOf('NOTES:'));
  };

  it('names the autoscaled pools and what each kind needs in the cluster, only when there are some', async () => {
    const [scaled, plain] = await Promise.all([notesOf(autoscaled({}, FROM_ZERO)), notesOf({ 'auth.keys': [A_KEY] })]);
    expect(scaled).toContain('Engines scaled on modelgate_pool_demand_requests (in flight + waiting, per pool): models/llama-8b.');
    expect(scaled).toContain('kubectl get scaledobjects,hpa -A');
    expect(scaled).toContain('A ScaledObject needs KEDA in the cluster');
    expect(plain).not.toContain('scaledobjects');
  });
});
