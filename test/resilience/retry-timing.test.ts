import { describe, expect, it } from '@jest/globals';
import { jsonDepthExceeds } from '../../src/api/json-depth.js';
import { retryDelay } from '../../src/director/retry-policy.js';
import { retryAfterMs } from '../../src/core/errors.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

describe('retryDelay', () => {
  it('doubles from the initial backoff up to the cap, within its upper half', () => {
    const retries = { ...RESILIENCE_DEFAULTS.retries, initialBackoffMs: 100, maxBackoffMs: 500 };
    expect([0, 1, 2, 3].map((n) => retryDelay(n, retries, () => 1))).toEqual([100, 200, 400, 500]);
    expect([0, 1, 2, 3].map((n) => retryDelay(n, retries, () => 0))).toEqual([50, 100, 200, 250]);
  });
});

describe('retryAfterMs', () => {
  it.each([
    [{ 'retry-after': '2' }, 2000],
    [{ 'retry-after': '0.5' }, 500],
    [{ 'retry-after-ms': '250' }, 250],
    [{ 'retry-after-ms': '250', 'retry-after': '9' }, 250],
    [{ 'retry-after': 'Thu, 01 Jan 2026 00:00:03 GMT' }, 3000],
    [{ 'retry-after': 'soon' }, undefined],
    [{}, undefined],
  ])('reads %j as %p ms', (headers, ms) => {
    expect(retryAfterMs(headers, Date.parse('2026-01-01T00:00:00Z'))).toBe(ms);
  });
});

describe('jsonDepthExceeds', () => {
  it.each([
    ['{"a":[1,{"b":2}]}', 3, false],
    ['{"a":[1,{"b":2}]}', 2, true],
    ['"[[[[[[[[["', 2, false],
    ['{"a":"\\"[[[["}', 1, false],
    ['['.repeat(100000), 64, true],
  ])('%j with limit %i → %p', (text, max, exceeds) => {
    expect(jsonDepthExceeds(text, max)).toBe(exceeds);
  });
});
