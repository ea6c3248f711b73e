/** The watch lifecycle on scripted informers and a manual scheduler: no sockets, no real time. */
import { describe, expect, it } from '@jest/globals';
import { type Scheduler } from '../../../src/core/clock.js';
import { ApiException } from '@kubernetes/client-node';
import { backoffDelay, describeKubeError, ResilientWatch, type InformerLike, type WatchState } from '../../../src/discovery/kubernetes/resilient-watch.js';
import { flush } from '../../helpers/fake-time.js';

type Outcome = 'sync' | 'error-event' | 'reject';

class ScriptedInformer implements InformerLike<string> {
  private readonly handlers = new Map<string, Array<(arg?: unknown) => void>>();
  stopped = false;
  constructor(
    public objects: string[],
    private readonly outcome: Outcome,
  ) {}
  on(verb: 'add' | 'update' | 'delete', cb: (obj: string) => void): void;
  on(verb: 'error', cb: (err?: unknown) => void): void;
  on(verb: string, cb: ((obj: string) => void) | ((err?: unknown) => void)): void {
    const list = this.handlers.get(verb) ?? [];
    list.push(cb as (arg?: unknown) => void);
    this.handlers.set(verb, list);
  }
  emit(verb: string, arg?: unknown): void {
    for (const cb of this.handlers.get(verb) ?? []) cb(arg);
  }
  start(): Promise<void> {
    if (this.outcome === 'reject') return Promise.reject(new Error('list failed'));
    if (this.outcome === 'error-event') this.emit('error', new Error('500 Internal Server Error'));
    return Promise.resolve();
  }
  stop(): Promise<void> {
    this.stopped = true;
    return Promise.resolve();
  }
  list(): readonly string[] {
    return this.objects;
  }
}

class ManualScheduler implements Scheduler {
  timers: Array<{ fn: () => void; ms: number }> = [];
  setTimeout(fn: () => void, ms: number): unknown {
    const timer = { fn, ms };
    this.timers.push(timer);
    return timer;
  }
  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t !== handle);
  }
  async fire(): Promise<number> {
    const next = this.timers.shift();
    if (!next) throw new Error('no timer pending');
    next.fn();
    await flush();
    return next.ms;
  }
}

function setup(script: Array<{ objects: string[]; outcome: Outcome }>) {
  const informers: ScriptedInformer[] = [];
  const scheduler = new ManualScheduler();
  const states: Array<Readonly<WatchState> & { failed: boolean }> = [];
  let changes = 0;
  const watch = new ResilientWatch<string>(
    () => {
      const step = script[Math.min(informers.length, script.length - 1)]!;
      const informer = new ScriptedInformer(step.objects, step.outcome);
      informers.push(informer);
      return informer;
    },
    {
      kind: 'endpointslices',
      namespace: 'models',
      resyncIntervalMs: 30000,
      backoff: { initialMs: 100, maxMs: 1000 },
      scheduler,
      random: () => 1,
      onChange: () => changes++,
      onState: (state, error) => states.push({ ...state, failed: error !== undefined }),
    },
  );
  return { watch, informers, scheduler, states, changes: () => changes };
}

describe('describeKubeError', () => {
  it("says the API server's refusal as an operator reads it: the code, the Status reason and message, not the client's dump", () => {
    const status = {
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      reason: 'Forbidden',
      message: 'modeldeployments.modelgate.io is forbidden: User "system:serviceaccount:modelgate:modelgate" cannot list resource "modeldeployments" in API group "modelgate.io" at the cluster scope',
      code: 403,
    };
    // as client-node raises it, with the body a JSON string (and as an object)
    for (const body of [JSON.stringify(status), status]) {
      const err = new ApiException(403, 'Unknown API Status Code!', body, { 'content-type': 'application/json' });
      expect(err.message).toContain('Unknown API Status Code!');
      expect(describeKubeError(err)).toBe(`HTTP 403 Forbidden: ${status.message}`);
    }
    expect(describeKubeError(new ApiException(502, 'Unknown API Status Code!', '<html>Bad Gateway</html>', {}))).toBe('HTTP 502: <html>Bad Gateway</html>');
    expect(describeKubeError(new ApiException(500, 'Unknown API Status Code!', undefined, {}))).toBe('HTTP 500');
    expect(describeKubeError(new Error('connect ECONNREFUSED 127.0.0.1:6443'))).toBe('connect ECONNREFUSED 127.0.0.1:6443');
  });
});

describe('backoffDelay', () => {
  it('doubles from the initial delay up to the cap, jittered within the upper half', () => {
    const backoff = { initialMs: 100, maxMs: 1000 };
    expect([0, 1, 2, 3, 4, 10].map((a) => backoffDelay(a, backoff, () => 1))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(backoffDelay(2, backoff, () => 0)).toBe(200);
  });
});

describe('ResilientWatch', () => {
  it('syncs, serves the informer’s objects, and schedules the periodic relist', async () => {
    const { watch, scheduler, changes } = setup([{ objects: ['a', 'b'], outcome: 'sync' }]);
    watch.start();
    await flush();
    expect(watch.state).toMatchObject({ up: true, synced: true, restarts: 0 });
    expect(watch.items()).toEqual(['a', 'b']);
    expect(changes()).toBe(1);
    expect(scheduler.timers.map((t) => t.ms)).toEqual([30000]);
  });

  it('forwards events of the running informer only', async () => {
    const { watch, informers, changes } = setup([{ objects: ['a'], outcome: 'sync' }]);
    watch.start();
    await flush();
    informers[0]!.emit('add', 'b');
    informers[0]!.emit('delete', 'a');
    expect(changes()).toBe(3);
  });

  it('retries a failed first sync with growing backoff and is not synced until one succeeds', async () => {
    const { watch, scheduler, informers } = setup([
      { objects: [], outcome: 'error-event' },
      { objects: [], outcome: 'reject' },
      { objects: ['a'], outcome: 'sync' },
    ]);
    watch.start();
    await flush();
    expect(watch.state).toMatchObject({ up: false, synced: false, restarts: 1 });
    expect(await scheduler.fire()).toBe(100);
    expect(watch.state).toMatchObject({ synced: false, restarts: 2 });
    expect(await scheduler.fire()).toBe(200);
    expect(watch.state).toMatchObject({ up: true, synced: true, restarts: 2 });
    expect(watch.items()).toEqual(['a']);
    expect(informers.slice(0, 2).every((i) => i.stopped)).toBe(true);
  });

  it('keeps serving the last known objects while the running informer is down, then recovers', async () => {
    const { watch, scheduler, informers, states } = setup([
      { objects: ['a', 'b'], outcome: 'sync' },
      { objects: [], outcome: 'reject' },
      { objects: ['a', 'b', 'c'], outcome: 'sync' },
    ]);
    watch.start();
    await flush();
    informers[0]!.emit('error', new Error('connect ECONNREFUSED'));
    expect(watch.state).toMatchObject({ up: false, synced: true, lastError: 'connect ECONNREFUSED' });
    expect(watch.items()).toEqual(['a', 'b']);
    expect(states.at(-1)?.failed).toBe(true);
    expect(await scheduler.fire()).toBe(100); // replaces the resync timer
    expect(watch.items()).toEqual(['a', 'b']);
    expect(await scheduler.fire()).toBe(200);
    expect(watch.state).toMatchObject({ up: true, lastError: undefined });
    expect(watch.items()).toEqual(['a', 'b', 'c']);
  });

  it('drops a ghost at the next relist: a fresh informer replaces the old one once it has synced', async () => {
    const { watch, scheduler, informers } = setup([
      { objects: ['a', 'ghost'], outcome: 'sync' },
      { objects: ['a'], outcome: 'sync' },
    ]);
    watch.start();
    await flush();
    expect(await scheduler.fire()).toBe(30000);
    expect(watch.items()).toEqual(['a']);
    expect(informers[0]!.stopped).toBe(true);
    expect(informers[1]!.stopped).toBe(false);
  });

  it('stops every informer and timer', async () => {
    const { watch, scheduler, informers } = setup([{ objects: ['a'], outcome: 'sync' }]);
    watch.start();
    await flush();
    await watch.stop();
    expect(informers[0]!.stopped).toBe(true);
    expect(scheduler.timers).toEqual([]);
  });
});
