import { describe, expect, it } from '@jest/globals';
import { type Scheduler } from '../../src/core/clock.js';
import { RouterError } from '../../src/core/errors.js';
import { AdmissionQueues } from '../../src/resilience/admission.js';
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
    const leaving = queues.admit('p', take, limits, controller.signal).catch((e: unknown) => e);
    const staying = queues.admit('p', take, limits);
    controller.abort();
    expect(((await leaving) as Error).name).toBe('AbortError');
    expect(queues.depth('p')).toBe(1);
    setFree(1);
    queues.notify('p');
    await expect(staying).resolves.toBe('slot');
    expect(events).toEqual(['p:abandoned:0', 'p:admitted:0']);
  });

  describe('priorities', () => {
    it('turns a sheddable request away at once, with 429 request_shed, when no slot is free', async () => {
      const { queues, take, setFree, events } = setup();
      const err = (await queues.admit('p', take, limits, undefined, 'sheddable').catch((e: unknown) => e)) as RouterError;
      expect([err.code, err.status, err.retryAfterSeconds]).toEqual(['REQUEST_SHED', 429, 1]);
      expect(queues.depth('p')).toBe(0);
      expect(events).toEqual(['p:shed']);
      setFree(1);
      await expect(queues.admit('p', take, limits, undefined, 'sheddable')).resolves.toBe('slot'); // a free slot takes it
    });

    it('lines critical requests up behind earlier critical ones, ahead of every standard one', async () => {
      const { queues, take, setFree } = setup();
      const order: string[] = [];
      const wide = { maxSize: 10, timeoutMs: 1000 };
      const all = [
        queues.admit('p', take, wide, undefined, 'standard').then(() => order.push('s1')),
        queues.admit('p', take, wide, undefined, 'critical').then(() => order.push('c1')),
        queues.admit('p', take, wide, undefined, 'standard').then(() => order.push('s2')),
        queues.admit('p', take, wide, undefined, 'critical').then(() => order.push('c2')),
      ];
      setFree(4);
      queues.notify('p');
      await Promise.all(all);
      expect(order).toEqual(['c1', 'c2', 's1', 's2']);
    });

    it('lets a critical request take the place of the most recent standard waiter when the queue is full', async () => {
      const { queues, take, setFree, events } = setup();
      const first = queues.admit('p', take, limits, undefined, 'standard');
      const last = queues.admit('p', take, limits, undefined, 'standard').catch((e: unknown) => e);
      const critical = queues.admit('p', take, limits, undefined, 'critical');
      expect(((await last) as RouterError).code).toBe('QUEUE_FULL');
      expect(queues.depth('p')).toBe(2);
      setFree(2);
      queues.notify('p');
      await expect(Promise.all([critical, first])).resolves.toEqual(['slot', 'slot']);
      expect(events).toEqual(['p:displaced:0', 'p:queue_full', 'p:admitted:0', 'p:admitted:0']);
    });

    it('answers a critical request 429 when the full queue holds only critical waiters', async () => {
      const { queues, take } = setup();
      void queues.admit('p', take, limits, undefined, 'critical').catch(() => undefined);
      void queues.admit('p', take, limits, undefined, 'critical').catch(() => undefined);
      const err = (await queues.admit('p', take, limits, undefined, 'critical').catch((e: unknown) => e)) as RouterError;
      expect(err.code).toBe('QUEUE_FULL');
    });
  });
});
