/** What an attempt's result means: retry or not, after how long, and how it moves the breaker. (retryDelay: test/resilience/retry-timing.test.ts.) */
import { describe, expect, it } from '@jest/globals';
import { breakerOutcome, failureError, outcomeName, retryable, retryDelay, retryWait } from '../../src/director/retry-policy.js';
import { type AttemptResult, type FailureReason } from '../../src/proxy/forwarder.js';
import { normaliseUpstreamError } from '../../src/proxy/upstream-errors.js';
import { type AttemptOutcome } from '../../src/resilience/breaker.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const committed: AttemptResult = { kind: 'committed', status: 200, done: Promise.resolve({ end: 'complete', bytes: 1 }) };
const clientGone: AttemptResult = { kind: 'client_gone' };

function failed(reason: FailureReason, detail = 'ECONNREFUSED'): Extract<AttemptResult, { kind: 'failed' }> {
  return { kind: 'failed', reason, detail };
}

function upstream(status: number, retryAfterMs?: number): AttemptResult {
  const body = Buffer.from(JSON.stringify({ error: { message: `status ${status}` } }));
  return { kind: 'upstream_error', status, error: normaliseUpstreamError(status, body), headers: {}, retryAfterMs };
}

describe('retryable', () => {
  it.each<[string, AttemptResult, boolean]>([
    ['connect', failed('connect'), true],
    ['connect_timeout', failed('connect_timeout'), true],
    ['reset', failed('reset'), true],
    ['first_byte_timeout', failed('first_byte_timeout'), true],
    ['deadline (no time left for anyone)', failed('deadline'), false],
    ['429', upstream(429), true],
    ['502', upstream(502), true],
    ['503', upstream(503), true],
    ['504', upstream(504), true],
    ['400', upstream(400), false],
    ['401 (the router’s credentials)', upstream(401), false],
    ['404', upstream(404), false],
    ['408', upstream(408), false],
    ['424 (TGI generation failed)', upstream(424), false],
    ['500', upstream(500), false],
    ['501', upstream(501), false],
    ['committed', committed, false],
    ['client_gone', clientGone, false],
  ])('%s → %p', (_name, result, expected) => {
    expect(retryable(result)).toBe(expected);
  });
});

describe('breakerOutcome', () => {
  it.each<[string, AttemptResult, AttemptOutcome]>([
    ['committed (counted when the answer ends)', committed, 'answered'],
    ['429 (busy, alive)', upstream(429), 'backpressure'],
    ['503 (busy, alive)', upstream(503), 'backpressure'],
    ['500', upstream(500), 'failure'],
    ['502', upstream(502), 'failure'],
    ['504', upstream(504), 'failure'],
    ['400 (the request’s fault)', upstream(400), 'success'],
    ['404', upstream(404), 'success'],
    ['422', upstream(422), 'success'],
    ['connect', failed('connect'), 'failure'],
    ['connect_timeout', failed('connect_timeout'), 'failure'],
    ['reset', failed('reset'), 'failure'],
    ['first_byte_timeout', failed('first_byte_timeout'), 'failure'],
    ['deadline', failed('deadline'), 'unknown'],
    ['client_gone (says nothing about the endpoint)', clientGone, 'unknown'],
  ])('%s → %s', (_name, result, expected) => {
    expect(breakerOutcome(result)).toBe(expected);
  });
});

describe('outcomeName', () => {
  it.each<[AttemptResult, string]>([
    [committed, 'committed'],
    [upstream(503), 'upstream_503'],
    [upstream(400), 'upstream_400'],
    [failed('connect'), 'connect'],
    [failed('first_byte_timeout'), 'first_byte_timeout'],
    [failed('deadline'), 'deadline'],
    [clientGone, 'client_gone'],
  ])('%#: %s', (result, expected) => {
    expect(outcomeName(result)).toBe(expected);
  });
});

describe('failureError', () => {
  it.each<[FailureReason, string, number]>([
    ['connect', 'UPSTREAM_CONNECTION_FAILED', 502],
    ['reset', 'UPSTREAM_CONNECTION_FAILED', 502],
    ['connect_timeout', 'UPSTREAM_TIMEOUT', 504],
    ['first_byte_timeout', 'UPSTREAM_TIMEOUT', 504],
    ['deadline', 'UPSTREAM_TIMEOUT', 504],
  ])('%s → %s (%i), with the detail in the message', (reason, code, status) => {
    const err = failureError(failed(reason, 'detail-xyz'));
    expect(err.code).toBe(code);
    expect(err.status).toBe(status);
    expect(err.message).toContain('(detail-xyz)');
    expect(err.retryAfterSeconds).toBeUndefined();
  });
});

describe('retryWait', () => {
  const retries = { ...RESILIENCE_DEFAULTS.retries, maxRetries: 2, initialBackoffMs: 100, maxBackoffMs: 1_000, maxRetryAfterMs: 5_000 };
  const half = (): number => 0.5;
  // with random 0.5 the backoff is ¾ of its ceiling: 75 ms before retry 0, 150 ms before retry 1

  it.each<[string, number, AttemptResult, typeof retries, number | undefined]>([
    ['first retry after a connection failure: the backoff', 0, failed('connect'), retries, 75],
    ['second retry: the doubled backoff', 1, failed('reset'), retries, 150],
    ['budget exhausted', 2, failed('connect'), retries, undefined],
    ['beyond the budget', 3, failed('connect'), retries, undefined],
    ['maxRetries 0: never', 0, failed('connect'), { ...retries, maxRetries: 0 }, undefined],
    ['an engine error without Retry-After: the backoff', 0, upstream(503), retries, 75],
    ['Retry-After longer than the backoff: honoured', 0, upstream(503, 2_000), retries, 2_000],
    ['Retry-After exactly maxRetryAfterMs: honoured', 0, upstream(429, 5_000), retries, 5_000],
    ['Retry-After beyond maxRetryAfterMs: no retry', 0, upstream(429, 5_001), retries, undefined],
    ['Retry-After shorter than the backoff: the backoff', 1, upstream(503, 10), retries, 150],
    ['Retry-After 0: the backoff', 0, upstream(503, 0), retries, 75],
    ['budget exhausted even when Retry-After is short', 2, upstream(503, 10), retries, undefined],
    ['maxRetryAfterMs 0 refuses any positive Retry-After', 0, upstream(503, 1), { ...retries, maxRetryAfterMs: 0 }, undefined],
    ['the backoff is capped by maxBackoffMs', 1, failed('connect'), { ...retries, maxBackoffMs: 120 }, 90],
  ])('%s', (_name, n, result, settings, expected) => {
    expect(retryWait(n, result, settings, half)).toBe(expected);
  });

  it('is the backoff of retryDelay with the same random draw', () => {
    const draws = [0, 0.25, 0.999];
    for (const r of draws) {
      for (const n of [0, 1]) expect(retryWait(n, failed('connect'), retries, () => r)).toBe(retryDelay(n, retries, () => r));
    }
  });
});
