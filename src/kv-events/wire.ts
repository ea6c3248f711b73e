/**
 * vLLM's KV-cache event wire format (`vllm/distributed/kv_events.py`; SGLang publishes the same):
 * a ZMQ PUB socket sends multipart messages `[topic, seq, payload]`, `seq` an 8-byte big-endian
 * counter per publisher and `payload` a msgpack `KVEventBatch`: `[ts, [event, ...], data_parallel_rank?]`.
 * Each event is a tagged array (msgspec `array_like`, `tag=True`): `["BlockStored", block_hashes,
 * parent_block_hash, token_ids, block_size, lora_id?, medium?]`, `["BlockRemoved", block_hashes,
 * medium?]`, `["AllBlocksCleared"]`; trailing fields left at their defaults may be omitted. A block
 * hash is an integer (up to 64 bits) or bytes. The replay socket (ROUTER) answers a start sequence
 * with `[seq, payload]` frames and ends with sequence -1 and an empty payload.
 */
import { decode } from '@msgpack/msgpack';

/** A block hash as a Map key: the integer's decimal digits, or the bytes in hex. */
export type BlockKey = string;

export type KvEvent =
  { type: 'BlockStored'; blocks: BlockKey[]; parent: BlockKey | undefined; tokenIds: number[]; blockSize: number } | { type: 'BlockRemoved'; blocks: BlockKey[] } | { type: 'AllBlocksCleared' };

export interface KvEventBatch {
  ts: number;
  events: KvEvent[];
  /** Events of a tag this router does not know, skipped. */
  unknown: number;
}

/**
 * Bounds on one batch, past which it is refused as a bad payload: a block of more token ids than any
 * engine's block size, more blocks or token ids in one batch than one scheduler step produces. vLLM
 * publishes a batch per step, and a step schedules at most `max_num_batched_tokens` tokens (8,192 by
 * default for the API server; 2,048–16,384 usual; as large as the context only with chunked prefill
 * off): its BlockStored events carry the blocks those tokens filled (tokens / block_size, plus one
 * per running sequence a decode step fills), its BlockRemoved no more than the step allocated. So
 * 262,144 ids (a whole 256k-token prompt in one step) and 16,384 blocks (those ids in vLLM's 16-token
 * blocks) leave a real engine room to spare, and bound one message's work: reading a batch at these
 * caps back with a model's tokenizer costs about a quarter of what the earlier caps (65,536 blocks,
 * 1,048,576 ids: over a second of event loop in the worst case measured) allowed. How many batches a
 * publisher may have read per second is bounded by the feed's work budget (feed.ts).
 */
export const MAX_BLOCK_SIZE = 4096;
export const MAX_BATCH_BLOCKS = 16_384;
export const MAX_BATCH_TOKEN_IDS = 1 << 18;
/**
 * The largest message the subscriber takes (ZMQ's own limit: a larger one drops its connection, which
 * then reconnects). A batch at the caps above is under 2 MiB in msgpack (16,384 hashes of 9 bytes,
 * 262,144 token ids of at most 5).
 */
export const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/**
 * Messages ZMQ keeps for the subscriber while the router does not read them (a feed waiting for its
 * budget, feed.ts): beyond them the publisher's are dropped, a gap. At most 64 MiB per replica.
 */
export const RECEIVE_QUEUE_MESSAGES = 16;

/** Why a batch was skipped: not a KVEventBatch, or over the bounds above. */
export type SkipReason = 'malformed';

/** A payload that is not a KVEventBatch, or over the bounds. */
export class KvWireError extends Error {
  readonly code = 'KV_EVENTS_BAD_PAYLOAD';
  constructor(
    message: string,
    readonly reason: SkipReason = 'malformed',
  ) {
    super(message);
  }
}

/** The replay socket's end-of-replay sequence (-1 as a signed 8-byte integer). */
export const END_OF_REPLAY = -1n;

/** An 8-byte big-endian sequence frame (signed, so the end-of-replay marker reads as -1). */
export function readSeq(frame: Uint8Array): bigint {
  if (frame.byteLength !== 8) throw new KvWireError(`a sequence frame has 8 bytes, not ${frame.byteLength}`);
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
}

export function seqFrame(seq: bigint): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigInt64BE(seq);
  return out;
}

function blockKey(value: unknown, what: string): BlockKey {
  if (typeof value === 'number' && Number.isInteger(value)) return String(value);
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
  throw new KvWireError(`${what} is not a block hash (an integer or bytes)`);
}

function blockKeys(value: unknown, what: string): BlockKey[] {
  if (!Array.isArray(value)) throw new KvWireError(`${what} is not a list`);
  if (value.length > MAX_BATCH_BLOCKS) throw new KvWireError(`${what} holds more than ${MAX_BATCH_BLOCKS} blocks`);
  return value.map((v, i) => blockKey(v, `${what}[${i}]`));
}

function tokenIds(value: unknown): number[] {
  if (!Array.isArray(value)) throw new KvWireError('token_ids is not a list');
  if (value.length > MAX_BATCH_TOKEN_IDS) throw new KvWireError(`token_ids holds more than ${MAX_BATCH_TOKEN_IDS} ids`);
  for (const id of value) if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) throw new KvWireError('token_ids holds something that is not a token id');
  return value as number[];
}

/** One tagged event, or undefined for a tag this router does not know. */
function readEvent(raw: unknown): KvEvent | undefined {
  if (!Array.isArray(raw) || typeof raw[0] !== 'string') throw new KvWireError('an event is not a tagged list');
  switch (raw[0]) {
    case 'BlockStored': {
      const [, hashes, parent, ids, blockSize] = raw as unknown[];
      if (typeof blockSize !== 'number' || !Number.isInteger(blockSize) || blockSize < 1) throw new KvWireError('BlockStored has no block_size');
      if (blockSize > MAX_BLOCK_SIZE) throw new KvWireError(`BlockStored has a block_size over ${MAX_BLOCK_SIZE}`);
      const blocks = blockKeys(hashes, 'block_hashes');
      const read = tokenIds(ids);
      // the ids of its blocks: block_size each (vLLM), or the simulator's characters, never more than its largest blocks hold
      if (read.length > blocks.length * MAX_BLOCK_SIZE) throw new KvWireError('BlockStored has more token ids than its blocks hold');
      return { type: 'BlockStored', blocks, parent: parent === null || parent === undefined ? undefined : blockKey(parent, 'parent_block_hash'), tokenIds: read, blockSize };
    }
    case 'BlockRemoved':
      return { type: 'BlockRemoved', blocks: blockKeys(raw[1], 'block_hashes') };
    case 'AllBlocksCleared':
      return { type: 'AllBlocksCleared' };
    default:
      return undefined;
  }
}

/** Decodes a msgpack KVEventBatch. Throws {@link KvWireError} on something else. */
export function decodeBatch(payload: Uint8Array): KvEventBatch {
  let raw: unknown;
  try {
    raw = decode(payload, { useBigInt64: true });
  } catch (err) {
    throw new KvWireError(`not msgpack: ${(err as Error).message}`);
  }
  if (!Array.isArray(raw) || raw.length < 2 || !Array.isArray(raw[1])) throw new KvWireError('not a KVEventBatch ([ts, events, dp_rank?])');
  const ts = typeof raw[0] === 'number' ? raw[0] : Number(raw[0]);
  const events: KvEvent[] = [];
  let unknown = 0;
  let blocks = 0;
  let ids = 0;
  for (const item of raw[1] as unknown[]) {
    const event = readEvent(item);
    if (!event) {
      unknown++;
      continue;
    }
    if (event.type !== 'AllBlocksCleared') blocks += event.blocks.length;
    if (event.type === 'BlockStored') ids += event.tokenIds.length;
    if (blocks > MAX_BATCH_BLOCKS) throw new KvWireError(`the batch holds more than ${MAX_BATCH_BLOCKS} blocks`);
    if (ids > MAX_BATCH_TOKEN_IDS) throw new KvWireError(`the batch holds more than ${MAX_BATCH_TOKEN_IDS} token ids`);
    events.push(event);
  }
  return { ts, events, unknown };
}
