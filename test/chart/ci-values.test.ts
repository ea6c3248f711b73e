/**
 * charts/modelgate with every ci/*-values.yaml: helm lint --strict passes, helm template renders
 * objects that pass the Kubernetes and CRD schemas and carry the common labels, and the rendered
 * router config is one the router itself accepts (buildConfig and `modelgate validate`), with
 * stand-ins for the files the pod mounts from Secrets.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parse, stringify } from 'yaml';
import { validateCommand } from '../../src/commands.js';
import { buildConfig } from '../../src/config/load.js';
import { parseKeysFile } from '../../src/config/keys-file.js';
import { A_KEY, CHART_DIR, ciValuesFiles, keysFileText, lint, NAMESPACE, parseObjects, render, RELEASE, routerConfigText, type HelmResult, type K8sObject } from '../helpers/helm.js';
import { schemaErrors } from '../helpers/k8s-schemas.js';

const CI_FILES = ciValuesFiles();
const chart = parse(readFileSync(join(CHART_DIR, 'Chart.yaml'), 'utf8')) as { name: string; version: string; appVersion: string };

interface Rendered {
  result: HelmResult;
  objects: K8sObject[];
}
const rendered = new Map<string, Rendered>();
const objectsOf = (file: string): K8sObject[] => {
  const r = rendered.get(file);
  if (!r) throw new Error(`${file} was not rendered`);
  return r.objects;
};

/** A rendered config's fields that name files the pod mounts from Secrets. */
interface MountedFiles {
  auth: { keysFile: string };
  limits?: { redis?: { passwordFile?: string; caFile?: string } };
}

/**
 * The router reads limits.redis.passwordFile and caFile when it loads its config; the pod has them
 * from Secrets (test/chart/limits.test.ts checks the mounts). Points them at stand-ins of the same
 * name in `secrets`.
 */
function withStandInSecrets<T extends MountedFiles>(config: T): T {
  const redis = config.limits?.redis;
  if (redis?.passwordFile) redis.passwordFile = join(secrets, basename(redis.passwordFile));
  if (redis?.caFile) redis.caFile = join(secrets, basename(redis.caFile));
  return config;
}

let secrets = '';
beforeAll(async () => {
  secrets = await mkdtemp(join(tmpdir(), 'modelgate-chart-secrets-'));
  await writeFile(join(secrets, 'password'), 'redis-password\n');
  await writeFile(join(secrets, 'ca.crt'), '-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n');
  await Promise.all(
    CI_FILES.map(async (file) => {
      const result = await render([file]);
      rendered.set(file, { result, objects: result.code === 0 ? parseObjects(result.stdout) : [] });
    }),
  );
});
afterAll(async () => {
  await rm(secrets, { recursive: true, force: true });
});

describe('charts/modelgate ci values', () => {
  it('has the values files CI renders', () => {
    expect(CI_FILES).toEqual(
      expect.arrayContaining([
        'ci/default-values.yaml',
        'ci/all-namespaces-values.yaml',
        'ci/existing-secret-values.yaml',
        'ci/full-values.yaml',
        'ci/limits-values.yaml',
        'ci/namespaces-values.yaml',
      ]),
    );
  });

  it('passes helm lint --strict with the defaults and one key', async () => {
    const result = await lint([], { 'auth.keys': [A_KEY] });
    expect({ code: result.code, output: result.stdout + result.stderr }).toEqual({ code: 0, output: expect.stringContaining('0 chart(s) failed') });
  });

  it.each(CI_FILES)('passes helm lint --strict with %s', async (file) => {
    const result = await lint([file]);
    expect({ code: result.code, output: result.stdout + result.stderr }).toEqual({ code: 0, output: expect.stringContaining('0 chart(s) failed') });
  });
});

describe.each(CI_FILES)('charts/modelgate rendered with %s', (file) => {
  it('renders, as YAML that reads the same as YAML 1.1 (as the Go YAML libraries read it)', () => {
    const { result } = rendered.get(file) as Rendered;
    expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    expect(parseObjects(result.stdout, '1.1')).toEqual(parseObjects(result.stdout, '1.2'));
    expect(objectsOf(file).length).toBeGreaterThanOrEqual(5);
  });

  it('renders only objects that pass their Kubernetes or CRD schema', () => {
    const errors = objectsOf(file).flatMap((o) => schemaErrors(o));
    expect(errors).toEqual([]);
  });

  it('gives every object the common labels and a unique kind/namespace/name', () => {
    const keys = new Set<string>();
    for (const o of objectsOf(file)) {
      expect({ object: `${o.kind} ${o.metadata.name}`, labels: o.metadata.labels }).toEqual({
        object: `${o.kind} ${o.metadata.name}`,
        labels: expect.objectContaining({
          'helm.sh/chart': `${chart.name}-${chart.version}`,
          'app.kubernetes.io/name': 'modelgate',
          'app.kubernetes.io/instance': RELEASE,
          'app.kubernetes.io/version': expect.any(String),
          'app.kubernetes.io/managed-by': 'Helm',
          'app.kubernetes.io/component': 'router',
        }),
      });
      const key = `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
      expect(keys.has(key)).toBe(false);
      keys.add(key);
    }
  });

  it("renders a config the router's own validation accepts, in Kubernetes mode", () => {
    const config = buildConfig(withStandInSecrets(parse(routerConfigText(objectsOf(file))) as MountedFiles), '/etc/modelgate/config', { POD_NAME: 'x', POD_NAMESPACE: 'ns' });
    expect(config.discovery.mode).toBe('kubernetes');
    expect(config.discovery.identity).toBe('x');
    expect(config.discovery.leaderElection.leaseNamespace).toBe('ns');
    expect(config.auth.keysFile).toBe('/etc/modelgate/keys/keys.yaml');
    expect(config.pools).toEqual([]);
    expect(config.deployments).toEqual([]);
  });

  describe('modelgate validate', () => {
    let dir = '';
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'modelgate-chart-'));
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it('accepts the rendered config with the rendered keys file (or a keys file for an existing Secret)', async () => {
      const objects = objectsOf(file);
      const keys = keysFileText(objects) ?? stringify([{ name: 'outside-the-chart', key: 'sk-outside-0123456789' }]);
      expect(parseKeysFile(keys, 'keys.yaml').length).toBeGreaterThan(0);
      const config = withStandInSecrets(parse(routerConfigText(objects)) as MountedFiles);
      config.auth.keysFile = join(dir, 'keys.yaml');
      await writeFile(join(dir, 'keys.yaml'), keys);
      await writeFile(join(dir, 'modelgate.yaml'), stringify(config));
      await expect(validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).resolves.toMatch(/^config OK: 0 pools, 0 endpoints, 0 deployments, [1-9]\d* keys?\n$/);
    });
  });
});

describe('charts/modelgate release', () => {
  it(`installs the namespaced objects into the release namespace (${NAMESPACE}) unless they belong elsewhere`, () => {
    const elsewhere = new Set(['Role', 'RoleBinding', 'ModelPool', 'ModelDeployment', 'ConfigMap']);
    for (const file of CI_FILES) {
      const routerDeployment = objectsOf(file).find((o) => o.kind === 'Deployment')?.metadata.name;
      const pools = objectsOf(file)
        .filter((o) => o.kind === 'ModelPool')
        .map((o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`);
      for (const o of objectsOf(file)) {
        const scaleTarget = (o.spec as { scaleTargetRef?: { name?: string } } | undefined)?.scaleTargetRef?.name;
        if (o.kind === 'ClusterRole' || o.kind === 'ClusterRoleBinding') expect(o.metadata.namespace).toBeUndefined();
        // An engine autoscaler (a ScaledObject, or an HPA of something else than the router) sits next to its ModelPool.
        else if (o.kind === 'ScaledObject' || (o.kind === 'HorizontalPodAutoscaler' && scaleTarget !== routerDeployment))
          expect({ file, object: `${o.kind} ${o.metadata.name}`, nextToPool: pools.includes(`${o.metadata.namespace ?? ''}/${o.metadata.name}`) }).toEqual({
            file,
            object: `${o.kind} ${o.metadata.name}`,
            nextToPool: true,
          });
        else if (!elsewhere.has(o.kind))
          expect({ file, object: `${o.kind} ${o.metadata.name}`, namespace: o.metadata.namespace }).toEqual({ file, object: `${o.kind} ${o.metadata.name}`, namespace: NAMESPACE });
        else expect(typeof o.metadata.namespace).toBe('string');
      }
    }
  });
});
