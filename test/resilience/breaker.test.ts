/** The per-endpoint breaker on real opossum, its cool-downs on fake time: no test waits for a timer. */
import { describe, expect, it, jest } from '@jest/globals';
import { BreakerRegistry, EndpointBreaker, type AttemptOutcome, type BreakerState } from '../../src/resilience/breaker.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

const settings = { failureThreshold: 3, cooldownMs: 10_000, closeAfterSuccesses: 2 };

function run(breaker: EndpointBreaker, outcome: AttemptOutcome): boolean {
  const ticket = breaker.begin();
  ticket?.settle(outcome);
  return ticket !== undefined;
}

function setup(): { breaker: EndpointBreaker; time: FakeTime; states: BreakerState[] } {
  const time = new FakeTime();
  const states: BreakerState[] = [];
  const breaker = new EndpointBreaker(settings, { onStateChange: (s) => states.push(s) }, time);
  return { breaker, time, states };
}

/** Three consecutive failures: the breaker is open and its cool-down is on the fake clock. */
async function opened(breaker: EndpointBreaker): Promise<void> {
  for (let i = 0; i < settings.failureThreshold; i++) run(breaker, 'failure');
  await flush();
  expect(breaker.state).toBe('open');
}

describe('EndpointBreaker', () => {
  it('opens after consecutive failures only, not after failures spread between successes', async () => {
    const { breaker, states } = setup();
    for (const outcome of ['failure', 'failure', 'success', 'failure', 'failure'] as const) run(breaker, outcome);
    await flush();
    expect(breaker.state).toBe('closed');
    run(breaker, 'failure');
    await flush();
    expect(breaker.state).toBe('open');
    expect(breaker.available()).toBe(false);
    expect(breaker.begin()).toBeUndefined();
    expect(states).toEqual(['open']);
    breaker.shutdown();
  });

  it('counts neither 4xx-style successes, backpressure nor unknown outcomes (a client gone before the first byte) as failures', async () => {
    const { breaker, time } = setup();
    for (let i = 0; i < 12; i++) run(breaker, (['backpressure', 'success', 'unknown'] as const)[i % 3] as AttemptOutcome);
    for (let i = 0; i < 5; i++) run(breaker, 'unknown'); // nor do they count towards the consecutive failures
    await flush();
    expect(breaker.state).toBe('closed');
    expect(time.pendingTimers).toBe(0);
    breaker.shutdown();
  });

  it('rejects for exactly the cool-down, then lets one probe through, closes on its success, and re-opens on a failure during probation', async () => {
    const { breaker, time, states } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs - 1);
    expect(breaker.state).toBe('open');
    expect(breaker.begin()).toBeUndefined();
    await time.advance(1);
    expect(breaker.state).toBe('half-open');
    const probe = breaker.begin();
    expect(probe).toBeDefined();
    expect(breaker.available()).toBe(false);
    expect(breaker.begin()).toBeUndefined(); // one probe at a time
    probe?.settle('success');
    await flush();
    expect(breaker.state).toBe('closed');
    expect(time.pendingTimers).toBe(0);
    run(breaker, 'failure'); // on probation: one failure is enough
    await flush();
    expect(breaker.state).toBe('open');
    expect(states).toEqual(['open', 'half-open', 'closed', 'open']);
    breaker.shutdown();
  });

  it('stays closed through failures spread between probation successes once probation is over', async () => {
    const { breaker, time } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    expect(run(breaker, 'success')).toBe(true); // the probe: closed, one more success of probation to go
    await flush();
    expect(run(breaker, 'success')).toBe(true);
    await flush();
    run(breaker, 'failure');
    run(breaker, 'failure');
    await flush();
    expect(breaker.state).toBe('closed');
    breaker.shutdown();
  });

  it('re-opens when the half-open probe fails, for another full cool-down', async () => {
    const { breaker, time, states } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    run(breaker, 'failure');
    await flush();
    expect(breaker.state).toBe('open');
    await time.advance(settings.cooldownMs - 1);
    expect(breaker.state).toBe('open');
    await time.advance(1);
    expect(breaker.state).toBe('half-open');
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open']);
    breaker.shutdown();
  });

  it('closes when the half-open probe meets backpressure: the engine answered', async () => {
    const { breaker, time } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    run(breaker, 'backpressure');
    await flush();
    expect(breaker.state).toBe('closed');
    breaker.shutdown();
  });

  it('opens again for another cool-down when the half-open probe ends unknown (its client gave up on a replica that hangs): it proved nothing', async () => {
    const { breaker, time, states } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    expect(run(breaker, 'unknown')).toBe(true);
    await flush();
    expect(breaker.state).toBe('open');
    expect(breaker.available()).toBe(false);
    await time.advance(settings.cooldownMs);
    expect(breaker.state).toBe('half-open');
    run(breaker, 'success');
    await flush();
    expect(breaker.state).toBe('closed');
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open', 'closed']);
    breaker.shutdown();
  });

  it('leaves the half-open decision to the probe: an attempt begun before the breaker opened does not close or re-open it', async () => {
    const { breaker, time } = setup();
    const early = [breaker.begin(), breaker.begin()];
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    early[0]?.settle('success');
    early[1]?.settle('failure');
    await flush();
    expect(breaker.state).toBe('half-open');
    expect(breaker.available()).toBe(true); // the probe slot is still free
    run(breaker, 'success');
    await flush();
    expect(breaker.state).toBe('closed');
    breaker.shutdown();
  });

  it('counts an answer when it ends, not when it begins: answers that each break after their first bytes open it', async () => {
    const { breaker, states } = setup();
    for (let i = 0; i < settings.failureThreshold - 1; i++) {
      run(breaker, 'answered'); // the first byte: nothing counted, the failure count not reset
      breaker.answerEnded('failure');
    }
    await flush();
    expect(breaker.state).toBe('closed');
    run(breaker, 'answered');
    breaker.answerEnded('failure', 'req-3');
    await flush();
    expect(breaker.state).toBe('open');
    expect(states).toEqual(['open']);
    breaker.shutdown();
  });

  it('a whole answer is a success: it resets the failure count', async () => {
    const { breaker } = setup();
    run(breaker, 'failure');
    run(breaker, 'failure');
    run(breaker, 'answered');
    breaker.answerEnded('success');
    run(breaker, 'failure');
    run(breaker, 'failure');
    await flush();
    expect(breaker.state).toBe('closed'); // two in a row since the whole answer
    run(breaker, 'failure');
    await flush();
    expect(breaker.state).toBe('open');
    breaker.shutdown();
  });

  it.each([
    ['answered (its whole answer the first success of probation)', true],
    ['a success (a 4xx it caused)', false],
  ])('after a probe %s, probation lasts closeAfterSuccesses successes, the probe’s the first: a failure before the second re-opens it', async (_case, answered) => {
    const { breaker, time } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    breaker.begin()?.settle(answered ? 'answered' : 'success');
    await flush();
    expect(breaker.state).toBe('closed');
    // the probe's success is the first of closeAfterSuccesses (2); an answered probe's is its whole answer
    if (answered) breaker.answerEnded('success');
    breaker.begin()?.settle('failure', {});
    await flush();
    expect(breaker.state).toBe('open'); // one more success was due (the answered probe's was counted once, not twice)
    breaker.shutdown();
  });

  it('closes when the half-open probe is answered, and re-opens when that answer breaks during probation', async () => {
    const { breaker, time } = setup();
    await opened(breaker);
    await time.advance(settings.cooldownMs);
    expect(breaker.state).toBe('half-open');
    expect(run(breaker, 'answered')).toBe(true);
    await flush();
    expect(breaker.state).toBe('closed');
    breaker.answerEnded('failure');
    await flush();
    expect(breaker.state).toBe('open');
    breaker.shutdown();
  });

  describe('server errors the engine answered ask the health check before they open it', () => {
    // a tenant whose requests make the engine answer 500 on purpose opened every breaker of a pool
    const answered = (key: string) => ({ key, answered: true });
    function asking(verdicts: Array<Promise<boolean> | undefined>) {
      const kept: Array<[string[], number]> = [];
      let asked = 0;
      const breaker = new EndpointBreaker(settings, { onKeptClosed: (keys, failures) => kept.push([keys, failures]) }, new FakeTime(), () => verdicts[asked++]);
      const fail = (source?: { key?: string; answered?: boolean }): void => breaker.begin()?.settle('failure', source);
      return { breaker, kept, fail, asked: () => asked };
    }

    it('passing: it stays closed, the run is forgotten, and the operator is told', async () => {
      let pass!: (healthy: boolean) => void;
      const t = asking([new Promise((resolve) => (pass = resolve)), Promise.resolve(false)]);
      for (let i = 0; i < settings.failureThreshold; i++) t.fail(answered('mallory'));
      t.fail(answered('mallory')); // one more while the check runs: asked once
      await flush();
      expect(t.asked()).toBe(1);
      expect(t.breaker.state).toBe('closed');
      pass(true);
      await flush();
      expect(t.breaker.state).toBe('closed');
      expect(t.kept).toEqual([[['mallory'], settings.failureThreshold + 1]]);
      for (let i = 0; i < settings.failureThreshold - 1; i++) t.fail(answered('mallory'));
      await flush();
      expect(t.asked()).toBe(1); // the count started again
      t.fail(answered('mallory'));
      await flush();
      expect(t.asked()).toBe(2);
      expect(t.breaker.state).toBe('open'); // the second check failed
      t.breaker.shutdown();
    });

    it.each([
      ['failing', [Promise.resolve(false)]],
      ['not answering (it threw)', [Promise.reject(new Error('connect ECONNREFUSED'))]],
      ['not possible (no health path)', [undefined]],
    ])('%s: it opens', async (_case, verdicts) => {
      const t = asking(verdicts);
      for (let i = 0; i < settings.failureThreshold; i++) t.fail(answered('mallory'));
      await flush();
      expect(t.breaker.state).toBe('open');
      expect(t.kept).toEqual([]);
      t.breaker.shutdown();
    });

    it('several keys’ server errors ask too (tenants acting together, or one with two keys), and the log names them', async () => {
      const t = asking([Promise.resolve(true)]);
      for (const key of ['a', 'b', 'a']) t.fail(answered(key));
      await flush();
      expect(t.asked()).toBe(1);
      expect(t.breaker.state).toBe('closed');
      expect(t.kept).toEqual([[['a', 'b'], 3]]);
      t.breaker.shutdown();
    });

    it.each([
      ['a failure that is no answer (a connection error) among them', [answered('a'), {}, answered('a')]],
      ['a failure of no key', [answered('a'), { answered: true }, answered('a')]],
    ])('%s open it without asking', async (_case, sources) => {
      const t = asking([Promise.resolve(true)]);
      for (const source of sources) t.fail(source);
      await flush();
      expect(t.asked()).toBe(0);
      expect(t.breaker.state).toBe('open');
      t.breaker.shutdown();
    });

    it('during probation one key’s server error re-opens it at once, as any failure does', async () => {
      const time = new FakeTime();
      let asked = 0;
      const breaker = new EndpointBreaker(settings, {}, time, () => (asked++, Promise.resolve(true)));
      await opened(breaker); // connection errors: no check asked
      await time.advance(settings.cooldownMs);
      expect(run(breaker, 'success')).toBe(true); // the probe closes it; probation follows
      await flush();
      expect(breaker.state).toBe('closed');
      breaker.begin()?.settle('failure', answered('mallory'));
      await flush();
      expect(breaker.state).toBe('open');
      expect(asked).toBe(0);
      breaker.shutdown();
    });
  });

  it('ends the cool-down only through the injected scheduler, never through real time passing', async () => {
    const time = new FakeTime();
    // opossum arms its own reset timer on the global setTimeout when it opens; make real time pass a week
    jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
    try {
      const breaker = new EndpointBreaker(settings, {}, time);
      await opened(breaker);
      jest.advanceTimersByTime(7 * 24 * 3600_000);
      await flush();
      expect(breaker.state).toBe('open');
      await time.advance(settings.cooldownMs);
      expect(breaker.state).toBe('half-open');
      breaker.shutdown();
      expect(jest.getTimerCount()).toBe(0); // opossum's timers went with it
    } finally {
      jest.useRealTimers();
    }
  });

  it('drops its cool-down on shutdown', async () => {
    const { breaker, time, states } = setup();
    await opened(breaker);
    expect(time.pendingTimers).toBe(1);
    breaker.shutdown();
    expect(time.pendingTimers).toBe(0);
    await time.advance(settings.cooldownMs);
    expect(states).toEqual(['open']);
  });
});

describe('BreakerRegistry', () => {
  it('runs every breaker on its scheduler, reports transitions by pool and endpoint, and drops breakers no longer listed', async () => {
    const time = new FakeTime();
    const seen: string[] = [];
    const registry = new BreakerRegistry((pool, endpoint, state) => seen.push(`${pool}/${endpoint}:${state}`), time);
    const a = registry.get('a', 'p', settings);
    expect(registry.get('a', 'p', settings)).toBe(a);
    registry.get('b', 'p', settings);
    await opened(a);
    await time.advance(settings.cooldownMs);
    expect([...registry.states()]).toEqual([
      { pool: 'p', endpoint: 'a', state: 'half-open' },
      { pool: 'p', endpoint: 'b', state: 'closed' },
    ]);
    expect(seen).toEqual(['p/a:open', 'p/a:half-open']);
    run(a, 'failure');
    await flush();
    expect(time.pendingTimers).toBe(1);
    registry.retain(new Set(['b']));
    expect(time.pendingTimers).toBe(0);
    expect([...registry.states()].map((s) => s.endpoint)).toEqual(['b']);
    registry.shutdown();
    expect([...registry.states()]).toEqual([]);
  });

  it('moves its version whenever what a breaker’s available() answers may have changed, and only then', async () => {
    const time = new FakeTime();
    const registry = new BreakerRegistry(undefined, time);
    const a = registry.get('a', 'p', settings);
    registry.get('b', 'p', settings);
    let probe: ReturnType<typeof a.begin>;
    const steps: Array<[string, () => void | Promise<void>]> = [
      ['a success and a failure below the threshold', async () => (run(a, 'success'), run(a, 'failure'), flush())],
      ['backpressure', async () => (run(a, 'backpressure'), flush())],
      ['opening', () => opened(a)],
      ['a rejected attempt', () => void a.begin()],
      ['the cool-down ending (half-open)', () => time.advance(settings.cooldownMs)],
      ['the probe taken', () => void (probe = a.begin())],
      ['the probe succeeding (closed)', async () => (probe?.settle('success'), flush())],
      ['retain keeping every breaker', () => registry.retain(new Set(['a', 'b']))],
      ['retain dropping one', () => registry.retain(new Set(['a']))],
    ];
    const moved: string[] = [];
    for (const [step, act] of steps) {
      const before = registry.version;
      await act();
      if (registry.version !== before) moved.push(step);
    }
    expect(moved).toEqual(['opening', 'the cool-down ending (half-open)', 'the probe taken', 'the probe succeeding (closed)', 'retain dropping one']);
    expect(a.state).toBe('closed');
    registry.shutdown();
  });
});
