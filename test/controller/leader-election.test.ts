import { describe, expect, it } from '@jest/globals';
import { LeaderElector } from '../../src/controller/leader-election.js';
import { type Scheduler } from '../../src/core/clock.js';
import { type LeaseRecord } from '../../src/discovery/kubernetes/kube-api.js';
import { flush } from '../helpers/fake-time.js';

/** A lease store with the API server's optimistic concurrency. */
class Leases {
  record: LeaseRecord | undefined;
  private version = 0;
  failing = false;
  /** Every call waits for an answer that never comes (an API server, or a proxy before it, gone silent). */
  hanging = false;
  readLease(): Promise<LeaseRecord | undefined> {
    if (this.hanging) return new Promise(() => undefined);
    if (this.failing) return Promise.reject(new Error('connect ECONNREFUSED'));
    return Promise.resolve(this.record && { ...this.record });
  }
  createLease(_ns: string, _name: string, lease: LeaseRecord): Promise<boolean> {
    if (this.record) return Promise.resolve(false);
    this.record = { ...lease, resourceVersion: String(++this.version) };
    return Promise.resolve(true);
  }
  replaceLease(_ns: string, _name: string, lease: LeaseRecord): Promise<boolean> {
    if (this.failing) return Promise.reject(new Error('connect ECONNREFUSED'));
    if (lease.resourceVersion !== this.record?.resourceVersion) return Promise.resolve(false);
    this.record = { ...lease, resourceVersion: String(++this.version) };
    return Promise.resolve(true);
  }
}

/** Holds timers until `tick()` runs every one due; time is the `now` field. */
class Ticker implements Scheduler {
  now = 0;
  private timers: Array<{ fn: () => void; at: number }> = [];
  setTimeout(fn: () => void, ms: number): unknown {
    const t = { fn, at: this.now + ms };
    this.timers.push(t);
    return t;
  }
  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t !== handle);
  }
  async advance(ms: number): Promise<void> {
    const until = this.now + ms;
    for (let i = 0; i < 5; i++) await flush();
    for (;;) {
      const due = this.timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.now = due.at;
      due.fn();
      for (let i = 0; i < 5; i++) await flush();
    }
    this.now = until;
  }
}

/** One elector, `a` (lease 3 s, renewed every 1 s), whose changes of leadership are recorded. */
function watched(): { leases: Leases; ticker: Ticker; changes: boolean[]; a: LeaderElector } {
  const leases = new Leases();
  const ticker = new Ticker();
  const changes: boolean[] = [];
  const a = new LeaderElector(leases, {
    namespace: 'n',
    name: 'l',
    identity: 'a',
    leaseDurationMs: 3000,
    renewIntervalMs: 1000,
    clock: { now: () => ticker.now },
    scheduler: ticker,
    onChange: (l) => changes.push(l),
    onError: () => undefined,
  });
  return { leases, ticker, changes, a };
}

function elector(leases: Leases, ticker: Ticker, identity: string): LeaderElector {
  return new LeaderElector(leases, { namespace: 'modelgate', name: 'modelgate', identity, leaseDurationMs: 3000, renewIntervalMs: 1000, clock: { now: () => ticker.now }, scheduler: ticker });
}

describe('LeaderElector', () => {
  it('gives the lease to one replica; the other waits while it is renewed', async () => {
    const leases = new Leases();
    const ticker = new Ticker();
    const a = elector(leases, ticker, 'a');
    const b = elector(leases, ticker, 'b');
    a.start();
    await ticker.advance(0);
    b.start();
    await ticker.advance(10_000);
    expect([a.isLeader(), b.isLeader()]).toEqual([true, false]);
    expect(leases.record?.holderIdentity).toBe('a');
  });

  it('hands over when the holder stops renewing, after the lease duration on the follower’s own clock', async () => {
    const leases = new Leases();
    const ticker = new Ticker();
    const a = elector(leases, ticker, 'a');
    const b = elector(leases, ticker, 'b');
    a.start();
    b.start();
    await ticker.advance(2000);
    await a.stop().catch(() => undefined);
    leases.record = { ...leases.record!, holderIdentity: 'a' }; // a crashed: the record still names it
    await ticker.advance(2000);
    expect(b.isLeader()).toBe(false);
    await ticker.advance(3000);
    expect(b.isLeader()).toBe(true);
    expect(leases.record?.leaseTransitions).toBe(1);
  });

  it('releases the lease on stop so a follower takes over at its next attempt', async () => {
    const leases = new Leases();
    const ticker = new Ticker();
    const a = elector(leases, ticker, 'a');
    const b = elector(leases, ticker, 'b');
    a.start();
    await ticker.advance(0);
    b.start();
    await ticker.advance(0);
    await a.stop();
    expect(leases.record?.holderIdentity).toBe('');
    await ticker.advance(1000);
    expect(b.isLeader()).toBe(true);
  });

  it('is no longer leader once the lease duration passes without a renewal, even while its renewal hangs', async () => {
    const { leases, ticker, changes, a } = watched();
    a.start();
    await ticker.advance(0);
    expect(a.isLeader()).toBe(true);
    leases.hanging = true;
    await ticker.advance(2999); // the renewal at 1000 never answers
    expect(a.isLeader()).toBe(true);
    await ticker.advance(2);
    expect(a.isLeader()).toBe(false);
    expect(changes).toEqual([true, false]);
  });

  it('steps down when it cannot renew within the lease duration', async () => {
    const { leases, ticker, changes, a } = watched();
    a.start();
    await ticker.advance(0);
    leases.failing = true;
    await ticker.advance(2000);
    expect(a.isLeader()).toBe(true);
    await ticker.advance(2000);
    expect(a.isLeader()).toBe(false);
    expect(changes).toEqual([true, false]);
    await a.stop();
  });
});
