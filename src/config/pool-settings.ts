/**
 * The one place a pool's settings are made: the router-wide settings (the defaults tables, merged
 * with the config's `resilience` and `routing` blocks by load.ts) and then the pool's own overrides,
 * field by field — a `scorers` list replaces the whole list. Discovery hands pools over as plain
 * declarations; this checks their overrides (a ModelPool may have been written without the CRD
 * schema) and merges them, for static and Kubernetes mode alike.
 */
import { kvEventsProblem, mergeRouting, normalizeScorers, routingOverridesSchema, type RoutingOverrides } from '../balancer/settings.js';
import { type PoolResolver, type ResilienceSettings, type RoutingSettings } from '../core/types.js';
import { mergeResilience, type ResilienceOverrides } from '../resilience/settings.js';
import { validatorFor } from '../api/schema-validator.js';

const checkRouting = validatorFor('routing', 'routing', routingOverridesSchema);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Resilience overrides whose every field has the type of the same field in `base`; else why not. */
function resilienceProblem(value: unknown, base: object, path: string): string | undefined {
  if (!isObject(value)) return `${path} must be an object`;
  for (const [key, v] of Object.entries(value)) {
    const expected = (base as Record<string, unknown>)[key];
    if (key === 'path' && path.endsWith('healthCheck')) {
      if (typeof v !== 'string' || !v.startsWith('/')) return `${path}.path must start with /`;
      continue;
    }
    if (expected === undefined) return `${path}.${key} is not a known field`;
    if (isObject(expected)) {
      const problem = resilienceProblem(v, expected, `${path}.${key}`);
      if (problem) return problem;
    } else if (typeof v !== typeof expected || (typeof v === 'number' && (!Number.isFinite(v) || v < 0))) {
      return `${path}.${key} must be a ${typeof expected === 'number' ? 'number ≥ 0' : typeof expected}`;
    }
  }
  return undefined;
}

/** Routing overrides the schema accepts, with each scorer named once; else why not. */
function routingProblem(value: unknown, path: string): string | undefined {
  if (!checkRouting(value)) {
    const [first] = checkRouting.errors ?? [];
    return `${path}${first?.instancePath.replaceAll('/', '.') ?? ''} ${first?.message ?? 'is invalid'}`;
  }
  const names = ((value as RoutingOverrides).scorers ?? []).map((s) => s.name);
  return new Set(names).size === names.length ? undefined : `${path}.scorers names a scorer twice`;
}

/** A resolver over these router-wide settings. */
export function poolResolver(base: { resilience: ResilienceSettings; routing: RoutingSettings }): PoolResolver {
  return (pool, path) => {
    const { resilience, routing } = pool.overrides;
    const problem =
      (resilience === undefined ? undefined : resilienceProblem(resilience, base.resilience, `${path}.resilience`)) ?? (routing === undefined ? undefined : routingProblem(routing, `${path}.routing`));
    if (problem) return { problem };
    const ownRouting = routing as RoutingOverrides | undefined;
    const { overrides: _overrides, ...plain } = pool;
    const merged = mergeRouting(base.routing, ownRouting?.scorers ? { ...ownRouting, scorers: normalizeScorers(ownRouting.scorers) } : ownRouting);
    const kvProblem = kvEventsProblem(merged.kvEvents);
    if (kvProblem) return { problem: `${path}.routing: ${kvProblem}` };
    // the engine's half of the isolation is vLLM's cache_salt: elsewhere its cache would still be shared
    // (TEI serves embeddings: no prefix cache to tell anyone anything)
    if (merged.prefix.isolateKeys && pool.engine !== 'vllm' && pool.engine !== 'tei') {
      return {
        problem: `${path}.routing: prefix.isolateKeys needs a vLLM pool (its cache_salt keeps each key's cached prompts apart); ${pool.engine} would still share its prefix cache between keys`,
      };
    }
    return {
      spec: {
        ...plain,
        resilience: mergeResilience(base.resilience, resilience as ResilienceOverrides | undefined),
        routing: merged,
      },
    };
  };
}
