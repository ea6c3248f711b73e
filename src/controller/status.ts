/**
 * The status modelgate writes back to its CRDs, computed from what discovery sees and the registry
 * built from it. Pure: the writer decides whether and when to send it.
 *
 * ModelPool: `replicas`, `readyReplicas`, `requestsWaiting` and `requestsHeld` (in the writing router),
 * `observedGeneration`, conditions `Accepted` (the spec is usable), `Ready` (at least one routable
 * endpoint), `RequestsHeld` (requests wait for a first replica of a pool at zero) and `ServedModelMismatch` (replicas
 * answered, to the writing router, that they do not serve the pool's `servedModelName`). ModelDeployment: `observedGeneration`,
 * conditions `Accepted` (the spec is usable, every target pool exists in its namespace with a usable
 * spec and, for a LoRA adapter, can serve it, and every fallback exists there: what static mode's
 * config check asks of a deployment) and `Conflicted` (an older deployment holds one of its names, so
 * that name does not reach it).
 */
import { adapterProblem, type Deployment } from '../core/types.js';
import { type DeploymentView, type PoolView } from '../discovery/kubernetes/kubernetes-discovery.js';
import { type ModelCatalog } from '../registry/registry.js';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration: number;
  lastTransitionTime: string;
}

export interface PoolStatus {
  replicas: number;
  readyReplicas: number;
  /** Requests waiting in this router for a replica of the pool; of them, held for a first ready replica. */
  requestsWaiting: number;
  requestsHeld: number;
  observedGeneration: number;
  conditions: Condition[];
}

export interface DeploymentStatus {
  observedGeneration: number;
  conditions: Condition[];
}

/** RFC 3339 to the second, as metav1.Time writes it. */
export function timestamp(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function previousConditions(status: unknown): Condition[] {
  const conditions = (status as { conditions?: unknown } | undefined)?.conditions;
  return Array.isArray(conditions) ? (conditions as Condition[]) : [];
}

/** A condition that keeps its lastTransitionTime unless its status changed. */
function condition(previous: Condition[], now: string, generation: number, type: string, holds: boolean, reason: string, message: string): Condition {
  const status = holds ? 'True' : 'False';
  const before = previous.find((c) => c.type === type);
  return { type, status, reason, message, observedGeneration: generation, lastTransitionTime: before?.status === status ? before.lastTransitionTime : now };
}

/** What waits in the writing router for a pool's replicas (metrics/demand.ts has every router's). */
export interface PoolWaiting {
  waiting: number;
  held: number;
}

/** The replicas of a pool that answered the writing router that they do not serve its `servedModelName`, sorted (wiring/served-model-watch.ts). */
export interface PoolMismatch {
  replicas: readonly string[];
}

/** Replicas a condition message names; the rest are counted. */
const NAMED_REPLICAS = 3;

/**
 * The `ServedModelMismatch` condition: names the replicas (a few, sorted) and the servedModelName, not when
 * each last said so, so that its message changes only when the set of replicas does (a status write each
 * time it changes, paced by the writer), not with every request; `lastTransitionTime` says since when.
 */
function mismatchCondition(previous: Condition[], at: string, g: number, pool: PoolView, mismatch: PoolMismatch | undefined): Condition {
  if (!mismatch || mismatch.replicas.length === 0 || !pool.spec)
    return condition(previous, at, g, 'ServedModelMismatch', false, 'NoMismatchSeen', "No replica has answered that it does not serve the pool's servedModelName.");
  const { replicas } = mismatch;
  const named = replicas.slice(0, NAMED_REPLICAS).join(', ') + (replicas.length > NAMED_REPLICAS ? ` and ${replicas.length - NAMED_REPLICAS} more` : '');
  return condition(
    previous,
    at,
    g,
    'ServedModelMismatch',
    true,
    'ModelNotServed',
    `Replica${replicas.length === 1 ? '' : 's'} ${named} answered that ${replicas.length === 1 ? 'it does' : 'they do'} not serve model "${pool.spec.servedModelName}" (the pool's servedModelName; compare the engine's GET /v1/models): requests no other replica serves are answered 502 served_model_mismatch. Clears when ${replicas.length === 1 ? 'it answers' : 'each answers'} the pool.`,
  );
}

export function poolStatus(pool: PoolView, now: Date, demand: PoolWaiting = { waiting: 0, held: 0 }, mismatch?: PoolMismatch): PoolStatus {
  const previous = previousConditions(pool.object.status);
  const at = timestamp(now);
  const g = pool.generation;
  const accepted = condition(previous, at, g, 'Accepted', !pool.problem, pool.problem ? 'InvalidSpec' : 'Accepted', pool.problem ?? 'The pool spec is valid.');
  const readyReason = pool.problem ? 'InvalidSpec' : pool.readyReplicas > 0 ? 'EndpointsReady' : pool.replicas > 0 ? 'NoReadyEndpoints' : 'NoEndpoints';
  const ready = pool.problem
    ? condition(previous, at, g, 'Ready', false, readyReason, 'Not routed: the spec is invalid (see the Accepted condition).')
    : condition(previous, at, g, 'Ready', pool.readyReplicas > 0, readyReason, `${pool.readyReplicas} of ${pool.replicas} endpoints of Service ${pool.service?.name ?? '(none)'} are routable.`);
  const held =
    demand.held > 0
      ? condition(previous, at, g, 'RequestsHeld', true, 'WaitingForReplica', `${demand.held} requests wait for a first ready replica (the pool scales from zero).`)
      : condition(previous, at, g, 'RequestsHeld', false, 'NoneHeld', 'No request waits for a first ready replica.');
  const served = mismatchCondition(previous, at, g, pool, mismatch);
  return { replicas: pool.replicas, readyReplicas: pool.readyReplicas, requestsWaiting: demand.waiting, requestsHeld: demand.held, observedGeneration: g, conditions: [accepted, ready, held, served] };
}

/**
 * `invalidPools`: the ModelPools (`namespace/name`) that exist with a spec the router cannot use, so a
 * target naming one is reported as invalid (`PoolInvalid`), not as missing.
 */
export function deploymentStatus(
  view: DeploymentView,
  catalog: ModelCatalog,
  views: ReadonlyMap<Deployment, DeploymentView>,
  now: Date,
  invalidPools: ReadonlySet<string> = new Set(),
  invalidDeployments: ReadonlySet<string> = new Set(),
): DeploymentStatus {
  const previous = previousConditions(view.object.status);
  const at = timestamp(now);
  const g = view.generation;
  const dep = view.deployment;
  if (!dep) {
    return {
      observedGeneration: g,
      conditions: [
        condition(previous, at, g, 'Accepted', false, 'InvalidSpec', view.problem ?? 'The spec is invalid.'),
        condition(previous, at, g, 'Conflicted', false, 'NoConflict', 'Not checked: the spec is invalid.'),
      ],
    };
  }
  const unusable = dep.targets.filter((t) => !catalog.pool(t.pool));
  const name = (pool: string): string => `"${pool.slice(view.namespace.length + 1)}"`;
  const invalid = unusable.filter((t) => invalidPools.has(t.pool)).map((t) => name(t.pool));
  const missing = unusable.filter((t) => !invalidPools.has(t.pool)).map((t) => name(t.pool));
  // the target pools that exist and cannot serve the deployment's LoRA adapter (left out of its routes)
  const adapter = dep.adapter;
  const adapterProblems = adapter
    ? dep.targets.flatMap((t) => {
        const pool = catalog.pool(t.pool);
        const problem = pool ? adapterProblem(adapter, { ...pool, name: t.pool.slice(view.namespace.length + 1) }) : undefined;
        return problem === undefined ? [] : [problem];
      })
    : [];
  const unusableFallbacks = dep.fallbacks.filter((id) => !catalog.fallbackOf(dep, id));
  const invalidFallback = unusableFallbacks.filter((id) => invalidDeployments.has(`${view.namespace}/${id}`)).map((id) => `"${id}"`);
  const noFallback = unusableFallbacks.filter((id) => !invalidDeployments.has(`${view.namespace}/${id}`)).map((id) => `"${id}"`);
  const accepted =
    missing.length > 0
      ? condition(previous, at, g, 'Accepted', false, 'PoolNotFound', `No ModelPool named ${missing.join(', ')} in namespace ${view.namespace}.`)
      : invalid.length > 0
        ? condition(previous, at, g, 'Accepted', false, 'PoolInvalid', `ModelPool ${invalid.join(', ')} in namespace ${view.namespace} has a spec the router cannot use (see its Accepted condition).`)
        : adapterProblems.length > 0
          ? condition(previous, at, g, 'Accepted', false, 'AdapterUnsupported', `${adapterProblems.join('; ')} (such a target gets no requests).`)
          : noFallback.length > 0
            ? condition(previous, at, g, 'Accepted', false, 'FallbackNotFound', `No ModelDeployment named ${noFallback.join(', ')} in namespace ${view.namespace}: requests do not fall back there.`)
            : invalidFallback.length > 0
              ? condition(
                  previous,
                  at,
                  g,
                  'Accepted',
                  false,
                  'FallbackInvalid',
                  `ModelDeployment ${invalidFallback.join(', ')} in namespace ${view.namespace} has a spec the router cannot use (see its Accepted condition): requests do not fall back there.`,
                )
              : condition(previous, at, g, 'Accepted', true, 'Accepted', 'Every target pool and fallback exists.');
  const held = new Set(catalog.namesOf(dep));
  const lost = [...new Set([dep.id, ...dep.aliases, dep.model])].filter((n) => !held.has(n));
  const holders = lost.map((name) => {
    const winner = catalog.resolve(name);
    const winnerView = winner ? views.get(winner) : undefined;
    return `"${name}" is held by ModelDeployment ${winnerView ? winnerView.key : (winner?.id ?? 'unknown')}`;
  });
  const conflicted =
    lost.length > 0
      ? condition(previous, at, g, 'Conflicted', true, 'NameConflict', `${holders.join('; ')} (the oldest object keeps a name).`)
      : condition(previous, at, g, 'Conflicted', false, 'NoConflict', 'Every name of this deployment reaches it.');
  return { observedGeneration: g, conditions: [accepted, conflicted] };
}

/** Key-order-independent JSON, to compare a desired status with the stored one. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
    return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  });
}
