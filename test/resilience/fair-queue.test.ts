import { describe, expect, it } from '@jest/globals';
import { FairQueue } from '../../src/resilience/fair-queue.js';

/** Serves the head `n` times and returns the values served. */
function serve(queue: FairQueue<string>, n: number): string[] {
  const served: string[] = [];
  for (let i = 0; i < n; i++) {
    const head = queue.head();
    if (!head) break;
    queue.remove(head, 'served');
    served.push(head.value);
  }
  return served;
}

describe('FairQueue', () => {
  it('orders by start tag, ties in arrival order', () => {
    const queue = new FairQueue<string>();
    for (const v of ['a0', 'a1', 'a2']) queue.push(v, 'a', 1);
    queue.push('b0', 'b', 2);
    queue.push('b1', 'b', 2);
    queue.push('b2', 'b', 2);
    // a: 0, 1, 2; b (weight 2): 0, 0.5, 1
    expect(serve(queue, 6)).toEqual(['a0', 'b0', 'b1', 'a1', 'b2', 'a2']);
  });

  it('starts a newcomer at the virtual time, not behind tags the others have already been served past', () => {
    const queue = new FairQueue<string>();
    for (let i = 0; i < 10; i++) queue.push(`a${i}`, 'a', 1);
    expect(serve(queue, 5)).toEqual(['a0', 'a1', 'a2', 'a3', 'a4']);
    queue.push('b0', 'b', 1); // V is a4's start tag, 4: b0 starts there, ahead of a5 (5)
    expect(serve(queue, 2)).toEqual(['b0', 'a5']);
  });

  it('names the latest entry of the tenant with the most entries', () => {
    const queue = new FairQueue<string>();
    queue.push('a0', 'a', 1);
    queue.push('b0', 'b', 1);
    queue.push('b1', 'b', 1);
    queue.push('a1', 'a', 1);
    queue.push('b2', 'b', 1);
    expect(queue.heaviest()).toMatchObject({ count: 3, entry: { value: 'b2' } });
    expect([queue.count('a'), queue.count('b'), queue.count('c')]).toEqual([2, 3, 0]);
  });

  it('forgets tenants once the virtual time passes them, so memory stays bounded under many one-off tenants', () => {
    const queue = new FairQueue<string>();
    for (let i = 0; i < 5; i++) queue.push(`long${i}`, 'long', 1);
    let peak = 0;
    for (let i = 0; i < 1000; i++) {
      queue.push(`once${i}`, `tenant-${i}`, 1);
      queue.push(`long-more${i}`, 'long', 1);
      serve(queue, 2);
      peak = Math.max(peak, queue.trackedTenants);
    }
    expect(peak).toBeLessThan(20);
  });

  it('drops all state when it empties', () => {
    const queue = new FairQueue<string>();
    for (let i = 0; i < 3; i++) queue.push(`a${i}`, 'a', 1);
    serve(queue, 3);
    expect(queue.trackedTenants).toBe(0);
    expect(queue.push('a3', 'a', 1).start).toBe(0);
  });

  it('answers false for an entry that is not queued', () => {
    const queue = new FairQueue<string>();
    const entry = queue.push('a0', 'a', 1);
    expect(queue.remove(entry, 'dropped')).toBe(true);
    expect(queue.remove(entry, 'dropped')).toBe(false);
    expect(queue.size).toBe(0);
  });
});
