import { describe, expect, it } from '@jest/globals';
import { HeldEvents, heldEventsLimit, MIN_SHARE_CHARS } from '../../src/proxy/held-events.js';

const MiB = 1024 * 1024;
const MIN = MIN_SHARE_CHARS;

describe('heldEventsLimit', () => {
  it("is an eighth of the heap's limit, or of the container's memory when that is less", () => {
    expect(heldEventsLimit(4096 * MiB, 2 ** 64)).toBe(512 * MiB); // no limit (Node answers a huge number)
    expect(heldEventsLimit(4096 * MiB, 512 * MiB)).toBe(64 * MiB); // the chart's pod
    expect(heldEventsLimit(4096 * MiB, 0)).toBe(512 * MiB); // unknown
    expect(heldEventsLimit(4096 * MiB, undefined)).toBe(512 * MiB);
  });
});

describe('HeldEvents', () => {
  it('under its limit, cuts no one, however much one stream holds', () => {
    const held = new HeldEvents(10 * MIN);
    expect(held.move(0, 9 * MIN)).toBe(false);
    expect(held.move(0, MIN)).toBe(false);
    expect(held.chars).toBe(10 * MIN);
  });

  it('past its limit, cuts a growing stream that holds more than the limit over the streams holding anything: the largest first', () => {
    const held = new HeldEvents(10 * MIN);
    expect(held.move(0, 6 * MIN)).toBe(false); // a
    expect(held.move(0, 5 * MIN)).toBe(false); // b: past the limit, but at its share (10 / 2)
    expect(held.move(6 * MIN, 7 * MIN)).toBe(true); // a grows past its share: cut
    held.move(7 * MIN, 0); // its share released
    expect(held.chars).toBe(5 * MIN);
    expect(held.move(5 * MIN, 9 * MIN)).toBe(false); // b alone, under the limit again
  });

  it('many streams: each may hold its fair share of the limit, never less than MIN_SHARE_CHARS; one that shrinks is not cut', () => {
    const held = new HeldEvents(10 * MIN);
    for (let i = 0; i < 20; i++) expect(held.move(0, MIN)).toBe(false); // 20 at the floor: past the limit, none cut
    expect(held.move(MIN, MIN + 1)).toBe(true); // past the floor
    expect(held.move(MIN, MIN / 2)).toBe(false); // an event finished in part
    expect(held.chars).toBe(19.5 * MIN + 1);
  });
});
