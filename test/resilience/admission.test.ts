import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { type Scheduler } from '../../src/core/clock.js';
import { RouterError } from '../../src/core/errors.js';
import { type Priority } from '../../src/core/types.js';
import { AdmissionQueues, MAX_PASSED_OVER, type AdmitOptions } from '../../src/resilience/admission.js';
import { flush } from '../helpers/fake-time.js';

class Timers implements Scheduler {
  now = 0;
  pending: Array<{ fn: () => void; at: number }> = [];
  setTimeout(fn: () => void, ms: number): unknown {
    const t = { fn, at: this.now + ms };
    this.pending.push(t);
    return t;
  }
  clearTimeout(handle: unknown): void {
    this.pending = this.pending.filter((t) => t !== handle);
  }
  advance(ms: number): void {
    this.now += ms;
    for (const t of this.pending.filter((p) => p.at <= this.now)) {
      this.clearTimeout(t);
      t.fn();
    }
  }
}

function setup() {
  const timers = new Timers();
  const events: string[] = [];
  const queues = new AdmissionQueues(timers, () => timers.now, {
    onDequeued: (pool, ms, result) => events.push(`${pool}:${result}:${ms}`),
    onRejected: (pool, reason) => events.push(`${pool}:${reason}`),
  });
  let free = 0;
  const take = (): string | undefined => (free > 0 ? (free--, 'slot') : undefined);
  return { timers, events, queues, take, setFree: (n: number) => (free = n) };
}

const limits = { maxSize: 2, timeoutMs: 1000 };

describe('AdmissionQueues', () => {
  it('admits at once when a slot is free', async () => {
    const { queues, take, setFree } = setup();
    setFree(1);
    await expect(queues.admit('p', take, limits)).resolves.toBe('slot');
    expect(queues.depth('p')).toBe(0);
  });

  it('queues in order, admits on notify, and answers 429 when the queue is full', async () => {
    const { queues, take, setFree, events, timers } = setup();
    const order: number[] = [];
    const a = queues.admit('p', take, limits).then(() => order.push(1));
    const b = queues.admit('p', take, limits).then(() => order.push(2));
    const full = await queues.admit('p', take, limits).catch((e: unknown) => e);
    expect(full).toBeInstanceOf(RouterError);
    expect((full as RouterError).code).toBe('QUEUE_FULL');
    expect((full as RouterError).retryAfterSeconds).toBe(1);
    expect(queues.depth('p')).toBe(2);
    timers.now = 40;
    setFree(1);
    queues.notify('p');
    await flush();
    expect(order).toEqual([1]);
    setFree(1);
    queues.notify('p');
    await Promise.all([a, b]);
    expect(order).toEqual([1, 2]);
    expect(events).toEqual(['p:queue_full', 'p:admitted:40', 'p:admitted:40']);
  });

  it('answers 429 when the wait runs out', async () => {
    const { queues, take, timers } = setup();
    const waiting = queues.admit('p', take, limits).catch((e: unknown) => e);
    timers.advance(999);
    expect(queues.depth('p')).toBe(1);
    timers.advance(1);
    const err = (await waiting) as RouterError;
    expect(err.code).toBe('QUEUE_TIMEOUT');
    expect(err.status).toBe(429);
    expect(queues.depth('p')).toBe(0);
  });

  it('takes a client that leaves out of the queue at once', async () => {
    const { queues, take, setFree, events } = setup();
    const controller = new AbortController();
    const leaving = queues.admit('p', take, limits, { signal: controller.signal }).catch((e: unknown) => e);
    const staying = queues.admit('p', take, limits);
    controller.abort();
    expect(((await leaving) as Error).name).toBe('AbortError');
    expect(queues.depth('p')).toBe(1);
    setFree(1);
    queues.notify('p');
    await expect(staying).resolves.toBe('slot');
    expect(events).toEqual(['p:abandoned:0', 'p:admitted:0']);
  });

  it('turns every waiter of a closed pool away at once, critical and standard, and leaves the other pools waiting', async () => {
    const { queues, take, setFree, events, timers } = setup();
    const wide = { maxSize: 10, timeoutMs: 1000 };
    const gone = [
      queues.admit('p', take, wide, { priority: 'critical', tenant: 'a' }).catch((e: unknown) => e),
      queues.admit('p', take, wide, { tenant: 'b' }).catch((e: unknown) => e),
      queues.admit('p', take, wide, { tenant: 'a', held: { expired: () => new RouterError('NO_READY_REPLICA', 'expired') } }).catch((e: unknown) => e),
    ];
    const other = queues.admit('q', take, wide);
    timers.advance(10);
    expect(queues.close('p', () => new RouterError('NO_READY_REPLICA', 'gone'))).toBe(3);
    for (const err of await Promise.all(gone)) expect(err).toMatchObject({ code: 'NO_READY_REPLICA', message: 'gone' });
    expect(queues.depth('p')).toBe(0);
    expect([...queues.depths()].map((d) => d.pool)).toEqual(['q']);
    expect(events).toEqual(['p:pool_removed:10', 'p:pool_removed', 'p:pool_removed:10', 'p:pool_removed', 'p:pool_removed:10', 'p:pool_removed']);
    // their timers went with them: nothing more happens to them at their timeout
    timers.advance(2000);
    expect(events.filter((e) => e.startsWith('p:'))).toHaveLength(6);
    // the other pool's waiter waited on (and timed out) as before
    await expect(other).rejects.toMatchObject({ code: 'QUEUE_TIMEOUT' });
    setFree(1);
    expect(queues.close('p', () => new Error('none'))).toBe(0);
  });

  it('shut down, answers every waiter of every pool, and every request that asks later, with the error it is given (not a cut connection)', async () => {
    const { queues, take, setFree, events, timers } = setup();
    const wide = { maxSize: 10, timeoutMs: 1000 };
    const waiting = [queues.admit('p', take, wide, { tenant: 'a' }).catch((e: unknown) => e), queues.admit('q', take, wide, { priority: 'critical' }).catch((e: unknown) => e)];
    timers.advance(5);
    expect(queues.closeAll(() => new RouterError('NO_READY_REPLICA', 'shutting down'))).toBe(2);
    for (const err of await Promise.all(waiting)) expect(err).toMatchObject({ code: 'NO_READY_REPLICA', message: 'shutting down' });
    expect([...queues.depths()]).toEqual([]);
    // a request arriving now (a fallback pool, a retry) is refused at once, even with a slot free
    setFree(1);
    await expect(queues.admit('r', take, wide)).rejects.toMatchObject({ message: 'shutting down' });
    expect(events).toEqual(['p:shutdown:5', 'p:shutdown', 'q:shutdown:5', 'q:shutdown', 'r:shutdown']);
  });

  describe('priorities', () => {
    it('turns a sheddable request away at once, with 429 request_shed, when no slot is free', async () => {
      const { queues, take, setFree, events } = setup();
      const err = (await queues.admit('p', take, limits, { priority: 'sheddable' }).catch((e: unknown) => e)) as RouterError;
      expect([err.code, err.status, err.retryAfterSeconds]).toEqual(['REQUEST_SHED', 429, 1]);
      expect(queues.depth('p')).toBe(0);
      expect(events).toEqual(['p:shed']);
      setFree(1);
      await expect(queues.admit('p', take, limits, { priority: 'sheddable' })).resolves.toBe('slot'); // a free slot takes it
    });

    it('lines critical requests up behind earlier critical ones, ahead of every standard one', async () => {
      const { queues, take, setFree } = setup();
      const order: string[] = [];
      const wide = { maxSize: 10, timeoutMs: 1000 };
      const all = [
        queues.admit('p', take, wide, { priority: 'standard' }).then(() => order.push('s1')),
        queues.admit('p', take, wide, { priority: 'critical' }).then(() => order.push('c1')),
        queues.admit('p', take, wide, { priority: 'standard' }).then(() => order.push('s2')),
        queues.admit('p', take, wide, { priority: 'critical' }).then(() => order.push('c2')),
      ];
      setFree(4);
      queues.notify('p');
      await Promise.all(all);
      expect(order).toEqual(['c1', 'c2', 's1', 's2']);
    });

    it('lets a critical request take the place of the most recent standard waiter when the queue is full', async () => {
      const { queues, take, setFree, events } = setup();
      const first = queues.admit('p', take, limits, { priority: 'standard' });
      const last = queues.admit('p', take, limits, { priority: 'standard' }).catch((e: unknown) => e);
      const critical = queues.admit('p', take, limits, { priority: 'critical' });
      expect(((await last) as RouterError).code).toBe('QUEUE_FULL');
      expect(queues.depth('p')).toBe(2);
      setFree(2);
      queues.notify('p');
      await expect(Promise.all([critical, first])).resolves.toEqual(['slot', 'slot']);
      expect(events).toEqual(['p:displaced:0', 'p:queue_full', 'p:admitted:0', 'p:admitted:0']);
    });

    it('answers a critical request 429 when the full queue holds only critical waiters', async () => {
      const { queues, take } = setup();
      void queues.admit('p', take, limits, { priority: 'critical' }).catch(() => undefined);
      void queues.admit('p', take, limits, { priority: 'critical' }).catch(() => undefined);
      const err = (await queues.admit('p', take, limits, { priority: 'critical' }).catch((e: unknown) => e)) as RouterError;
      expect(err.code).toBe('QUEUE_FULL');
    });
  });

  describe('fair sharing between tenants', () => {
    /** Queues that record, in admission order, the label of each waiter that took a slot; slots free one `release()` at a time. */
    function tenants(maxSize = 100) {
      const { queues, timers, events } = setup();
      let free = 0;
      const admitted: string[] = [];
      const admit = (label: string, options: AdmitOptions = {}) =>
        queues.admit('p', () => (free > 0 ? (free--, admitted.push(label), label) : undefined), { maxSize, timeoutMs: 1000 }, options).catch((e: unknown) => e as RouterError);
      const release = (n = 1): void => {
        free += n;
        queues.notify('p');
      };
      return { queues, timers, events, admitted, admit, release };
    }

    it('lets a tenant that queues later take turns with the burst queued before it', async () => {
      const { admit, release, admitted } = tenants();
      const all = [...Array.from({ length: 10 }, (_, i) => admit(`a${i}`, { tenant: 'a' })), admit('b0', { tenant: 'b' }), admit('b1', { tenant: 'b' })];
      for (let i = 0; i < 12; i++) release();
      await Promise.all(all);
      expect(admitted.slice(0, 4)).toEqual(['a0', 'b0', 'a1', 'b1']);
      expect(admitted.slice(4)).toEqual(['a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9']);
    });

    it('admits tenants in proportion to their weights while both have requests waiting', async () => {
      const { admit, release, admitted } = tenants();
      const all = [...Array.from({ length: 40 }, (_, i) => admit(`a${i}`, { tenant: 'a', weight: 3 })), ...Array.from({ length: 40 }, (_, i) => admit(`b${i}`, { tenant: 'b' }))];
      for (let i = 0; i < 40; i++) release();
      const first40 = admitted.filter((label) => label.startsWith('a')).length;
      expect(first40).toBeGreaterThanOrEqual(29);
      expect(first40).toBeLessThanOrEqual(31);
      // every window of 8 admissions holds 5 to 7 of a's: they interleave, they do not come in runs
      for (let i = 0; i + 8 <= 40; i++) expect(admitted.slice(i, i + 8).filter((l) => l.startsWith('a')).length).toBeGreaterThanOrEqual(5);
      release(40);
      await Promise.all(all);
    });

    it('treats requests without a tenant as one tenant, in arrival order', async () => {
      const { admit, release, admitted } = tenants();
      const all = [admit('x0'), admit('x1'), admit('b0', { tenant: 'b' }), admit('x2')];
      release(4);
      await Promise.all(all);
      expect(admitted).toEqual(['x0', 'b0', 'x1', 'x2']);
    });

    it('serves every critical waiter before any standard one, whatever their tenants', async () => {
      const { admit, release, admitted } = tenants();
      const all = [
        admit('a-std0', { tenant: 'a' }),
        admit('a-std1', { tenant: 'a' }),
        admit('b-crit0', { tenant: 'b', priority: 'critical' }),
        admit('b-crit1', { tenant: 'b', priority: 'critical' }),
        admit('c-crit0', { tenant: 'c', priority: 'critical' }),
        admit('c-std0', { tenant: 'c' }),
      ];
      release(6);
      await Promise.all(all);
      expect(admitted).toEqual(['b-crit0', 'c-crit0', 'b-crit1', 'a-std0', 'c-std0', 'a-std1']);
    });

    it('turns a sheddable request away at once whatever its tenant, even one with nothing queued', async () => {
      const { admit, queues, events } = tenants();
      void admit('a0', { tenant: 'a' });
      const err = await admit('b0', { tenant: 'b', priority: 'sheddable', weight: 100 });
      expect((err as RouterError).code).toBe('REQUEST_SHED');
      expect(queues.depth('p')).toBe(1);
      expect(events).toEqual(['p:shed']);
    });

    it("lets a tenant with fewer waiters take the place of the heaviest tenant's latest waiter when the queue is full", async () => {
      const { admit, release, admitted, queues, events } = tenants(3);
      const a = [admit('a0', { tenant: 'a' }), admit('a1', { tenant: 'a' }), admit('a2', { tenant: 'a' })];
      const b0 = admit('b0', { tenant: 'b' });
      const a2 = (await a[2]) as RouterError;
      expect([a2.code, a2.status]).toEqual(['QUEUE_FULL', 429]);
      expect(events).toEqual(['p:displaced:0', 'p:queue_full']);
      // the heaviest tenant's own newcomer finds no room
      const a3 = (await admit('a3', { tenant: 'a' })) as RouterError;
      expect(a3.code).toBe('QUEUE_FULL');
      expect(queues.depth('p')).toBe(3);
      release(3);
      await Promise.all([a[0], a[1], b0]);
      expect(admitted).toEqual(['a0', 'b0', 'a1']);
    });

    it('lets a critical newcomer displace the heaviest standard tenant, not the trickle that queued last', async () => {
      const { admit, release, admitted } = tenants(3);
      const a = [admit('a0', { tenant: 'a' }), admit('a1', { tenant: 'a' })];
      const b0 = admit('b0', { tenant: 'b' });
      const crit = admit('c0', { tenant: 'c', priority: 'critical' });
      expect(((await a[1]) as RouterError).code).toBe('QUEUE_FULL');
      release(3);
      await Promise.all([a[0], b0, crit]);
      expect(admitted).toEqual(['c0', 'a0', 'b0']);
    });

    it('does not push a tenant back for the waiters it lost to timeouts or aborts (the virtual time is given back)', async () => {
      const { admit, release, admitted } = tenants();
      const a0 = admit('a0', { tenant: 'a' });
      const controllers = Array.from({ length: 5 }, () => new AbortController());
      const gone = controllers.map((c, i) => admit(`gone${i}`, { tenant: 'a', signal: c.signal }));
      for (const c of controllers) c.abort(); // in arrival order: only the last one was a's latest when it left
      await Promise.all(gone);
      const rest = [admit('a1', { tenant: 'a' }), admit('b0', { tenant: 'b' }), admit('b1', { tenant: 'b' }), admit('b2', { tenant: 'b' })];
      release(5);
      await Promise.all([a0, ...rest]);
      expect(admitted).toEqual(['a0', 'b0', 'a1', 'b1', 'b2']);
    });

    it('rejects a weight that is not a positive number with a RangeError', async () => {
      const { queues, take } = setup();
      for (const weight of [0, -1, Number.NaN, Infinity]) {
        await expect(queues.admit('p', take, limits, { tenant: 'a', weight })).rejects.toThrow(RangeError);
      }
    });

    it('keeps timeouts per waiter: a tenant that times out leaves the others in their turns', async () => {
      const { admit, release, admitted, timers, queues } = tenants();
      const a0 = admit('a0', { tenant: 'a' });
      timers.advance(500);
      const b = [admit('b0', { tenant: 'b' }), admit('b1', { tenant: 'b' })];
      timers.advance(500);
      expect(((await a0) as RouterError).code).toBe('QUEUE_TIMEOUT');
      expect(queues.depth('p')).toBe(2);
      release(2);
      await Promise.all(b);
      expect(admitted).toEqual(['b0', 'b1']);
    });
  });

  describe('invariants (property)', () => {
    type Step =
      | { kind: 'admit'; tenant: string | undefined; weight: number; priority: Priority; abortable: boolean }
      | { kind: 'release'; slots: number }
      | { kind: 'abort'; pick: number }
      | { kind: 'advance'; ms: number };
    const step: fc.Arbitrary<Step> = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.record({
          kind: fc.constant('admit' as const),
          tenant: fc.constantFrom(undefined, 'a', 'b', 'c'),
          weight: fc.constantFrom(0.5, 1, 3),
          priority: fc.constantFrom<Priority>('critical', 'standard', 'standard', 'sheddable'),
          abortable: fc.boolean(),
        }),
      },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), slots: fc.integer({ min: 0, max: 3 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 60 }) }) },
    );

    interface Tracked {
      priority: Priority;
      controller: AbortController | undefined;
      /** The slot its tryTake took, if any. */
      took?: string;
      settled: number;
      outcome?: { ok: true; value: string } | { ok: false; code: string };
    }

    it('never loses or double-admits a waiter, keeps critical first, and settles every promise', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(step, { maxLength: 60 }), fc.integer({ min: 0, max: 5 }), async (steps, maxSize) => {
          const timers = new Timers();
          const queues = new AdmissionQueues(timers, () => timers.now);
          const waiters: Tracked[] = [];
          let free = 0;
          let slot = 0;
          const queued = (): Tracked[] => waiters.filter((w) => w.settled === 0 && w.took === undefined);
          for (const s of steps) {
            if (s.kind === 'admit') {
              const w: Tracked = { priority: s.priority, controller: s.abortable ? new AbortController() : undefined, settled: 0 };
              waiters.push(w);
              const tryTake = (): string | undefined => {
                if (free === 0) return undefined;
                expect(w.took).toBeUndefined(); // a waiter takes one slot, once
                // a standard waiter is admitted only when no critical one is waiting
                if (w.priority !== 'critical') expect(queued().filter((o) => o !== w && o.priority === 'critical')).toEqual([]);
                free--;
                w.took = `slot${slot++}`;
                return w.took;
              };
              const options = { tenant: s.tenant, weight: s.weight, priority: s.priority, signal: w.controller?.signal };
              queues.admit('p', tryTake, { maxSize, timeoutMs: 100 }, options).then(
                (value) => ((w.settled += 1), (w.outcome = { ok: true, value })),
                (err: unknown) => ((w.settled += 1), (w.outcome = { ok: false, code: err instanceof RouterError ? err.code : (err as Error).name })),
              );
            } else if (s.kind === 'release') {
              free += s.slots;
              queues.notify('p');
              // notify stops only at a waiter that cannot take a slot
              if (free > 0) expect(queues.depth('p')).toBe(0);
            } else if (s.kind === 'abort') {
              const abortable = waiters.filter((w) => w.controller && !w.controller.signal.aborted);
              abortable[s.pick % Math.max(1, abortable.length)]?.controller?.abort();
            } else {
              timers.advance(s.ms);
            }
            await flush();
            expect(queues.depth('p')).toBe(queued().length);
            expect(queued().length).toBeLessThanOrEqual(maxSize);
          }
          timers.advance(100);
          await flush();
          expect(queues.depth('p')).toBe(0);
          for (const w of waiters) {
            expect(w.settled).toBe(1);
            // admitted with the slot it took, or rejected without having taken one
            if (w.took !== undefined) expect(w.outcome).toEqual({ ok: true, value: w.took });
            else expect(w.outcome?.ok).toBe(false);
          }
          expect([...queues.depths()]).toEqual([]);
        }),
        { numRuns: 300 },
      );
    });
  });
});

describe('AdmissionQueues: narrow waiters (a request that may take a slot on some replicas only)', () => {
  it('a freed slot passes over narrow waiters that cannot take it, keeping their place, at most MAX_PASSED_OVER of them', async () => {
    const { queues } = setup();
    let asked = 0;
    const never = (): string | undefined => {
      asked += 1;
      return undefined;
    };
    const limits = { maxSize: 256, timeoutMs: 60_000 };
    for (let i = 0; i < 20; i++) void queues.admit('p', never, limits, { narrow: true });
    let free = 0;
    const behind = queues.admit('p', () => (free > 0 ? (free--, 'slot') : undefined), limits);
    let admitted: string | undefined;
    void behind.then((v) => (admitted = v));
    free = 1; // a slot frees
    asked = 0;
    queues.notify('p');
    await flush();
    expect(asked).toBe(MAX_PASSED_OVER + 1); // not the 20 a release, nor the request behind them
    expect(admitted).toBeUndefined();
    expect(queues.depth('p')).toBe(21);
  });

  it('with fewer narrow waiters ahead, the request behind them takes the freed slot; they keep their place', async () => {
    const { queues } = setup();
    const limits = { maxSize: 256, timeoutMs: 60_000 };
    let narrowFree = 0;
    const first = queues.admit('p', () => (narrowFree > 0 ? (narrowFree--, 'pinned') : undefined), limits, { narrow: true });
    let free = 0;
    const behind = queues.admit('p', () => (free > 0 ? (free--, 'slot') : undefined), limits);
    free = 1;
    queues.notify('p');
    await expect(behind).resolves.toBe('slot');
    expect(queues.depth('p')).toBe(1);
    narrowFree = 1;
    queues.notify('p');
    await expect(first).resolves.toBe('pinned');
  });
});
