/**
 * The simulated engine's prefix cache, like vLLM's automatic prefix caching: a prompt is cut into
 * blocks whose hashes chain, and an LRU set of block hashes remembers recent prompts, so a prompt
 * whose leading blocks were seen recently prefills faster.
 */
import { hash53 } from './prng.js';
import { CHARS_PER_TOKEN } from './text.js';

/** The text each list of {@link promptBlockHashes} was cut from, for the KV-event publisher (which sends each new block's tokens). */
const cutFrom = new WeakMap<readonly number[], { text: string; blockChars: number }>();

/** Hashes of the prompt's full blocks, each chained to the one before (like vLLM's block hashes). */
export function promptBlockHashes(promptText: string, blockSize: number, salt?: string): number[] {
  const blockChars = blockSize * CHARS_PER_TOKEN;
  const hashes: number[] = [];
  // vLLM mixes a request's cache_salt into its first block's hash (and so into every later one)
  let previous = salt === undefined ? 0 : hash53(salt);
  for (let end = blockChars; end <= promptText.length; end += blockChars) {
    previous = hash53(promptText.slice(end - blockChars, end), previous % 4294967296);
    hashes.push(previous);
  }
  cutFrom.set(hashes, { text: promptText, blockChars });
  return hashes;
}

/** Blocks newly stored by one prompt, in order: `parent` is the block before the first (none: the prompt's start). */
export interface StoredRun {
  hashes: number[];
  parent: number | undefined;
  /** The blocks' text, one entry per hash. */
  texts: string[];
}

/** Hears what the cache stores and evicts (vLLM's KV events: BlockStored, BlockRemoved, AllBlocksCleared). */
export interface PrefixCacheListener {
  changed(stored: readonly StoredRun[], removed: readonly number[]): void;
  cleared(): void;
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

  /** Hears every store, eviction and clear (the simulator's KV-event publisher). */
  listener: PrefixCacheListener | undefined;

  store(blockHashes: readonly number[]): void {
    const stored = this.listener ? this.newRuns(blockHashes) : [];
    for (const h of blockHashes) {
      this.blocks.delete(h);
      this.blocks.set(h, true);
    }
    const removed: number[] = [];
    while (this.blocks.size > this.capacity) {
      const oldest = this.blocks.keys().next();
      if (oldest.done) break;
      this.blocks.delete(oldest.value);
      removed.push(oldest.value);
    }
    if (stored.length > 0 || removed.length > 0) this.listener?.changed(stored, removed);
  }

  /** Forgets every block, as vLLM's `POST /reset_prefix_cache`. */
  clear(): void {
    this.blocks.clear();
    this.listener?.cleared();
  }

  /** The runs of `blockHashes` not in the cache yet, with their text (none when the hashes did not come from {@link promptBlockHashes}). */
  private newRuns(blockHashes: readonly number[]): StoredRun[] {
    const source = cutFrom.get(blockHashes);
    if (!source) return [];
    const runs: StoredRun[] = [];
    let run: StoredRun | undefined;
    blockHashes.forEach((h, i) => {
      if (this.blocks.has(h)) {
        run = undefined;
        return;
      }
      if (!run) runs.push((run = { hashes: [], parent: i === 0 ? undefined : blockHashes[i - 1], texts: [] }));
      run.hashes.push(h);
      run.texts.push(source.text.slice(i * source.blockChars, (i + 1) * source.blockChars));
    });
    return runs;
  }
}
