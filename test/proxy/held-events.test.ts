import { describe, expect, it } from '@jest/globals';
import { HeldEvents, heldEventsLimit, SHARE_CHARS } from '../../src/proxy/held-events.js';

const MiB = 1024 * 1024;

describe('heldEventsLimit', () => {
  it("is an eighth of the heap's limit, or of the container's memory when that is less", () => {
    expect(heldEventsLimit(4096 * MiB, 2 ** 64)).toBe(512 * MiB); // no limit (Node answers a huge number)
    expect(heldEventsLimit(4096 * MiB, 512 * MiB)).toBe(64 * MiB); // the chart's pod
    expect(heldEventsLimit(4096 * MiB, 0)).toBe(512 * MiB); // unknown
    expect(heldEventsLimit(4096 * MiB, undefined)).toBe(512 * MiB);
  });
});

describe('HeldEvents', () => {
  it('sums every stream’s share and cuts only a stream past its own share while the sum is past the limit', () => {
    const held = new HeldEvents(2 * SHARE_CHARS);
    expect(held.move(0, SHARE_CHARS)).toBe(false); // at its share
    expect(held.move(0, SHARE_CHARS)).toBe(false); // another, the router at its limit
    expect(held.move(0, 10)).toBe(false); // past the limit, but a small event
    expect(held.move(SHARE_CHARS, SHARE_CHARS + 1)).toBe(true); // past its share and the router past its limit
    expect(held.chars).toBe(2 * SHARE_CHARS + 11);
    held.move(SHARE_CHARS + 1, 0); // that stream cut: its share released
    expect(held.move(10, 2 * SHARE_CHARS)).toBe(true);
    expect(held.move(2 * SHARE_CHARS, 0)).toBe(false);
    expect(held.chars).toBe(SHARE_CHARS);
  });
});
