/**
 * The chart's RBAC: least privilege, namespaced by default. A Role per watched namespace (the release
 * namespace unless watch.namespaces says otherwise), a ClusterRole only with watch.allNamespaces, the
 * same rules as manifests/rbac/cluster-role.yaml, plus the leader-election Role for Leases; and the
 * router's discovery.namespaces always agreeing with what RBAC allows.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { A_KEY, NAMESPACE, ofKind, only, render, REPO_ROOT, routerConfigText, type K8sObject, type SetValues, Variants } from '../helpers/helm.js';

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}
type RoleObject = K8sObject & { rules: Rule[] };
type BindingObject = K8sObject & { roleRef: { apiGroup: string; kind: string; name: string }; subjects: Array<{ kind: string; name: string; namespace: string }> };

/** The rules of manifests/rbac/cluster-role.yaml: what the router needs in a watched namespace. */
const WATCH_RULES = (parse(readFileSync(join(REPO_ROOT, 'manifests/rbac/cluster-role.yaml'), 'utf8')) as { rules: Rule[] }).rules;
const LEASE_RULES: Rule[] = [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] }];
const SUBJECT = { kind: 'ServiceAccount', name: 'modelgate', namespace: NAMESPACE };

const roles = (objects: K8sObject[]): RoleObject[] => [...ofKind(objects, 'Role'), ...ofKind(objects, 'ClusterRole')] as RoleObject[];
const bindings = (objects: K8sObject[]): BindingObject[] => [...ofKind(objects, 'RoleBinding'), ...ofKind(objects, 'ClusterRoleBinding')] as BindingObject[];
const where = (o: K8sObject): string => `${o.kind} ${o.metadata.namespace ?? '(cluster)'}/${o.metadata.name}`;
const discovery = (objects: K8sObject[]): { namespaces: string[]; leaderElection: { enabled: boolean; leaseName: string } } =>
  (parse(routerConfigText(objects)) as { discovery: { namespaces: string[]; leaderElection: { enabled: boolean; leaseName: string } } }).discovery;

const variants = new Variants();
const get = (name: string): K8sObject[] => variants.get(name);

beforeAll(async () => {
  const matrix: Record<string, SetValues> = {
    base: {},
    all: { 'watch.allNamespaces': true },
    two: { 'watch.namespaces': ['models', 'embeddings'] },
    noLeader: { 'config.leaderElection.enabled': false },
    lease: { 'config.leaderElection.leaseName': 'router-status' },
    noRbac: { 'rbac.create': false },
    ownSa: { 'serviceAccount.create': false, 'serviceAccount.name': 'router' },
  };
  await variants.render(Object.fromEntries(Object.entries(matrix).map(([name, set]) => [name, [[], { 'auth.keys': [A_KEY], ...set }]])));
});

describe('chart RBAC', () => {
  it('by default is namespaced: one Role in the release namespace with the watch rules, and the Lease Role', () => {
    const objects = get('base');
    expect(ofKind(objects, 'ClusterRole')).toEqual([]);
    expect(ofKind(objects, 'ClusterRoleBinding')).toEqual([]);
    expect(roles(objects).map((o) => [where(o), o.rules])).toEqual([
      [`Role ${NAMESPACE}/modelgate`, WATCH_RULES],
      [`Role ${NAMESPACE}/modelgate-leader-election`, LEASE_RULES],
    ]);
    expect(discovery(objects).namespaces).toEqual([NAMESPACE]);
  });

  it('with watch.allNamespaces uses a ClusterRole with the same rules, and the router watches every namespace', () => {
    const objects = get('all');
    const clusterRole = only(objects, 'ClusterRole') as RoleObject;
    expect(clusterRole.metadata.namespace).toBeUndefined();
    expect(clusterRole.rules).toEqual(WATCH_RULES);
    expect(ofKind(objects, 'Role').map(where)).toEqual([`Role ${NAMESPACE}/modelgate-leader-election`]);
    const binding = only(objects, 'ClusterRoleBinding') as BindingObject;
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'modelgate' });
    expect(discovery(objects).namespaces).toEqual([]);
  });

  it('with watch.namespaces has one Role and RoleBinding in each watched namespace, and the router watches exactly those', () => {
    const objects = get('two');
    expect(ofKind(objects, 'ClusterRole')).toEqual([]);
    const watchRoles = ofKind(objects, 'Role').filter((o) => o.metadata.name === 'modelgate') as RoleObject[];
    expect(watchRoles.map((o) => o.metadata.namespace)).toEqual(['models', 'embeddings']);
    for (const role of watchRoles) expect(role.rules).toEqual(WATCH_RULES);
    expect(ofKind(objects, 'RoleBinding').map(where)).toEqual(['RoleBinding models/modelgate', 'RoleBinding embeddings/modelgate', `RoleBinding ${NAMESPACE}/modelgate-leader-election`]);
    expect(discovery(objects).namespaces).toEqual(['models', 'embeddings']);
  });

  it("binds every role to the router ServiceAccount in the release namespace, in the role's own namespace", () => {
    for (const variant of ['base', 'all', 'two']) {
      const objects = get(variant);
      for (const b of bindings(objects)) {
        expect({ binding: where(b), subjects: b.subjects }).toEqual({ binding: where(b), subjects: [SUBJECT] });
        const role = roles(objects).find((o) => o.kind === b.roleRef.kind && o.metadata.name === b.roleRef.name && o.metadata.namespace === b.metadata.namespace);
        expect({ binding: where(b), found: role !== undefined }).toEqual({ binding: where(b), found: true });
      }
      expect(bindings(objects)).toHaveLength(roles(objects).length);
    }
  });

  it('grants nothing beyond the watch and Lease rules: no wildcard, no Secrets, Pods or Services', () => {
    for (const variant of ['base', 'all', 'two']) {
      for (const role of roles(get(variant))) {
        for (const rule of role.rules) {
          expect(Object.keys(rule).sort()).toEqual(['apiGroups', 'resources', 'verbs']);
          for (const value of [...rule.apiGroups, ...rule.resources, ...rule.verbs]) expect(value).not.toContain('*');
          expect(rule.resources.some((res) => ['secrets', 'pods', 'services', 'configmaps'].includes(res))).toBe(false);
        }
        expect([WATCH_RULES, LEASE_RULES]).toContainEqual(role.rules);
      }
    }
  });

  it('names the Lease after the release unless leaseName is set, and drops the Lease Role without leader election', () => {
    expect(discovery(get('base')).leaderElection).toMatchObject({ enabled: true, leaseName: 'modelgate' });
    expect(discovery(get('lease')).leaderElection.leaseName).toBe('router-status');
    expect(discovery(get('noLeader')).leaderElection.enabled).toBe(false);
    expect(roles(get('noLeader')).map(where)).toEqual([`Role ${NAMESPACE}/modelgate`]);
  });

  it('renders no RBAC objects with rbac.create false', () => {
    expect([...roles(get('noRbac')), ...bindings(get('noRbac'))]).toEqual([]);
  });

  it('with serviceAccount.create false renders no ServiceAccount and uses the one named', () => {
    expect(ofKind(get('ownSa'), 'ServiceAccount')).toEqual([]);
    const pod = (only(get('ownSa'), 'Deployment').spec as { template: { spec: { serviceAccountName: string } } }).template.spec;
    expect(pod.serviceAccountName).toBe('router');
    for (const b of bindings(get('ownSa'))) expect(b.subjects).toEqual([{ ...SUBJECT, name: 'router' }]);
  });

  it('refuses watch.allNamespaces together with watch.namespaces', async () => {
    const result = await render([], { 'auth.keys': [A_KEY], 'watch.allNamespaces': true, 'watch.namespaces': ['models'] });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('not both');
  });
});
