/**
 * Approximate prefix-cache index. A prompt is cut into fixed blocks of characters; each block's hash
 * chains the one before, so one hash stands for the whole prefix up to it. For every endpoint the
 * router remembers, in a bounded LRU, the block hashes of the prompts it sent there — updated at
 * decision time, so a burst of requests with one prompt does not all land on a cold replica. The
 * longest run of leading blocks an endpoint holds is how much of the prompt its KV cache likely has.
 */
import { hash53 } from '../core/hash.js';

/** Chained hashes of the prompt's full blocks, at most `maxBlocks` (a trailing partial block is not cached by engines either). */
export function promptBlocks(text: string, blockChars: number, maxBlocks: number): number[] {
  const count = Math.min(maxBlocks, Math.floor(text.length / blockChars));
  const hashes = new Array<number>(count);
  let previous = 0;
  for (let i = 0; i < count; i++) {
    previous = hash53(text, previous % 4294967296, i * blockChars, (i + 1) * blockChars);
    hashes[i] = previous;
  }
  return hashes;
}

export class PrefixIndex {
  /** Per endpoint: an insertion-ordered Map used as an LRU set of block hashes. */
  private readonly byEndpoint = new Map<string, Map<number, true>>();
  /** Per endpoint: the capacity its engine's KV cache implies, once known (see {@link tune}). */
  private readonly capacities = new Map<string, number>();

  /**
   * Sizes an endpoint's memory to what its engine can hold: `cacheTokens` (the KV cache's size) at
   * `charsPerBlock / charsPerToken` tokens per block. An index much larger than the engine's cache
   * would keep "matching" prompts the engine evicted long ago (the prefix benchmark's first run: the
   * router counted 88% hits where the engines had 18%).
   */
  tune(endpointId: string, cacheTokens: number, charsPerBlock: number, charsPerToken = 4): void {
    this.capacities.set(endpointId, Math.max(1, Math.floor((cacheTokens * charsPerToken) / charsPerBlock)));
  }

  /** Leading blocks of `blocks` that `endpointId` holds. */
  match(endpointId: string, blocks: readonly number[]): number {
    const held = this.byEndpoint.get(endpointId);
    if (!held) return 0;
    let n = 0;
    while (n < blocks.length && held.has(blocks[n] as number)) n++;
    return n;
  }

  /**
   * Remembers that `endpointId` now holds `blocks`, evicting its least recently used beyond its
   * engine's tuned capacity or, when that is unknown, `capacity`.
   */
  record(endpointId: string, blocks: readonly number[], fallbackCapacity: number): void {
    if (blocks.length === 0) return;
    const capacity = this.capacities.get(endpointId) ?? fallbackCapacity;
    let held = this.byEndpoint.get(endpointId);
    if (!held) {
      held = new Map();
      this.byEndpoint.set(endpointId, held);
    }
    for (const block of blocks) {
      held.delete(block);
      held.set(block, true);
    }
    for (const oldest of held.keys()) {
      if (held.size <= capacity) break;
      held.delete(oldest);
    }
  }

  /** Forgets endpoints not in `live` (replicas that are gone). */
  retain(live: ReadonlySet<string>): void {
    for (const id of this.byEndpoint.keys()) if (!live.has(id)) this.byEndpoint.delete(id);
    for (const id of this.capacities.keys()) if (!live.has(id)) this.capacities.delete(id);
  }

  /** Block hashes remembered, over all endpoints. */
  size(): number {
    let n = 0;
    for (const held of this.byEndpoint.values()) n += held.size;
    return n;
  }
}
