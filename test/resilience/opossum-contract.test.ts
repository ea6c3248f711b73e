/**
 * The opossum behaviour src/resilience/breaker.ts relies on, pinned so that an upgrade that changes it
 * fails here, by name, rather than somewhere in the routing tests. The breaker drives its own cool-down
 * and, when it has passed, replaces the open circuit with one created half-open through opossum's
 * documented state initialization (README, "Breaker State Initialization"; @types/opossum leaves the
 * `state` option out, so it is passed in an object typed more widely than the constructor's options).
 */
import { describe, expect, it } from '@jest/globals';
import CircuitBreaker from 'opossum';
import { flush } from '../helpers/fake-time.js';

type Run = () => Promise<void>;

class Filtered extends Error {}

/** The options breaker.ts uses that matter here; `resetTimeout` as long as a timer goes, so it never fires in a test. */
function circuit(state?: Partial<CircuitBreaker.State>): CircuitBreaker<[Run], void> {
  const options = {
    timeout: false as const,
    resetTimeout: 2 ** 31 - 1,
    volumeThreshold: Number.MAX_SAFE_INTEGER,
    errorThresholdPercentage: 100,
    errorFilter: (err: unknown) => err instanceof Filtered,
    enableSnapshots: false,
    ...(state ? { state } : {}),
  };
  return new CircuitBreaker((run: Run) => run(), options);
}

function events(c: CircuitBreaker<[Run], void>): string[] {
  const seen: string[] = [];
  for (const name of ['open', 'close', 'halfOpen'] as const) c.on(name as 'open', () => seen.push(name));
  return seen;
}

/** Fires an attempt that ends when the returned function is called. */
function pending(c: CircuitBreaker<[Run], void>): { end: (err?: Error) => void; fired: Promise<unknown> } {
  let end!: (err?: Error) => void;
  const result = new Promise<void>((resolve, reject) => (end = (err) => (err ? reject(err) : resolve())));
  return { end, fired: c.fire(() => result).catch((e: unknown) => e) };
}

const halfOpen = { closed: false, open: false, halfOpen: true };

describe('opossum, as the breaker uses it', () => {
  it('creates a circuit half-open when told so, with its one probe slot free and no event', () => {
    const c = circuit(halfOpen);
    expect([c.halfOpen, c.pendingClose, c.opened, c.closed]).toEqual([true, true, false, false]);
    c.shutdown();
  });

  it('lets exactly one attempt through a half-open circuit and closes it on that attempt’s success', async () => {
    const c = circuit(halfOpen);
    const seen = events(c);
    const probe = pending(c);
    expect(c.pendingClose).toBe(false);
    const second = await pending(c).fired;
    expect((second as { code?: string }).code).toBe('EOPENBREAKER');
    probe.end();
    await probe.fired;
    expect(c.closed).toBe(true);
    expect(seen).toEqual(['close']);
    c.shutdown();
  });

  it('opens a half-open circuit when its probe fails, however high the volume threshold', async () => {
    const c = circuit(halfOpen);
    const seen = events(c);
    const probe = pending(c);
    probe.end(new Error('down'));
    await probe.fired;
    expect(c.opened).toBe(true);
    expect(seen).toEqual(['open']);
    c.shutdown();
  });

  it('counts an error its filter accepts as a success: never against the circuit, and it closes a half-open one', async () => {
    const closed = circuit();
    for (let i = 0; i < 5; i++) {
      const attempt = pending(closed);
      attempt.end(new Filtered());
      await attempt.fired;
    }
    expect(closed.stats.failures).toBe(0);
    expect(closed.closed).toBe(true);
    closed.shutdown();

    const c = circuit(halfOpen);
    const probe = pending(c);
    probe.end(new Filtered());
    await probe.fired;
    expect(c.closed).toBe(true);
    c.shutdown();
  });

  it('never opens a closed circuit by itself under these options; open() opens it and then it rejects', async () => {
    const c = circuit();
    const seen = events(c);
    for (let i = 0; i < 20; i++) {
      const attempt = pending(c);
      attempt.end(new Error('down'));
      await attempt.fired;
    }
    expect(c.closed).toBe(true);
    c.open();
    expect([c.opened, c.pendingClose]).toEqual([true, false]);
    expect(((await pending(c).fired) as { code?: string }).code).toBe('EOPENBREAKER');
    expect(seen).toEqual(['open']);
    c.shutdown();
  });

  it('ignores an attempt that ends after the circuit was shut down', async () => {
    const c = circuit(halfOpen);
    const seen = events(c);
    const late = pending(c);
    c.shutdown();
    late.end(new Error('down'));
    await late.fired;
    await flush();
    expect([c.isShutdown, c.opened, c.closed]).toEqual([true, false, false]);
    expect(seen).toEqual([]);
  });
});
