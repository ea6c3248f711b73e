/**
 * The status writer's pacing on fake time, with a discovery and an API server of the test's own: a
 * watch that shows the router's own writes late is not "another writer" (no warning, no extra write).
 */
import { expect, it } from '@jest/globals';
import { KubernetesController } from '../../src/controller/kubernetes-controller.js';
import { FakeTime } from '../helpers/fake-time.js';

/** Discovery's state with one ModelPool, as the router's cache holds it: its resourceVersion and status. */
function poolState(resourceVersion: string, status: object) {
  return {
    pools: [
      {
        namespace: 'models',
        name: 'llm',
        key: 'models/llm',
        generation: 1,
        service: { name: 'llm', port: 8000 },
        replicas: 1,
        readyReplicas: 1,
        object: { metadata: { name: 'llm', namespace: 'models', resourceVersion }, status },
      },
    ],
    deployments: [],
  };
}

it("one router whose watch lags its own writes: they are its own, not another writer's (no warning, no write again)", async () => {
  const time = new FakeTime();
  const listeners: Array<(s: unknown) => void> = [];
  // the object as the router's cache holds it, and each write the API server took
  let cached = { rv: '1', status: {} as object };
  const taken: Array<{ rv: string; status: object }> = [];
  const state = () => poolState(cached.rv, cached.status);
  const discovery = { onChange: (l: (s: unknown) => void) => listeners.push(l), state };
  const api = {
    patchStatus: (_kind: string, _namespace: string, _name: string, status: object) => {
      const rv = String(taken.length + 2);
      taken.push({ rv, status });
      return Promise.resolve(rv); // the resourceVersion the write gave the object, as the API server answers
    },
  };
  const warnings: string[] = [];
  const logger = { warn: (_o: unknown, msg: string) => warnings.push(msg), info: () => undefined } as never;
  let waiting = 1;
  const controller = new KubernetesController(discovery as never, api, {
    logger,
    mayWriteStatus: () => true,
    now: () => new Date(0),
    demand: () => ({ waiting, held: 0 }),
    clock: () => time.now(),
    scheduler: time,
  });
  const changed = async (): Promise<void> => {
    for (const listener of listeners) listener(state());
    await controller.idle();
  };
  await changed(); // writes A (1 waiting)
  expect(taken).toHaveLength(1);
  await time.advance(1_100);
  waiting = 2;
  await changed(); // the cache still shows the object before A: B is written
  expect(taken).toHaveLength(2);
  cached = taken[0]!; // the watch shows A now, B not yet
  await changed();
  await time.advance(1_000);
  await controller.idle();
  expect(taken).toHaveLength(2); // B is on its way: not sent again, even once its second is over
  waiting = 3; // the queue moved again while the cache still shows A: C is due (a second after B)
  await changed();
  await time.advance(1_000);
  await controller.idle();
  expect(taken).toHaveLength(3);
  cached = taken[1]!; // then B, then C, come through the watch
  await changed();
  cached = taken[2]!;
  await changed();
  await time.advance(60_000);
  await controller.idle();
  controller.stop();
  expect(warnings).toEqual([]);
  expect(taken).toHaveLength(3);
});

it('writes an object at most once a second, and what a second held back when it ends', async () => {
  const time = new FakeTime();
  const listeners: Array<(s: unknown) => void> = [];
  const taken: object[] = [];
  let waiting = 0;
  const state = () => poolState('1', {});
  const controller = new KubernetesController(
    { onChange: (l: (s: unknown) => void) => listeners.push(l), state } as never,
    { patchStatus: (_k: string, _n: string, _m: string, s: object) => (taken.push(s), Promise.resolve(undefined)) },
    {
      logger: { warn: () => undefined, info: () => undefined } as never,
      mayWriteStatus: () => true,
      now: () => new Date(0),
      demand: () => ({ waiting, held: 0 }),
      clock: () => time.now(),
      scheduler: time,
    },
  );
  for (let i = 1; i <= 10; i++) {
    waiting = i; // the queue moves ten times within the second
    for (const listener of listeners) listener(state());
    await controller.idle();
    await time.advance(50);
  }
  expect(taken).toHaveLength(1);
  await time.advance(1_000);
  await controller.idle();
  expect(taken).toHaveLength(2);
  expect((taken[1] as { requestsWaiting: number }).requestsWaiting).toBe(10);
  controller.stop();
});

it("writes the ServedModelMismatch condition when the router's replicas say they lack the pool's servedModelName, paced as any change, and clears it", async () => {
  const time = new FakeTime();
  const taken: Array<{ conditions: Array<{ type: string; status: string; message: string }> }> = [];
  const base = poolState('1', {});
  const spec = { name: 'models/llm', engine: 'vllm', servedModelName: 'Llama-3-8B' };
  const state = () => ({ ...base, pools: base.pools.map((p) => ({ ...p, spec })) });
  let replicas: string[] = [];
  const asked: string[] = [];
  const controller = new KubernetesController(
    { onChange: () => undefined, state } as never,
    { patchStatus: (_k: string, _n: string, _m: string, s: object) => (taken.push(s as (typeof taken)[number]), Promise.resolve(undefined)) },
    {
      logger: { warn: () => undefined, info: () => undefined } as never,
      mayWriteStatus: () => true,
      now: () => new Date(0),
      servedModel: (pool) => (asked.push(pool.servedModelName), replicas.length > 0 ? { replicas } : undefined),
      clock: () => time.now(),
      scheduler: time,
    },
  );
  const served = (): { status: string; message: string } | undefined => taken.at(-1)?.conditions.find((c) => c.type === 'ServedModelMismatch');
  controller.syncStatus();
  await controller.idle();
  expect(served()).toMatchObject({ status: 'False' });
  replicas = ['models/llm-0'];
  controller.syncStatus(); // what the watch's change asks for (DiscoveryWiring.demandChanged)
  await controller.idle();
  expect(taken).toHaveLength(1); // within the second of the last write
  await time.advance(1_000);
  await controller.idle();
  expect(taken).toHaveLength(2);
  expect(served()).toMatchObject({ status: 'True', message: expect.stringContaining('Replica models/llm-0 answered that it does not serve model "Llama-3-8B"') });
  expect(asked.every((name) => name === 'Llama-3-8B')).toBe(true);
  replicas = [];
  controller.syncStatus();
  await time.advance(1_000);
  await controller.idle();
  expect(served()).toMatchObject({ status: 'False' });
  controller.stop();
});

it('a status write answered 404 (the object deleted since the cache showed it) is not warned of or counted failed; a second 404 a second later, the object still cached, is', async () => {
  const time = new FakeTime();
  const listeners: Array<(s: unknown) => void> = [];
  let waiting = 1;
  const state = () => poolState('1', {});
  const writes: boolean[] = [];
  const warnings: string[] = [];
  const debugs: string[] = [];
  const notFound = () => Object.assign(new Error('HTTP-Code: 404'), { code: 404, body: JSON.stringify({ kind: 'Status', reason: 'NotFound', message: 'modelpools.modelgate.io "llm" not found' }) });
  let answer: () => Promise<string | undefined> = () => Promise.reject(notFound());
  const controller = new KubernetesController(
    { onChange: (l: (s: unknown) => void) => listeners.push(l), state } as never,
    { patchStatus: () => answer() },
    {
      logger: { warn: (_o: unknown, msg: string) => warnings.push(msg), info: () => undefined, debug: (_o: unknown, msg: string) => debugs.push(msg) } as never,
      mayWriteStatus: () => true,
      now: () => new Date(0),
      demand: () => ({ waiting, held: 0 }),
      clock: () => time.now(),
      scheduler: time,
      onStatusWrite: (_kind, ok) => writes.push(ok),
    },
  );
  const changed = async (): Promise<void> => {
    for (const listener of listeners) listener(state());
    await controller.idle();
  };
  await changed();
  expect(warnings).toEqual([]);
  expect(debugs).toEqual(['status not written: the object was deleted']);
  expect(writes).toEqual([]);
  // a second later the cache still holds it and the API server still answers 404: not a deletion on its way
  await time.advance(1_100);
  waiting = 2;
  await changed();
  expect(warnings).toEqual(['status write failed; will retry on the next change or resync']);
  expect(writes).toEqual([false]);
  // a write that goes through forgets the 404: the next one is read as a deletion again
  answer = () => Promise.resolve('5');
  await time.advance(1_100);
  waiting = 3;
  await changed();
  expect(writes).toEqual([false, true]);
  answer = () => Promise.reject(notFound());
  await time.advance(1_100);
  waiting = 4;
  await changed();
  expect(warnings).toHaveLength(1);
  expect(writes).toEqual([false, true]);
  controller.stop();
});
