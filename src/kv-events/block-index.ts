/**
 * One replica's KV-cache blocks as its engine reported them, and the router blocks they hold. Each
 * stored engine block keeps where its chain left the router's blocks (so a child block stored later
 * continues from it) and the router blocks it completed; a router block is held while some engine
 * block that completed it is. Memory is bounded: past `maxBlocks` engine blocks, the oldest stored
 * is forgotten (the index then under-reports, never over-reports).
 */
import { CHAIN_START, continueChain, simulatorText, type ChainState } from './block-text.js';
import { type BlockKey, type KvEvent } from './wire.js';

interface EngineBlock {
  /** Undefined: the block's chain is not known (its parent was stored before the router listened). */
  state: ChainState | undefined;
  keys: readonly number[];
}

export interface ReplicaBlocksOptions {
  /** The pool's `prefix.blockChars`. */
  blockChars: number;
  maxBlocks: number;
  /** Whether the events' token ids can be read (the simulator's tokenizer): otherwise only engine blocks are counted. */
  readable: boolean;
}

export class ReplicaBlocks {
  private readonly engineBlocks = new Map<BlockKey, EngineBlock>();
  /** Router block hash → how many engine blocks completed it. */
  private readonly held = new Map<number, number>();

  constructor(private readonly options: ReplicaBlocksOptions) {}

  /** Engine blocks the replica holds, as far as the events said. */
  get size(): number {
    return this.engineBlocks.size;
  }

  /** Router blocks held. */
  get routerBlocks(): number {
    return this.held.size;
  }

  apply(event: KvEvent): void {
    if (event.type === 'BlockStored') this.stored(event.blocks, event.parent, event.tokenIds, event.blockSize);
    else if (event.type === 'BlockRemoved') for (const block of event.blocks) this.forget(block);
    else this.clear();
  }

  clear(): void {
    this.engineBlocks.clear();
    this.held.clear();
  }

  /** Leading blocks of `blocks` (the router's `promptBlocks`) the replica holds. */
  match(blocks: readonly number[]): number {
    const held = this.held;
    let n = 0;
    while (n < blocks.length && held.has(blocks[n] as number)) n++;
    return n;
  }

  private stored(blocks: readonly BlockKey[], parent: BlockKey | undefined, tokenIds: readonly number[], blockSize: number): void {
    const { blockChars, readable } = this.options;
    let state: ChainState | undefined = !readable ? undefined : parent === undefined ? CHAIN_START : this.engineBlocks.get(parent)?.state;
    // vLLM's invariant: block_size token ids per block. Otherwise (the simulator's non-ASCII text) the text is split evenly.
    const byTokens = tokenIds.length === blocks.length * blockSize;
    const text = state === undefined || byTokens ? '' : simulatorText(tokenIds);
    for (let i = 0; i < blocks.length; i++) {
      const key = blocks[i] as BlockKey;
      let keys: readonly number[] = [];
      if (state !== undefined) {
        const blockText = byTokens
          ? simulatorText(tokenIds, i * blockSize, (i + 1) * blockSize)
          : text.slice(Math.floor((i * text.length) / blocks.length), Math.floor(((i + 1) * text.length) / blocks.length));
        const next = continueChain(state, blockText, blockChars);
        state = next.state;
        keys = next.keys;
      }
      this.forget(key); // stored again: its old chain (if some) no longer counts
      this.engineBlocks.set(key, { state, keys });
      for (const k of keys) this.held.set(k, (this.held.get(k) ?? 0) + 1);
    }
    while (this.engineBlocks.size > this.options.maxBlocks) {
      const oldest = this.engineBlocks.keys().next();
      if (oldest.done) break;
      this.forget(oldest.value);
    }
  }

  private forget(block: BlockKey): void {
    const entry = this.engineBlocks.get(block);
    if (!entry) return;
    this.engineBlocks.delete(block);
    for (const k of entry.keys) {
      const count = (this.held.get(k) ?? 0) - 1;
      if (count > 0) this.held.set(k, count);
      else this.held.delete(k);
    }
  }
}
