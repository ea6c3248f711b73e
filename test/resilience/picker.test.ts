/**
 * EndpointPicker with its real collaborators (InFlight, BreakerRegistry, AdmissionQueues on fake time)
 * and fakes only for what comes from outside: discovery's endpoints, health checks, engine metrics.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { isAbortError } from '../../src/core/clock.js';
import { RouterError } from '../../src/core/errors.js';
import { type Endpoint, type EngineLoad, type PoolSpec, type Priority } from '../../src/core/types.js';
import { AdmissionQueues } from '../../src/resilience/admission.js';
import { BreakerRegistry } from '../../src/resilience/breaker.js';
import { HealthChecker } from '../../src/resilience/health-checker.js';
import { EndpointPicker, HOLD_POLL_MS, REMEMBERED_REMOVALS, type HealthView, type Picked } from '../../src/resilience/picker.js';
import { mergeResilience, RESILIENCE_DEFAULTS, type ResilienceOverrides } from '../../src/resilience/settings.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

function endpoint(id: string, weight = 1): Endpoint {
  return { id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight };
}

function pool(resilience: ResilienceOverrides = {}, engineMetrics = true): PoolSpec {
  return {
    name: 'p',
    engine: 'vllm',
    servedModelName: 'm',
    capabilities: ['chat'],
    resilience: mergeResilience(RESILIENCE_DEFAULTS, { breaker: { failureThreshold: 1 }, ...resilience }),
    routing: { ...ROUTING_DEFAULTS, engineMetrics: { ...ROUTING_DEFAULTS.engineMetrics, enabled: engineMetrics } },
  };
}

/** An engine sample; the default saturation thresholds are queueDepth 5, kvCacheUsage 0.8. */
function load(waiting: number, kvCacheUsage?: number): EngineLoad {
  return { waiting, running: 1, at: 0, localAtSample: 0, ...(kvCacheUsage === undefined ? {} : { kvCacheUsage }) };
}

const opened: BreakerRegistry[] = [];
afterEach(() => {
  // the breakers' cool-downs run on real (unref'd) timers by default: stop them
  for (const breakers of opened.splice(0)) breakers.shutdown();
});

const endpoints = (ids: Array<string | Endpoint>): Endpoint[] => ids.map((e) => (typeof e === 'string' ? endpoint(e) : e));

/** `health`: a health view of the test's own (default: the `unhealthy` set, asked on every pick as it has no version). */
function setup(ids: Array<string | Endpoint>, health?: (time: FakeTime, snapshot: () => readonly Endpoint[]) => HealthView) {
  const time = new FakeTime();
  // discovery's snapshot: the same array until replaced
  let snapshot: readonly Endpoint[] = endpoints(ids);
  const unhealthy = new Set<string>();
  const loads = new Map<string, EngineLoad>();
  const inFlight = new InFlight();
  const breakers = new BreakerRegistry(undefined, time, undefined, undefined, () => time.now());
  opened.push(breakers);
  const events: string[] = [];
  const admission = new AdmissionQueues(time, () => time.now(), {
    onQueued: (p) => events.push(`queued:${p}`),
    onDequeued: (p, ms, result) => events.push(`dequeued:${p}:${result}:${ms}`),
    onRejected: (p, reason) => events.push(`rejected:${p}:${reason}`),
  });
  let draw = 0;
  let clockReads = 0;
  const engineReads: Array<number | undefined> = [];
  const picker = new EndpointPicker({
    endpoints: { snapshot: (name) => (name === 'p' ? snapshot : []) },
    inFlight,
    breakers,
    health: health?.(time, () => snapshot) ?? { isHealthy: (id) => !unhealthy.has(id) },
    admission,
    engine: {
      load: (id, now) => {
        engineReads.push(now);
        return loads.get(id);
      },
      now: () => ++clockReads,
    },
    random: () => draw,
    events: { onShed: (p) => events.push(`shed:${p}`), onHold: (p, event) => events.push(`hold:${p}:${event}`) },
    scheduler: time,
  });
  const open = (spec: PoolSpec, id: string): void => {
    const breaker = breakers.get(id, spec.name, spec.resilience.breaker);
    for (let i = 0; i < spec.resilience.breaker.failureThreshold; i++) breaker.answerEnded('failure');
    expect(breaker.state).toBe('open');
  };
  return {
    time,
    picker,
    inFlight,
    breakers,
    admission,
    unhealthy,
    loads,
    events,
    open,
    engineReads,
    clockReads: () => clockReads,
    setDraw: (r: number) => (draw = r),
    setSnapshot: (ids: Array<string | Endpoint>) => (snapshot = endpoints(ids)),
  };
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

async function routerError(promise: Promise<unknown>): Promise<RouterError> {
  const err = await rejection(promise);
  if (!(err instanceof RouterError)) throw new Error(`expected a RouterError, got ${String(err)}`);
  return err;
}

/** A pick that is still pending, and how it ended once it has. */
function track(promise: Promise<Picked>): { state: () => string; picked: () => Picked | undefined; error: () => unknown } {
  let state = 'pending';
  let value: Picked | undefined;
  let error: unknown;
  promise.then(
    (p) => {
      state = 'picked';
      value = p;
    },
    (err: unknown) => {
      state = 'rejected';
      error = err;
    },
  );
  return { state: () => state, picked: () => value, error: () => error };
}

describe('EndpointPicker: who can take traffic', () => {
  it.each([
    { case: 'the pool has no endpoints', ids: [], unhealthy: [], open: [], wait: 2 },
    { case: 'every endpoint fails its health checks', ids: ['a', 'b'], unhealthy: ['a', 'b'], open: [], wait: 2 },
    // the official SDKs retry after the wait they are told: the breakers' cool-down (10 s by default), not 2 s into it
    { case: 'every endpoint’s breaker is open', ids: ['a', 'b'], unhealthy: [], open: ['a', 'b'], wait: 10 },
    { case: 'one unhealthy, the other open', ids: ['a', 'b'], unhealthy: ['a'], open: ['b'], wait: 10 },
  ])('NO_READY_REPLICA (503, Retry-After $wait) when $case, without queueing', async ({ ids, unhealthy, open, wait }) => {
    const t = setup(ids);
    const spec = pool({ maxConcurrencyPerReplica: 1 });
    for (const id of unhealthy) t.unhealthy.add(id);
    for (const id of open) t.open(spec, id);
    const err = await routerError(t.picker.pick(spec, new Set()));
    expect(err.code).toBe('NO_READY_REPLICA');
    expect(err.status).toBe(503);
    expect(err.retryAfterSeconds).toBe(wait);
    expect(t.admission.depth('p')).toBe(0);
    expect(t.events).toEqual([]);
    expect(t.picker.hasUntried(spec, new Set())).toBe(false);
  });

  it('with every healthy replica held out by an open breaker, Retry-After is when the first turns half-open (whole seconds, at least 1)', async () => {
    const t = setup(['a', 'b']);
    const spec = pool({ breaker: { cooldownMs: 10_000 } });
    t.open(spec, 'a');
    await t.time.advance(4_000);
    t.open(spec, 'b');
    const wait = async (): Promise<number | undefined> => (await routerError(t.picker.pick(spec, new Set()))).retryAfterSeconds;
    expect(await wait()).toBe(6); // a's cool-down has 6 s left, b's 10
    const err = await routerError(t.picker.pick(spec, new Set()));
    expect(err.message).toMatch(/circuit breaker.*tried again in 6 s/);
    await t.time.advance(5_700);
    expect(await wait()).toBe(1); // 0.3 s left: rounded up
  });

  it('a half-open replica whose probe is under way gives the usual Retry-After (the probe decides it, at no known time)', async () => {
    const t = setup(['a', 'b']);
    const spec = pool({ breaker: { cooldownMs: 10_000 } });
    t.open(spec, 'a');
    t.open(spec, 'b');
    await t.time.advance(10_000);
    const probeA = t.breakers.find('a')?.begin();
    const probeB = t.breakers.find('b')?.begin();
    expect(probeA && probeB).toBeDefined();
    expect((await routerError(t.picker.pick(spec, new Set()))).retryAfterSeconds).toBe(2);
    probeA?.settle('failure'); // a opens again for a whole cool-down; b's probe is still out
    await flush();
    expect((await routerError(t.picker.pick(spec, new Set()))).retryAfterSeconds).toBe(2);
  });

  it('a breaker’s cool-down left is undefined unless it is open, and counts down on its clock', async () => {
    const time = new FakeTime();
    const breakers = new BreakerRegistry(undefined, time, undefined, undefined, () => time.now());
    opened.push(breakers);
    const breaker = breakers.get('x', 'p', { failureThreshold: 1, cooldownMs: 3_000, closeAfterSuccesses: 1 });
    expect(breaker.cooldownLeftMs()).toBeUndefined();
    breaker.answerEnded('failure');
    expect(breaker.cooldownLeftMs()).toBe(3_000);
    await time.advance(2_500);
    expect(breaker.cooldownLeftMs()).toBe(500);
    await time.advance(500);
    expect(breaker.state).toBe('half-open');
    expect(breaker.cooldownLeftMs()).toBeUndefined();
  });

  it.each([0, 0.3, 0.6, 0.99])('picks the one usable endpoint whatever the draw (%p)', async (draw) => {
    const t = setup(['sick', 'broken', 'fine']);
    const spec = pool();
    t.unhealthy.add('sick');
    t.open(spec, 'broken');
    t.setDraw(draw);
    const picked = await t.picker.pick(spec, new Set());
    expect(picked.endpoint.id).toBe('fine');
    picked.release();
  });

  it('reads the engine samples’ clock once a pick, not once an endpoint', async () => {
    const { picker, engineReads, clockReads } = setup(['a', 'b', 'c']);
    (await picker.pick(pool(), new Set())).release();
    expect(clockReads()).toBe(1);
    expect(engineReads).toEqual([1, 1, 1]);
  });

  it('avoids the endpoints this request tried while an untried one is usable', async () => {
    const t = setup(['a', 'b', 'c']);
    const spec = pool();
    const seen = new Set<string>();
    for (const draw of [0, 0.25, 0.5, 0.75, 0.99]) {
      t.setDraw(draw);
      const picked = await t.picker.pick(spec, new Set(['a']));
      seen.add(picked.endpoint.id);
      picked.release();
    }
    expect([...seen].sort()).toEqual(['b', 'c']);
    const last = await t.picker.pick(spec, new Set(['a', 'b']));
    expect(last.endpoint.id).toBe('c');
    last.release();
  });

  it('tries a tried endpoint again when every usable one was tried (not NO_READY_REPLICA)', async () => {
    const t = setup(['a', 'b']);
    const spec = pool();
    t.unhealthy.add('b');
    const picked = await t.picker.pick(spec, new Set(['a', 'b']));
    expect(picked.endpoint.id).toBe('a');
    picked.release();
  });

  it.each([
    { case: 'nothing tried', tried: [], unhealthy: [], open: [], untried: true },
    { case: 'one of two tried', tried: ['a'], unhealthy: [], open: [], untried: true },
    { case: 'both tried', tried: ['a', 'b'], unhealthy: [], open: [], untried: false },
    { case: 'the untried one is unhealthy', tried: ['a'], unhealthy: ['b'], open: [], untried: false },
    { case: 'the untried one’s breaker is open', tried: ['a'], unhealthy: [], open: ['b'], untried: false },
    { case: 'the tried one is unhealthy, the other untried', tried: ['a'], unhealthy: ['a'], open: [], untried: true },
    { case: 'a tried id that is no endpoint (any more)', tried: ['gone'], unhealthy: [], open: [], untried: true },
  ])('hasUntried: $case → $untried', ({ tried, unhealthy, open, untried }) => {
    const t = setup(['a', 'b']);
    const spec = pool();
    for (const id of unhealthy) t.unhealthy.add(id);
    for (const id of open) t.open(spec, id);
    expect(t.picker.hasUntried(spec, new Set(tried))).toBe(untried);
  });
});

describe('EndpointPicker: what a pick holds', () => {
  it('holds a concurrency slot until release, which is idempotent', async () => {
    const t = setup(['a']);
    const picked = await t.picker.pick(pool(), new Set());
    expect(t.inFlight.count('a')).toBe(1);
    expect([...t.inFlight.byEndpoint()]).toEqual([{ endpoint: 'a', pool: 'p', count: 1 }]);
    picked.release();
    picked.release();
    expect(t.inFlight.count('a')).toBe(0);
  });

  it('says how long each request held its replica’s slot, from the pick to the release: not its wait in the queue before', async () => {
    const time = new FakeTime();
    const breakers = new BreakerRegistry(undefined, time);
    opened.push(breakers);
    const held: Array<[string, number]> = [];
    const picker = new EndpointPicker({
      endpoints: { snapshot: () => endpoints(['a']) },
      inFlight: new InFlight(),
      breakers,
      health: { isHealthy: () => true },
      admission: new AdmissionQueues(time, () => time.now()),
      engine: { load: () => undefined },
      now: () => time.now(),
      random: () => 0,
      events: { onReleased: (p, ms) => held.push([p, ms]) },
      scheduler: time,
    });
    const limited = pool({ maxConcurrencyPerReplica: 1 });
    const first = await picker.pick(limited, new Set());
    const second = track(picker.pick(limited, new Set()));
    await flush();
    expect(second.state()).toBe('pending'); // waits in the queue for the one slot
    await time.advance(500);
    first.release();
    first.release(); // once
    await flush();
    expect(second.state()).toBe('picked');
    await time.advance(200);
    second.picked()!.release();
    expect(held).toEqual([
      ['p', 500],
      ['p', 200],
    ]);
  });

  it('hands out a breaker ticket whose failure opens the breaker (threshold 1): the next pick finds no replica', async () => {
    const t = setup(['a']);
    const spec = pool();
    const picked = await t.picker.pick(spec, new Set());
    picked.ticket.settle('failure');
    picked.release();
    await flush();
    expect([...t.breakers.states()]).toEqual([{ pool: 'p', endpoint: 'a', state: 'open' }]);
    expect((await routerError(t.picker.pick(spec, new Set()))).code).toBe('NO_READY_REPLICA');
  });

  it.each(['success', 'backpressure'] as const)('a %s ticket leaves the breaker closed', async (outcome) => {
    const t = setup(['a']);
    const spec = pool();
    const picked = await t.picker.pick(spec, new Set());
    picked.ticket.settle(outcome);
    picked.release();
    await flush();
    expect([...t.breakers.states()]).toEqual([{ pool: 'p', endpoint: 'a', state: 'closed' }]);
    (await t.picker.pick(spec, new Set())).release();
  });

  it('makes no breaker again for an answer that ends after its endpoint left the snapshot (its breaker was dropped with it)', async () => {
    const t = setup(['a', 'b']);
    const spec = pool();
    (await t.picker.pick(spec, new Set())).release();
    expect([...t.breakers.states()].map((b) => b.endpoint)).toEqual(['a', 'b']);
    t.setSnapshot(['b']); // a replaced: discovery drops it, and its breaker
    t.breakers.retain(new Set(['b']));
    t.picker.recordAnswerEnd(spec, 'a', 'failure'); // a stream it carried, cut as the pod stopped
    expect([...t.breakers.states()].map((b) => b.endpoint)).toEqual(['b']);
  });

  it('recordAnswerEnd counts an answer’s end on the endpoint’s breaker: a success resets the count, failures open it', async () => {
    const t = setup(['a', 'b']);
    const spec = pool({ breaker: { failureThreshold: 2 } });
    t.picker.recordAnswerEnd(spec, 'a', 'failure');
    t.picker.recordAnswerEnd(spec, 'a', 'success');
    t.picker.recordAnswerEnd(spec, 'a', 'failure');
    expect(t.breakers.get('a', 'p', spec.resilience.breaker).state).toBe('closed');
    t.picker.recordAnswerEnd(spec, 'a', 'failure');
    expect(t.breakers.get('a', 'p', spec.resilience.breaker).state).toBe('open');
    for (const draw of [0, 0.99]) {
      t.setDraw(draw);
      const picked = await t.picker.pick(spec, new Set());
      expect(picked.endpoint.id).toBe('b');
      picked.release();
    }
  });
});

describe('EndpointPicker: concurrency limit and admission', () => {
  const limited = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 4, timeoutMs: 1_000 } });

  it('queues a request while every replica is at its limit; release lets it in', async () => {
    const t = setup(['a']);
    const first = await t.picker.pick(limited, new Set());
    const second = track(t.picker.pick(limited, new Set()));
    await flush();
    expect(second.state()).toBe('pending');
    expect(t.admission.depth('p')).toBe(1);
    await t.time.advance(250);
    first.release();
    await flush();
    expect(second.state()).toBe('picked');
    expect(second.picked()?.endpoint.id).toBe('a');
    expect(t.admission.depth('p')).toBe(0);
    expect(t.inFlight.count('a')).toBe(1);
    expect(t.events).toEqual(['queued:p', 'dequeued:p:admitted:250']);
    second.picked()?.release();
    expect(t.inFlight.count('a')).toBe(0);
  });

  it('a queued request that no slot reaches in time gets QUEUE_TIMEOUT (429)', async () => {
    const t = setup(['a']);
    const first = await t.picker.pick(limited, new Set());
    const second = track(t.picker.pick(limited, new Set()));
    await t.time.advance(999);
    expect(second.state()).toBe('pending');
    await t.time.advance(1);
    expect(second.state()).toBe('rejected');
    const err = second.error();
    expect(err instanceof RouterError && err.code).toBe('QUEUE_TIMEOUT');
    expect(t.admission.depth('p')).toBe(0);
    first.release();
  });

  it('a queued request whose pool is removed is answered at once (NO_READY_REPLICA: the route moves on), and the pool’s view lets go of its endpoints', async () => {
    const t = setup(['a']);
    const first = await t.picker.pick(limited, new Set());
    const second = track(t.picker.pick(limited, new Set()));
    await flush();
    expect(t.admission.depth('p')).toBe(1);
    t.setSnapshot([]);
    const dropped: string[] = [];
    const drop = t.inFlight.drop.bind(t.inFlight);
    t.inFlight.drop = (id: string): void => {
      dropped.push(id);
      drop(id);
    };
    t.picker.poolRemoved('p');
    expect(dropped).toEqual(['a']);
    await flush();
    expect(second.state()).toBe('rejected');
    expect(second.error()).toMatchObject({ code: 'NO_READY_REPLICA' });
    expect(t.events).toEqual(['queued:p', 'dequeued:p:pool_removed:0', 'rejected:p:pool_removed']);
    // the request already under way finishes as before; with it released, nothing of the pool is kept
    expect(t.inFlight.count('a')).toBe(1);
    first.release();
    expect([...t.inFlight.entries()]).toEqual([]);
    expect(t.time.pendingTimers).toBe(0);
  });

  it('a queued request whose client leaves is taken out with an AbortError', async () => {
    const t = setup(['a']);
    const first = await t.picker.pick(limited, new Set());
    const controller = new AbortController();
    const second = track(t.picker.pick(limited, new Set(), controller.signal));
    await flush();
    controller.abort();
    await flush();
    expect(second.state()).toBe('rejected');
    expect(isAbortError(second.error())).toBe(true);
    expect(t.admission.depth('p')).toBe(0);
    first.release();
    expect(t.inFlight.count('a')).toBe(0);
  });

  it('a replica of weight 2 takes twice the limit before requests queue', async () => {
    const t = setup([endpoint('a', 2)]);
    const held = [await t.picker.pick(limited, new Set()), await t.picker.pick(limited, new Set())];
    expect(t.inFlight.count('a')).toBe(2);
    const third = track(t.picker.pick(limited, new Set()));
    await flush();
    expect(third.state()).toBe('pending');
    held[0]?.release();
    await flush();
    expect(third.state()).toBe('picked');
    held[1]?.release();
    third.picked()?.release();
  });

  it('with no limit (0) nothing queues', async () => {
    const t = setup(['a']);
    const held = await Promise.all([0, 1, 2, 3, 4].map(() => t.picker.pick(pool(), new Set())));
    expect(t.inFlight.count('a')).toBe(5);
    expect(t.events).toEqual([]);
    for (const p of held) p.release();
  });

  it("queued requests of one priority take turns by tenant (the request's API key), by weight", async () => {
    const t = setup(['a']);
    const wide = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 10, timeoutMs: 1_000 } });
    let held = await t.picker.pick(wide, new Set());
    const order: string[] = [];
    const waiting = new Map<string, Promise<Picked>>();
    const queue = (label: string, tenant: string, weight?: number): void => {
      const request = { priority: 'standard' as Priority, tenant, ...(weight === undefined ? {} : { weight }) };
      waiting.set(
        label,
        t.picker.pick(wide, new Set(), undefined, request).then((picked) => (order.push(label), picked)),
      );
    };
    for (const label of ['flood0', 'flood1', 'flood2']) queue(label, 'flood');
    for (const label of ['trickle0', 'trickle1']) queue(label, 'trickle', 2);
    while (order.length < waiting.size) {
      held.release(); // the only slot frees: the next in turn takes it
      await flush();
      held = await (waiting.get(order.at(-1) ?? '') as Promise<Picked>);
    }
    held.release();
    // flood: 0, 1, 2; trickle (weight 2): 0, 0.5
    expect(order).toEqual(['flood0', 'trickle0', 'trickle1', 'flood1', 'flood2']);
  });

  it('a sheddable request never waits for a slot: REQUEST_SHED (429) at once', async () => {
    const t = setup(['a']);
    const first = await t.picker.pick(limited, new Set());
    const err = await routerError(t.picker.pick(limited, new Set(), undefined, { priority: 'sheddable' }));
    expect(err.code).toBe('REQUEST_SHED');
    expect(err.status).toBe(429);
    expect(t.admission.depth('p')).toBe(0);
    expect(t.events).toEqual(['rejected:p:shed']);
    first.release();
  });
});

describe('EndpointPicker: shedding on engine saturation', () => {
  it.each<{ case: string; loads: Record<string, EngineLoad>; unhealthy?: string[]; engineMetrics?: boolean; shed: boolean }>([
    { case: 'every replica’s queue at the threshold', loads: { a: load(5), b: load(9) }, shed: true },
    { case: 'every replica’s KV cache at the threshold', loads: { a: load(0, 0.8), b: load(0, 0.95) }, shed: true },
    { case: 'one by queue, one by KV cache', loads: { a: load(6), b: load(0, 0.9) }, shed: true },
    { case: 'one replica below both thresholds', loads: { a: load(5), b: load(4, 0.79) }, shed: false },
    { case: 'one replica without a fresh sample', loads: { a: load(50) }, shed: false },
    { case: 'the only unsaturated replica is unhealthy (only usable ones count)', loads: { a: load(50) }, unhealthy: ['b'], shed: true },
    { case: 'engine metrics disabled for the pool', loads: { a: load(50), b: load(50) }, engineMetrics: false, shed: false },
  ])('sheddable: $case → shed $shed', async ({ loads, unhealthy = [], engineMetrics = true, shed }) => {
    const t = setup(['a', 'b']);
    const spec = pool({}, engineMetrics);
    for (const [id, sample] of Object.entries(loads)) t.loads.set(id, sample);
    for (const id of unhealthy) t.unhealthy.add(id);
    const pick = t.picker.pick(spec, new Set(), undefined, { priority: 'sheddable' });
    if (shed) {
      const err = await routerError(pick);
      expect(err.code).toBe('REQUEST_SHED');
      expect(err.retryAfterSeconds).toBe(1);
      expect(t.events).toEqual(['shed:p']);
      expect(t.inFlight.total()).toBe(0);
    } else {
      (await pick).release();
      expect(t.events).toEqual([]);
    }
  });

  it.each<Priority>(['standard', 'critical'])('a %s request is never shed for saturation', async (priority) => {
    const t = setup(['a', 'b']);
    t.loads.set('a', load(50));
    t.loads.set('b', load(50));
    const picked = await t.picker.pick(pool(), new Set(), undefined, { priority });
    expect(['a', 'b']).toContain(picked.endpoint.id);
    expect(t.events).toEqual([]);
    picked.release();
  });
});

describe('EndpointPicker: a request pinned to one endpoint (PickRequest.only)', () => {
  const pinned = { priority: 'standard' as Priority, only: 'b' };

  it('goes only there, whatever the scheduler would prefer, and again after trying it', async () => {
    const t = setup(['a', 'b', 'c']);
    const spec = pool();
    t.inFlight.acquire('b', 'p'); // b is the busiest: least-outstanding alone would never pick it
    for (let i = 0; i < 3; i++) {
      const picked = await t.picker.pick(spec, new Set(i === 0 ? [] : ['b']), undefined, pinned);
      expect(picked.endpoint.id).toBe('b');
      picked.release();
    }
    expect(t.picker.hasUntried(spec, new Set(['b']), pinned)).toBe(false);
    expect(t.picker.hasUntried(spec, new Set(), pinned)).toBe(true);
  });

  it('waits in the queue for it when it is full rather than going elsewhere', async () => {
    const t = setup(['a', 'b']);
    const spec = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 4, timeoutMs: 1_000 } });
    const first = await t.picker.pick(spec, new Set(), undefined, pinned);
    let second: Picked | undefined;
    void t.picker.pick(spec, new Set(), undefined, pinned).then((p) => (second = p));
    await flush();
    expect(second).toBeUndefined();
    expect(t.events).toContain('queued:p');
    first.release();
    await flush();
    expect(second?.endpoint.id).toBe('b');
    second?.release();
  });

  it("waiting for its full replica, does not hold up another key's request queued behind it when another replica frees a slot", async () => {
    const t = setup(['a', 'b']);
    const spec = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 4, timeoutMs: 1_000 } });
    const onB = await t.picker.pick(spec, new Set(), undefined, pinned);
    const onA = await t.picker.pick(spec, new Set(), undefined, { priority: 'standard' });
    expect(onA.endpoint.id).toBe('a');
    let follow: Picked | undefined;
    let other: Picked | undefined;
    let retry: Picked | undefined;
    void t.picker.pick(spec, new Set(), undefined, { ...pinned, tenant: 'team-a' }).then((p) => (follow = p));
    void t.picker.pick(spec, new Set(['a']), undefined, { priority: 'standard', tenant: 'team-c' }).then((p) => (retry = p));
    void t.picker.pick(spec, new Set(), undefined, { priority: 'standard', tenant: 'team-b' }).then((p) => (other = p));
    await flush();
    expect(t.admission.depth('p')).toBe(3);
    // a frees: the follow-up (pinned to b) and the retry (a tried) cannot take it; the request behind them does
    onA.release();
    await flush();
    expect(other?.endpoint.id).toBe('a');
    expect(follow).toBeUndefined();
    expect(retry).toBeUndefined();
    // b frees: the follow-up, first in line, takes it; then the retry gets the next slot
    onB.release();
    await flush();
    expect(follow?.endpoint.id).toBe('b');
    expect(retry).toBeUndefined();
    follow?.release();
    await flush();
    expect(retry?.endpoint.id).toBe('b');
    other?.release();
    retry?.release();
  });

  it('is NO_READY_REPLICA when its endpoint cannot take traffic, even though others could', async () => {
    const t = setup(['a', 'b']);
    const spec = pool();
    t.open(spec, 'b');
    expect((await routerError(t.picker.pick(spec, new Set(), undefined, pinned))).code).toBe('NO_READY_REPLICA');
  });
});

describe('EndpointPicker: what it keeps between picks, the very next pick sees change', () => {
  const spec = pool();
  const { cooldownMs } = spec.resilience.breaker;
  /** A picker whose health view has a version that never moves: it keeps what it knows until a breaker or the snapshot changes. */
  const cached = (ids: string[]): ReturnType<typeof setup> => setup(ids, () => ({ isHealthy: () => true, version: 0 }));

  /** The endpoints the next picks can land on, over draws that reach every one of up to three tied replicas. */
  async function reachable(t: ReturnType<typeof setup>, tried: ReadonlySet<string> = new Set()): Promise<string[]> {
    const seen = new Set<string>();
    for (const draw of [0, 0.4, 0.99]) {
      t.setDraw(draw);
      const picked = await t.picker.pick(spec, tried);
      seen.add(picked.endpoint.id);
      picked.ticket.settle('success');
      picked.release();
    }
    return [...seen].sort();
  }

  it('a breaker that opens, its cool-down ending, its half-open probe taken and closing', async () => {
    const t = cached(['a', 'b']);
    expect(await reachable(t)).toEqual(['a', 'b']);
    t.open(spec, 'b');
    expect(await reachable(t)).toEqual(['a']);
    await t.time.advance(cooldownMs);
    expect(t.breakers.get('b', 'p', spec.resilience.breaker).state).toBe('half-open');
    const probe = await t.picker.pick(spec, new Set(['a'])); // the untried one: b, its probe
    expect(probe.endpoint.id).toBe('b');
    // b's probe slot is taken: a request that tried a goes to a again rather than to b
    const next = await t.picker.pick(spec, new Set(['a']));
    expect(next.endpoint.id).toBe('a');
    next.release();
    probe.ticket.settle('success');
    probe.release();
    await flush();
    expect(t.breakers.get('b', 'p', spec.resilience.breaker).state).toBe('closed');
    expect(await reachable(t)).toEqual(['a', 'b']);
  });

  it('a breaker dropped for an endpoint no longer listed: a new one, closed, if the endpoint is picked again', async () => {
    const t = cached(['a', 'b']);
    expect(await reachable(t)).toEqual(['a', 'b']);
    t.open(spec, 'b');
    expect(await reachable(t)).toEqual(['a']);
    t.breakers.retain(new Set(['a']));
    expect(await reachable(t)).toEqual(['a', 'b']);
  });

  it('a health check that fails, and passes again (the health checker’s version)', async () => {
    let failing = new Set<string>();
    const checks = pool({ healthCheck: { enabled: true, intervalMs: 1_000, unhealthyThreshold: 1, healthyThreshold: 1 } });
    let checker: HealthChecker | undefined;
    const t = setup(['a', 'b'], (time, snapshot) => {
      checker = new HealthChecker({
        endpoints: { snapshot },
        pools: () => [checks],
        scheduler: time,
        now: () => time.now(),
        probe: (url) => Promise.resolve(!failing.has(url.hostname.split('.')[0] ?? '')),
      });
      return checker;
    });
    const round = async (): Promise<void> => {
      await t.time.advance(1_000);
      await checker?.runOnce();
    };
    expect(await reachable(t)).toEqual(['a', 'b']);
    failing = new Set(['b']);
    await round();
    expect(checker?.isHealthy('b')).toBe(false);
    expect(await reachable(t)).toEqual(['a']);
    failing = new Set();
    await round();
    expect(await reachable(t)).toEqual(['a', 'b']);
  });

  it('a replica a health check ejected comes back when its pool turns the check off (the verdict is not kept for good)', async () => {
    let checks = pool({ healthCheck: { enabled: true, intervalMs: 1_000, unhealthyThreshold: 1, healthyThreshold: 1, path: '/wrong' } });
    let checker: HealthChecker | undefined;
    const t = setup(['a', 'b'], (time, snapshot) => {
      checker = new HealthChecker({ endpoints: { snapshot }, pools: () => [checks], scheduler: time, now: () => time.now(), probe: (url) => Promise.resolve(url.pathname !== '/wrong') });
      return checker;
    });
    await t.time.advance(1_000);
    await checker?.runOnce();
    // a typo in the path: every replica fails it
    expect(['a', 'b'].map((id) => checker?.isHealthy(id))).toEqual([false, false]);
    await expect(t.picker.pick(spec, new Set())).rejects.toMatchObject({ code: 'NO_READY_REPLICA' });
    checks = pool({ healthCheck: { enabled: false } }); // the operator turns the check off again
    await t.time.advance(1_000);
    await checker?.runOnce();
    expect(['a', 'b'].map((id) => checker?.isHealthy(id))).toEqual([true, true]);
    expect(await reachable(t)).toEqual(['a', 'b']);
  });

  it('confirm: one probe now, on the pool’s health path, whether or not the pool runs checks; none for what it does not know', async () => {
    const probed: Array<[string, number]> = [];
    let pools = [pool({ healthCheck: { enabled: false, timeoutMs: 1_500 } })];
    const eps = endpoints(['a']);
    const checker = new HealthChecker({
      endpoints: { snapshot: (name) => (name === 'p' ? eps : []) },
      pools: () => pools,
      scheduler: new FakeTime(),
      now: () => 0,
      probe: (url, timeoutMs) => (probed.push([url.href, timeoutMs]), Promise.resolve(false)),
    });
    await expect(checker.confirm('p', 'a')).resolves.toBe(false);
    expect(probed).toEqual([[new URL('/health', eps[0]!.url).href, 1_500]]); // vLLM's health path
    expect(checker.isHealthy('a')).toBe(true); // its verdict is not kept: the breaker decides from it
    expect(checker.confirm('p', 'gone')).toBeUndefined();
    expect(checker.confirm('other', 'a')).toBeUndefined();
    pools = [{ ...pool({ healthCheck: { path: '/ready' } }) }];
    await checker.confirm('p', 'a');
    expect(probed.at(-1)?.[0]).toBe(new URL('/ready', eps[0]!.url).href);
  });

  it('confirm: a pass stands for the pool’s check interval (requests that keep failing ask no faster than its checks would); a failure does not', async () => {
    let now = 0;
    let healthy = true;
    let probes = 0;
    const eps = endpoints(['a']);
    const checker = new HealthChecker({
      endpoints: { snapshot: () => eps },
      pools: () => [pool({ healthCheck: { intervalMs: 5_000 } })],
      scheduler: new FakeTime(),
      now: () => now,
      probe: () => (probes++, Promise.resolve(healthy)),
    });
    await expect(checker.confirm('p', 'a')).resolves.toBe(true);
    now = 4_999;
    await expect(checker.confirm('p', 'a')).resolves.toBe(true);
    expect(probes).toBe(1);
    now = 5_000;
    healthy = false;
    await expect(checker.confirm('p', 'a')).resolves.toBe(false);
    await expect(checker.confirm('p', 'a')).resolves.toBe(false);
    expect(probes).toBe(3);
  });

  it('a probe that throws fails its own endpoint’s check, and the round still checks the others', async () => {
    const checks = pool({ healthCheck: { enabled: true, intervalMs: 1_000, unhealthyThreshold: 1, healthyThreshold: 1 } });
    let checker: HealthChecker | undefined;
    let failing = true;
    const t = setup(['a', 'b', 'c'], (time, snapshot) => {
      checker = new HealthChecker({
        endpoints: { snapshot },
        pools: () => [checks],
        scheduler: time,
        now: () => time.now(),
        // 'a' cannot be probed at all (as a URL the probe's client refuses), 'c' fails an ordinary check
        probe: (url) => {
          const host = url.hostname.split('.')[0];
          if (host === 'a') throw new TypeError('Protocol "https:" not supported');
          return Promise.resolve(!(failing && host === 'c'));
        },
      });
      return checker;
    });
    await t.time.advance(1_000);
    await checker?.runOnce();
    expect(['a', 'b', 'c'].map((id) => checker?.isHealthy(id))).toEqual([false, true, false]);
    expect(await reachable(t)).toEqual(['b']);
    failing = false;
    await t.time.advance(1_000);
    await checker?.runOnce();
    expect(await reachable(t)).toEqual(['b', 'c']);
  });

  it('a health check goes to the engine’s health path from the root, also for an endpoint URL with a path', async () => {
    const checks = pool({ healthCheck: { enabled: true, intervalMs: 1_000 } });
    const asked: string[] = [];
    let checker: HealthChecker | undefined;
    const prefixed: Endpoint = { id: 'b', pool: 'p', url: new URL('http://gateway.local:8000/replica-1/'), weight: 1 };
    const t = setup(['a', prefixed], (time, snapshot) => {
      checker = new HealthChecker({ endpoints: { snapshot }, pools: () => [checks], scheduler: time, now: () => time.now(), probe: (url) => (asked.push(url.href), Promise.resolve(true)) });
      return checker;
    });
    await t.time.advance(1_000);
    await checker?.runOnce();
    expect(asked.sort()).toEqual(['http://a.local:8000/health', 'http://gateway.local:8000/health']);
  });

  it('a health view without a version is asked on every pick', async () => {
    const t = setup(['a', 'b']);
    expect(await reachable(t)).toEqual(['a', 'b']);
    t.unhealthy.add('b');
    expect(await reachable(t)).toEqual(['a']);
    t.unhealthy.delete('b');
    expect(await reachable(t)).toEqual(['a', 'b']);
  });

  it.each([
    { case: 'an endpoint added', next: ['a', 'b', 'c'], reach: ['a', 'b', 'c'] },
    { case: 'an endpoint removed', next: ['b'], reach: ['b'] },
    { case: 'every endpoint replaced', next: ['c', 'd'], reach: ['c', 'd'] },
    { case: 'no endpoint left', next: [], reach: [] },
  ])('a new snapshot from discovery: $case', async ({ next, reach }) => {
    const t = cached(['a', 'b']);
    expect(await reachable(t)).toEqual(['a', 'b']);
    t.setSnapshot(next);
    if (reach.length === 0) expect((await routerError(t.picker.pick(spec, new Set()))).code).toBe('NO_READY_REPLICA');
    else expect(await reachable(t)).toEqual(reach);
    expect(t.inFlight.total()).toBe(0);
  });

  it('a weight changed in a new snapshot (the concurrency limit is per unit of weight)', async () => {
    const t = cached(['a']);
    const limited = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 4, timeoutMs: 1_000 } });
    const first = await t.picker.pick(limited, new Set());
    t.setSnapshot([endpoint('a', 2)]);
    const second = await t.picker.pick(limited, new Set());
    expect(second.endpoint).toEqual(endpoint('a', 2));
    first.release();
    second.release();
  });

  it('a replica reaching its concurrency limit, whoever took the last slot', async () => {
    const t = cached(['a', 'b']);
    const limited = pool({ maxConcurrencyPerReplica: 1, queue: { maxSize: 4, timeoutMs: 1_000 } });
    const first = await t.picker.pick(limited, new Set());
    const other = first.endpoint.id === 'a' ? 'b' : 'a';
    const release = t.inFlight.acquire(other, 'p'); // a slot taken outside this picker's picks
    const waiting = track(t.picker.pick(limited, new Set()));
    await flush();
    expect(waiting.state()).toBe('pending');
    release();
    t.admission.notify('p');
    await flush();
    expect(waiting.picked()?.endpoint.id).toBe(other);
    waiting.picked()?.release();
    first.release();
    expect(t.inFlight.total()).toBe(0);
  });
});

describe('EndpointPicker: scale from zero', () => {
  const cold = (maxWaitMs = 60_000, overrides: ResilienceOverrides = {}): PoolSpec => pool({ scaleFromZero: { enabled: true, maxWaitMs }, ...overrides });

  it('holds a request while the pool has no endpoint and hands it the first one that appears', async () => {
    const { picker, time, events, setSnapshot } = setup([]);
    const pending = track(picker.pick(cold(), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    await flush();
    expect(pending.state()).toBe('pending');
    expect(picker.heldRequests('p')).toBe(1);
    setSnapshot(['a']);
    await time.advance(HOLD_POLL_MS);
    expect(pending.state()).toBe('picked');
    expect(pending.picked()?.endpoint.id).toBe('a');
    expect(picker.heldRequests('p')).toBe(0);
    expect(events.filter((e) => e.startsWith('hold:'))).toEqual(['hold:p:held', 'hold:p:served']);
    expect(time.pendingTimers).toBe(0); // nothing held: no more looks
  });

  it('answers 503 with Retry-After once maxWaitMs has passed, counted as no_replica_timeout', async () => {
    const { picker, time, events } = setup([]);
    const pending = routerError(picker.pick(cold(10_000), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    await time.advance(10_000);
    const err = await pending;
    expect(err.code).toBe('NO_READY_REPLICA');
    expect(err.message).toContain('within 10 s');
    expect(err.retryAfterSeconds).toBeGreaterThanOrEqual(2);
    expect(events).toContain('rejected:p:no_replica_timeout');
    expect(events).toContain('hold:p:timeout');
    expect(picker.heldRequests('p')).toBe(0);
  });

  it('holds no longer than what is left of the request’s total timeout', async () => {
    const { picker, time } = setup([]);
    const pending = routerError(picker.pick(cold(60_000), new Set(), undefined, { priority: 'standard' }, 2_000, true));
    await time.advance(2_000);
    expect((await pending).code).toBe('NO_READY_REPLICA');
  });

  it('drops a held request at once when its client leaves, and counts it', async () => {
    const { picker, events } = setup([]);
    const client = new AbortController();
    const pending = rejection(picker.pick(cold(), new Set(), client.signal, { priority: 'standard' }, Infinity, true));
    await flush();
    client.abort();
    expect(isAbortError(await pending)).toBe(true);
    expect(picker.heldRequests('p')).toBe(0);
    expect(events).toContain('hold:p:abandoned');
  });

  it('turns a held request away when the queue is full', async () => {
    const { picker, events } = setup([]);
    const spec = cold(60_000, { queue: { maxSize: 1 } });
    const first = track(picker.pick(spec, new Set(), undefined, { priority: 'standard', tenant: 'a' }, Infinity, true));
    const second = await routerError(picker.pick(spec, new Set(), undefined, { priority: 'standard', tenant: 'a' }, Infinity, true));
    expect(second.code).toBe('QUEUE_FULL');
    expect(events).toContain('hold:p:rejected');
    expect(first.state()).toBe('pending');
    expect(picker.heldRequests('p')).toBe(1);
  });

  it('answers a held request at once when its pool is removed: NO_READY_REPLICA, counted as rejected (not a timeout), no more looks', async () => {
    const { picker, time, events } = setup([]);
    const pending = routerError(picker.pick(cold(600_000), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    await flush();
    expect(picker.heldRequests('p')).toBe(1);
    picker.poolRemoved('p');
    const err = await pending;
    expect(err.code).toBe('NO_READY_REPLICA');
    expect(err.message).toContain('was removed while the request waited');
    expect(err.retryAfterSeconds).toBeGreaterThan(0);
    expect(events).toContain('rejected:p:pool_removed');
    expect(events).toContain('hold:p:rejected');
    expect(events).not.toContain('hold:p:timeout');
    expect(picker.heldRequests('p')).toBe(0);
    expect(time.pendingTimers).toBe(0);
    // a request whose route was planned before the removal, reaching the pool after it, is not held either
    const late = await routerError(picker.pick(cold(600_000), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    expect(late.code).toBe('NO_READY_REPLICA');
    expect(picker.heldRequests('p')).toBe(0);
    // once discovery lists the pool again, its requests are held again
    picker.poolAdded('p');
    const again = track(picker.pick(cold(600_000), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    await flush();
    expect(again.state()).toBe('pending');
    expect(picker.heldRequests('p')).toBe(1);
    picker.poolRemoved('p');
    await flush();
    expect(again.state()).toBe('rejected');
  });

  it('remembers at most REMEMBERED_REMOVALS removed pools, oldest forgotten first (the soak hunt: one name per pool ever removed was kept for the life of the router)', async () => {
    const { picker } = setup([]);
    // pool churn in Kubernetes mode: every pool a fresh name, each listed and then removed
    for (let i = 0; i < REMEMBERED_REMOVALS * 3; i++) {
      picker.poolAdded(`churn-${i}`);
      picker.poolRemoved(`churn-${i}`);
    }
    expect(picker.removedPools).toBe(REMEMBERED_REMOVALS);
    // removing one pool again and again is one entry
    for (let i = 0; i < 5; i++) picker.poolRemoved('p');
    expect(picker.removedPools).toBe(REMEMBERED_REMOVALS);
    // the latest removal still keeps a late request from being held for it
    const late = await routerError(picker.pick(cold(600_000), new Set(), undefined, { priority: 'standard' }, Infinity, true));
    expect(late.code).toBe('NO_READY_REPLICA');
    expect(picker.heldRequests('p')).toBe(0);
    // and a pool listed again leaves the record
    picker.poolAdded('p');
    expect(picker.removedPools).toBe(REMEMBERED_REMOVALS - 1);
  });

  it('does not hold when not asked to (a pool before the end of the route), a sheddable request, or a pool that does not opt in', async () => {
    const { picker } = setup([]);
    expect((await routerError(picker.pick(cold(), new Set(), undefined, { priority: 'standard' }, Infinity, false))).code).toBe('NO_READY_REPLICA');
    expect((await routerError(picker.pick(cold(), new Set(), undefined, { priority: 'sheddable' }, Infinity, true))).code).toBe('NO_READY_REPLICA');
    expect((await routerError(picker.pick(pool(), new Set(), undefined, { priority: 'standard' }, Infinity, true))).code).toBe('NO_READY_REPLICA');
    expect(picker.heldRequests('p')).toBe(0);
  });

  it('does not hold for a pool whose replicas are there but failing (breakers open): that is a 503', async () => {
    const { picker, open } = setup(['a']);
    const spec = cold();
    open(spec, 'a');
    expect(picker.readyReplicas(spec)).toBe(1);
    expect((await routerError(picker.pick(spec, new Set(), undefined, { priority: 'standard' }, Infinity, true))).code).toBe('NO_READY_REPLICA');
  });

  it('with health checks, counts a replica ready only once a probe has passed (one still loading gets nothing)', async () => {
    let passing = false;
    const spec = cold(60_000, { healthCheck: { enabled: true, intervalMs: 100 } });
    let checker: HealthChecker | undefined;
    const { picker, time } = setup(['a'], (t, snapshot) => {
      checker = new HealthChecker({ endpoints: { snapshot }, pools: () => [spec], scheduler: t, now: () => t.now(), probe: () => Promise.resolve(passing) });
      return checker;
    });
    expect(picker.readyReplicas(spec)).toBe(0); // listed, never probed
    const pending = track(picker.pick(spec, new Set(), undefined, { priority: 'standard' }, Infinity, true));
    await checker?.runOnce(); // the model is still loading
    await time.advance(HOLD_POLL_MS);
    expect(pending.state()).toBe('pending');
    passing = true;
    await time.advance(100);
    await checker?.runOnce();
    await time.advance(HOLD_POLL_MS);
    expect(pending.state()).toBe('picked');
    expect(picker.readyReplicas(spec)).toBe(1);
    // a pool that does not scale from zero trusts an endpoint it has not probed yet, as before
    expect(picker.readyReplicas(pool({ healthCheck: { enabled: true } }))).toBe(1);
  });
});
