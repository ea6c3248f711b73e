/**
 * The chart's files: Chart.yaml, CRDs identical to manifests/crds, a values schema that matches
 * what the router and the CRDs accept, a values.yaml with every key documented, and NOTES.txt.
 */
import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { configSchema } from '../../src/config/schema.js';
import { routingOverridesSchema } from '../../src/balancer/settings.js';
import { PRIORITIES } from '../../src/core/types.js';
import { resilienceOverridesSchema } from '../../src/resilience/settings.js';
import { A_KEY, CHART_DIR, helm, NAMESPACE, RELEASE, REPO_ROOT, type HelmResult } from '../helpers/helm.js';
import { crdToJsonSchema, loadCrds } from '../helpers/k8s-schemas.js';
import { schemaNode, withoutKeywords, type Obj } from '../helpers/json-schema.js';

const read = (path: string): string => readFileSync(join(CHART_DIR, path), 'utf8');
const valuesSchema = JSON.parse(read('values.schema.json')) as Obj;

const withoutDescriptions = (value: unknown): unknown => withoutKeywords(value, ['description']);

describe('charts/modelgate files', () => {
  it('describes the chart: apiVersion v2, application, version 0.1.0, Kubernetes 1.30 or later', () => {
    expect(parse(read('Chart.yaml'))).toMatchObject({ apiVersion: 'v2', name: 'modelgate', type: 'application', version: '0.1.0', appVersion: '0.1.0', kubeVersion: '>=1.30.0-0' });
  });

  it('refuses Kubernetes before 1.30, which lacks the preStop sleep action', async () => {
    const templateFor = (version: string): Promise<HelmResult> =>
      helm(['template', RELEASE, CHART_DIR, '--namespace', NAMESPACE, '--kube-version', version, '--set-json', `auth.keys=${JSON.stringify([A_KEY])}`]);
    const [old, supported] = await Promise.all([templateFor('1.29.9'), templateFor('1.30.0')]);
    expect(old.code).not.toBe(0);
    expect(old.stderr).toContain('chart requires kubeVersion: >=1.30.0-0');
    expect(supported.code).toBe(0);
  });

  it('ships the CRDs of manifests/crds byte for byte', () => {
    const chartCrds = readdirSync(join(CHART_DIR, 'crds')).sort();
    expect(chartCrds).toEqual(['modelgate.io_modeldeployments.yaml', 'modelgate.io_modelpools.yaml']);
    for (const file of chartCrds) expect({ file, text: read(`crds/${file}`) }).toEqual({ file, text: readFileSync(join(REPO_ROOT, 'manifests/crds', file), 'utf8') });
  });

  it('has no stale charts/README.md placeholder', () => {
    expect(readdirSync(join(REPO_ROOT, 'charts'))).toEqual(['modelgate']);
  });
});

describe('charts/modelgate values.schema.json', () => {
  it('is draft-07 and closes every object it defines', () => {
    expect(valuesSchema.$schema).toBe('http://json-schema.org/draft-07/schema#');
    const open: string[] = [];
    const walk = (schema: unknown, path: string): void => {
      if (typeof schema !== 'object' || schema === null) return;
      const s = schema as Obj;
      if (s.properties !== undefined && s.additionalProperties !== false) open.push(path);
      for (const [key, child] of Object.entries((s.properties ?? {}) as Obj)) walk(child, `${path}.${key}`);
      if (s.items !== undefined) walk(s.items, `${path}[]`);
      for (const [key, child] of Object.entries((s.definitions ?? {}) as Obj)) walk(child, `#${key}`);
    };
    walk(valuesSchema, '');
    expect(open).toEqual([]);
  });

  it("accepts in config.resilience and config.routing exactly what the router's resilience and routing blocks accept", () => {
    expect(withoutDescriptions(schemaNode(valuesSchema, 'config', 'resilience'))).toEqual(withoutDescriptions(resilienceOverridesSchema));
    expect(withoutDescriptions(schemaNode(valuesSchema, 'config', 'routing'))).toEqual(withoutDescriptions(routingOverridesSchema));
  });

  it("accepts in config.slo and config.tracing exactly what the router's slo and tracing blocks accept, without their defaults", () => {
    for (const block of ['slo', 'tracing']) {
      expect(withoutKeywords(schemaNode(valuesSchema, 'config', block), ['description'])).toEqual(withoutKeywords(schemaNode(configSchema, block), ['description', 'default']));
    }
  });

  it("accepts in config.priority the router's priority block, without its default (values.yaml holds it)", () => {
    const { default: _default, ...header } = schemaNode(configSchema, 'priority', 'header');
    expect(withoutDescriptions(schemaNode(valuesSchema, 'config', 'priority'))).toEqual({ type: 'object', additionalProperties: false, properties: { header } });
    expect((parse(read('values.yaml')) as { config: { priority: unknown } }).config.priority).toEqual({ header: _default });
  });

  it('accepts in auth.keys[].priority exactly the classes of the keys file', () => {
    const keys = schemaNode(valuesSchema, 'auth', 'keys').items as Obj;
    expect(withoutDescriptions(schemaNode(keys, 'priority'))).toEqual({ type: 'string', enum: [...PRIORITIES] });
  });

  it("accepts in config.server the router's server fields except those the chart sets (host, port, drain), with the same bounds", () => {
    const router = schemaNode(configSchema, 'server').properties as Record<string, Obj>;
    const chart = schemaNode(valuesSchema, 'config', 'server').properties as Record<string, Obj>;
    const expected = Object.fromEntries(
      Object.entries(router)
        .filter(([key]) => !['host', 'port', 'shutdownDelayMs', 'gracePeriodMs'].includes(key))
        .map(([key, { default: _default, ...rest }]) => [key, rest]),
    );
    expect(withoutDescriptions(chart)).toEqual(expected);
  });

  it("checks modelPools[].spec and modelDeployments[].spec with the CRDs' own schemas", () => {
    const definitions = valuesSchema.definitions as Obj;
    const specOf = (kind: string): Obj => {
      const crd = loadCrds().find((c) => c.kind === kind);
      const spec = (crd?.versions[0]?.schema.properties as Obj | undefined)?.spec;
      if (typeof spec !== 'object' || spec === null) throw new Error(`no spec schema in the ${kind} CRD`);
      return crdToJsonSchema(spec as Obj);
    };
    expect(definitions.modelPoolSpec).toEqual(specOf('ModelPool'));
    expect(definitions.modelDeploymentSpec).toEqual(specOf('ModelDeployment'));
  });
});

describe('charts/modelgate values.yaml', () => {
  const text = read('values.yaml');

  it('matches the values schema (it is what the chart renders with, plus a key)', () => {
    const values = parse(text) as Obj;
    expect(Object.keys(values).sort()).toEqual(
      Object.keys(valuesSchema.properties as Obj)
        .filter((k) => k !== 'global')
        .sort(),
    );
  });

  it('documents every key: a "# --" comment on the key or on an enclosing key', () => {
    // Each key line with its indent; comment lines directly above it (blank lines end the block).
    interface Key {
      indent: number;
      path: string;
      documented: boolean;
    }
    const keys: Key[] = [];
    const stack: Key[] = [];
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      const m = /^(\s*)([A-Za-z0-9_.-]+):/.exec(line);
      if (!m) return;
      const indent = (m[1] ?? '').length;
      while (stack.length > 0 && (stack[stack.length - 1] as Key).indent >= indent) stack.pop();
      let documented = false;
      for (let j = i - 1; j >= 0 && /^\s*#/.test(lines[j] ?? ''); j--) if (/^\s*# --/.test(lines[j] ?? '')) documented = true;
      const key = { indent, path: [...stack.map((k) => k.path.split('.').pop()), m[2]].join('.'), documented: documented || stack.some((k) => k.documented) };
      keys.push(key);
      stack.push(key);
    });
    const leaves = keys.filter((k, i) => (keys[i + 1]?.indent ?? -1) <= k.indent);
    expect(leaves.length).toBeGreaterThan(60);
    expect(leaves.filter((k) => !k.documented).map((k) => k.path)).toEqual([]);
  });
});

describe('charts/modelgate NOTES.txt', () => {
  it('tells how to reach the API, how to try a key on /v1/models and how to list ModelPools', async () => {
    const result = await helm(['install', RELEASE, CHART_DIR, '--namespace', NAMESPACE, '--dry-run=client', '--set-json', `auth.keys=${JSON.stringify([A_KEY])}`]);
    expect(result.code).toBe(0);
    const notes = result.stdout.slice(result.stdout.indexOf('NOTES:'));
    expect(notes).toContain(`kubectl -n ${NAMESPACE} port-forward service/modelgate 8080:8080`);
    expect(notes).toContain('curl -s $BASE/v1/models -H "Authorization: Bearer $KEY"');
    expect(notes).toContain('kubectl get modelpools -A');
  });

  it('names the Ingress and HTTPRoute hosts when they are enabled', async () => {
    const result = await helm(['install', RELEASE, CHART_DIR, '--namespace', NAMESPACE, '--dry-run=client', '-f', join(CHART_DIR, 'ci/full-values.yaml')]);
    expect(result.code).toBe(0);
    const notes = result.stdout.slice(result.stdout.indexOf('NOTES:'));
    expect(notes).toContain('BASE=https://llm.example.com');
    expect(notes).toContain('through the HTTPRoute');
  });
});
