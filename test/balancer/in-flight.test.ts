/** Outstanding requests per endpoint, and the counters a reader holds between picks. */
import { describe, expect, it } from '@jest/globals';
import { InFlight } from '../../src/balancer/in-flight.js';

describe('InFlight: held counters', () => {
  it('a held counter follows every acquire and release, and stays at 0 until dropped', () => {
    const inFlight = new InFlight();
    const counter = inFlight.hold('a', 'p');
    expect(counter.count).toBe(0);
    const r1 = inFlight.acquire('a', 'p');
    const r2 = inFlight.acquire('a', 'p');
    expect(counter.count).toBe(2);
    r1();
    r2();
    expect(counter.count).toBe(0);
    expect(inFlight.hold('a', 'p')).toBe(counter); // still the same object
    inFlight.drop('a');
    inFlight.acquire('a', 'p');
    expect(counter.count).toBe(1);
  });

  it('lists only endpoints with outstanding requests, held or not', () => {
    const inFlight = new InFlight();
    inFlight.hold('idle', 'p');
    inFlight.hold('busy', 'p');
    inFlight.acquire('busy', 'p');
    inFlight.acquire('other', 'q');
    expect([...inFlight.entries()]).toEqual([
      ['busy', 1],
      ['other', 1],
    ]);
    expect([...inFlight.byEndpoint()]).toEqual([
      { endpoint: 'busy', pool: 'p', count: 1 },
      { endpoint: 'other', pool: 'q', count: 1 },
    ]);
    expect(inFlight.total()).toBe(2);
  });

  it('reports the pool of the request that made an idle endpoint busy, as when idle endpoints were not kept', () => {
    const inFlight = new InFlight();
    inFlight.hold('a', 'p');
    const release = inFlight.acquire('a', 'q');
    expect([...inFlight.byEndpoint()]).toEqual([{ endpoint: 'a', pool: 'q', count: 1 }]);
    release();
    inFlight.acquire('a', 'p');
    expect([...inFlight.byEndpoint()]).toEqual([{ endpoint: 'a', pool: 'p', count: 1 }]);
  });

  it.each([
    { case: 'dropped while idle: forgotten at once', busy: false, holds: 1, forgotten: true },
    { case: 'dropped while busy: forgotten when its last request ends', busy: true, holds: 1, forgotten: true },
    { case: 'held twice, dropped once: kept', busy: false, holds: 2, forgotten: false },
  ])('an endpoint $case', ({ busy, holds, forgotten }) => {
    const inFlight = new InFlight();
    let counter = inFlight.hold('a');
    for (let i = 1; i < holds; i++) counter = inFlight.hold('a');
    const release = busy ? inFlight.acquire('a') : undefined;
    inFlight.drop('a');
    release?.();
    expect(inFlight.count('a')).toBe(0);
    // a forgotten endpoint gets a new counter; a kept one, the same
    expect(inFlight.hold('a') === counter).toBe(!forgotten);
  });

  it('ignores a drop without a hold', () => {
    const inFlight = new InFlight();
    inFlight.drop('a');
    const release = inFlight.acquire('a');
    inFlight.drop('a');
    expect(inFlight.count('a')).toBe(1);
    release();
    expect([...inFlight.entries()]).toEqual([]);
  });
});

describe('InFlight: per pool', () => {
  it('counts each pool’s own requests on an endpoint two pools share, and a release gives back its own pool’s', () => {
    const inFlight = new InFlight();
    const chat = [inFlight.acquire('http://engine:8000', 'chat'), inFlight.acquire('http://engine:8000', 'chat')];
    const completions = inFlight.acquire('http://engine:8000', 'completions');
    expect(inFlight.count('http://engine:8000')).toBe(3); // the engine carries both pools' requests
    expect(inFlight.poolCount('chat')).toBe(2);
    expect(inFlight.poolCount('completions')).toBe(1);
    completions();
    completions(); // idempotent
    expect(inFlight.poolCount('completions')).toBe(0);
    expect(inFlight.poolCount('chat')).toBe(2);
    for (const release of chat) release();
    expect(inFlight.poolCount('chat')).toBe(0);
    expect(inFlight.total()).toBe(0);
  });
});
