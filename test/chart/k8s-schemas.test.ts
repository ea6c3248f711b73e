/** The schema check the chart and manifest tests rely on: it must fail on what the API server rejects. */
import { describe, expect, it } from '@jest/globals';
import { schemaErrors, validateObject } from '../helpers/k8s-schemas.js';

const deployment = (container: Record<string, unknown>): Record<string, unknown> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'modelgate', labels: { 'app.kubernetes.io/name': 'modelgate' } },
  spec: { selector: { matchLabels: { app: 'x' } }, template: { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'router', image: 'modelgate:0.1.0', ...container }] } } },
});
const scaledObject = (spec: Record<string, unknown>): Record<string, unknown> => ({
  apiVersion: 'keda.sh/v1alpha1',
  kind: 'ScaledObject',
  metadata: { name: 'llama-8b', namespace: 'models' },
  spec: {
    scaleTargetRef: { name: 'llama-8b' },
    triggers: [{ type: 'prometheus', metadata: { serverAddress: 'http://prometheus:9090', query: 'sum(up)', threshold: '8' } }],
    ...spec,
  },
});
const pool = (spec: Record<string, unknown>): Record<string, unknown> => ({ apiVersion: 'modelgate.io/v1alpha1', kind: 'ModelPool', metadata: { name: 'llama-8b', namespace: 'models' }, spec });

describe('k8s schema check', () => {
  it('accepts valid objects of the built-in, Prometheus Operator, Gateway API, KEDA and modelgate kinds', () => {
    expect(schemaErrors(deployment({ ports: [{ name: 'http', containerPort: 8080 }] }))).toEqual([]);
    expect(schemaErrors({ apiVersion: 'monitoring.coreos.com/v1', kind: 'ServiceMonitor', metadata: { name: 'm' }, spec: { selector: {}, endpoints: [{ port: 'admin' }] } })).toEqual([]);
    expect(
      schemaErrors({
        apiVersion: 'gateway.networking.k8s.io/v1',
        kind: 'HTTPRoute',
        metadata: { name: 'r' },
        spec: { parentRefs: [{ name: 'gw' }], rules: [{ matches: [{ path: { type: 'PathPrefix', value: '/v1' } }] }] },
      }),
    ).toEqual([]);
    expect(schemaErrors(pool({ service: { name: 'llama-8b', port: 'http' }, servedModelName: 'm' }))).toEqual([]);
    expect(schemaErrors(scaledObject({ minReplicaCount: 0, maxReplicaCount: 4 }))).toEqual([]);
  });

  it('fails an unknown apiVersion or kind instead of skipping it', () => {
    expect(schemaErrors({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' } })).toEqual(['example.com/v1 Widget w: no schema for apiVersion example.com/v1, kind Widget']);
    expect(schemaErrors({ apiVersion: 'apps/v1beta1', kind: 'Deployment', metadata: { name: 'd' } })).toHaveLength(1);
    expect(schemaErrors({ ...scaledObject({}), apiVersion: 'keda.sh/v1' })).toEqual(['keda.sh/v1 ScaledObject llama-8b: no schema for apiVersion keda.sh/v1, kind ScaledObject']);
    expect(() => validateObject({ kind: 'Deployment', metadata: { name: 'd' } })).toThrow('no apiVersion or kind');
  });

  it('fails wrong types and enums in built-in kinds', () => {
    expect(schemaErrors(deployment({ ports: [{ containerPort: '8080' }] })).join('\n')).toContain('containerPort must be integer');
    expect(
      schemaErrors({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r' }, spec: { rules: [{ matches: [{ path: { type: 'Glob', value: '/v1' } }] }] } }),
    ).not.toEqual([]);
  });

  it('fails wrong types in a KEDA ScaledObject, and one without its scale target or triggers', () => {
    expect(schemaErrors(scaledObject({ minReplicaCount: '0' })).join('\n')).toContain('minReplicaCount must be integer');
    // KEDA reads every trigger setting as a string: a bare number for the threshold is refused.
    expect(schemaErrors(scaledObject({ triggers: [{ type: 'prometheus', metadata: { threshold: 8 } }] })).join('\n')).toContain('threshold must be string');
    expect(schemaErrors({ apiVersion: 'keda.sh/v1alpha1', kind: 'ScaledObject', metadata: { name: 'x' }, spec: {} }).join('\n')).toContain('must have required property scaleTargetRef');
  });

  it('fails unknown fields and broken values in modelgate kinds', () => {
    expect(schemaErrors(pool({ service: { name: 'llama-8b' }, servedModelName: 'm', servedModel: 'x' })).join('\n')).toContain('must NOT have additional properties');
    expect(schemaErrors(pool({ service: { name: 'llama-8b', port: 70000 }, servedModelName: 'm' })).join('\n')).toContain('must be <= 65535');
  });

  it('fails names and labels the API server rejects', () => {
    const badName = { ...deployment({}), metadata: { name: 'Model_Gate' } };
    expect(schemaErrors(badName).join('\n')).toContain('not a DNS-1123 subdomain');
    const badLabel = { ...deployment({}), metadata: { name: 'modelgate', labels: { 'app.kubernetes.io/version': 'x'.repeat(64) } } };
    expect(schemaErrors(badLabel).join('\n')).toContain('invalid value');
    expect(schemaErrors({ apiVersion: 'v1', kind: 'Service', metadata: { name: '1router' } }).join('\n')).toContain('not a DNS-1035 label');
  });
});
