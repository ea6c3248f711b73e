/** The per-endpoint breaker on real opossum, with a short cool-down. */
import { describe, expect, it } from '@jest/globals';
import { EndpointBreaker, type AttemptOutcome, type BreakerState } from '../../src/resilience/breaker.js';
import { waitFor } from '../helpers/sim.js';

const settings = { failureThreshold: 3, cooldownMs: 150, closeAfterSuccesses: 2 };

function run(breaker: EndpointBreaker, outcome: AttemptOutcome): boolean {
  const ticket = breaker.begin();
  ticket?.settle(outcome);
  return ticket !== undefined;
}

async function settled(): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
}

describe('EndpointBreaker', () => {
  it('opens after consecutive failures only, not after failures spread between successes', async () => {
    const breaker = new EndpointBreaker(settings);
    for (const outcome of ['failure', 'failure', 'success', 'failure', 'failure'] as const) run(breaker, outcome);
    await settled();
    expect(breaker.state).toBe('closed');
    run(breaker, 'failure');
    await settled();
    expect(breaker.state).toBe('open');
    expect(breaker.available()).toBe(false);
    expect(breaker.begin()).toBeUndefined();
    breaker.shutdown();
  });

  it('counts neither 4xx-style successes nor backpressure as failures', async () => {
    const breaker = new EndpointBreaker(settings);
    for (let i = 0; i < 10; i++) run(breaker, i % 2 === 0 ? 'backpressure' : 'success');
    await settled();
    expect(breaker.state).toBe('closed');
    breaker.shutdown();
  });

  it('lets one probe through after the cool-down, closes on its success, and re-opens on a failure during probation', async () => {
    const states: BreakerState[] = [];
    const breaker = new EndpointBreaker(settings, { onStateChange: (s) => states.push(s) });
    for (let i = 0; i < 3; i++) run(breaker, 'failure');
    await settled();
    await waitFor(() => breaker.state === 'half-open', 'the cool-down to pass', 3000);
    const probe = breaker.begin();
    expect(probe).toBeDefined();
    expect(breaker.begin()).toBeUndefined(); // one probe at a time
    probe?.settle('success');
    await settled();
    expect(breaker.state).toBe('closed');
    run(breaker, 'failure'); // on probation: one failure is enough
    await settled();
    expect(breaker.state).toBe('open');
    expect(states).toEqual(['open', 'half-open', 'closed', 'open']);
    breaker.shutdown();
  });

  it('re-opens when the half-open probe fails', async () => {
    const breaker = new EndpointBreaker(settings);
    for (let i = 0; i < 3; i++) run(breaker, 'failure');
    await waitFor(() => breaker.state === 'half-open', 'the cool-down to pass', 3000);
    run(breaker, 'failure');
    await settled();
    expect(breaker.state).toBe('open');
    breaker.shutdown();
  });

  it('counts a broken stream reported after the attempt as a failure', async () => {
    const breaker = new EndpointBreaker(settings);
    for (let i = 0; i < 3; i++) {
      run(breaker, 'success');
      breaker.recordFailure();
    }
    await settled();
    expect(breaker.state).toBe('closed'); // each success reset the count
    for (let i = 0; i < 3; i++) breaker.recordFailure();
    await settled();
    expect(breaker.state).toBe('open');
    breaker.shutdown();
  });
});
