/**
 * The simulated engine's prefix cache, like vLLM's automatic prefix caching: a prompt is cut into
 * blocks whose hashes chain, and an LRU set of block hashes remembers recent prompts, so a prompt
 * whose leading blocks were seen recently prefills faster.
 */
import { hash53 } from './prng.js';
import { CHARS_PER_TOKEN } from './text.js';

/** Hashes of the prompt's full blocks, each chained to the one before (like vLLM's block hashes). */
export function promptBlockHashes(promptText: string, blockSize: number): number[] {
  const blockChars = blockSize * CHARS_PER_TOKEN;
  const hashes: number[] = [];
  let previous = 0;
  for (let end = blockChars; end <= promptText.length; end += blockChars) {
    previous = hash53(promptText.slice(end - blockChars, end), previous % 4294967296);
    hashes.push(previous);
  }
  return hashes;
}

export class PrefixCache {
  /** Insertion-ordered map used as an LRU set of block hashes. */
  private readonly blocks = new Map<number, true>();

  constructor(
    private readonly blockSize: number,
    private readonly capacity: number,
  ) {}

  /** Tokens of the prompt already in the prefix cache (leading blocks only), refreshing their recency. */
  match(blockHashes: readonly number[]): number {
    let matched = 0;
    for (const h of blockHashes) {
      if (!this.blocks.delete(h)) break;
      this.blocks.set(h, true);
      matched += 1;
    }
    return matched * this.blockSize;
  }

  store(blockHashes: readonly number[]): void {
    for (const h of blockHashes) {
      this.blocks.delete(h);
      this.blocks.set(h, true);
    }
    while (this.blocks.size > this.capacity) {
      const oldest = this.blocks.keys().next();
      if (oldest.done) break;
      this.blocks.delete(oldest.value);
    }
  }
}
