/**
 * ModelPool and ModelDeployment objects → the registry's PoolSpec and Deployment. Pure. The API server
 * validates objects against the CRD schema; this repeats the checks that matter (an object written
 * before a schema change, or by a client that skipped validation) and applies the schema's defaults.
 * A pool is keyed `namespace/name`; a deployment's targets name pools in its own namespace.
 */
import { CAPABILITIES, defaultCapabilities, ENGINES, type Capability, type Deployment, type Engine, type PoolResolver, type PoolSpec } from '../../core/types.js';

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

/**
 * Parses a ModelPool. Its `spec.resilience` and `spec.routing` are the pool's overrides: `resolve`
 * (config/pool-settings.ts, handed in by the composition root) checks them and merges them over the
 * router's settings; discovery itself applies no policy.
 */
export function parseModelPool(obj: CustomObject, resolve: PoolResolver): ParsedPool {
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
  const capabilities = spec.capabilities ?? defaultCapabilities(engine as Engine);
  if (!Array.isArray(capabilities) || capabilities.length === 0 || !capabilities.every((c) => CAPABILITIES.includes(c as Capability))) {
    return { ...id, problem: `spec.capabilities must be a non-empty list of ${CAPABILITIES.join(', ')}` };
  }
  const resolved = resolve(
    {
      name: id.key,
      engine: engine as Engine,
      servedModelName: spec.servedModelName,
      capabilities: [...new Set(capabilities as Capability[])],
      overrides: { ...(spec.resilience !== undefined ? { resilience: spec.resilience } : {}), ...(spec.routing !== undefined ? { routing: spec.routing } : {}) },
    },
    'spec',
  );
  if ('problem' in resolved) return { ...id, problem: resolved.problem };
  return { ...id, spec: resolved.spec, service: { name: service.name, port: port as string | number | undefined } };
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
  if (parsed.every((t) => t.weight === 0)) return { ...id, problem: 'spec.targets needs a weight above 0 on at least one pool' };
  const fallbacks = spec.fallbacks ?? [];
  if (!Array.isArray(fallbacks) || !fallbacks.every(nonEmpty)) return { ...id, problem: 'spec.fallbacks must be a list of ModelDeployment names' };
  if (fallbacks.includes(id.name)) return { ...id, problem: 'spec.fallbacks must not name the deployment itself' };
  const slo = spec.slo ?? {};
  const positive = (v: unknown): boolean => v === undefined || (Number.isInteger(v) && (v as number) >= 1);
  if (!isObject(slo) || !positive(slo.ttftMs) || !positive(slo.itlMs)) return { ...id, problem: 'spec.slo.ttftMs and spec.slo.itlMs must be whole milliseconds ≥ 1' };
  const ownSlo = { ...(slo.ttftMs === undefined ? {} : { ttftMs: slo.ttftMs as number }), ...(slo.itlMs === undefined ? {} : { itlMs: slo.itlMs as number }) };
  const resumeStreams = spec.resumeStreams ?? false;
  if (typeof resumeStreams !== 'boolean') return { ...id, problem: 'spec.resumeStreams must be true or false' };
  const adapter = spec.adapter;
  if (adapter !== undefined && !(isObject(adapter) && nonEmpty(adapter.name) && !/\s/.test(adapter.name) && (adapter.path === undefined || nonEmpty(adapter.path)))) {
    return { ...id, problem: 'spec.adapter needs a name (the name the engines serve the LoRA adapter under, no spaces) and, optionally, a non-empty path' };
  }
  return {
    ...id,
    deployment: {
      id: id.name,
      namespace: id.namespace,
      // its label in metrics and logs, as a pool's is its key: two namespaces may each have a deployment of this name
      label: id.key,
      model: spec.model,
      aliases: [...new Set(aliases)],
      targets: parsed,
      fallbacks: [...new Set(fallbacks)],
      created: createdSeconds(obj),
      ...(Object.keys(ownSlo).length > 0 ? { slo: ownSlo } : {}),
      ...(resumeStreams ? { resumeStreams: true } : {}),
      ...(adapter !== undefined ? { adapter: { name: adapter.name as string, ...(adapter.path !== undefined ? { path: adapter.path as string } : {}) } } : {}),
    },
  };
}
