import { describe, expect, it } from '@jest/globals';
import { ListedEndpoints } from '../../src/wiring/listed-endpoints.js';

describe('ListedEndpoints', () => {
  it('keeps an endpoint listed now, and one listed less than the grace ago; forgets it once the grace has passed', () => {
    let now = 0;
    const listed = new ListedEndpoints(60_000, () => now);
    expect([...listed.update([['p', ['a', 'b']]])]).toEqual(['a', 'b']);
    now = 59_999;
    expect([...listed.update([['p', ['b']]])]).toEqual(['b', 'a']); // a left 59.999 s ago: a readiness blip
    now = 60_000;
    expect([...listed.update([['p', ['b']]])]).toEqual(['b']); // a gone a minute: forgotten
    expect([...listed.update([['p', ['a', 'b']]])]).toEqual(['a', 'b']); // back: listed again, from now
  });

  it('counts the grace from the last time an endpoint was listed, not the first', () => {
    let now = 0;
    const listed = new ListedEndpoints(1000, () => now);
    listed.update([['p', ['a']]]);
    now = 900;
    listed.update([['p', ['a']]]);
    now = 1500;
    expect([...listed.update([['p', []]])]).toEqual(['a']);
    now = 1900;
    expect([...listed.update([['p', []]])]).toEqual([]);
  });

  it('holds only what was listed within one grace, however many endpoints came and went before', () => {
    let now = 0;
    const listed = new ListedEndpoints(60_000, () => now);
    for (let i = 0; i < 10_000; i++) {
      now = i * 100; // a pod replaced every 100 ms
      listed.update([['p', [`pod-${i}`]]]);
    }
    expect(listed.update([['p', []]]).size).toBe(600);
  });

  it('forgets at once with no grace', () => {
    const listed = new ListedEndpoints(0, () => 5);
    listed.update([['p', ['a']]]);
    expect([...listed.update([['p', ['b']]])]).toEqual(['b']);
  });

  it('forgets at once the endpoints of a pool that was deleted, without the grace (a deletion is no blip)', () => {
    let now = 0;
    const listed = new ListedEndpoints(60_000, () => now);
    listed.update([
      ['llama', ['a', 'shared']],
      ['canary', ['c', 'shared']],
    ]);
    now = 1000;
    expect([...listed.update([['llama', ['shared']]])]).toEqual(['shared', 'a']); // a blinked; canary was deleted: c goes now
  });
});
