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

  /** Leading blocks of `blocks` that `endpointId` holds. */
  match(endpointId: string, blocks: readonly number[]): number {
    const held = this.byEndpoint.get(endpointId);
    if (!held) return 0;
    let n = 0;
    while (n < blocks.length && held.has(blocks[n] as number)) n++;
    return n;
  }

  /** Remembers that `endpointId` now holds `blocks`, evicting its least recently used beyond `capacity`. */
  record(endpointId: string, blocks: readonly number[], capacity: number): void {
    if (blocks.length === 0) return;
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
  }

  /** Block hashes remembered, over all endpoints. */
  size(): number {
    let n = 0;
    for (const held of this.byEndpoint.values()) n += held.size;
    return n;
  }
}
