/** planRoute over a real Registry: the pools a request may go to, in the order they are tried. */
import { describe, expect, it } from '@jest/globals';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RouterError, toErrorResponse } from '../../src/core/errors.js';
import { type Capability, type Deployment, type DeploymentTarget, type PoolSpec } from '../../src/core/types.js';
import { planRoute, type PlannedPool, type RoutePlanInput } from '../../src/director/route-plan.js';
import { Registry } from '../../src/registry/registry.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

function pool(name: string, capabilities: readonly Capability[] = ['chat']): PoolSpec {
  return { name, engine: 'vllm', servedModelName: `${name}-served`, capabilities, resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
}

/** `targets`: weight by pool name (a table row's absent keys read as undefined and are left out). */
function deployment(id: string, targets: Readonly<Record<string, number | undefined>>, fallbacks: string[] = [], aliases: string[] = []): Deployment {
  const list: DeploymentTarget[] = Object.entries(targets).flatMap(([name, weight]) => (weight === undefined ? [] : [{ pool: name, weight }]));
  return { id, model: `${id}-model`, aliases, targets: list, fallbacks, created: 0 };
}

const POOLS = [pool('a'), pool('b'), pool('c'), pool('d'), pool('e'), pool('emb', ['embeddings']), pool('both', ['chat', 'embeddings'])];

function input(deployments: readonly Deployment[], opts: { random?: number; withoutEndpoints?: string[] } = {}): RoutePlanInput {
  const empty = new Set(opts.withoutEndpoints ?? []);
  const random = opts.random ?? 0;
  return { catalog: new Registry(POOLS, deployments), hasEndpoints: (name) => !empty.has(name), random: () => random };
}

/** The route as `pool@deployment` strings, easy to read in a table. */
function names(route: readonly PlannedPool[]): string[] {
  return route.map((r) => `${r.pool.name}@${r.deployment}`);
}

function thrown(fn: () => unknown): RouterError {
  try {
    fn();
  } catch (err) {
    if (err instanceof RouterError) return err;
    throw err;
  }
  throw new Error('expected planRoute to throw');
}

describe('planRoute: the deployment’s own pools', () => {
  // weights a:1, b:3, c:2 (total 6): random × 6 walks the targets in their listed order
  const weighted = deployment('main', { a: 1, b: 3, c: 2 });

  it.each([
    { random: 0, route: ['a', 'b', 'c'] },
    { random: 0.16, route: ['a', 'b', 'c'] }, // 0.96 < 1
    { random: 0.17, route: ['b', 'c', 'a'] }, // 1.02: past a, inside b
    { random: 0.66, route: ['b', 'c', 'a'] }, // 3.96 < 4
    { random: 0.67, route: ['c', 'b', 'a'] }, // 4.02: inside c
    { random: 0.999, route: ['c', 'b', 'a'] },
  ])('random $random: the weighted choice first, then the rest by weight → $route', ({ random, route }) => {
    expect(planRoute(input([weighted], { random }), weighted, 'chat', 'main').map((r) => r.pool.name)).toEqual(route);
  });

  it.each([
    { case: 'a pool without endpoints is skipped', targets: { a: 1, b: 3, c: 2 }, withoutEndpoints: ['b'], random: 0.5, route: ['c', 'a'] },
    { case: 'the choice is made among pools with endpoints only', targets: { a: 1, b: 3 }, withoutEndpoints: ['b'], random: 0.99, route: ['a'] },
    { case: 'a target of weight 0 is never tried', targets: { a: 0, b: 1 }, withoutEndpoints: [], random: 0, route: ['b'] },
    { case: 'a target naming an unknown pool is ignored', targets: { ghost: 5, a: 1 }, withoutEndpoints: [], random: 0, route: ['a'] },
    { case: 'equal weights keep the listed order after the choice', targets: { a: 1, b: 1, c: 1 }, withoutEndpoints: [], random: 0.5, route: ['b', 'a', 'c'] },
    { case: 'a pool of the other kind is left out', targets: { emb: 5, a: 1 }, withoutEndpoints: [], random: 0, route: ['a'] },
    { case: 'a pool serving both kinds is kept', targets: { both: 1, emb: 1 }, withoutEndpoints: [], random: 0.9, route: ['both'] },
  ])('$case', ({ targets, withoutEndpoints, random, route }) => {
    const dep = deployment('main', targets);
    const planned = planRoute(input([dep], { random, withoutEndpoints }), dep, 'chat', 'main');
    expect(planned.map((r) => r.pool.name)).toEqual(route);
    expect(planned.every((r) => r.deployment === 'main')).toBe(true);
  });

  it('hands out the catalog’s own PoolSpec objects', () => {
    const dep = deployment('main', { a: 1 });
    const catalogInput = input([dep]);
    expect(planRoute(catalogInput, dep, 'chat', 'main')[0]?.pool).toBe(catalogInput.catalog.pool('a'));
  });
});

describe('planRoute: fallbacks', () => {
  const backup = deployment('backup', { b: 1, c: 1 }, ['third']); // b is shared with main; 'third' is a fallback of a fallback
  const third = deployment('third', { d: 1 });
  const other = deployment('other', { e: 1 }, [], ['nickname']);
  const embeddingsOnly = deployment('vectors', { emb: 1 });

  it.each([
    {
      case: 'appended after the own pools, in the fallback’s order; its own fallback (third) not followed',
      fallbacks: ['backup'],
      own: { a: 1 },
      without: [],
      route: ['a@main', 'b@backup', 'c@backup'],
    },
    { case: 'a pool already on the route is not listed twice', fallbacks: ['backup'], own: { a: 1, b: 1 }, without: [], route: ['a@main', 'b@main', 'c@backup'] },
    { case: 'a fallback’s own fallback is reached only when listed directly', fallbacks: ['backup', 'third'], own: { a: 1 }, without: [], route: ['a@main', 'b@backup', 'c@backup', 'd@third'] },
    { case: 'several fallbacks, in the listed order', fallbacks: ['third', 'backup'], own: { a: 1 }, without: [], route: ['a@main', 'd@third', 'b@backup', 'c@backup'] },
    { case: 'an unknown fallback is ignored', fallbacks: ['ghost', 'third'], own: { a: 1 }, without: [], route: ['a@main', 'd@third'] },
    { case: 'a fallback named by alias is ignored (IDs only)', fallbacks: ['nickname', 'third'], own: { a: 1 }, without: [], route: ['a@main', 'd@third'] },
    { case: 'a fallback named by model is ignored (IDs only)', fallbacks: ['other-model'], own: { a: 1 }, without: [], route: ['a@main'] },
    { case: 'the deployment as its own fallback is ignored', fallbacks: ['main', 'third'], own: { a: 1 }, without: [], route: ['a@main', 'd@third'] },
    { case: 'a fallback of the other kind adds nothing (and is no mismatch)', fallbacks: ['vectors', 'third'], own: { a: 1 }, without: [], route: ['a@main', 'd@third'] },
    { case: 'fallback pools without endpoints are skipped', fallbacks: ['backup'], own: { a: 1 }, without: ['c'], route: ['a@main', 'b@backup'] },
    { case: 'the route starts at a fallback when no own pool is ready', fallbacks: ['backup'], own: { a: 1 }, without: ['a'], route: ['b@backup', 'c@backup'] },
  ])('$case', ({ fallbacks, own, without, route }) => {
    const main = deployment('main', own, fallbacks);
    const planned = planRoute(input([main, backup, third, other, embeddingsOnly], { withoutEndpoints: without }), main, 'chat', 'main');
    expect(names(planned)).toEqual(route);
  });

  it('names each step’s deployment by its label: `namespace/name` in Kubernetes mode, on the short route and the general one', () => {
    const ns = (d: Deployment, namespace: string): Deployment => ({ ...d, namespace, label: `${namespace}/${d.id}` });
    const single = ns(deployment('main', { a: 1 }), 'team-a');
    expect(names(planRoute(input([single]), single, 'chat', 'main'))).toEqual(['a@team-a/main']);
    const main = ns(deployment('main', { a: 1 }, ['backup']), 'team-a');
    const ownBackup = ns(deployment('backup', { b: 1 }), 'team-a');
    const theirBackup = ns(deployment('backup', { c: 1 }), 'team-b');
    expect(names(planRoute(input([main, theirBackup, ownBackup]), main, 'chat', 'main'))).toEqual(['a@team-a/main', 'b@team-a/backup']);
  });
});

describe('planRoute: no route', () => {
  it.each([
    { kind: 'chat' as const, targets: { emb: 1 }, serves: 'it serves embeddings' },
    { kind: 'embeddings' as const, targets: { a: 1, b: 2 }, serves: 'it serves chat completions' },
  ])('a deployment serving only the other kind than $kind → MODEL_CAPABILITY_MISMATCH on param model', ({ kind, targets, serves }) => {
    const dep = deployment('main', targets, ['backup']);
    const backup = deployment('backup', { both: 1 });
    const err = thrown(() => planRoute(input([dep, backup]), dep, kind, 'my-alias'));
    expect(err.code).toBe('MODEL_CAPABILITY_MISMATCH');
    expect(err.status).toBe(400);
    expect(err.param).toBe('model');
    expect(err.message).toContain('`my-alias`');
    expect(err.message).toContain(serves);
  });

  it('is no mismatch when a capable pool exists but has no endpoints: NO_READY_REPLICA instead', () => {
    const dep = deployment('main', { a: 1, emb: 1 });
    expect(thrown(() => planRoute(input([dep], { withoutEndpoints: ['a'] }), dep, 'chat', 'main')).code).toBe('NO_READY_REPLICA');
  });

  it.each([
    { case: 'no pool has endpoints', targets: { a: 1, b: 1 }, fallbacks: ['backup'], without: ['a', 'b', 'c'] },
    { case: 'every target names an unknown pool', targets: { ghost: 1 }, fallbacks: [], without: [] },
    { case: 'no targets at all', targets: {}, fallbacks: [], without: [] },
    { case: 'only weight-0 targets', targets: { a: 0 }, fallbacks: [], without: [] },
    { case: 'only unknown fallbacks', targets: { a: 1 }, fallbacks: ['ghost'], without: ['a'] },
  ])('$case → NO_READY_REPLICA, 503 with Retry-After 2', ({ targets, fallbacks, without }) => {
    const dep = deployment('main', targets, fallbacks);
    const backup = deployment('backup', { c: 1 });
    const err = thrown(() => planRoute(input([dep, backup], { withoutEndpoints: without }), dep, 'chat', 'asked-name'));
    expect(err.code).toBe('NO_READY_REPLICA');
    expect(err.message).toContain('`asked-name`');
    const answer = toErrorResponse(err);
    expect(answer.status).toBe(503);
    expect(answer.headers).toEqual({ 'retry-after': '2' });
    expect(answer.body.error.code).toBe('no_ready_replica');
  });
});
