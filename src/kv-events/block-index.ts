/**
 * One replica's KV-cache blocks as its engine reported them, and the router blocks they hold. Each
 * stored engine block keeps where its chain left the router's blocks (so a child block stored later
 * continues from it) and the router blocks it completed; a router block is held while some engine
 * block that completed it is. Memory is bounded: past `maxBlocks` engine blocks, or past
 * {@link ROUTER_BLOCKS_PER_ENGINE_BLOCK} times as many router blocks completed by them (an engine block
 * of a large block size completes many), the oldest stored is forgotten (the index then under-reports,
 * never over-reports). The oldest is found in constant time (a queue of the stores in order; a Map's
 * own first key, after many deletions at its front, is found by walking past them).
 */
import { CHAIN_START, continueChain, simulatorText, type ChainState } from './block-text.js';
import { EMPTY_TAIL, type DecodeTail } from './hf-tokenizer.js';
import { type BlockKey, type KvEvent } from './wire.js';

interface EngineBlock {
  /** Undefined: the block's chain is not known (its parent was stored before the router listened). */
  state: ChainState | undefined;
  keys: readonly number[];
  /** Its store's place in the order of stores (a block stored again moves to the end). */
  seq: number;
}

/** Router blocks remembered per engine block of `maxBlocks`: a 16-token engine block is about one 64-character router block. */
export const ROUTER_BLOCKS_PER_ENGINE_BLOCK = 8;

export interface ReplicaBlocksOptions {
  /** The pool's `prefix.blockChars`. */
  blockChars: number;
  maxBlocks: number;
  /** Whether the events' token ids can be read (the simulator's tokenizer, or `reader`): otherwise only engine blocks are counted. */
  readable: boolean;
  /** The model's tokenizer (huggingface mode): reads the ids along the chain, keeping the template's text. */
  reader?: BlockReader;
}

/** What the index needs of a model tokenizer (hf-tokenizer.ts `HfModel`). */
export interface BlockReader {
  readBlock(tail: DecodeTail, ids: readonly number[]): { text: string; tail: DecodeTail };
}

export class ReplicaBlocks {
  private readonly engineBlocks = new Map<BlockKey, EngineBlock>();
  /** Router block hash → how many engine blocks completed it. */
  private readonly held = new Map<number, number>();
  /** The router blocks the remembered engine blocks completed, counted once per engine block. */
  private routerRefs = 0;
  /** The stores in order, as (block, seq) from `head` on; an entry whose block was forgotten or stored again since is skipped. */
  private order: BlockKey[] = [];
  private orderSeq: number[] = [];
  private head = 0;
  private seq = 0;

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
    this.routerRefs = 0;
    this.order = [];
    this.orderSeq = [];
    this.head = 0;
  }

  /** Leading blocks of `blocks` (the router's `promptBlocks`) the replica holds. */
  match(blocks: readonly number[]): number {
    const held = this.held;
    let n = 0;
    while (n < blocks.length && held.has(blocks[n] as number)) n++;
    return n;
  }

  private stored(blocks: readonly BlockKey[], parent: BlockKey | undefined, tokenIds: readonly number[], blockSize: number): void {
    const { blockChars, readable, reader } = this.options;
    let state: ChainState | undefined = !readable ? undefined : parent === undefined ? CHAIN_START : this.engineBlocks.get(parent)?.state;
    // vLLM's invariant: block_size token ids per block. Otherwise (the simulator's blocks are of characters) the text is split evenly.
    const byTokens = tokenIds.length === blocks.length * blockSize;
    const text = state === undefined || byTokens ? '' : this.runText(state, tokenIds);
    for (let i = 0; i < blocks.length; i++) {
      const key = blocks[i] as BlockKey;
      let keys: readonly number[] = [];
      if (state !== undefined) {
        let tail: DecodeTail | undefined;
        let blockText: string;
        if (!byTokens) {
          blockText = text.slice(Math.floor((i * text.length) / blocks.length), Math.floor(((i + 1) * text.length) / blocks.length));
          tail = reader ? EMPTY_TAIL : undefined; // each of the simulator's blocks is whole characters
        } else if (reader) {
          const read = reader.readBlock(state.tail ?? EMPTY_TAIL, tokenIds.slice(i * blockSize, (i + 1) * blockSize));
          blockText = read.text;
          tail = read.tail;
        } else blockText = simulatorText(tokenIds, i * blockSize, (i + 1) * blockSize);
        const next = continueChain(state, blockText, blockChars, reader === undefined);
        state = tail === undefined ? next.state : { ...next.state, tail };
        keys = next.keys;
      }
      this.forget(key); // stored again: its old chain (if some) no longer counts
      const seq = ++this.seq;
      this.engineBlocks.set(key, { state, keys, seq });
      this.order.push(key);
      this.orderSeq.push(seq);
      this.routerRefs += keys.length;
      for (const k of keys) this.held.set(k, (this.held.get(k) ?? 0) + 1);
    }
    const { maxBlocks } = this.options;
    while ((this.engineBlocks.size > maxBlocks || this.routerRefs > maxBlocks * ROUTER_BLOCKS_PER_ENGINE_BLOCK) && this.head < this.order.length) {
      const key = this.order[this.head] as BlockKey;
      const seq = this.orderSeq[this.head] as number;
      this.head++;
      if (this.engineBlocks.get(key)?.seq === seq) this.forget(key);
    }
    this.compact();
  }

  /**
   * Drops the order's used and stale entries once they outnumber the live ones (blocks removed by the
   * engine leave theirs behind): rebuilt from the Map, whose order is the stores' (a block stored again
   * is deleted and set again), so each store pays a constant share of it.
   */
  private compact(): void {
    if (this.order.length - this.engineBlocks.size <= this.engineBlocks.size + 1024) return;
    this.order = [];
    this.orderSeq = [];
    this.head = 0;
    for (const [key, block] of this.engineBlocks) {
      this.order.push(key);
      this.orderSeq.push(block.seq);
    }
  }

  /** The text of a whole run of blocks, continuing `state`'s chain. */
  private runText(state: ChainState, tokenIds: readonly number[]): string {
    const reader = this.options.reader;
    return reader ? reader.readBlock(state.tail ?? EMPTY_TAIL, tokenIds).text : simulatorText(tokenIds);
  }

  private forget(block: BlockKey): void {
    const entry = this.engineBlocks.get(block);
    if (!entry) return;
    this.engineBlocks.delete(block);
    this.routerRefs -= entry.keys.length;
    for (const k of entry.keys) {
      const count = (this.held.get(k) ?? 0) - 1;
      if (count > 0) this.held.set(k, count);
      else this.held.delete(k);
    }
  }
}
