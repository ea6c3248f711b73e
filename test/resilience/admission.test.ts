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
});
