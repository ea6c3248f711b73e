/**
 * Approximate prefix-cache index. A prompt is cut into fixed blocks of characters; each block's hash
 * chains the one before, so one hash stands for the whole prefix up to it. For every endpoint the
 * router remembers, in a bounded LRU, the block hashes of the prompts it sent there — updated at
 * decision time, so a burst of requests with one prompt does not all land on a cold replica. The
 * longest run of leading blocks an endpoint holds is how much of the prompt its KV cache likely has.
 */
import { hash53 } from '../core/hash.js';

/**
 * Chained hashes of the prompt's full blocks, at most `maxBlocks` (a trailing partial block is not
 * cached by engines either). `scope` (an API key's name, for a pool that isolates keys) seeds the
 * chain: the same text in another scope shares no block.
 */
export function promptBlocks(text: string, blockChars: number, maxBlocks: number, scope?: string): number[] {
  const count = Math.min(maxBlocks, Math.floor(text.length / blockChars));
  const hashes = new Array<number>(count);
  let previous = scope === undefined ? 0 : hash53(scope);
  for (let i = 0; i < count; i++) {
    previous = hash53(text, previous % 4294967296, i * blockChars, (i + 1) * blockChars);
    hashes[i] = previous;
  }
  return hashes;
}

/** An endpoint's place in the index, held by a reader that matches it on every pick: see {@link PrefixIndex.hold}. */
export interface PrefixHold {
  readonly endpointId: string;
}

/** What the index keeps for one endpoint. */
interface Entry extends PrefixHold {
  /** Block hashes, an insertion-ordered Map used as an LRU set (none until the first record). */
  blocks: Map<number, true> | undefined;
  /** Grows whenever a hash leaves `blocks`: while it stands still, `blocks` only gains hashes. */
  evictions: number;
  /** The blocks of the last match, of which the first `memoDepth` were held when `evictions` was `memoEvictions`. */
  memo: readonly number[] | undefined;
  memoDepth: number;
  memoEvictions: number;
  /** Readers holding the entry: it stays, empty too, while one does. */
  holds: number;
}

export class PrefixIndex {
  private readonly byEndpoint = new Map<string, Entry>();
  /** Per endpoint: the capacity its engine's KV cache implies, once known (see {@link tune}). */
  private readonly capacities = new Map<string, number>();
  /** How many leading blocks `lcpOf` shares with `lcpWith` (see {@link sharedLead}). */
  private lcpOf: readonly number[] | undefined;
  private lcpWith: readonly number[] | undefined;
  private lcp = 0;

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
    const entry = this.byEndpoint.get(endpointId);
    return entry ? this.matchEntry(entry, blocks) : 0;
  }

  /** {@link match} for an endpoint whose place the caller holds: no lookup by id. */
  matchHeld(hold: PrefixHold, blocks: readonly number[]): number {
    return this.matchEntry(hold as Entry, blocks);
  }

  /**
   * The endpoint's place in the index, for a reader that matches it on every pick: kept (empty too)
   * until as many {@link drop}s as holds; {@link retain} empties it rather than forgetting it.
   */
  hold(endpointId: string): PrefixHold {
    const entry = this.entry(endpointId);
    entry.holds += 1;
    return entry;
  }

  /** Gives back one {@link hold} of the endpoint's place. */
  drop(endpointId: string): void {
    const entry = this.byEndpoint.get(endpointId);
    if (!entry || entry.holds === 0) return;
    entry.holds -= 1;
    if (entry.holds === 0 && (entry.blocks?.size ?? 0) === 0) this.byEndpoint.delete(endpointId);
  }

  /**
   * Remembers that `endpointId` now holds `blocks`, evicting its least recently used beyond its
   * engine's tuned capacity or, when that is unknown, `capacity`.
   */
  record(endpointId: string, blocks: readonly number[], fallbackCapacity: number): void {
    if (blocks.length === 0) return;
    const capacity = this.capacities.get(endpointId) ?? fallbackCapacity;
    const entry = this.entry(endpointId);
    const lru = (entry.blocks ??= new Map());
    for (const block of blocks) {
      lru.delete(block);
      lru.set(block, true);
    }
    if (lru.size <= capacity) return;
    for (const oldest of lru.keys()) {
      if (lru.size <= capacity) break;
      lru.delete(oldest);
      entry.evictions += 1;
    }
  }

  /** Forgets endpoints not in `live` (replicas that are gone). */
  retain(live: ReadonlySet<string>): void {
    for (const [id, entry] of this.byEndpoint) {
      if (live.has(id)) continue;
      if (entry.holds === 0) this.byEndpoint.delete(id);
      else if (entry.blocks !== undefined) {
        entry.blocks = undefined;
        entry.evictions += 1;
      }
    }
    for (const id of this.capacities.keys()) if (!live.has(id)) this.capacities.delete(id);
  }

  /** Forgets what `endpointId` holds (its engine reported its cache cleared: KV events), keeping its place. */
  forget(endpointId: string): void {
    const entry = this.byEndpoint.get(endpointId);
    if (entry?.blocks === undefined) return;
    entry.blocks = undefined;
    entry.evictions += 1;
  }

  /** Block hashes remembered, over all endpoints. */
  size(): number {
    let n = 0;
    for (const entry of this.byEndpoint.values()) n += entry.blocks?.size ?? 0;
    return n;
  }

  private entry(endpointId: string): Entry {
    let entry = this.byEndpoint.get(endpointId);
    if (!entry) {
      entry = { endpointId, blocks: undefined, evictions: 0, memo: undefined, memoDepth: 0, memoEvictions: 0, holds: 0 };
      this.byEndpoint.set(endpointId, entry);
    }
    return entry;
  }

  /**
   * A pick matches every endpoint, and with a popular system prompt every endpoint holds its blocks:
   * so each endpoint remembers its last match, and a prompt that shares those leading blocks (compared
   * as numbers, once per pick) is checked only from where they end — exact as long as nothing was
   * evicted since.
   */
  private matchEntry(entry: Entry, blocks: readonly number[]): number {
    const held = entry.blocks;
    if (held === undefined) return 0;
    let n = 0;
    if (entry.memo !== undefined && entry.memoEvictions === entry.evictions) n = Math.min(entry.memoDepth, this.sharedLead(entry.memo, blocks));
    while (n < blocks.length && held.has(blocks[n] as number)) n++;
    entry.memo = blocks;
    entry.memoDepth = n;
    entry.memoEvictions = entry.evictions;
    return n;
  }

  /** How many leading blocks `a` and `b` share; the last answer is kept, as a pick asks it of the same two arrays for endpoint after endpoint. */
  private sharedLead(a: readonly number[], b: readonly number[]): number {
    if (a === b) return a.length;
    if (a !== this.lcpOf || b !== this.lcpWith) {
      let n = 0;
      const end = Math.min(a.length, b.length);
      while (n < end && a[n] === b[n]) n++;
      this.lcpOf = a;
      this.lcpWith = b;
      this.lcp = n;
    }
    return this.lcp;
  }
}
