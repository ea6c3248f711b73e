/**
 * The raw manifests for clusters without Helm: `kubectl kustomize manifests` renders the CRDs, RBAC
 * and router (not the examples or the monitoring objects), and every object it renders, and every
 * object of manifests/examples and manifests/monitoring, passes the Kubernetes and CRD schemas.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseObjects, REPO_ROOT, type K8sObject } from '../helpers/helm.js';
import { schemaErrors } from '../helpers/k8s-schemas.js';

const KUBECTL = join(REPO_ROOT, '.tools/bin/kubectl');
const MANIFESTS = join(REPO_ROOT, 'manifests');

/** `kubectl kustomize DIR` (execFile, no shell), parsed. */
function kustomize(dir: string): Promise<K8sObject[]> {
  return new Promise((resolve, reject) => {
    execFile(KUBECTL, ['kustomize', dir], { maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`kubectl kustomize ${dir} failed: ${stderr || err.message}`));
      resolve(parseObjects(stdout));
    });
  });
}

const filesIn = (dir: string): string[] =>
  readdirSync(join(MANIFESTS, dir))
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => `${dir}/${f}`);
const id = (o: K8sObject): string => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;

let root: K8sObject[] = [];
const parts = new Map<string, K8sObject[]>();

beforeAll(async () => {
  const [all, ...each] = await Promise.all([kustomize(MANIFESTS), ...['crds', 'rbac', 'router'].map((d) => kustomize(join(MANIFESTS, d)))]);
  root = all ?? [];
  ['crds', 'rbac', 'router'].forEach((d, i) => parts.set(d, each[i] ?? []));
});

describe('manifests/kustomization.yaml', () => {
  it('renders exactly the objects of crds, rbac and router', () => {
    const expected = [...(parts.get('crds') ?? []), ...(parts.get('rbac') ?? []), ...(parts.get('router') ?? [])].map(id).sort();
    expect(expected.length).toBeGreaterThan(8);
    expect(root.map(id).sort()).toEqual(expected);
    expect(root.filter((o) => ['ModelPool', 'ModelDeployment', 'PrometheusRule'].includes(o.kind))).toEqual([]);
  });

  it('renders only objects that pass their Kubernetes or CRD schema', () => {
    expect(root.flatMap((o) => schemaErrors(o))).toEqual([]);
  });
});

describe.each([...filesIn('examples'), ...filesIn('monitoring')])('manifests/%s', (file) => {
  it('holds only objects that pass their Kubernetes or CRD schema', () => {
    const objects = parseObjects(readFileSync(join(MANIFESTS, file), 'utf8'));
    expect(objects.length).toBeGreaterThan(0);
    expect(objects.flatMap((o) => schemaErrors(o))).toEqual([]);
  });
});
