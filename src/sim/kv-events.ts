/**
 * The simulator's KV-cache events, as vLLM publishes them with `--kv-events-config`
 * (`vllm/distributed/kv_events.py`): a ZMQ PUB socket sending `[topic, seq, payload]`, `seq` an
 * 8-byte big-endian counter from 0 and `payload` a msgpack `KVEventBatch` `[ts, [event, ...]]` with
 * tagged-array events — `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
 * lora_id, medium]`, `["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]` — and, with a
 * replay port, a ROUTER socket that answers a start sequence with the buffered batches from it on,
 * `[seq, payload]` each, then sequence -1 and an empty payload. One batch per prefix-cache change
 * (vLLM: per engine step). The token ids are the simulator's own tokenizer's (sim/tokenizer.ts), or
 * with `--tokenizer-dir` the model's (hf-template.ts), each block's text tokenized on its own: the
 * simulator's blocks are of characters, so a block's id count varies (vLLM's are `block_size` ids).
 *
 * `zeromq` and msgpack are loaded only when `--kv-events-port` is set (server.ts imports this module then).
 */
import { encode } from '@msgpack/msgpack';
import { Publisher, Router } from 'zeromq';
import { type PrefixCache, type PrefixCacheListener, type StoredRun } from './prefix-cache.js';
import { tokenize } from './tokenizer.js';

export interface KvEventsOptions {
  host: string;
  port: number;
  /** 0: no replay socket. */
  replayPort: number;
  topic: string;
  /** Tokens per block (`--block-size`). */
  blockSize: number;
  /** Batches kept for replay (vLLM's `buffer_steps`). */
  bufferSize?: number;
  /** The token ids of a block's text (default: the simulator's tokenizer; `--tokenizer-dir`: the model's). */
  tokenize?: (text: string) => number[];
}

const MEDIUM = 'GPU';

function seqFrame(seq: bigint): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigInt64BE(seq);
  return out;
}

/** The msgpack KVEventBatch of one cache change. */
export function encodeBatch(ts: number, stored: readonly StoredRun[], removed: readonly number[], blockSize: number, cleared = false, tokenIds: (text: string) => number[] = tokenize): Uint8Array {
  const events: unknown[] = [];
  if (cleared) events.push(['AllBlocksCleared']);
  for (const run of stored) events.push(['BlockStored', run.hashes, run.parent ?? null, run.texts.flatMap((t) => tokenIds(t)), blockSize, null, MEDIUM]);
  if (removed.length > 0) events.push(['BlockRemoved', [...removed], MEDIUM]);
  return encode([ts, events]);
}

export class KvEventsPublisher implements PrefixCacheListener {
  private readonly pub = new Publisher({ linger: 0, sendHighWaterMark: 100_000 });
  private readonly replay: Router | undefined;
  private seq = 0n;
  /** Batches not sent yet (a ZMQ socket sends one message at a time). */
  private readonly outbox: Array<[bigint, Uint8Array]> = [];
  private sending = false;
  private readonly buffer: Array<[bigint, Uint8Array]> = [];
  private lose = 0;
  private corrupt = 0;
  private closed = false;

  private constructor(
    private readonly options: KvEventsOptions,
    private readonly cache: PrefixCache,
  ) {
    if (options.replayPort > 0) this.replay = new Router({ linger: 0 });
  }

  /** Binds the sockets and starts publishing `cache`'s changes. */
  static async start(options: KvEventsOptions, cache: PrefixCache): Promise<KvEventsPublisher> {
    const publisher = new KvEventsPublisher(options, cache);
    const host = options.host.includes(':') ? `[${options.host}]` : options.host;
    await publisher.pub.bind(`tcp://${host}:${options.port}`);
    if (publisher.replay) {
      await publisher.replay.bind(`tcp://${host}:${options.replayPort}`);
      void publisher.serveReplays(publisher.replay);
    }
    cache.listener = publisher;
    return publisher;
  }

  /** Test fault: the next `count` batches take a sequence number but are never sent (a subscriber sees a gap). */
  loseNext(count = 1): void {
    this.lose += count;
  }

  /** Test fault: the next `count` batches are sent (and buffered for replay) as a payload that is not msgpack. */
  corruptNext(count = 1): void {
    this.corrupt += count;
  }

  changed(stored: readonly StoredRun[], removed: readonly number[]): void {
    this.publish(encodeBatch(Date.now() / 1000, stored, removed, this.options.blockSize, false, this.options.tokenize));
  }

  cleared(): void {
    this.publish(encodeBatch(Date.now() / 1000, [], [], this.options.blockSize, true));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.cache.listener === this) this.cache.listener = undefined;
    this.pub.close();
    this.replay?.close();
  }

  private publish(payload: Uint8Array): void {
    if (this.closed) return;
    const seq = this.seq++;
    if (this.corrupt > 0) {
      this.corrupt--;
      payload = Uint8Array.from([0xc1]); // a byte msgpack never uses
    }
    this.buffer.push([seq, payload]);
    if (this.buffer.length > (this.options.bufferSize ?? 10_000)) this.buffer.shift();
    if (this.lose > 0) {
      this.lose--;
      return;
    }
    this.outbox.push([seq, payload]);
    if (!this.sending) void this.flush();
  }

  private async flush(): Promise<void> {
    this.sending = true;
    const topic = Buffer.from(this.options.topic);
    try {
      for (let next = this.outbox.shift(); next && !this.closed; next = this.outbox.shift()) await this.pub.send([topic, seqFrame(next[0]), next[1]]);
    } catch (err) {
      if (!this.closed) throw err;
    } finally {
      this.sending = false;
    }
  }

  /** Answers each replay request (`[identity, '', start]`) with the buffered batches from `start` on, then the end marker. */
  private async serveReplays(router: Router): Promise<void> {
    try {
      for await (const [identity, , start] of router) {
        if (!identity || !start || start.byteLength !== 8) continue;
        const from = start.readBigInt64BE(0);
        const empty = Buffer.alloc(0);
        for (const [seq, payload] of this.buffer.filter(([s]) => s >= from)) await router.send([identity, empty, seqFrame(seq), payload]);
        await router.send([identity, empty, seqFrame(-1n), empty]);
      }
    } catch (err) {
      if (!this.closed) throw err;
    }
  }
}
