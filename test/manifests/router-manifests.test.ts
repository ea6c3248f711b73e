/** The router's own manifests: its config passes the router's validation, its pod is locked down. */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { buildConfig } from '../../src/config/load.js';

const read = (name: string): Record<string, unknown> => parse(readFileSync(new URL(`../../manifests/router/${name}`, import.meta.url), 'utf8')) as Record<string, unknown>;

interface Container {
  args: string[];
  env: Array<{ name: string }>;
  securityContext: Record<string, unknown>;
  livenessProbe: { httpGet: { path: string; port: string } };
  readinessProbe: { httpGet: { path: string; port: string } };
  volumeMounts: Array<{ name: string; mountPath: string; readOnly: boolean }>;
}

describe('manifests/router', () => {
  const configMap = read('configmap.yaml') as { data: Record<string, string> };
  const deployment = read('deployment.yaml') as { spec: { template: { spec: { serviceAccountName: string; securityContext: Record<string, unknown>; containers: Container[] } } } };
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0]!;

  it('holds a config the router accepts, in Kubernetes mode', () => {
    const config = buildConfig(parse(configMap.data['modelgate.yaml'] ?? '') as unknown, '/etc/modelgate/config', { POD_NAME: 'modelgate-0', POD_NAMESPACE: 'modelgate' });
    expect(config.discovery.mode).toBe('kubernetes');
    expect(config.discovery.identity).toBe('modelgate-0');
    expect(config.discovery.leaderElection.leaseNamespace).toBe('modelgate');
    const configMount = container.volumeMounts.find((m) => m.name === 'config')!;
    const keysMount = container.volumeMounts.find((m) => m.name === 'keys')!;
    expect(container.args).toEqual(['serve', '--config', `${configMount.mountPath}/modelgate.yaml`]);
    expect(config.auth.keysFile.startsWith(keysMount.mountPath + '/')).toBe(true);
  });

  it('runs as non-root on a read-only root filesystem with no capabilities, as the RBAC service account', () => {
    expect(pod.serviceAccountName).toBe('modelgate');
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(container.securityContext).toEqual({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
    expect(container.volumeMounts.every((m) => m.readOnly)).toBe(true);
  });

  it('probes /livez and /readyz on the admin port and passes the downward-API identity', () => {
    expect(container.livenessProbe.httpGet).toEqual({ path: '/livez', port: 'admin' });
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' });
    expect(container.env.map((e) => e.name)).toEqual(['POD_NAME', 'POD_NAMESPACE']);
  });
});

describe('ModelPool CRD and the config', () => {
  it('offer the same resilience fields, with the same types', async () => {
    const { resilienceOverridesSchema } = await import('../../src/resilience/settings.js');
    const crd = parse(readFileSync(new URL('../../manifests/crds/modelgate.io_modelpools.yaml', import.meta.url), 'utf8')) as {
      spec: { versions: Array<{ schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, unknown> } } } } }> };
    };
    const fromCrd = crd.spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties.resilience;
    type Node = { type?: string; properties?: Record<string, Node> };
    const shape = (node: Node): unknown => (node.properties ? Object.fromEntries(Object.entries(node.properties).map(([k, v]) => [k, shape(v)]).sort(([a], [b]) => String(a).localeCompare(String(b)))) : node.type);
    expect(fromCrd).toBeDefined();
    expect(shape(fromCrd as Node)).toEqual(shape(resilienceOverridesSchema));
  });
});
