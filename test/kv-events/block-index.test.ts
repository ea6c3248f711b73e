/**
 * The replica block index: the simulator's KV events, read back with its tokenizer and chat template,
 * give exactly the router's prefix blocks of the same conversation.
 */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { chatPromptText } from '../../src/api/prompt-text.js';
import { promptBlocks } from '../../src/balancer/prefix-index.js';
import { ReplicaBlocks, ROUTER_BLOCKS_PER_ENGINE_BLOCK } from '../../src/kv-events/block-index.js';
import { continueChain, CHAIN_START, simulatorText } from '../../src/kv-events/block-text.js';
import { decodeBatch } from '../../src/kv-events/wire.js';
import { renderPrompt } from '../../src/sim/chat-request.js';
import { encodeBatch } from '../../src/sim/kv-events.js';
import { PrefixCache, promptBlockHashes, type StoredRun } from '../../src/sim/prefix-cache.js';
import { detokenize, tokenize } from '../../src/sim/tokenizer.js';

const BLOCK_SIZE = 16; // the simulator's tokens per block: 64 characters
const ROUTER_BLOCK_CHARS = 64;

type Message = { role: string; content: string };

/** A simulator's prefix cache whose events feed `index`, as they would over the wire. */
function engineFeeding(index: ReplicaBlocks, capacity = 4096): { cache: PrefixCache; store(messages: Message[]): void } {
  const cache = new PrefixCache(BLOCK_SIZE, capacity);
  const apply = (payload: Uint8Array): void => {
    for (const event of decodeBatch(payload).events) index.apply(event);
  };
  cache.listener = {
    changed: (stored: readonly StoredRun[], removed: readonly number[]) => apply(encodeBatch(0, stored, removed, BLOCK_SIZE)),
    cleared: () => apply(encodeBatch(0, [], [], BLOCK_SIZE, true)),
  };
  return { cache, store: (messages) => cache.store(promptBlockHashes(renderPrompt(messages), BLOCK_SIZE)) };
}

const routerBlocks = (messages: Message[]): number[] => promptBlocks(chatPromptText({ model: 'm', messages }), ROUTER_BLOCK_CHARS, 4096);

/** Router blocks the engine's stored text covers: its full blocks, the template's markers taken out. */
function expectedHeld(messages: Message[]): number {
  const template = renderPrompt(messages);
  const stored = template.slice(0, Math.floor(template.length / 64) * 64);
  let text = stored.split('<|im_start|>').join('').split('<|im_end|>').join('');
  for (let n = Math.min(11, text.length); n > 0; n--) {
    const tail = text.slice(text.length - n);
    if (['<|im_start|>', '<|im_end|>'].some((m) => m.length > n && m.startsWith(tail))) {
      text = text.slice(0, text.length - n);
      break;
    }
  }
  return Math.min(routerBlocks(messages).length, Math.floor(text.length / ROUTER_BLOCK_CHARS));
}

const SYSTEM = 'You are the support assistant of a bicycle shop. Answer briefly and politely. '.repeat(4);

describe('simulatorText', () => {
  it("is the simulator's detokenizer (which the router does not import)", () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 80 }), (text) => {
        const ids = tokenize(text);
        expect(simulatorText(ids)).toBe(detokenize(ids));
      }),
    );
  });
});

describe('continueChain', () => {
  it('holds back a marker cut in two by a block boundary, and drops it once whole', () => {
    const first = continueChain(CHAIN_START, 'abc<|im_', 4);
    expect(first.state.held).toBe('<|im_');
    expect(first.state.pending).toBe('abc');
    const second = continueChain(first.state, 'end|>defgh', 4);
    expect(second.keys).toEqual(promptBlocks('abcdefgh', 4, 10));
  });
});

describe('ReplicaBlocks with the simulator tokenizer', () => {
  const options = { blockChars: ROUTER_BLOCK_CHARS, maxBlocks: 100_000, readable: true };

  it("matches the router's blocks of a conversation the engine stored, and stops where it differs", () => {
    const index = new ReplicaBlocks(options);
    const engine = engineFeeding(index);
    const first: Message[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'My brakes squeak after rain, and the squeak gets worse on long descents. What should I check?' },
    ];
    engine.store(first);
    const held = expectedHeld(first);
    expect(held).toBeGreaterThan(4);
    expect(index.match(routerBlocks(first))).toBe(held);
    // another user with the same system prompt: matched through the shared system prompt only
    const other: Message[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'x'.repeat(300) },
    ];
    const shared = Math.floor(('system\n' + SYSTEM + '\nuser\n').length / ROUTER_BLOCK_CHARS);
    expect(index.match(routerBlocks(other))).toBe(shared);
  });

  it('holds exactly the blocks the engine holds, for every conversation (property)', () => {
    const message = fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content: fc.string({ minLength: 0, maxLength: 200 }) });
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 5 }), (messages) => {
        const index = new ReplicaBlocks(options);
        engineFeeding(index).store(messages);
        expect(index.match(routerBlocks(messages))).toBe(expectedHeld(messages));
      }),
      { numRuns: 200 },
    );
  });

  it('forgets what the engine evicts or clears', () => {
    const index = new ReplicaBlocks(options);
    const engine = engineFeeding(index, 12); // a cache of 12 blocks
    const a: Message[] = [{ role: 'system', content: 'A'.repeat(600) }];
    const b: Message[] = [{ role: 'system', content: 'B'.repeat(600) }];
    engine.store(a);
    expect(index.match(routerBlocks(a))).toBe(expectedHeld(a));
    engine.store(b); // evicts a's blocks
    expect(index.match(routerBlocks(a))).toBe(0);
    expect(index.match(routerBlocks(b))).toBeGreaterThan(0);
    expect(index.size).toBe(Math.min(12, index.size));
    engine.cache.clear();
    expect(index.match(routerBlocks(b))).toBe(0);
    expect(index.size).toBe(0);
    expect(index.routerBlocks).toBe(0);
  });

  it('keeps at most maxBlocks engine blocks, dropping the oldest stored', () => {
    const index = new ReplicaBlocks({ ...options, maxBlocks: 10 });
    const engine = engineFeeding(index);
    const a: Message[] = [{ role: 'system', content: 'A'.repeat(640) }];
    engine.store(a);
    engine.store([{ role: 'system', content: 'C'.repeat(640) }]);
    expect(index.size).toBe(10);
    expect(index.match(routerBlocks(a))).toBe(0); // its first blocks went first
  });

  it('drops the oldest store first: a block stored again is the newest, one the engine removed leaves no hole in the count', () => {
    const index = new ReplicaBlocks({ ...options, readable: false, maxBlocks: 4 });
    const store = (...blocks: string[]): void => index.apply({ type: 'BlockStored', blocks, parent: undefined, tokenIds: [], blockSize: 16 });
    const held = (...blocks: string[]): boolean[] =>
      blocks.map((b) => {
        // a block is held when storing it again does not change the count
        const before = index.size;
        store(b);
        const kept = index.size === before;
        return kept;
      });
    store('a', 'b', 'c', 'd');
    store('a'); // stored again: now the newest
    index.apply({ type: 'BlockRemoved', blocks: ['c'] });
    store('e', 'f'); // five would be held: b (the oldest) goes
    expect(index.size).toBe(4);
    expect(held('a', 'd', 'e', 'f')).toEqual([true, true, true, true]);
    // thousands of stores and removals later (under the bound: nothing is evicted) the order still holds
    index.apply({ type: 'BlockRemoved', blocks: ['a'] });
    for (let i = 0; i < 5000; i++) {
      store(`x${i}`);
      index.apply({ type: 'BlockRemoved', blocks: [`x${i}`] });
    }
    store('g', 'h'); // five: d, the oldest left, goes
    expect(index.size).toBe(4);
    index.apply({ type: 'BlockRemoved', blocks: ['d'] });
    expect(index.size).toBe(4); // it was gone
    index.apply({ type: 'BlockRemoved', blocks: ['e'] });
    expect(index.size).toBe(3); // it was held
  });

  it('bounds the router blocks it remembers too: engine blocks of a large block size complete many each', () => {
    const index = new ReplicaBlocks({ ...options, maxBlocks: 4 });
    // each engine block of 1,024 characters completes 16 router blocks; 4 × 8 router blocks at most are kept
    for (let i = 0; i < 4; i++) index.apply({ type: 'BlockStored', blocks: [`big${i}`], parent: i === 0 ? undefined : `big${i - 1}`, tokenIds: tokenize('y'.repeat(1024)), blockSize: 1024 });
    expect(index.routerBlocks).toBeLessThanOrEqual(4 * ROUTER_BLOCKS_PER_ENGINE_BLOCK);
    expect(index.size).toBe(2);
  });

  it('cannot chain blocks whose parent it never saw: they count for nothing (never a false match)', () => {
    const index = new ReplicaBlocks(options);
    const text = renderPrompt([{ role: 'system', content: SYSTEM }]);
    const hashes = promptBlockHashes(text, BLOCK_SIZE);
    const texts = hashes.map((_, i) => text.slice(i * 64, (i + 1) * 64));
    // only the second half of the chain reaches the index
    const payload = encodeBatch(0, [{ hashes: hashes.slice(3), parent: hashes[2], texts: texts.slice(3) }], [], BLOCK_SIZE);
    for (const event of decodeBatch(payload).events) index.apply(event);
    expect(index.size).toBe(hashes.length - 3);
    expect(index.routerBlocks).toBe(0);
  });

  it('with opaque token ids (a real engine) counts blocks but matches nothing', () => {
    const index = new ReplicaBlocks({ ...options, readable: false });
    const messages: Message[] = [{ role: 'system', content: SYSTEM }];
    engineFeeding(index).store(messages);
    expect(index.size).toBeGreaterThan(0);
    expect(index.match(routerBlocks(messages))).toBe(0);
  });
});
