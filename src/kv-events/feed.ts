/**
 * One replica's event stream, from sequence numbers to a trustworthy index. The publisher numbers its
 * batches 0, 1, 2…: a batch that follows the last one is applied; a jump is a gap (batches lost —
 * ZMQ PUB drops when a subscriber is slow or reconnecting), after which the index may hold blocks the
 * engine evicted, so the replica counts as unknown until a replay fills the gap, the engine clears
 * its cache (AllBlocksCleared) or the publisher restarts (sequence 0: a new engine, an empty cache).
 * A router that joins a running engine missed what was stored before: without a replay from 0 its
 * index is partial (a lower bound). A publisher unreachable for `staleAfterMs` is stale: unknown.
 * Socket-free, so the rules are unit-tested; zmq-transport.ts moves the bytes.
 */
import { ReplicaBlocks, type ReplicaBlocksOptions } from './block-index.js';
import { decodeBatch, KvWireError } from './wire.js';

/**
 * The event loop's time one replica's batches may take: `perSecondMs` of each second on average,
 * `burstMs` at once (plus the one batch that overdraws it). A batch that finds the budget spent waits
 * until it refills, and the feed reads nothing from its publisher meanwhile: the publisher's queue
 * for this router fills (a few messages, zmq-transport.ts) and ZMQ drops what does not fit, which the
 * next batch's number shows as a gap, handled like every lagging subscriber's (a replay, else unknown). So
 * a real engine's burst (a long replay at a join, a slow read) is read late, not lost; a publisher
 * sending batches at the caps as fast as it can (over 1 s of decoding each, before the caps were
 * lowered) gets a tenth of the loop that every tenant's requests share, whatever it sends. A real
 * engine's events cost the router a few milliseconds a second (a 16-token block is read back in
 * about 6 µs with a model's tokenizer).
 */
export const APPLY_BUDGET = { perSecondMs: 100, burstMs: 250 } as const;

/** `complete`: exact; `partial`: a lower bound; `unknown`: the estimate answers. */
export type FeedState = 'complete' | 'partial' | 'unknown';

export interface FeedEvents {
  /** A batch was applied, with its events by type. */
  onBatch?: (stored: number, removed: number, cleared: number) => void;
  /** A sequence gap (`recovered`: a replay filled it). */
  onGap?: (recovered: boolean) => void;
  /** A payload that is not a KVEventBatch, or over the bounds (skipped as a lost batch: the replica is unknown until its cache is cleared or it restarts; the sequence still counts). */
  onBadPayload?: (err: KvWireError) => void;
  /** A batch waited `ms` for the replica's budget ({@link APPLY_BUDGET}) before it was read. */
  onThrottled?: (ms: number) => void;
}

/** A replay: the publisher's buffered batches from `from` on, in order (empty when it has none, or no replay socket). */
export type Replay = (from: bigint) => Promise<ReadonlyArray<readonly [bigint, Uint8Array]>>;

export interface ReplicaFeedOptions extends ReplicaBlocksOptions {
  staleAfterMs: number;
  /** Milliseconds, monotonic (staleness, and the time batches take against {@link APPLY_BUDGET}). */
  now: () => number;
  replay?: Replay;
  events?: FeedEvents;
  /** Waits `ms` on `now`'s clock (a batch over the budget; default: a real timer). */
  sleep?: (ms: number) => Promise<void>;
}

export class ReplicaFeed {
  readonly index: ReplicaBlocks;
  private lastSeq: bigint | undefined;
  private base: FeedState = 'unknown';
  /** A batch was skipped since the index last started over (batch 0, a join's replay, a clear): it may hold blocks the engine evicted. */
  private lost = false;
  /** Since when the publisher is unreachable (undefined: connected). */
  private downSince: number | undefined;
  /** Milliseconds of {@link APPLY_BUDGET} left (negative: overdrawn by the last batch), as of `budgetAt`. */
  private budget: number = APPLY_BUDGET.burstMs;
  private budgetAt: number;
  /** Batches that arrived while a replay ran, applied after it. */
  private queued: Array<readonly [bigint, Uint8Array]> | undefined;

  constructor(private readonly options: ReplicaFeedOptions) {
    this.index = new ReplicaBlocks(options);
    this.downSince = options.now();
    this.budgetAt = this.downSince;
  }

  state(now = this.options.now()): FeedState {
    if (this.downSince !== undefined && now - this.downSince >= this.options.staleAfterMs) return 'unknown';
    return this.base;
  }

  /** Whether the publisher's connection is up now. */
  get isConnected(): boolean {
    return this.downSince === undefined;
  }

  connected(): void {
    this.downSince = undefined;
  }

  disconnected(): void {
    this.downSince ??= this.options.now();
  }

  /**
   * One `[seq, payload]` from the publisher. Resolves once it (and whatever replay it caused) is applied:
   * the transport hands the next one only then (a batch may wait for the budget, and the publisher's
   * queue takes up the slack); one that comes during a replay is queued behind it.
   */
  async receive(seq: bigint, payload: Uint8Array): Promise<void> {
    if (this.queued) {
      this.queued.push([seq, payload]);
      return;
    }
    const last = this.lastSeq;
    if (last !== undefined && seq === last + 1n) return this.apply(seq, payload);
    if (seq === 0n) {
      // the publisher's first batch: seen from the start (a restarted engine's cache is empty)
      this.index.clear();
      this.base = 'complete';
      this.lost = false;
      return this.apply(seq, payload);
    }
    if (last === undefined || seq <= last) {
      // joined a running publisher, or it restarted and its first batches were missed
      this.index.clear();
      this.base = 'unknown'; // while the replay runs, the index is being rebuilt
      this.lost = false;
      const reached = await this.catchUp(0n, seq);
      // a batch of the replay that was skipped is lost as a gap's would be: apply() said unknown, which stays.
      // A replay that stopped short of the live batch left a gap after what it applied (removals of those
      // blocks may be in it): unknown. Nothing replayed: what comes is a lower bound, partial.
      if (!this.lost) this.base = reached === seq ? 'complete' : reached === 0n ? 'partial' : 'unknown';
    } else {
      const recovered = (await this.catchUp(last + 1n, seq)) === seq;
      this.options.events?.onGap?.(recovered);
      if (!recovered) this.base = 'unknown';
    }
    await this.apply(seq, payload);
    await this.drain();
  }

  /** Replays `[from, to)`; returns the first batch not applied (`to`: every one came back and was applied). */
  private async catchUp(from: bigint, to: bigint): Promise<bigint> {
    const replay = this.options.replay;
    if (!replay) return from;
    this.queued = [];
    let next = from;
    try {
      for (const [seq, payload] of await replay(from)) {
        if (seq < next || seq >= to) continue;
        if (seq !== next) break;
        await this.apply(seq, payload);
        next += 1n;
      }
    } catch {
      // no answer from the replay socket: the gap stays
    }
    return next;
  }

  private async drain(): Promise<void> {
    const queued = this.queued ?? [];
    this.queued = undefined;
    for (const [seq, payload] of queued) await this.receive(seq, payload);
  }

  private async apply(seq: bigint, payload: Uint8Array): Promise<void> {
    this.lastSeq = seq;
    let start = this.refill();
    if (this.budget <= 0) {
      const waited = start;
      while (this.budget <= 0) {
        await this.sleep(Math.ceil((-this.budget * 1000) / APPLY_BUDGET.perSecondMs) + 1);
        start = this.refill();
      }
      this.options.events?.onThrottled?.(start - waited);
    }
    try {
      this.read(payload);
    } finally {
      this.budget -= Math.max(0, this.options.now() - start);
    }
  }

  /** The budget refilled for the time since it was last looked at; returns now. */
  private refill(): number {
    const now = this.options.now();
    this.budget = Math.min(APPLY_BUDGET.burstMs, this.budget + (Math.max(0, now - this.budgetAt) * APPLY_BUDGET.perSecondMs) / 1000);
    this.budgetAt = now;
    return now;
  }

  private sleep(ms: number): Promise<void> {
    return this.options.sleep ? this.options.sleep(ms) : new Promise((resolve) => setTimeout(resolve, ms).unref());
  }

  /** A batch lost as a gap's are (its removals too: the index may hold blocks the engine evicted). */
  private skip(err: KvWireError): void {
    this.options.events?.onBadPayload?.(err);
    this.base = 'unknown';
    this.lost = true;
  }

  private read(payload: Uint8Array): void {
    let batch;
    try {
      batch = decodeBatch(payload);
    } catch (err) {
      if (!(err instanceof KvWireError)) throw err;
      return this.skip(err);
    }
    let stored = 0;
    let removed = 0;
    let cleared = 0;
    for (const event of batch.events) {
      this.index.apply(event);
      if (event.type === 'BlockStored') stored++;
      else if (event.type === 'BlockRemoved') removed++;
      else {
        cleared++;
        this.base = 'complete'; // what was held before the clear no longer matters
        this.lost = false;
      }
    }
    this.options.events?.onBatch?.(stored, removed, cleared);
  }
}
