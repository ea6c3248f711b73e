import { describe, expect, it } from '@jest/globals';
import { Liveness } from '../../src/resilience/liveness.js';

describe('Liveness', () => {
  it('says a replica worked after a time only for a mark strictly after it; a later mark is kept over an earlier one', () => {
    const live = new Liveness();
    expect(live.workedAfter('a', 0)).toBe(false);
    live.mark('a', 100);
    expect(live.workedAfter('a', 99)).toBe(true);
    expect(live.workedAfter('a', 100)).toBe(false); // a mark at the time itself is the request's own
    live.mark('a', 50); // an older reading (a scrape answered late) does not move it back
    expect(live.workedAfter('a', 99)).toBe(true);
    expect(live.workedAfter('b', 0)).toBe(false);
  });

  it('forgets replicas not marked for an hour (swept as marks come)', () => {
    const live = new Liveness();
    live.mark('gone', 0);
    for (let i = 1; i <= 4096; i++) live.mark('busy', 3_600_001 + i);
    expect(live.size).toBe(1);
    expect(live.workedAfter('gone', -1)).toBe(false);
  });
});
