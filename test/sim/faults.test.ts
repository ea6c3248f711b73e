import { describe, expect, it } from '@jest/globals';
import { FaultSpecError, mergeFaults, parseFault } from '../../src/sim/faults.js';

describe('parseFault', () => {
  it.each([
    ['', {}],
    ['none', {}],
    ['status=503', { status: 503 }],
    ['status=429, retry-after=2', { status: 429, retryAfterSeconds: 2 }],
    ['hang', { hang: true }],
    ['slow-start=250', { slowStartMs: 250 }],
    ['die-after=0', { dieAfterTokens: 0 }],
    ['stall-after=3,error-after=5', { stallAfterTokens: 3, errorAfterTokens: 5 }],
  ])('reads %j', (spec, expected) => {
    expect(parseFault(spec)).toEqual(expected);
  });

  it.each([['explode'], ['status=abc'], ['status=99'], ['die-after=-1'], ['slow-start=1.5'], ['status']])('rejects %j with a message that lists the valid faults or the range', (spec) => {
    expect(() => parseFault(spec)).toThrow(FaultSpecError);
  });

  it('lets a later fault override an earlier one field by field', () => {
    expect(mergeFaults({ status: 500, slowStartMs: 10 }, { status: 503 })).toEqual({ status: 503, slowStartMs: 10 });
  });
});
