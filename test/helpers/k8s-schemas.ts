/**
 * Validates a Kubernetes object against the schema of its apiVersion and kind: the built-in kinds and
 * the Prometheus Operator, Gateway API and KEDA kinds through the kubernetes-models classes (the API's
 * OpenAPI schemas compiled to ajv), ModelPool and ModelDeployment through the openAPIV3Schema of
 * manifests/crds. An apiVersion/kind without a schema here is an error, never a silent pass.
 *
 * The kubernetes-models schemas check types, required fields, enums and formats, not unknown
 * fields (the OpenAPI documents do not close their objects); the CRD schemas here do, as kubectl's
 * strict field validation would. Object names and label values are also checked against the API
 * server's rules.
 */
import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import { parse } from 'yaml';
import { HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { PrometheusRule, ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Lease } from 'kubernetes-models/coordination.k8s.io/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ClusterRole, ClusterRoleBinding, Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';

type Obj = Record<string, unknown>;
/** A kubernetes-models class: `new Class(data).validate()` throws when data breaks the schema. */
type ModelClass = new (data: never) => { validate(): void };

const MODELS: Record<string, ModelClass> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Namespace': Namespace,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'coordination.k8s.io/v1/Lease': Lease,
  'apiextensions.k8s.io/v1/CustomResourceDefinition': CustomResourceDefinition,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  // @kubernetes-models/gateway-api 0.5.1 is generated from Gateway API v1.0.0, which has HTTPRoute v1.
  'gateway.networking.k8s.io/v1/HTTPRoute': HTTPRoute,
  // @kubernetes-models/keda 2 is generated from KEDA v2's Go API types (the engine autoscaling ScaledObject).
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
};

const CRD_FILES = ['modelgate.io_modelpools.yaml', 'modelgate.io_modeldeployments.yaml'];

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A CRD's structural schema as plain JSON Schema for ajv: `x-kubernetes-int-or-string` becomes
 * `anyOf: [integer, string]`, other `x-kubernetes-*` keys go, and every object with properties gets
 * `additionalProperties: false` (kubectl's strict field validation rejects unknown fields).
 */
export function crdToJsonSchema(schema: Obj): Obj {
  const out: Obj = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'x-kubernetes-int-or-string') {
      if (value === true) out.anyOf = [{ type: 'integer' }, { type: 'string' }];
    } else if (key.startsWith('x-kubernetes-')) {
      continue;
    } else if (key === 'properties' && isObj(value)) {
      out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, isObj(v) ? crdToJsonSchema(v) : v]));
    } else if (key === 'items' && isObj(value)) {
      out.items = crdToJsonSchema(value);
    } else {
      out[key] = value;
    }
  }
  if (out.properties !== undefined && out.additionalProperties === undefined) out.additionalProperties = false;
  return out;
}

interface Crd {
  group: string;
  kind: string;
  versions: Array<{ name: string; schema: Obj }>;
}

/** The CRDs of manifests/crds: group, kind and each version's openAPIV3Schema. */
export function loadCrds(): Crd[] {
  return CRD_FILES.map((file) => {
    const doc = parse(readFileSync(new URL(`../../manifests/crds/${file}`, import.meta.url), 'utf8')) as {
      spec: { group: string; names: { kind: string }; versions: Array<{ name: string; schema: { openAPIV3Schema: Obj } }> };
    };
    return { group: doc.spec.group, kind: doc.spec.names.kind, versions: doc.spec.versions.map((v) => ({ name: v.name, schema: v.schema.openAPIV3Schema })) };
  });
}

/** ajv with the formats Kubernetes schemas use (int32, int64, date-time). */
export function newAjv(): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addFormat('date-time', /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/);
  return ajv;
}

const ajv = newAjv();
const CUSTOM: Record<string, ValidateFunction> = Object.fromEntries(
  loadCrds().flatMap((crd) => crd.versions.map((v) => [`${crd.group}/${v.name}/${crd.kind}`, ajv.compile(crdToJsonSchema(v.schema))])),
);

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAME = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** What the API server checks of every object's metadata: the name's format, the labels' syntax. */
function metadataErrors(value: Obj, where: string): string[] {
  const meta = isObj(value.metadata) ? value.metadata : {};
  const errors: string[] = [];
  const name = meta.name;
  if (typeof name !== 'string' || name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) errors.push(`${where}: metadata.name ${JSON.stringify(name)} is not a DNS-1123 subdomain`);
  // Services (and Namespaces) need a DNS label: their names become host names.
  if ((value.kind === 'Service' || value.kind === 'Namespace') && (typeof name !== 'string' || name.length > 63 || !DNS1035_LABEL.test(name))) {
    errors.push(`${where}: metadata.name ${JSON.stringify(name)} is not a DNS-1035 label`);
  }
  if (meta.namespace !== undefined && (typeof meta.namespace !== 'string' || meta.namespace.length > 63 || !DNS1123_LABEL.test(meta.namespace))) {
    errors.push(`${where}: metadata.namespace ${JSON.stringify(meta.namespace)} is not a DNS label`);
  }
  for (const [key, label] of Object.entries(isObj(meta.labels) ? meta.labels : {})) {
    if (!LABEL_NAME.test(key) || (key.split('/').pop() ?? '').length > 63) errors.push(`${where}: label name ${JSON.stringify(key)} is invalid`);
    if (typeof label !== 'string' || label.length > 63 || !LABEL_VALUE.test(label)) errors.push(`${where}: label ${key} has the invalid value ${JSON.stringify(label)}`);
  }
  for (const [key, annotation] of Object.entries(isObj(meta.annotations) ? meta.annotations : {})) {
    if (typeof annotation !== 'string') errors.push(`${where}: annotation ${key} is not a string`);
  }
  return errors;
}

/** Why `value` is not a valid object of its apiVersion and kind; empty when it is valid. */
export function schemaErrors(value: unknown): string[] {
  if (!isObj(value)) return ['not an object'];
  const { apiVersion, kind } = value;
  const name = isObj(value.metadata) ? String(value.metadata.name) : '?';
  const where = `${String(apiVersion)} ${String(kind)} ${name}`;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return [`${where}: no apiVersion or kind`];
  const key = `${apiVersion}/${kind}`;
  const errors = metadataErrors(value, where);
  const custom = CUSTOM[key];
  const model = MODELS[key];
  if (custom) {
    if (!custom(value)) errors.push(...(custom.errors ?? []).map((e) => `${where}: ${e.instancePath || '/'} ${e.message ?? ''}`));
  } else if (model) {
    try {
      new model(value as never).validate();
    } catch (err) {
      errors.push(`${where}: ${err instanceof Error ? err.message : String(err)}`);
    }
  } else {
    errors.push(`${where}: no schema for apiVersion ${apiVersion}, kind ${kind}`);
  }
  return errors;
}

/** Throws, naming every problem, unless `value` is a valid object of its apiVersion and kind. */
export function validateObject(value: unknown): void {
  const errors = schemaErrors(value);
  if (errors.length > 0) throw new Error(errors.join('\n'));
}
