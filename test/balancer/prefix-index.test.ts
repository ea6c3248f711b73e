/** Prompt blocks and the per-replica prefix memory. */
import { describe, expect, it } from '@jest/globals';
import { PrefixIndex, promptBlocks } from '../../src/balancer/prefix-index.js';

const SYSTEM = 'You are a careful assistant for the billing team. '.repeat(10); // 510 chars

describe('promptBlocks', () => {
  it.each([
    ['full blocks only: a trailing partial block is not hashed', 'x'.repeat(150), 64, 256, 2],
    ['a prompt shorter than one block has none', 'short', 64, 256, 0],
    ['at most maxBlocks', 'y'.repeat(64 * 10), 64, 4, 4],
  ])('%s', (_name, text, blockChars, maxBlocks, count) => {
    expect(promptBlocks(text, blockChars, maxBlocks)).toHaveLength(count);
  });

  it('chains each block to the ones before: equal prefixes give equal hashes, a change changes every hash after it', () => {
    const a = promptBlocks(SYSTEM + 'first question about invoices, long enough to fill a block or two of text', 64, 256);
    const b = promptBlocks(SYSTEM + 'second question about refunds, also long enough to fill a block or two.....', 64, 256);
    const shared = Math.floor(SYSTEM.length / 64);
    expect(a.slice(0, shared)).toEqual(b.slice(0, shared));
    expect(a[shared]).not.toBe(b[shared]);
    // the same block text at another position (after a different prefix) hashes differently
    const moved = promptBlocks('z'.repeat(64) + SYSTEM, 64, 256);
    expect(moved.slice(1, 3)).not.toEqual(a.slice(0, 2));
  });
});

describe('PrefixIndex', () => {
  const blocks = (text: string): number[] => promptBlocks(text, 64, 256);

  it('matches the longest run of leading blocks a replica was sent', () => {
    const index = new PrefixIndex();
    const turn1 = SYSTEM + 'user: hello, I have a question about my last invoice and its line items';
    const turn2 = turn1 + ' assistant: sure, which line item? user: the second one, the support fee.';
    index.record('a', blocks(turn1), 1000);
    expect(index.match('a', blocks(turn1))).toBe(blocks(turn1).length);
    expect(index.match('a', blocks(turn2))).toBe(blocks(turn1).length);
    expect(index.match('b', blocks(turn2))).toBe(0);
    expect(index.match('a', blocks('another system prompt entirely, nothing in common with the first one at all'))).toBe(0);
  });

  it('keeps at most `capacity` hashes per replica, evicting the least recently sent', () => {
    const index = new PrefixIndex();
    const old = blocks('o'.repeat(64 * 8));
    const fresh = blocks('f'.repeat(64 * 8));
    index.record('a', old, 10);
    index.record('a', fresh, 10);
    expect(index.size()).toBe(10);
    expect(index.match('a', fresh)).toBe(8);
    expect(index.match('a', old)).toBe(0); // its leading blocks were the oldest
    index.record('a', old.slice(0, 2), 10); // sending a prompt again makes it recent
    expect(index.match('a', old)).toBe(2);
  });

  it('forgets replicas that are gone', () => {
    const index = new PrefixIndex();
    index.record('a', blocks(SYSTEM), 100);
    index.record('b', blocks(SYSTEM), 100);
    index.retain(new Set(['b']));
    expect(index.match('a', blocks(SYSTEM))).toBe(0);
    expect(index.match('b', blocks(SYSTEM))).toBe(blocks(SYSTEM).length);
  });

  it('sizes a replica’s memory to its engine’s KV cache once known, over the fallback capacity', () => {
    const index = new PrefixIndex();
    const many = blocks('m'.repeat(64 * 40));
    index.tune('a', 160, 64); // 160 tokens × 4 chars / 64 chars per block = 10 blocks
    index.record('a', many, 1000);
    index.record('b', many, 1000);
    expect(index.size()).toBe(10 + 40);
    index.retain(new Set(['b']));
    index.record('a', many, 1000); // a replaced replica starts from the fallback again
    expect(index.size()).toBe(40 + 40);
  });
});
