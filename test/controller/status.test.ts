import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { describe, expect, it } from '@jest/globals';
import { canonical, deploymentStatus, poolStatus } from '../../src/controller/status.js';
import { type Deployment } from '../../src/core/types.js';
import { type DeploymentView, type PoolView } from '../../src/discovery/kubernetes/kubernetes-discovery.js';
import { Registry } from '../../src/registry/registry.js';

const t0 = new Date('2026-11-21T10:00:00.123Z');
const t1 = new Date('2026-11-21T10:05:00Z');

function pool(ready: number, replicas: number, status?: unknown, problem?: string): PoolView {
  return {
    key: 'models/llama',
    namespace: 'models',
    name: 'llama',
    generation: 4,
    replicas,
    readyReplicas: ready,
    ...(problem
      ? { problem }
      : {
          spec: { name: 'models/llama', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS },
          service: { name: 'llama-svc', port: 'http' },
        }),
    object: { metadata: { namespace: 'models', name: 'llama', generation: 4 }, status },
  };
}

function deployment(name: string, created: number, model: string, aliases: string[], pools: string[]): DeploymentView {
  const dep: Deployment = { id: name, model, aliases, targets: pools.map((p) => ({ pool: `models/${p}`, weight: 100 })), fallbacks: [], created };
  return { key: `models/${name}`, namespace: 'models', name, generation: 2, deployment: dep, object: { metadata: { namespace: 'models', name, generation: 2 } } };
}

describe('poolStatus', () => {
  it('reports replicas, ready replicas, generation and Accepted/Ready conditions', () => {
    expect(poolStatus(pool(2, 3), t0)).toEqual({
      replicas: 3,
      readyReplicas: 2,
      requestsWaiting: 0,
      requestsHeld: 0,
      observedGeneration: 4,
      conditions: [
        { type: 'Accepted', status: 'True', reason: 'Accepted', message: 'The pool spec is valid.', observedGeneration: 4, lastTransitionTime: '2026-11-21T10:00:00Z' },
        { type: 'Ready', status: 'True', reason: 'EndpointsReady', message: '2 of 3 endpoints of Service llama-svc are routable.', observedGeneration: 4, lastTransitionTime: '2026-11-21T10:00:00Z' },
        { type: 'RequestsHeld', status: 'False', reason: 'NoneHeld', message: 'No request waits for a first ready replica.', observedGeneration: 4, lastTransitionTime: '2026-11-21T10:00:00Z' },
        {
          type: 'ServedModelMismatch',
          status: 'False',
          reason: 'NoMismatchSeen',
          message: "No replica has answered that it does not serve the pool's servedModelName.",
          observedGeneration: 4,
          lastTransitionTime: '2026-11-21T10:00:00Z',
        },
      ],
    });
  });

  it("shows replicas that answered they do not serve the pool's servedModelName as a condition, whose message moves only with the set of replicas", () => {
    const one = poolStatus(pool(2, 2), t0, undefined, { replicas: ['models/llama-0'] });
    expect(one.conditions[3]).toEqual({
      type: 'ServedModelMismatch',
      status: 'True',
      reason: 'ModelNotServed',
      message:
        'Replica models/llama-0 answered that it does not serve model "m" (the pool\'s servedModelName; compare the engine\'s GET /v1/models): requests no other replica serves are answered 502 served_model_mismatch. Clears when it answers the pool.',
      observedGeneration: 4,
      lastTransitionTime: '2026-11-21T10:00:00Z',
    });
    // four replicas: three named, one counted; the transition time kept while it stays True
    const four = poolStatus(pool(4, 4, one), t1, undefined, { replicas: ['models/llama-0', 'models/llama-1', 'models/llama-2', 'models/llama-3'] });
    expect(four.conditions[3]).toMatchObject({ status: 'True', lastTransitionTime: '2026-11-21T10:00:00Z' });
    expect(four.conditions[3]?.message).toMatch(/^Replicas models\/llama-0, models\/llama-1, models\/llama-2 and 1 more answered that they do not serve model "m"/);
    // cleared: False from now on
    expect(poolStatus(pool(4, 4, four), t1).conditions[3]).toMatchObject({ status: 'False', reason: 'NoMismatchSeen', lastTransitionTime: '2026-11-21T10:05:00Z' });
    // a pool with an invalid spec serves nothing: no mismatch to show
    expect(poolStatus(pool(0, 0, undefined, 'bad'), t0, undefined, { replicas: ['models/llama-0'] }).conditions[3]).toMatchObject({ status: 'False' });
  });

  it('shows what waits in the router, and requests held for a pool at zero as a condition', () => {
    const held = poolStatus(pool(0, 0), t0, { waiting: 7, held: 7 });
    expect(held).toMatchObject({ readyReplicas: 0, requestsWaiting: 7, requestsHeld: 7 });
    expect(held.conditions[2]).toMatchObject({ type: 'RequestsHeld', status: 'True', reason: 'WaitingForReplica', message: '7 requests wait for a first ready replica (the pool scales from zero).' });
    const served = poolStatus(pool(1, 1, held), t1, { waiting: 0, held: 0 });
    expect(served.conditions[2]).toMatchObject({ status: 'False', reason: 'NoneHeld', lastTransitionTime: '2026-11-21T10:05:00Z' });
  });

  it('says why a pool is not ready, and why it is not accepted', () => {
    expect(poolStatus(pool(0, 2), t0).conditions[1]).toMatchObject({ status: 'False', reason: 'NoReadyEndpoints' });
    expect(poolStatus(pool(0, 0), t0).conditions[1]).toMatchObject({ status: 'False', reason: 'NoEndpoints' });
    const invalid = poolStatus(pool(0, 0, undefined, 'spec.servedModelName is required'), t0);
    expect(invalid.conditions[0]).toMatchObject({
      status: 'False',
      reason: 'InvalidSpec',
      message: 'spec.servedModelName is required',
    });
    // not ready because it is not routed at all, not for want of endpoints of a Service it may name
    expect(invalid.conditions[1]).toMatchObject({ status: 'False', reason: 'InvalidSpec', message: 'Not routed: the spec is invalid (see the Accepted condition).' });
  });

  it('keeps lastTransitionTime while a condition keeps its status, and moves it when the status flips', () => {
    const first = poolStatus(pool(2, 2), t0);
    const same = poolStatus(pool(1, 2, first), t1);
    expect(same.conditions[1]?.lastTransitionTime).toBe('2026-11-21T10:00:00Z');
    const flipped = poolStatus(pool(0, 2, first), t1);
    expect(flipped.conditions[1]?.lastTransitionTime).toBe('2026-11-21T10:05:00Z');
    expect(canonical(poolStatus(pool(2, 2, first), t1))).toBe(canonical(first));
  });
});

describe('deploymentStatus', () => {
  const pools = [{ name: 'models/llama', engine: 'vllm' as const, servedModelName: 'm', capabilities: ['chat' as const], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS }];

  it('accepts a deployment whose pools exist and that keeps all its names', () => {
    const view = deployment('llama-prod', 100, 'llama', ['default'], ['llama']);
    const registry = new Registry(pools, [view.deployment!]);
    const status = deploymentStatus(view, registry, new Map([[view.deployment!, view]]), t0);
    expect(status.observedGeneration).toBe(2);
    expect(status.conditions.map((c) => [c.type, c.status, c.reason])).toEqual([
      ['Accepted', 'True', 'Accepted'],
      ['Conflicted', 'False', 'NoConflict'],
    ]);
  });

  it('does not accept a deployment targeting a pool missing from its namespace', () => {
    const view = deployment('llama-prod', 100, 'llama', [], ['llama', 'gone']);
    const registry = new Registry(pools, [view.deployment!]);
    const accepted = deploymentStatus(view, registry, new Map(), t0).conditions[0];
    expect(accepted).toMatchObject({ status: 'False', reason: 'PoolNotFound', message: 'No ModelPool named "gone" in namespace models.' });
  });

  it('tells a target pool that exists with an invalid spec from one that does not exist', () => {
    const view = deployment('llama-prod', 100, 'llama', [], ['llama', 'broken']);
    const registry = new Registry(pools, [view.deployment!]);
    const accepted = deploymentStatus(view, registry, new Map(), t0, new Set(['models/broken'])).conditions[0];
    expect(accepted).toMatchObject({ status: 'False', reason: 'PoolInvalid', message: 'ModelPool "broken" in namespace models has a spec the router cannot use (see its Accepted condition).' });
    // a missing pool is named first: it is the one to create
    const both = deployment('llama-prod', 100, 'llama', [], ['gone', 'broken']);
    expect(deploymentStatus(both, new Registry(pools, [both.deployment!]), new Map(), t0, new Set(['models/broken'])).conditions[0]).toMatchObject({
      reason: 'PoolNotFound',
      message: 'No ModelPool named "gone" in namespace models.',
    });
  });

  it('does not accept a LoRA adapter on a pool that cannot serve it (what static mode refuses), and the target gets no route', () => {
    const sglang = { ...pools[0]!, name: 'models/sg', engine: 'sglang' as const };
    const base = deployment('lora', 100, 'sql-lora', [], ['sg']);
    const view = { ...base, deployment: { ...base.deployment!, adapter: { name: 'sql-lora' } } };
    const registry = new Registry([...pools, sglang], [view.deployment]);
    expect(deploymentStatus(view, registry, new Map(), t0).conditions[0]).toMatchObject({
      status: 'False',
      reason: 'AdapterUnsupported',
      message: 'LoRA adapters are served by vLLM pools only; pool "sg" runs sglang (such a target gets no requests).',
    });
    expect(registry.targetPool(view.deployment, view.deployment.targets[0]!)).toBeUndefined();
    // named like the base model its vLLM pool serves: the engine would answer for the base model
    const named = { ...view, deployment: { ...view.deployment, targets: [{ pool: 'models/llama', weight: 100 }], adapter: { name: 'm' } } };
    const namedRegistry = new Registry(pools, [named.deployment]);
    expect(deploymentStatus(named, namedRegistry, new Map(), t0).conditions[0]).toMatchObject({ status: 'False', reason: 'AdapterUnsupported' });
    expect(namedRegistry.targetPool(named.deployment, named.deployment.targets[0]!)).toBeUndefined();
    // on a vLLM pool under its own name it is accepted and routed
    const fine = { ...view, deployment: { ...view.deployment, targets: [{ pool: 'models/llama', weight: 100 }] } };
    const fineRegistry = new Registry(pools, [fine.deployment]);
    expect(deploymentStatus(fine, fineRegistry, new Map(), t0).conditions[0]).toMatchObject({ status: 'True', reason: 'Accepted' });
    expect(fineRegistry.targetPool(fine.deployment, fine.deployment.targets[0]!)).toMatchObject({ servedModelName: 'sql-lora' });
  });

  it('does not accept a deployment whose fallback names no ModelDeployment in its namespace', () => {
    const view = deployment('llama-prod', 100, 'llama', [], ['llama']);
    const withFallbacks = { ...view, deployment: { ...view.deployment!, fallbacks: ['backup', 'elsewhere'] } };
    const backup = deployment('backup', 50, 'llama-small', [], ['llama']);
    const registry = new Registry(pools, [withFallbacks.deployment, backup.deployment!]);
    expect(deploymentStatus(withFallbacks, registry, new Map(), t0).conditions[0]).toMatchObject({
      status: 'False',
      reason: 'FallbackNotFound',
      message: 'No ModelDeployment named "elsewhere" in namespace models: requests do not fall back there.',
    });
  });

  it('says FallbackInvalid, not FallbackNotFound, when the fallback exists with a spec the router cannot use', () => {
    const view = deployment('llama-prod', 100, 'llama', [], ['llama']);
    const withFallbacks = { ...view, deployment: { ...view.deployment!, fallbacks: ['broken'] } };
    const registry = new Registry(pools, [withFallbacks.deployment]);
    expect(deploymentStatus(withFallbacks, registry, new Map(), t0, new Set(), new Set(['models/broken'])).conditions[0]).toMatchObject({
      status: 'False',
      reason: 'FallbackInvalid',
      message: 'ModelDeployment "broken" in namespace models has a spec the router cannot use (see its Accepted condition): requests do not fall back there.',
    });
    // one missing and one invalid: the missing one is named first, as a missing pool is before an invalid one
    const both = { ...view, deployment: { ...view.deployment!, fallbacks: ['broken', 'elsewhere'] } };
    expect(deploymentStatus(both, new Registry(pools, [both.deployment]), new Map(), t0, new Set(), new Set(['models/broken'])).conditions[0]).toMatchObject({
      reason: 'FallbackNotFound',
      message: 'No ModelDeployment named "elsewhere" in namespace models: requests do not fall back there.',
    });
  });

  it('marks the younger of two deployments claiming an alias as Conflicted, naming the holder', () => {
    const older = deployment('older', 100, 'llama-a', ['default'], ['llama']);
    const younger = deployment('younger', 200, 'llama-b', ['default'], ['llama']);
    const registry = new Registry(pools, [younger.deployment!, older.deployment!]);
    const views = new Map([
      [older.deployment!, older],
      [younger.deployment!, younger],
    ]);
    expect(deploymentStatus(older, registry, views, t0).conditions[1]).toMatchObject({ status: 'False' });
    expect(deploymentStatus(younger, registry, views, t0).conditions[1]).toMatchObject({
      status: 'True',
      reason: 'NameConflict',
      message: '"default" is held by ModelDeployment models/older (the oldest object keeps a name).',
    });
  });

  it('reports an invalid spec', () => {
    const view: DeploymentView = { key: 'models/x', namespace: 'models', name: 'x', generation: 1, problem: 'spec.model is required', object: {} };
    expect(deploymentStatus(view, new Registry([], []), new Map(), t0).conditions[0]).toMatchObject({ status: 'False', reason: 'InvalidSpec', message: 'spec.model is required' });
  });
});
