/** Prompt blocks and the per-replica prefix memory. */
import { describe, expect, it } from '@jest/globals';
import { PrefixIndex, promptBlocks } from '../../src/balancer/prefix-index.js';
import { createRng } from '../../src/sim/prng.js';

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

  describe('a match starts where the endpoint’s last match ended, and is still exact', () => {
    const chain = (lead: string, tail: string): number[] => blocks(SYSTEM + lead + tail);
    const first = chain('conversation one, with its own history. ', 'x'.repeat(200));
    const second = chain('conversation one, with its own history. ', 'y'.repeat(200)); // shares the system prompt and the lead
    const other = blocks('a different system prompt altogether, sharing nothing with the first. '.repeat(4));

    it.each([
      ['a prompt sharing fewer blocks than last matched', () => [first, second], (a: number[], b: number[]) => sharedLead(a, b)],
      ['a prompt sharing nothing', () => [first, other], () => 0],
      ['the same prompt again', () => [first, first], (a: number[]) => a.length],
    ])('%s', (_name, prompts, expected) => {
      const index = new PrefixIndex();
      const [a, b] = prompts();
      index.record('e', a as number[], 1000);
      expect(index.match('e', a as number[])).toBe((a as number[]).length);
      expect(index.match('e', b as number[])).toBe(expected(a as number[], b as number[]));
    });

    it('after an eviction took a block the last match counted', () => {
      const index = new PrefixIndex();
      index.record('e', first, first.length);
      expect(index.match('e', first)).toBe(first.length);
      index.record('e', other.slice(0, 1), first.length); // evicts first[0], the least recently sent
      expect(index.match('e', second)).toBe(0);
      expect(index.match('e', first)).toBe(0);
    });

    it('after blocks were added since the last match', () => {
      const index = new PrefixIndex();
      index.record('e', first.slice(0, 3), 1000);
      expect(index.match('e', first)).toBe(3);
      index.record('e', first, 1000);
      expect(index.match('e', first)).toBe(first.length);
    });

    it('through a held place: the same answers, and a place emptied rather than forgotten while held', () => {
      const index = new PrefixIndex();
      const place = index.hold('e');
      expect(index.matchHeld(place, first)).toBe(0);
      index.record('e', first, 1000);
      expect(index.matchHeld(place, second)).toBe(index.match('e', second));
      index.retain(new Set());
      expect(index.size()).toBe(0);
      expect(index.matchHeld(place, first)).toBe(0);
      index.record('e', other, 1000);
      expect(index.matchHeld(place, other)).toBe(other.length);
      index.drop('e'); // it has blocks: kept, as an endpoint nobody holds is
      expect(index.match('e', other)).toBe(other.length);
      index.retain(new Set());
      expect(index.hold('e')).not.toBe(place);
    });

    it('after the endpoint was forgotten and sent other prompts', () => {
      const index = new PrefixIndex();
      index.record('e', first, 1000);
      expect(index.match('e', first)).toBe(first.length);
      index.retain(new Set());
      expect(index.match('e', first)).toBe(0);
      index.record('e', other, 1000);
      expect(index.match('e', first)).toBe(0);
      expect(index.match('e', other)).toBe(other.length);
    });

    it('matches as a plain LRU set would, over random sends, matches (by id or through a held place), evictions and forgetting', () => {
      const rng = createRng(17);
      const prompts = Array.from({ length: 12 }, (_, i) => blocks(SYSTEM.slice(0, 64 * (i % 4)) + `${i % 3}`.repeat(64 * (1 + (i % 5)))));
      const index = new PrefixIndex();
      const reference = new Map<string, Map<number, true>>();
      const places = new Map(['e0', 'e1'].map((id) => [id, index.hold(id)]));
      for (let step = 0; step < 5000; step++) {
        const endpoint = `e${Math.floor(rng() * 3)}`;
        const prompt = prompts[Math.floor(rng() * prompts.length)] as number[];
        if (rng() < 0.01) {
          const live = new Set(['e0', 'e1', 'e2'].filter(() => rng() < 0.5));
          index.retain(live);
          for (const id of reference.keys()) if (!live.has(id)) reference.delete(id);
        } else if (rng() < 0.3) {
          const sent = prompt.slice(0, 1 + Math.floor(rng() * prompt.length));
          index.record(endpoint, sent, 12);
          const held = reference.get(endpoint) ?? new Map<number, true>();
          reference.set(endpoint, held);
          for (const block of sent) {
            held.delete(block);
            held.set(block, true);
          }
          for (const oldest of [...held.keys()].slice(0, Math.max(0, held.size - 12))) held.delete(oldest);
        } else {
          const held = reference.get(endpoint);
          let expected = 0;
          while (held && expected < prompt.length && held.has(prompt[expected] as number)) expected++;
          const place = places.get(endpoint);
          expect(place && rng() < 0.5 ? index.matchHeld(place, prompt) : index.match(endpoint, prompt)).toBe(expected);
        }
      }
    });
  });
});

function sharedLead(a: readonly number[], b: readonly number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}
