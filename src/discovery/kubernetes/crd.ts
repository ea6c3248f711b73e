/**
 * ModelPool and ModelDeployment objects → the registry's PoolSpec and Deployment. Pure. The API server
 * validates objects against the CRD schema; this repeats the checks that matter (an object written
 * before a schema change, or by a client that skipped validation) and applies the schema's defaults.
 * A pool is keyed `namespace/name`; a deployment's targets name pools in its own namespace.
 */
import { Ajv } from 'ajv';
import { mergeRouting, normalizeScorers, ROUTING_DEFAULTS, routingOverridesSchema, type RoutingOverrides } from '../../balancer/settings.js';
import { CAPABILITIES, ENGINES, type Capability, type Deployment, type Engine, type PoolSpec, type ResilienceSettings, type RoutingSettings } from '../../core/types.js';
import { mergeResilience, type ResilienceOverrides } from '../../resilience/settings.js';

const checkRouting = new Ajv({ allErrors: false, strict: true }).compile(routingOverridesSchema);

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  generation?: number;
  creationTimestamp?: string | Date;
  resourceVersion?: string;
}

export interface CustomObject {
  metadata?: ObjectMeta;
  spec?: unknown;
  status?: unknown;
}

interface Identity {
  /** `namespace/name` */
  key: string;
  namespace: string;
  name: string;
  generation: number;
}

export interface ParsedPool extends Identity {
  spec?: PoolSpec;
  service?: { name: string; port: string | number | undefined };
  /** Why the spec is unusable. */
  problem?: string;
}

export interface ParsedDeployment extends Identity {
  deployment?: Deployment;
  problem?: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.trim() !== '';

function identity(obj: CustomObject): Identity {
  const namespace = obj.metadata?.namespace ?? '';
  const name = obj.metadata?.name ?? '';
  return { key: `${namespace}/${name}`, namespace, name, generation: obj.metadata?.generation ?? 0 };
}

function createdSeconds(obj: CustomObject): number {
  const raw = obj.metadata?.creationTimestamp;
  const ms = raw instanceof Date ? raw.getTime() : typeof raw === 'string' ? Date.parse(raw) : NaN;
  return Number.isFinite(ms) ? Math.floor(ms / 1000) : 0;
}

/** A `spec.resilience` whose every field has the type of the same field in `defaults`. */
function checkOverrides(value: unknown, defaults: object, path: string): string | undefined {
  if (!isObject(value)) return `${path} must be an object`;
  for (const [key, v] of Object.entries(value)) {
    const expected = (defaults as Record<string, unknown>)[key];
    if (key === 'path' && path.endsWith('healthCheck')) {
      if (typeof v !== 'string' || !v.startsWith('/')) return `${path}.path must start with /`;
      continue;
    }
    if (expected === undefined) return `${path}.${key} is not a known field`;
    if (isObject(expected)) {
      const problem = checkOverrides(v, expected, `${path}.${key}`);
      if (problem) return problem;
    } else if (typeof v !== typeof expected || (typeof v === 'number' && (!Number.isFinite(v) || v < 0))) {
      return `${path}.${key} must be a ${typeof expected === 'number' ? 'number ≥ 0' : typeof expected}`;
    }
  }
  return undefined;
}

/** A `spec.routing` the schema accepts, with each scorer named once; else why not. */
function routingProblem(value: unknown): string | undefined {
  if (!checkRouting(value)) {
    const [first] = checkRouting.errors ?? [];
    return `spec.routing${first?.instancePath.replaceAll('/', '.') ?? ''} ${first?.message ?? 'is invalid'}`;
  }
  const names = ((value as RoutingOverrides).scorers ?? []).map((s) => s.name);
  return new Set(names).size === names.length ? undefined : 'spec.routing.scorers names a scorer twice';
}

/**
 * Parses a ModelPool; `defaults` is the router's resilience (its config), which `spec.resilience`
 * overrides, and `routingDefaults` its routing, which `spec.routing` overrides.
 */
export function parseModelPool(obj: CustomObject, defaults: ResilienceSettings, routingDefaults: RoutingSettings = ROUTING_DEFAULTS): ParsedPool {
  const id = identity(obj);
  const spec = obj.spec;
  if (!isObject(spec)) return { ...id, problem: 'spec is missing' };
  const service = spec.service;
  if (!isObject(service) || !nonEmpty(service.name)) return { ...id, problem: 'spec.service.name is required' };
  const port = service.port;
  if (port !== undefined && !(typeof port === 'string' || (Number.isInteger(port) && (port as number) > 0 && (port as number) < 65536))) {
    return { ...id, problem: 'spec.service.port must be a port name or number' };
  }
  if (!nonEmpty(spec.servedModelName)) return { ...id, problem: 'spec.servedModelName is required' };
  const engine = spec.engine ?? 'vllm';
  if (!ENGINES.includes(engine as Engine)) return { ...id, problem: `spec.engine must be one of ${ENGINES.join(', ')}` };
  const capabilities = spec.capabilities ?? ['chat'];
  if (!Array.isArray(capabilities) || capabilities.length === 0 || !capabilities.every((c) => CAPABILITIES.includes(c as Capability))) {
    return { ...id, problem: `spec.capabilities must be a non-empty list of ${CAPABILITIES.join(', ')}` };
  }
  if (spec.resilience !== undefined) {
    const problem = checkOverrides(spec.resilience, defaults, 'spec.resilience');
    if (problem) return { ...id, problem };
  }
  if (spec.routing !== undefined) {
    const problem = routingProblem(spec.routing);
    if (problem) return { ...id, problem };
  }
  const routing = spec.routing as RoutingOverrides | undefined;
  return {
    ...id,
    spec: {
      name: id.key,
      engine: engine as Engine,
      servedModelName: spec.servedModelName,
      capabilities: [...new Set(capabilities as Capability[])],
      resilience: mergeResilience(defaults, spec.resilience as ResilienceOverrides | undefined),
      routing: mergeRouting(routingDefaults, routing?.scorers ? { ...routing, scorers: normalizeScorers(routing.scorers) } : routing),
    },
    service: { name: service.name, port: port as string | number | undefined },
  };
}

export function parseModelDeployment(obj: CustomObject): ParsedDeployment {
  const id = identity(obj);
  const spec = obj.spec;
  if (!isObject(spec)) return { ...id, problem: 'spec is missing' };
  if (!nonEmpty(spec.model)) return { ...id, problem: 'spec.model is required' };
  const aliases = spec.aliases ?? [];
  if (!Array.isArray(aliases) || !aliases.every(nonEmpty)) return { ...id, problem: 'spec.aliases must be a list of names' };
  const targets = spec.targets;
  if (!Array.isArray(targets) || targets.length === 0) return { ...id, problem: 'spec.targets needs at least one pool' };
  const parsed: Array<{ pool: string; weight: number }> = [];
  for (const [i, t] of targets.entries()) {
    if (!isObject(t) || !nonEmpty(t.pool)) return { ...id, problem: `spec.targets[${i}].pool is required` };
    const weight = t.weight ?? 100;
    if (typeof weight !== 'number' || !Number.isFinite(weight) || weight < 0) return { ...id, problem: `spec.targets[${i}].weight must be a number ≥ 0` };
    parsed.push({ pool: `${id.namespace}/${t.pool}`, weight });
  }
  const fallbacks = spec.fallbacks ?? [];
  if (!Array.isArray(fallbacks) || !fallbacks.every(nonEmpty)) return { ...id, problem: 'spec.fallbacks must be a list of ModelDeployment names' };
  if (fallbacks.includes(id.name)) return { ...id, problem: 'spec.fallbacks must not name the deployment itself' };
  return { ...id, deployment: { id: id.name, model: spec.model, aliases: [...new Set(aliases)], targets: parsed, fallbacks: [...new Set(fallbacks)], created: createdSeconds(obj) } };
}
