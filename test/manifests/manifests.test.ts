/**
 * The raw manifests in manifests/: CRD names, columns and structural schemas; the examples validated
 * against the CRD schemas (with ajv, the way the API server would, plus kubectl's strict field
 * validation); RBAC exactly least privilege; examples that reference each other correctly, engine
 * autoscalers included (KEDA ScaledObject, HPA and the prometheus-adapter rule it reads through).
 */
import { describe, expect, it } from '@jest/globals';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ValidateFunction } from 'ajv';
import { parser } from '@prometheus-io/lezer-promql';
import { parse, parseAllDocuments } from 'yaml';
import { crdToJsonSchema, newAjv } from '../helpers/k8s-schemas.js';

type Obj = Record<string, unknown>;

interface Manifest {
  /** Path relative to manifests/, e.g. `crds/modelgate.io_modelpools.yaml`. */
  file: string;
  value: Obj;
}

const ROOT = fileURLToPath(new URL('../../manifests/', import.meta.url));
const GROUP = 'modelgate.io';
const VERSION = 'v1alpha1';

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
function obj(v: unknown, what: string): Obj {
  if (!isObj(v)) throw new Error(`${what} is not an object`);
  return v;
}
function list(v: unknown, what: string): unknown[] {
  if (!Array.isArray(v)) throw new Error(`${what} is not a list`);
  return v as unknown[];
}
function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new Error(`${what} is not a string`);
  return v;
}
const strings = (v: unknown, what: string): string[] => list(v, what).map((s, i) => str(s, `${what}[${i}]`));
const meta = (m: Manifest): Obj => obj(m.value.metadata, `${m.file} metadata`);
const nameOf = (m: Manifest): string => str(meta(m).name, `${m.file} metadata.name`);
const namespaceOf = (m: Manifest): unknown => meta(m).namespace;
const specOf = (m: Manifest): Obj => obj(m.value.spec, `${m.file} ${nameOf(m)} spec`);

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return yamlFiles(path);
    return /\.ya?ml$/.test(entry.name) ? [path] : [];
  });
}

/** Every document of a file as plain data, checking that the file parses cleanly. */
function documents(text: string, file: string, version: '1.1' | '1.2'): unknown[] {
  return parseAllDocuments(text, { version }).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value: unknown = doc.toJS();
    return value;
  });
}

const files = yamlFiles(ROOT).map((path) => ({ file: relative(ROOT, path), text: readFileSync(path, 'utf8') }));
/** Values files for other projects' Helm charts, next to the examples that need them: YAML, not Kubernetes objects. */
const HELM_VALUES = 'examples/helm-values/';
const manifests: Manifest[] = files
  .filter(({ file }) => !file.startsWith(HELM_VALUES))
  .flatMap(({ file, text }) =>
  documents(text, file, '1.2')
    .filter((value) => value !== null)
    .map((value) => ({ file, value: obj(value, `a document of ${file}`) })),
);
const ofKind = (kind: string, dir?: string): Manifest[] => manifests.filter((m) => m.value.kind === kind && (dir === undefined || m.file.startsWith(`${dir}/`)));
const examples = manifests.filter((m) => m.file.startsWith('examples/'));

// ---------------------------------------------------------------------------------------------
// CRDs

interface Column {
  name: string;
  type: string;
  jsonPath: string;
  /** 1 and above: shown only with -o wide. */
  priority?: number;
}

const CRDS = {
  ModelPool: {
    file: 'crds/modelgate.io_modelpools.yaml',
    names: { kind: 'ModelPool', listKind: 'ModelPoolList', plural: 'modelpools', singular: 'modelpool', shortNames: ['mpool'], categories: ['modelgate'] },
    columns: [
      { name: 'Service', type: 'string', jsonPath: '.spec.service.name' },
      { name: 'Model', type: 'string', jsonPath: '.spec.servedModelName' },
      { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
      { name: 'Replicas', type: 'integer', jsonPath: '.status.replicas' },
      { name: 'Waiting', type: 'integer', jsonPath: '.status.requestsWaiting' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ['capabilities', 'engine', 'resilience', 'routing', 'servedModelName', 'service'],
    status: ['conditions', 'observedGeneration', 'readyReplicas', 'replicas', 'requestsHeld', 'requestsWaiting'],
  },
  ModelDeployment: {
    file: 'crds/modelgate.io_modeldeployments.yaml',
    names: { kind: 'ModelDeployment', listKind: 'ModelDeploymentList', plural: 'modeldeployments', singular: 'modeldeployment', shortNames: ['mdeploy'], categories: ['modelgate'] },
    columns: [
      { name: 'Model', type: 'string', jsonPath: '.spec.model' },
      { name: 'Aliases', type: 'string', jsonPath: '.spec.aliases' },
      // Not .spec.targets[*].pool: the API server prints only the first result of a column's JSONPath.
      { name: 'Targets', type: 'string', jsonPath: '.spec.targets' },
      // A list, so the whole of it for the same reason; wide output only, to keep the default narrow.
      { name: 'Fallbacks', type: 'string', jsonPath: '.spec.fallbacks', priority: 1 },
      { name: 'Accepted', type: 'string', jsonPath: '.status.conditions[?(@.type=="Accepted")].status' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: ['adapter', 'aliases', 'fallbacks', 'model', 'resumeStreams', 'slo', 'targets'],
    status: ['conditions', 'observedGeneration'],
  },
} as const;
type CrdKind = keyof typeof CRDS;
const CRD_KINDS = Object.keys(CRDS) as CrdKind[];

function crd(kind: CrdKind): Manifest {
  const found = ofKind('CustomResourceDefinition').filter((m) => obj(specOf(m).names, 'names').kind === kind);
  expect(found).toHaveLength(1);
  return found[0] as Manifest;
}
function crdVersion(kind: CrdKind): Obj {
  return obj(list(specOf(crd(kind)).versions, 'versions')[0], 'versions[0]');
}
function crdSchema(kind: CrdKind): Obj {
  return obj(obj(crdVersion(kind).schema, 'schema').openAPIV3Schema, 'openAPIV3Schema');
}

/** Child schemas with their paths: properties and items (the only nesting these CRDs use). */
function children(schema: Obj, path: string): Array<[Obj, string]> {
  const out: Array<[Obj, string]> = [];
  if (schema.properties !== undefined) {
    for (const [key, child] of Object.entries(obj(schema.properties, `${path}.properties`))) out.push([obj(child, `${path}.${key}`), `${path}.${key}`]);
  }
  if (schema.items !== undefined) out.push([obj(schema.items, `${path}[]`), `${path}[]`]);
  return out;
}

/**
 * Where a schema breaks the rules of a structural schema (as the API server checks them) or the
 * stricter house rules: a type on every node, except an int-or-string node, which has none; no
 * anyOf/allOf/oneOf/not (not needed here); no uniqueItems (forbidden) and no
 * x-kubernetes-preserve-unknown-fields (we rely on pruning); no additionalProperties next to
 * properties; list-type set only on scalar items and list-type map only on objects whose keys are
 * required or defaulted; a description on every node but the root's metadata.
 */
function structuralProblems(schema: Obj, path: string, isRootMetadata = false): string[] {
  const problems: string[] = [];
  const intOrString = schema['x-kubernetes-int-or-string'] === true;
  if (intOrString && schema.type !== undefined) problems.push(`${path}: int-or-string with a type`);
  if (!intOrString && typeof schema.type !== 'string') problems.push(`${path}: no type`);
  if ((schema.properties !== undefined || schema.items !== undefined) && schema.type === undefined) problems.push(`${path}: properties or items without a type`);
  if (schema.type === 'array' && schema.items === undefined) problems.push(`${path}: array without items`);
  if (schema.properties !== undefined && schema.type !== 'object') problems.push(`${path}: properties on a non-object`);
  for (const key of ['anyOf', 'allOf', 'oneOf', 'not', 'uniqueItems', 'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-embedded-resource', '$ref']) {
    if (key in schema) problems.push(`${path}: uses ${key}`);
  }
  if (schema.properties !== undefined && schema.additionalProperties !== undefined) problems.push(`${path}: additionalProperties next to properties`);
  if (isRootMetadata) {
    if (JSON.stringify(schema) !== JSON.stringify({ type: 'object' })) problems.push(`${path}: the root metadata may only be {type: object}`);
  } else if (typeof schema.description !== 'string' || schema.description.trim() === '') {
    problems.push(`${path}: no description`);
  }
  const listType = schema['x-kubernetes-list-type'];
  if (listType !== undefined) {
    const items = isObj(schema.items) ? schema.items : {};
    if (schema.type !== 'array') problems.push(`${path}: x-kubernetes-list-type on a non-array`);
    if (listType === 'set' && !['string', 'integer', 'number', 'boolean'].includes(String(items.type))) problems.push(`${path}: list-type set needs scalar items`);
    if (listType === 'map') {
      const keys = schema['x-kubernetes-list-map-keys'];
      const required = Array.isArray(items.required) ? (items.required as unknown[]) : [];
      const props = isObj(items.properties) ? items.properties : {};
      if (items.type !== 'object' || !Array.isArray(keys) || keys.length === 0) problems.push(`${path}: list-type map needs object items and map keys`);
      for (const key of Array.isArray(keys) ? (keys as unknown[]) : []) {
        const prop = props[String(key)];
        if (!isObj(prop) || (!required.includes(key) && prop.default === undefined)) problems.push(`${path}: map key ${String(key)} must be a required or defaulted property`);
      }
    }
  }
  if (Array.isArray(schema.required)) {
    const props = isObj(schema.properties) ? schema.properties : {};
    for (const key of schema.required as unknown[]) if (!(String(key) in props)) problems.push(`${path}: requires unknown property ${String(key)}`);
  }
  for (const [child, childPath] of children(schema, path)) {
    problems.push(...structuralProblems(child, childPath, path === '' && childPath === '.metadata'));
  }
  return problems;
}

/** Every node of a schema that has a `default`, with its path. */
function defaulted(schema: Obj, path: string): Array<[Obj, string]> {
  const here: Array<[Obj, string]> = schema.default !== undefined ? [[schema, path]] : [];
  return [...here, ...children(schema, path).flatMap(([child, childPath]) => defaulted(child, childPath))];
}

const ajv = newAjv();
const validators = new Map<CrdKind, ValidateFunction>(CRD_KINDS.map((kind) => [kind, ajv.compile(crdToJsonSchema(crdSchema(kind)))]));
function validate(kind: CrdKind, value: unknown): string[] {
  const check = validators.get(kind) as ValidateFunction;
  return check(value) ? [] : (check.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''}`);
}

describe('manifests: files', () => {
  it('has the expected files, each of them clean YAML that reads the same as YAML 1.1 (as kubectl reads it)', () => {
    expect(files.map((f) => f.file).sort()).toEqual(
      expect.arrayContaining([
        'crds/kustomization.yaml',
        'crds/modelgate.io_modeldeployments.yaml',
        'crds/modelgate.io_modelpools.yaml',
        'examples/autoscaling-hpa.yaml',
        'examples/autoscaling-keda.yaml',
        'examples/canary.yaml',
        'examples/helm-values/prometheus-adapter.yaml',
        'examples/tei-embeddings.yaml',
        'examples/vllm-llama.yaml',
        'rbac/cluster-role-binding.yaml',
        'rbac/cluster-role.yaml',
        'rbac/kustomization.yaml',
        'rbac/role-leases.yaml',
        'rbac/role-namespaced.yaml',
        'rbac/service-account.yaml',
      ]),
    );
    for (const { file, text } of files) {
      // Plain scalars such as yes/no/on/off or 0755 mean different things in YAML 1.1 and 1.2.
      expect({ file, docs: documents(text, file, '1.1') }).toEqual({ file, docs: documents(text, file, '1.2') });
    }
  });

  it('gives every object an apiVersion, a kind and a name', () => {
    for (const m of manifests) {
      expect(typeof m.value.apiVersion).toBe('string');
      expect(typeof m.value.kind).toBe('string');
      if (m.value.kind !== 'Kustomization') expect(nameOf(m)).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    }
  });

  it('lists the CRDs and the cluster-wide RBAC set in the kustomizations, and the listed files exist', () => {
    const resources = (dir: string): string[] => {
      const found = ofKind('Kustomization', dir);
      expect(found).toHaveLength(1);
      const listed = strings((found[0] as Manifest).value.resources, `${dir}/kustomization.yaml resources`);
      for (const file of listed) expect(existsSync(join(ROOT, dir, file))).toBe(true);
      return listed;
    };
    expect(resources('crds').sort()).toEqual(['modelgate.io_modeldeployments.yaml', 'modelgate.io_modelpools.yaml']);
    expect(resources('rbac').sort()).toEqual(['cluster-role-binding.yaml', 'cluster-role.yaml', 'role-leases.yaml', 'service-account.yaml']);
  });
});

describe.each(CRD_KINDS)('manifests: the %s CRD', (kind) => {
  const expected = CRDS[kind];

  it('has the group, names, scope and one served and stored version with the status subresource', () => {
    const m = crd(kind);
    expect(m.file).toBe(expected.file);
    expect(m.value.apiVersion).toBe('apiextensions.k8s.io/v1');
    expect(nameOf(m)).toBe(`${expected.names.plural}.${GROUP}`);
    const spec = specOf(m);
    expect(spec.group).toBe(GROUP);
    expect(spec.scope).toBe('Namespaced');
    expect(spec.names).toEqual(expected.names);
    expect(list(spec.versions, 'versions')).toHaveLength(1);
    const version = crdVersion(kind);
    expect({ name: version.name, served: version.served, storage: version.storage }).toEqual({ name: VERSION, served: true, storage: true });
    expect(version.subresources).toEqual({ status: {} });
  });

  it('has the printer columns', () => {
    const columns = list(crdVersion(kind).additionalPrinterColumns, 'additionalPrinterColumns').map((c): Column => {
      const col = obj(c, 'column');
      return { name: str(col.name, 'name'), type: str(col.type, 'type'), jsonPath: str(col.jsonPath, 'jsonPath'), ...(col.priority === undefined ? {} : { priority: Number(col.priority) }) };
    });
    expect(columns).toEqual(expected.columns);
  });

  it('has a structural schema with a description on every field', () => {
    const schema = crdSchema(kind);
    expect(structuralProblems(schema, '')).toEqual([]);
    expect(schema.type).toBe('object');
    const properties = obj(schema.properties, 'properties');
    expect(Object.keys(properties).sort()).toEqual(['apiVersion', 'kind', 'metadata', 'spec', 'status']);
    expect(Object.keys(obj(obj(properties.spec, 'spec').properties, 'spec.properties')).sort()).toEqual([...expected.spec]);
    expect(Object.keys(obj(obj(properties.status, 'status').properties, 'status.properties')).sort()).toEqual([...expected.status]);
  });

  it('has defaults that are valid against their own schema', () => {
    const nodes = defaulted(crdSchema(kind), '');
    expect(nodes.length).toBeGreaterThan(0);
    for (const [node, path] of nodes) {
      const check = newAjv().compile(crdToJsonSchema(node));
      expect({ path, valid: check(node.default), errors: check.errors ?? null }).toEqual({ path, valid: true, errors: null });
    }
  });

  it('uses the standard metav1.Condition schema for status.conditions, as a map keyed by type', () => {
    const status = obj(obj(crdSchema(kind).properties, 'properties').status, 'status');
    const conditions = obj(obj(status.properties, 'status.properties').conditions, 'conditions');
    expect(conditions['x-kubernetes-list-type']).toBe('map');
    expect(conditions['x-kubernetes-list-map-keys']).toEqual(['type']);
    const items = obj(conditions.items, 'conditions.items');
    expect(strings(items.required, 'required').sort()).toEqual(['lastTransitionTime', 'message', 'reason', 'status', 'type']);
    const props = obj(items.properties, 'conditions.items.properties');
    expect(obj(props.status, 'status').enum).toEqual(['True', 'False', 'Unknown']);
    expect(obj(props.reason, 'reason').pattern).toBe('^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$');
    expect(obj(props.observedGeneration, 'observedGeneration')).toMatchObject({ type: 'integer', format: 'int64' });
    expect(obj(props.lastTransitionTime, 'lastTransitionTime')).toMatchObject({ type: 'string', format: 'date-time' });
  });
});

describe('manifests: the CRD schemas accept the examples and reject broken objects', () => {
  const customObjects = (kind: CrdKind): Manifest[] => ofKind(kind, 'examples');
  const example = (kind: CrdKind, name: string): Obj => {
    const found = customObjects(kind).find((m) => nameOf(m) === name);
    if (!found) throw new Error(`no example ${kind} ${name}`);
    return structuredClone(found.value);
  };

  it.each(CRD_KINDS)('every example %s is valid', (kind) => {
    expect(customObjects(kind).length).toBeGreaterThan(0);
    for (const m of customObjects(kind)) {
      expect(m.value.apiVersion).toBe(`${GROUP}/${VERSION}`);
      expect({ file: m.file, name: nameOf(m), errors: validate(kind, m.value) }).toEqual({ file: m.file, name: nameOf(m), errors: [] });
    }
  });

  it('accepts a status as modelgate writes it', () => {
    const condition = { type: 'Ready', status: 'True', reason: 'EndpointsReady', message: '2 of 2 endpoints are routable.', observedGeneration: 1, lastTransitionTime: '2025-01-01T00:00:00Z' };
    const pool = { ...example('ModelPool', 'llama-8b'), status: { replicas: 2, readyReplicas: 2, observedGeneration: 1, conditions: [condition] } };
    expect(validate('ModelPool', pool)).toEqual([]);
    const conflicted = { ...condition, type: 'Conflicted', reason: 'NameConflict', message: '"default" is held by ModelDeployment models/other.' };
    const dep = {
      ...example('ModelDeployment', 'llama-8b-prod'),
      status: { observedGeneration: 3, conditions: [{ ...condition, type: 'Accepted', reason: 'PoolNotFound', status: 'False' }, conflicted] },
    };
    expect(validate('ModelDeployment', dep)).toEqual([]);
  });

  interface PoolObject {
    spec: { service: { name: string; port?: unknown }; engine?: unknown; servedModelName?: unknown; capabilities?: unknown; servedModel?: unknown; routing?: Obj; resilience?: Obj };
    status?: unknown;
  }
  interface DeploymentObject {
    spec: { model?: unknown; aliases?: unknown; targets: Array<{ pool?: unknown; weight?: unknown }>; fallbacks?: unknown };
  }
  const pool = (): PoolObject => example('ModelPool', 'llama-8b') as unknown as PoolObject;
  const deployment = (): DeploymentObject => example('ModelDeployment', 'llama-8b-prod') as unknown as DeploymentObject;

  const poolCases: Array<[string, (p: PoolObject) => void, string]> = [
    ['no servedModelName', (p) => delete p.spec.servedModelName, "must have required property 'servedModelName'"],
    ['an empty servedModelName', (p) => (p.spec.servedModelName = ''), 'must NOT have fewer than 1 characters'],
    ['engine triton', (p) => (p.spec.engine = 'triton'), 'must be equal to one of the allowed values'],
    ['capabilities []', (p) => (p.spec.capabilities = []), 'must NOT have fewer than 1 items'],
    ['capability video', (p) => (p.spec.capabilities = ['video']), 'must be equal to one of the allowed values'],
    ['port 70000', (p) => (p.spec.service.port = 70000), 'must be <= 65535'],
    ['port 0', (p) => (p.spec.service.port = 0), 'must be >= 1'],
    ['port "8000" (a quoted number is not a port name)', (p) => (p.spec.service.port = '8000'), 'must match pattern'],
    ['port 80.5', (p) => (p.spec.service.port = 80.5), 'must be integer'],
    ['service name with capitals', (p) => (p.spec.service.name = 'Llama'), 'must match pattern'],
    ['a misspelt field (servedModel)', (p) => (p.spec.servedModel = 'x'), 'must NOT have additional properties'],
    ['a negative readyReplicas', (p) => (p.status = { readyReplicas: -1 }), 'must be >= 0'],
    [
      'a condition without reason',
      (p) => (p.status = { conditions: [{ type: 'Ready', status: 'True', message: '', lastTransitionTime: '2025-01-01T00:00:00Z' }] }),
      "must have required property 'reason'",
    ],
    [
      'a condition status yes',
      (p) => (p.status = { conditions: [{ type: 'Ready', status: 'yes', reason: 'R', message: '', lastTransitionTime: '2025-01-01T00:00:00Z' }] }),
      'must be equal to one of the allowed values',
    ],
    ['an unknown scorer', (p) => (p.spec.routing = { scorers: [{ name: 'random' }] }), 'must be equal to one of the allowed values'],
    ['an empty scorer list', (p) => (p.spec.routing = { scorers: [] }), 'must NOT have fewer than 1 items'],
    ['a scorer without name', (p) => (p.spec.routing = { scorers: [{ weight: 2 }] }), "must have required property 'name'"],
    ['a scorer weight of 1001', (p) => (p.spec.routing = { scorers: [{ name: 'queue', weight: 1001 }] }), 'must be <= 1000'],
    ['a negative scorer weight', (p) => (p.spec.routing = { scorers: [{ name: 'queue', weight: -1 }] }), 'must be >= 0'],
    ['a misspelt routing group (sesion)', (p) => (p.spec.routing = { sesion: { header: 'x-s' } }), 'must NOT have additional properties'],
    ['a metrics path without a slash', (p) => (p.spec.routing = { engineMetrics: { path: 'metrics' } }), 'must match pattern'],
    ['a scrape interval as a string', (p) => (p.spec.routing = { engineMetrics: { intervalMs: '1s' } }), 'must be integer'],
    ['a scrape timeout under 10 ms', (p) => (p.spec.routing = { engineMetrics: { timeoutMs: 5 } }), 'must be >= 10'],
    ['blocks of 4 characters', (p) => (p.spec.routing = { prefix: { blockChars: 4 } }), 'must be >= 8'],
    ['a session header with a space', (p) => (p.spec.routing = { session: { header: 'x session' } }), 'must match pattern'],
    ['a session load factor under 1', (p) => (p.spec.routing = { session: { loadFactor: 0.5 } }), 'must be >= 1'],
    ['a KV-cache saturation above 1', (p) => (p.spec.routing = { saturation: { kvCacheUsage: 1.5 } }), 'must be <= 1'],
    ['a queue depth of 0', (p) => (p.spec.routing = { saturation: { queueDepth: 0 } }), 'must be >= 1'],
    ['a scale-from-zero wait under a second', (p) => (p.spec.resilience = { scaleFromZero: { enabled: true, maxWaitMs: 999 } }), 'must be >= 1000'],
    ['a scale-from-zero wait over an hour', (p) => (p.spec.resilience = { scaleFromZero: { enabled: true, maxWaitMs: 3600001 } }), 'must be <= 3600000'],
    ['a scale-from-zero wait of 1.5 s', (p) => (p.spec.resilience = { scaleFromZero: { maxWaitMs: 1500.5 } }), 'must be integer'],
    ['scale from zero enabled as a string', (p) => (p.spec.resilience = { scaleFromZero: { enabled: 'true' } }), 'must be boolean'],
    ['a misspelt scale-from-zero field (maxWait)', (p) => (p.spec.resilience = { scaleFromZero: { maxWait: 60000 } }), 'must NOT have additional properties'],
  ];
  it.each(poolCases)('rejects a ModelPool with %s', (_name, mutate, message) => {
    const p = pool();
    mutate(p);
    expect(validate('ModelPool', p).join('\n')).toContain(message);
  });

  const poolOk: Array<[string, (p: PoolObject) => void]> = [
    ['port by number', (p) => (p.spec.service.port = 8000)],
    ['no port', (p) => delete p.spec.service.port],
    [
      'no engine and no capabilities (defaults)',
      (p) => {
        delete p.spec.engine;
        delete p.spec.capabilities;
      },
    ],
    ['both capabilities', (p) => (p.spec.capabilities = ['chat', 'embeddings'])],
    ['scorers without weights', (p) => (p.spec.routing = { scorers: [{ name: 'prefix' }, { name: 'outstanding' }] })],
    ['scale from zero with only enabled (maxWaitMs defaults)', (p) => (p.spec.resilience = { scaleFromZero: { enabled: true } })],
    ['scale from zero waiting an hour at most', (p) => (p.spec.resilience = { scaleFromZero: { enabled: true, maxWaitMs: 3600000 } })],
    [
      'every routing field',
      (p) =>
        (p.spec.routing = {
          scorers: [{ name: 'outstanding', weight: 0 }, { name: 'queue', weight: 1.5 }, { name: 'kv-cache', weight: 1000 }, { name: 'prefix' }, { name: 'session', weight: 10 }],
          engineMetrics: { enabled: false, path: '/metrics', intervalMs: 100, timeoutMs: 10, staleAfterMs: 100 },
          prefix: { blockChars: 4096, maxBlocks: 1, capacityPerEndpoint: 10_000_000, maxLoadGap: 0.5 },
          session: { header: 'X-Conversation-Id', loadFactor: 1 },
          saturation: { queueDepth: 1, kvCacheUsage: 1 },
        }),
    ],
  ];
  it.each(poolOk)('accepts a ModelPool with %s', (_name, mutate) => {
    const p = pool();
    mutate(p);
    expect(validate('ModelPool', p)).toEqual([]);
  });

  const deploymentCases: Array<[string, (d: DeploymentObject) => void, string]> = [
    ['targets []', (d) => (d.spec.targets = []), 'must NOT have fewer than 1 items'],
    ['17 targets', (d) => (d.spec.targets = Array.from({ length: 17 }, (_, i) => ({ pool: `p${i}` }))), 'must NOT have more than 16 items'],
    ['weight 5000', (d) => (d.spec.targets = [{ pool: 'llama-8b', weight: 5000 }]), 'must be <= 1000'],
    ['weight -1', (d) => (d.spec.targets = [{ pool: 'llama-8b', weight: -1 }]), 'must be >= 0'],
    ['a target without pool', (d) => (d.spec.targets = [{ weight: 1 }]), "must have required property 'pool'"],
    ['no model', (d) => delete d.spec.model, "must have required property 'model'"],
    ['a model with a space', (d) => (d.spec.model = 'llama 8b'), 'must match pattern'],
    ['an empty alias', (d) => (d.spec.aliases = ['']), 'must NOT have fewer than 1 characters'],
    ['a pool name with capitals', (d) => (d.spec.targets = [{ pool: 'Llama' }]), 'must match pattern'],
    ['fallbacks that are not a list', (d) => (d.spec.fallbacks = 'llama-8b-next'), 'must be array'],
    ['an empty fallback', (d) => (d.spec.fallbacks = ['']), 'must NOT have fewer than 1 characters'],
    ['a fallback with capitals', (d) => (d.spec.fallbacks = ['Llama']), 'must match pattern'],
    ['a fallback that is not a name', (d) => (d.spec.fallbacks = [{ name: 'llama-8b-next' }]), 'must be string'],
    ['17 fallbacks', (d) => (d.spec.fallbacks = Array.from({ length: 17 }, (_, i) => `d${i}`)), 'must NOT have more than 16 items'],
  ];
  it.each(deploymentCases)('rejects a ModelDeployment with %s', (_name, mutate, message) => {
    const d = deployment();
    mutate(d);
    expect(validate('ModelDeployment', d).join('\n')).toContain(message);
  });

  it('accepts a ModelDeployment with weight 0, no weight, no aliases and a 16-pool split', () => {
    for (const targets of [[{ pool: 'a', weight: 0 }, { pool: 'b' }], Array.from({ length: 16 }, (_, i) => ({ pool: `p${i}`, weight: 1000 }))]) {
      const d = deployment();
      delete d.spec.aliases;
      d.spec.targets = targets;
      expect(validate('ModelDeployment', d)).toEqual([]);
    }
  });

  it('accepts a ModelDeployment with fallbacks (a name listed twice, which the router counts once), and without any', () => {
    const d = deployment();
    d.spec.fallbacks = ['llama-8b-spot', 'llama-70b.prod', 'llama-8b-spot'];
    expect(validate('ModelDeployment', d)).toEqual([]);
    delete d.spec.fallbacks;
    expect(validate('ModelDeployment', d)).toEqual([]);
  });

  // What plain OpenAPI cannot say, CEL rules say to the API server (the ajv check here skips them).
  it('refuses, with CEL rules, a KV-cache saturation of 0 and a ModelDeployment that is its own fallback', () => {
    const pool = obj(obj(obj(crdSchema('ModelPool').properties, 'properties').spec, 'spec').properties, 'spec.properties');
    const saturation = obj(obj(obj(pool.routing, 'routing').properties, 'routing.properties').saturation, 'saturation');
    expect(obj(obj(saturation.properties, 'saturation.properties').kvCacheUsage, 'kvCacheUsage')['x-kubernetes-validations']).toEqual([
      { rule: 'self > 0.0', message: expect.stringContaining('must be above 0') },
    ]);
    expect(crdSchema('ModelDeployment')['x-kubernetes-validations']).toEqual([
      { rule: '!has(self.spec.fallbacks) || !(self.metadata.name in self.spec.fallbacks)', message: 'spec.fallbacks must not name the ModelDeployment itself' },
    ]);
  });

  it('keys the scorer list by name (the API server refuses a scorer listed twice) and keeps fallbacks as one ordered list', () => {
    const pool = obj(obj(obj(crdSchema('ModelPool').properties, 'properties').spec, 'spec').properties, 'spec.properties');
    const scorers = obj(obj(obj(pool.routing, 'routing').properties, 'routing.properties').scorers, 'scorers');
    expect([scorers['x-kubernetes-list-type'], scorers['x-kubernetes-list-map-keys']]).toEqual(['map', ['name']]);
    const dep = obj(obj(obj(crdSchema('ModelDeployment').properties, 'properties').spec, 'spec').properties, 'spec.properties');
    expect(obj(dep.fallbacks, 'fallbacks')['x-kubernetes-list-type']).toBe('atomic');
  });

  it('rejects an object without spec', () => {
    expect(validate('ModelPool', { apiVersion: `${GROUP}/${VERSION}`, kind: 'ModelPool', metadata: { name: 'x' } }).join('\n')).toContain("must have required property 'spec'");
  });
});

// ---------------------------------------------------------------------------------------------
// RBAC

const triple = (group: string, resource: string, verb: string): string => `${group}|${resource}|${verb}`;
const expand = (groups: string[], resources: string[], verbs: string[]): string[] => groups.flatMap((g) => resources.flatMap((r) => verbs.map((v) => triple(g, r, v))));
const WATCH = [
  ...expand(['discovery.k8s.io'], ['endpointslices'], ['list', 'watch']),
  ...expand([GROUP], ['modelpools', 'modeldeployments'], ['list', 'watch']),
  ...expand([GROUP], ['modelpools/status', 'modeldeployments/status'], ['patch']),
].sort();
const LEASES = expand(['coordination.k8s.io'], ['leases'], ['get', 'create', 'update']).sort();
const SUBJECT = { kind: 'ServiceAccount', name: 'modelgate', namespace: 'modelgate' };

function rules(m: Manifest): Obj[] {
  return list(m.value.rules, `${m.file} rules`).map((r, i) => obj(r, `${m.file} rules[${i}]`));
}
function triplesOf(m: Manifest): string[] {
  const out = rules(m).flatMap((r) => expand(strings(r.apiGroups, 'apiGroups'), strings(r.resources, 'resources'), strings(r.verbs, 'verbs')));
  expect(new Set(out).size).toBe(out.length);
  return out.sort();
}

describe('manifests: RBAC is least privilege', () => {
  const clusterRoles = ofKind('ClusterRole');
  const roles = ofKind('Role');

  it('has one ServiceAccount modelgate in namespace modelgate', () => {
    const accounts = ofKind('ServiceAccount');
    expect(accounts.map((m) => [m.file, nameOf(m), namespaceOf(m)])).toEqual([['rbac/service-account.yaml', 'modelgate', 'modelgate']]);
  });

  it('gives the ClusterRole exactly: read EndpointSlices, ModelPools and ModelDeployments; write their status', () => {
    expect(clusterRoles.map((m) => [m.file, nameOf(m)])).toEqual([['rbac/cluster-role.yaml', 'modelgate']]);
    expect(triplesOf(clusterRoles[0] as Manifest)).toEqual(WATCH);
  });

  it('gives the leader-election Role exactly get, create and update on Leases in namespace modelgate', () => {
    const leases = roles.filter((m) => nameOf(m) === 'modelgate-leader-election');
    expect(leases.map((m) => [m.file, namespaceOf(m)])).toEqual([['rbac/role-leases.yaml', 'modelgate']]);
    expect(triplesOf(leases[0] as Manifest)).toEqual(LEASES);
  });

  it('gives the namespaced alternative Role the same rules as the ClusterRole', () => {
    const namespaced = roles.filter((m) => m.file === 'rbac/role-namespaced.yaml');
    expect(namespaced).toHaveLength(1);
    expect(triplesOf(namespaced[0] as Manifest)).toEqual(WATCH);
    expect(readFileSync(join(ROOT, 'rbac/role-namespaced.yaml'), 'utf8')).toMatch(/one copy .* per watched namespace/i);
  });

  it('grants nothing else anywhere: all rules together are exactly the expected set', () => {
    const all = new Set([...clusterRoles, ...roles].flatMap(triplesOf));
    expect([...all].sort()).toEqual([...WATCH, ...LEASES].sort());
  });

  it('has no wildcard, no resourceNames or nonResourceURLs, and no secrets, pods or services', () => {
    for (const m of [...clusterRoles, ...roles]) {
      expect(m.value.aggregationRule).toBeUndefined();
      for (const r of rules(m)) {
        expect(Object.keys(r).sort()).toEqual(['apiGroups', 'resources', 'verbs']);
        for (const value of [...strings(r.apiGroups, 'apiGroups'), ...strings(r.resources, 'resources'), ...strings(r.verbs, 'verbs')]) expect(value).not.toContain('*');
        for (const resource of strings(r.resources, 'resources')) {
          expect(['secrets', 'pods', 'services', 'endpoints', 'configmaps']).not.toContain(resource.split('/')[0]);
        }
      }
    }
  });

  it('binds each role to the modelgate ServiceAccount and nothing else', () => {
    const bindings = [...ofKind('ClusterRoleBinding'), ...ofKind('RoleBinding')];
    expect(bindings.map((m) => nameOf(m)).sort()).toEqual(['modelgate', 'modelgate', 'modelgate-leader-election']);
    for (const b of bindings) {
      expect(b.value.subjects).toEqual([SUBJECT]);
      const ref = obj(b.value.roleRef, 'roleRef');
      expect(ref.apiGroup).toBe('rbac.authorization.k8s.io');
      const target =
        b.value.kind === 'ClusterRoleBinding'
          ? clusterRoles.find((r) => nameOf(r) === ref.name && ref.kind === 'ClusterRole')
          : roles.find((r) => nameOf(r) === ref.name && ref.kind === 'Role' && namespaceOf(r) === namespaceOf(b) && r.file === b.file);
      expect({ binding: `${b.file} ${nameOf(b)}`, found: target !== undefined }).toEqual({ binding: `${b.file} ${nameOf(b)}`, found: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Examples

describe('manifests: examples', () => {
  const inNamespace = (kind: string, namespace: unknown): Manifest[] => examples.filter((m) => m.value.kind === kind && namespaceOf(m) === namespace);
  const labelsMatch = (selector: Obj, labels: Obj): boolean => Object.entries(selector).every(([k, v]) => labels[k] === v);
  const podLabels = (d: Manifest): Obj => obj(obj(obj(specOf(d).template, 'template').metadata, 'template.metadata').labels, 'template labels');
  const containers = (d: Manifest): Obj[] => list(obj(obj(specOf(d).template, 'template').spec, 'pod spec').containers, 'containers').map((c) => obj(c, 'container'));
  const containerPorts = (d: Manifest): Obj[] => containers(d).flatMap((c) => list(c.ports ?? [], 'ports').map((p) => obj(p, 'port')));

  it('gives every example object a namespace', () => {
    expect(examples.length).toBeGreaterThan(0);
    for (const m of examples)
      expect({ file: m.file, name: nameOf(m), namespace: namespaceOf(m) }).toEqual({ file: m.file, name: nameOf(m), namespace: expect.stringMatching(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/) });
  });

  it('has the ModelPools and ModelDeployments the README names', () => {
    const names = (kind: string): string[] => [...new Set(examples.filter((m) => m.value.kind === kind).map(nameOf))].sort();
    expect(names('ModelPool')).toEqual(['bge-small', 'llama-8b', 'llama-8b-canary']);
    expect(names('ModelDeployment')).toEqual(['bge-small', 'llama-8b-next', 'llama-8b-prod']);
    const prod = examples.filter((m) => m.value.kind === 'ModelDeployment' && nameOf(m) === 'llama-8b-prod');
    expect(prod.map((m) => [m.file, specOf(m).targets])).toEqual([
      [
        'examples/canary.yaml',
        [
          { pool: 'llama-8b', weight: 90 },
          { pool: 'llama-8b-canary', weight: 10 },
        ],
      ],
      ['examples/vllm-llama.yaml', [{ pool: 'llama-8b', weight: 100 }]],
    ]);
  });

  it('points every ModelDeployment target at a ModelPool in the same namespace', () => {
    for (const d of ofKind('ModelDeployment', 'examples')) {
      for (const t of list(specOf(d).targets, 'targets')) {
        const poolName = obj(t, 'target').pool;
        const found = inNamespace('ModelPool', namespaceOf(d)).some((p) => nameOf(p) === poolName);
        expect({ deployment: nameOf(d), pool: poolName, found }).toEqual({ deployment: nameOf(d), pool: poolName, found: true });
      }
    }
  });

  it('points every ModelDeployment fallback at another ModelDeployment in the same namespace, and has one', () => {
    const withFallbacks = ofKind('ModelDeployment', 'examples').filter((d) => specOf(d).fallbacks !== undefined);
    expect(withFallbacks.map((d) => [d.file, nameOf(d), specOf(d).fallbacks])).toEqual([['examples/canary.yaml', 'llama-8b-next', ['llama-8b-prod']]]);
    for (const d of withFallbacks) {
      for (const fallback of strings(specOf(d).fallbacks, 'fallbacks')) {
        const found = inNamespace('ModelDeployment', namespaceOf(d)).some((other) => nameOf(other) === fallback);
        expect({ deployment: nameOf(d), fallback, found, itself: fallback === nameOf(d) }).toEqual({ deployment: nameOf(d), fallback, found: true, itself: false });
      }
    }
  });

  it('gives a ModelPool a routing profile: prefix and outstanding scorers, and session affinity on its own header', () => {
    const withRouting = ofKind('ModelPool', 'examples').filter((p) => specOf(p).routing !== undefined);
    const profile = {
      scorers: [
        { name: 'prefix', weight: 3 },
        { name: 'outstanding', weight: 2 },
        { name: 'session', weight: 10 },
      ],
      session: { header: 'x-conversation-id' },
    };
    // autoscaling-keda.yaml re-declares llama-8b with the same spec (checked below).
    expect(withRouting.map((p) => [p.file, nameOf(p), specOf(p).routing])).toEqual([
      ['examples/autoscaling-keda.yaml', 'llama-8b', profile],
      ['examples/vllm-llama.yaml', 'llama-8b', profile],
    ]);
  });

  it("points every ModelPool at a Service of its namespace that selects a Deployment's pods, on a port that exists", () => {
    for (const p of ofKind('ModelPool', 'examples')) {
      const service = obj(specOf(p).service, 'service');
      const svc = inNamespace('Service', namespaceOf(p)).find((s) => nameOf(s) === service.name);
      if (!svc) throw new Error(`ModelPool ${nameOf(p)}: no Service ${String(service.name)} in namespace ${String(namespaceOf(p))}`);
      const selector = obj(specOf(svc).selector, 'selector');
      const backends = inNamespace('Deployment', namespaceOf(p)).filter((d) => labelsMatch(selector, podLabels(d)));
      expect(backends).toHaveLength(1);
      const backend = backends[0] as Manifest;
      const servicePorts = list(specOf(svc).ports, 'ports').map((x) => obj(x, 'service port'));
      // The numbers an EndpointSlice lists: each Service port's target port, resolved on the pods.
      const endpointPorts = servicePorts.map((sp) => {
        const target = sp.targetPort ?? sp.port;
        const resolved = typeof target === 'number' ? target : containerPorts(backend).find((cp) => cp.name === target)?.containerPort;
        expect({ pool: nameOf(p), port: target, resolved: typeof resolved }).toEqual({ pool: nameOf(p), port: target, resolved: 'number' });
        return { name: sp.name, number: resolved };
      });
      const port = service.port;
      if (port === undefined) expect(endpointPorts).toHaveLength(1);
      else if (typeof port === 'string') expect(endpointPorts.map((e) => e.name)).toContain(port);
      else expect(endpointPorts.map((e) => e.number)).toContain(port);
    }
  });

  it("has Deployments whose selector matches their pods' labels and that probe readiness on a declared port", () => {
    const deployments = ofKind('Deployment', 'examples');
    expect(deployments.length).toBeGreaterThan(0);
    for (const d of deployments) {
      expect(labelsMatch(obj(obj(specOf(d).selector, 'selector').matchLabels, 'matchLabels'), podLabels(d))).toBe(true);
      for (const c of containers(d)) {
        const probe = obj(obj(c.readinessProbe, 'readinessProbe').httpGet, 'httpGet');
        expect(probe.path).toBe('/health');
        expect(containerPorts(d).map((cp) => cp.name)).toContain(probe.port);
      }
    }
  });

  it('runs vLLM with a GPU and TEI on CPU, as the README says', () => {
    const llama = examples.find((m) => m.value.kind === 'Deployment' && nameOf(m) === 'llama-8b') as Manifest;
    const [vllm] = containers(llama);
    expect(specOf(llama).replicas).toBe(2);
    expect(vllm).toMatchObject({
      image: 'vllm/vllm-openai:v0.11.0',
      args: ['--model', 'meta-llama/Llama-3.1-8B-Instruct', '--port', '8000'],
      ports: [{ name: 'http', containerPort: 8000 }],
      resources: { limits: { 'nvidia.com/gpu': 1 } },
    });
    const bge = examples.find((m) => m.value.kind === 'Deployment' && nameOf(m) === 'bge-small') as Manifest;
    expect(containers(bge)[0]).toMatchObject({
      image: 'ghcr.io/huggingface/text-embeddings-inference:cpu-1.8',
      args: ['--model-id', 'BAAI/bge-small-en-v1.5', '--port', '8080'],
    });
  });

  // ---------------------------------------------------------------------------------------------
  // Engine autoscaling

  /** Whether PromQL parses with Prometheus' own grammar. */
  const parsesAsPromql = (expr: string): boolean => {
    let ok = true;
    parser.parse(expr).iterate({
      enter: (n) => {
        if (n.type.isError) ok = false;
      },
    });
    return ok;
  };
  /** The example Deployment whose pods a ModelPool's Service selects. */
  const backingDeployment = (pool: Manifest): Manifest => {
    const serviceName = obj(specOf(pool).service, 'service').name;
    const svc = inNamespace('Service', namespaceOf(pool)).find((s) => nameOf(s) === serviceName);
    if (!svc) throw new Error(`ModelPool ${nameOf(pool)}: no Service ${String(serviceName)}`);
    const selector = obj(specOf(svc).selector, 'selector');
    const found = inNamespace('Deployment', namespaceOf(pool)).filter((d) => labelsMatch(selector, podLabels(d)));
    expect(found).toHaveLength(1);
    return found[0] as Manifest;
  };
  const poolIn = (file: string, namespace: unknown, name: string): Manifest => {
    const found = examples.find((m) => m.file === file && m.value.kind === 'ModelPool' && namespaceOf(m) === namespace && nameOf(m) === name);
    if (!found) throw new Error(`no ModelPool ${String(namespace)}/${name} in ${file}`);
    return found;
  };

  it('scales with KEDA the Deployment behind the pool its query names, from zero replicas only for a pool that scales from zero', () => {
    const scaled = ofKind('ScaledObject', 'examples');
    expect(scaled.map((m) => [m.file, nameOf(m)])).toEqual([['examples/autoscaling-keda.yaml', 'llama-8b']]);
    for (const so of scaled) {
      const spec = specOf(so);
      const triggers = list(spec.triggers, 'triggers').map((t) => obj(t, 'trigger'));
      expect(triggers.map((t) => [t.type, t.metricType])).toEqual([['prometheus', 'AverageValue']]);
      const metadata = obj(triggers[0]?.metadata, 'trigger metadata');
      const query = str(metadata.query, 'query');
      expect({ query, parses: parsesAsPromql(query) }).toEqual({ query, parses: true });
      const key = /^sum\(modelgate_pool_demand_requests\{pool="([a-z0-9-]+)\/([a-z0-9.-]+)"\}\)$/.exec(query);
      expect(key?.[1]).toBe(namespaceOf(so));
      // The pool as this file declares it: the one the ScaledObject is applied with.
      const pool = poolIn(so.file, namespaceOf(so), key?.[2] ?? '');
      expect(obj(spec.scaleTargetRef, 'scaleTargetRef')).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: nameOf(backingDeployment(pool)) });
      expect(metadata).toMatchObject({ threshold: expect.stringMatching(/^[1-9]\d*$/), activationThreshold: '0' });
      const fromZero = obj(obj(specOf(pool).resilience ?? {}, 'resilience').scaleFromZero ?? {}, 'scaleFromZero').enabled === true;
      expect({ minReplicaCount: spec.minReplicaCount, fromZero }).toEqual({ minReplicaCount: 0, fromZero: true });
      expect(Number(spec.maxReplicaCount)).toBeGreaterThan(0);
    }
  });

  it('re-declares in autoscaling-keda.yaml the ModelPool of vllm-llama.yaml, unchanged but for scale from zero', () => {
    const base = poolIn('examples/vllm-llama.yaml', 'models', 'llama-8b');
    const keda = poolIn('examples/autoscaling-keda.yaml', 'models', 'llama-8b');
    const { resilience, ...rest } = specOf(keda);
    expect(rest).toEqual(specOf(base));
    expect(specOf(base).resilience).toBeUndefined();
    expect(resilience).toEqual({ scaleFromZero: { enabled: true, maxWaitMs: 600000 } });
    expect(keda.value.metadata).toEqual(base.value.metadata);
  });

  it('scales with an HPA the Deployment behind the pool its External metric selects, on the metric the prometheus-adapter rule serves', () => {
    const valuesFile = files.find((f) => f.file === `${HELM_VALUES}prometheus-adapter.yaml`);
    if (!valuesFile) throw new Error('no prometheus-adapter values');
    const values = obj(parse(valuesFile.text), 'prometheus-adapter values');
    const rules = obj(values.rules, 'rules');
    const external = list(rules.external, 'rules.external').map((r) => obj(r, 'external rule'));
    expect(external).toHaveLength(1);
    const rule = external[0] as Obj;
    const metric = str(obj(rule.name, 'name').as, 'name.as');
    expect(metric).toBe('modelgate_pool_demand_requests');
    expect(str(rule.seriesQuery, 'seriesQuery')).toMatch(new RegExp(`^${metric}\\{`));
    // The namespace of the HPA asking is the pool's namespace, not the routers'.
    expect(rule.resources).toEqual({ overrides: { pool_namespace: { resource: 'namespace' } } });
    const asQueried = str(rule.metricsQuery, 'metricsQuery').replace('<<.Series>>', metric).replace('<<.LabelMatchers>>', 'pool_namespace="models",pool_name="bge-small"');
    expect({ asQueried, parses: parsesAsPromql(asQueried) }).toEqual({ asQueried, parses: true });
    expect(asQueried).toMatch(/^sum\(.*\) by \(pool_namespace, pool_name\)$/);

    const hpas = ofKind('HorizontalPodAutoscaler', 'examples');
    expect(hpas.map((m) => [m.file, nameOf(m)])).toEqual([['examples/autoscaling-hpa.yaml', 'bge-small']]);
    for (const hpa of hpas) {
      const spec = specOf(hpa);
      const metrics = list(spec.metrics, 'metrics').map((m) => obj(m, 'metric'));
      expect(metrics.map((m) => m.type)).toEqual(['External']);
      const ext = obj(metrics[0]?.external, 'external');
      const m = obj(ext.metric, 'external.metric');
      expect(m.name).toBe(metric);
      const labels = obj(obj(m.selector, 'selector').matchLabels, 'matchLabels');
      expect(labels).toEqual({ pool_namespace: namespaceOf(hpa), pool_name: expect.any(String) });
      const pool = poolIn('examples/tei-embeddings.yaml', namespaceOf(hpa), str(labels.pool_name, 'pool_name'));
      expect(obj(spec.scaleTargetRef, 'scaleTargetRef')).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: nameOf(backingDeployment(pool)) });
      expect(ext.target).toEqual({ type: 'AverageValue', averageValue: expect.stringMatching(/^[1-9]\d*$/) });
      expect(Number(spec.minReplicas)).toBeGreaterThanOrEqual(1);
    }
  });
});
