/**
 * The router's own manifests: its config passes the router's validation, its pod is locked down; and
 * the ModelPool CRD offers exactly the resilience and routing fields the router's config accepts.
 */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { Ajv } from 'ajv';
import { ROUTING_DEFAULTS, routingOverridesSchema } from '../../src/balancer/settings.js';
import { buildConfig } from '../../src/config/load.js';
import { crdToJsonSchema, newAjv } from '../helpers/k8s-schemas.js';

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
  type Node = { type?: string; enum?: readonly unknown[]; properties?: Record<string, Node>; items?: Node };
  const poolSpec = (): Record<string, Node> => {
    const crd = parse(readFileSync(new URL('../../manifests/crds/modelgate.io_modelpools.yaml', import.meta.url), 'utf8')) as {
      spec: { versions: Array<{ schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, Node> } } } } }> };
    };
    return crd.spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties;
  };
  /** Field names and leaf types, sorted; an enum without a type (the router's schema) has its values' type, as in the CRD. */
  const shape = (node: Node): unknown => {
    if (node.properties)
      return Object.fromEntries(
        Object.entries(node.properties)
          .map(([k, v]) => [k, shape(v)])
          .sort(([a], [b]) => String(a).localeCompare(String(b))),
      );
    if (node.items) return [shape(node.items)];
    return node.type ?? (node.enum ? typeof node.enum[0] : undefined);
  };

  it('offer the same resilience fields, with the same types', async () => {
    const { resilienceOverridesSchema } = await import('../../src/resilience/settings.js');
    const fromCrd = poolSpec().resilience;
    expect(fromCrd).toBeDefined();
    expect(shape(fromCrd as Node)).toEqual(shape(resilienceOverridesSchema));
  });

  it('offer the same routing fields, with the same types', () => {
    const fromCrd = poolSpec().routing;
    expect(fromCrd).toBeDefined();
    expect(shape(fromCrd as Node)).toEqual(shape(routingOverridesSchema));
  });

  /**
   * The CRD's routing schema as ajv reads it, its one kind of CEL rule (`self > N`) read as
   * exclusiveMinimum N: a CRD spells an exclusive bound as a boolean (OpenAPI 3.0), which ajv's
   * draft-07 refuses, so the CRD says it in CEL and the API server checks it there.
   */
  function crdRoutingChecker(): (value: unknown) => boolean {
    const withCel = (node: Record<string, unknown>): Record<string, unknown> => {
      const out: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(node)) {
        if (key === 'x-kubernetes-validations') {
          for (const { rule } of value as Array<{ rule: string }>) {
            const bound = /^self > (\d+(?:\.\d+)?)$/.exec(rule);
            if (!bound) throw new Error(`a CEL rule this test cannot read: ${rule}`);
            out.exclusiveMinimum = Number(bound[1]);
          }
        } else if (key === 'properties') {
          out.properties = Object.fromEntries(Object.entries(value as Record<string, Record<string, unknown>>).map(([k, v]) => [k, withCel(v)]));
        } else if (key === 'items') {
          out.items = withCel(value as Record<string, unknown>);
        } else {
          out[key] = value;
        }
      }
      return out;
    };
    return newAjv().compile(crdToJsonSchema(withCel(poolSpec().routing as Record<string, unknown>)));
  }

  let checks: { router: (value: unknown) => boolean; crd: (value: unknown) => boolean } | undefined;
  it.each<[string, unknown]>([
    ['nothing', {}],
    ['a scorer list', { scorers: [{ name: 'prefix', weight: 3 }, { name: 'outstanding' }] }],
    ['no scorers', { scorers: [] }],
    ['an unknown scorer', { scorers: [{ name: 'random' }] }],
    ['a scorer without name', { scorers: [{ weight: 1 }] }],
    ['a scorer with another field', { scorers: [{ name: 'queue', boost: 2 }] }],
    ['weight 0', { scorers: [{ name: 'queue', weight: 0 }] }],
    ['weight 1000', { scorers: [{ name: 'queue', weight: 1000 }] }],
    ['weight 1000.5', { scorers: [{ name: 'queue', weight: 1000.5 }] }],
    ['weight -0.1', { scorers: [{ name: 'queue', weight: -0.1 }] }],
    ['weight "3"', { scorers: [{ name: 'queue', weight: '3' }] }],
    ['engine metrics off', { engineMetrics: { enabled: false } }],
    ['engine metrics "off"', { engineMetrics: { enabled: 'off' } }],
    ['path /metrics', { engineMetrics: { path: '/metrics' } }],
    ['path metrics', { engineMetrics: { path: 'metrics' } }],
    ['intervalMs 100', { engineMetrics: { intervalMs: 100 } }],
    ['intervalMs 99', { engineMetrics: { intervalMs: 99 } }],
    ['intervalMs 100.5', { engineMetrics: { intervalMs: 100.5 } }],
    ['timeoutMs 10', { engineMetrics: { timeoutMs: 10 } }],
    ['timeoutMs 9', { engineMetrics: { timeoutMs: 9 } }],
    ['staleAfterMs 99', { engineMetrics: { staleAfterMs: 99 } }],
    ['an unknown engineMetrics field', { engineMetrics: { port: 9000 } }],
    ['blockChars 8 and 4096', { prefix: { blockChars: 8, maxBlocks: 4096 } }],
    ['blockChars 7', { prefix: { blockChars: 7 } }],
    ['blockChars 4097', { prefix: { blockChars: 4097 } }],
    ['maxBlocks 0', { prefix: { maxBlocks: 0 } }],
    ['capacityPerEndpoint 16', { prefix: { capacityPerEndpoint: 16 } }],
    ['capacityPerEndpoint 15', { prefix: { capacityPerEndpoint: 15 } }],
    ['capacityPerEndpoint 10000001', { prefix: { capacityPerEndpoint: 10_000_001 } }],
    ['maxLoadGap 0.5', { prefix: { maxLoadGap: 0.5 } }],
    ['maxLoadGap -1', { prefix: { maxLoadGap: -1 } }],
    ['header x-conversation-id', { session: { header: 'x-conversation-id' } }],
    ['header with a space', { session: { header: 'x conversation' } }],
    ['an empty header', { session: { header: '' } }],
    ['loadFactor 1', { session: { loadFactor: 1 } }],
    ['loadFactor 0.99', { session: { loadFactor: 0.99 } }],
    ['queueDepth 1', { saturation: { queueDepth: 1 } }],
    ['queueDepth 0', { saturation: { queueDepth: 0 } }],
    ['kvCacheUsage 1', { saturation: { kvCacheUsage: 1 } }],
    ['kvCacheUsage 0.01', { saturation: { kvCacheUsage: 0.01 } }],
    ['kvCacheUsage 0', { saturation: { kvCacheUsage: 0 } }],
    ['kvCacheUsage 1.01', { saturation: { kvCacheUsage: 1.01 } }],
    ['an unknown group', { affinity: {} }],
  ])('accept or refuse alike a routing block with %s', (_what, routing) => {
    checks ??= { router: new Ajv({ strict: true }).compile(routingOverridesSchema), crd: crdRoutingChecker() };
    expect({ routing, crd: checks.crd(routing) }).toEqual({ routing, crd: checks.router(routing) });
  });

  it("quote ROUTING_DEFAULTS in the CRD's descriptions", () => {
    const routing = poolSpec().routing as Node & { description: string; properties: Record<string, Node & { description: string; properties?: Record<string, { description: string }> }> };
    const { scorers, ...groups } = ROUTING_DEFAULTS;
    expect(routing.properties.scorers?.description).toContain(`(default ${scorers.map((s) => `${s.name} ${s.weight}`).join(', ')})`);
    const quoted = Object.entries(groups).flatMap(([group, fields]) =>
      Object.entries(fields as Record<string, unknown>).map(([field, value]) => [
        `${group}.${field}`,
        routing.properties[group]?.properties?.[field]?.description.includes(`(default ${String(value)})`),
      ]),
    );
    expect(quoted.length).toBeGreaterThanOrEqual(12);
    expect(quoted.filter(([, ok]) => !ok)).toEqual([]);
  });
});
