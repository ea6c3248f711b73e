/**
 * The ZMQ side of one replica's feed, and the only home of `zeromq` (loaded by hub.ts with a dynamic
 * import, only once a pool enables KV events). A SUB socket connects to the replica's publisher and
 * reconnects by itself (ZMQ retries with backoff); ZMTP heartbeats notice a peer that vanished without
 * closing its connection. After a gap the feed asks the replay socket (a DEALER speaking to vLLM's
 * ROUTER as a REQ would: an empty delimiter frame, then the start sequence).
 */
import { Dealer, Subscriber } from 'zeromq';
import { ReplicaFeed, type ReplicaFeedOptions } from './feed.js';
import { END_OF_REPLAY, MAX_MESSAGE_BYTES, RECEIVE_QUEUE_MESSAGES, readSeq, seqFrame } from './wire.js';

export interface FeedTarget {
  endpoint: string;
  /** '' : none. */
  replayEndpoint: string;
  topic: string;
}

/** How long a replay may take, at most: for its answer's each message, and for all of it. */
const REPLAY_TIMEOUT_MS = 2_000;
/** The most messages one replay takes (vLLM's publisher buffers 10,000 steps by default), and their bytes. */
const MAX_REPLAY_MESSAGES = 10_000;
const MAX_REPLAY_BYTES = 64 * 1024 * 1024;

/**
 * The frames a replay socket answers `from` with, up to its end marker (or the timeout, or the bound).
 * Timed on the monotonic clock: on the wall clock, a step back during a replay (NTP) stretched the
 * wait for a silent replay socket by the step, and the feed, which holds live batches behind its
 * replay, counted its replica unknown for that long.
 */
export async function replayFrom(endpoint: string, from: bigint): Promise<Array<readonly [bigint, Uint8Array]>> {
  const socket = new Dealer({ receiveTimeout: REPLAY_TIMEOUT_MS, linger: 0, maxMessageSize: MAX_MESSAGE_BYTES });
  const out: Array<readonly [bigint, Uint8Array]> = [];
  const until = performance.now() + REPLAY_TIMEOUT_MS;
  try {
    socket.connect(endpoint);
    await socket.send([Buffer.alloc(0), seqFrame(from)]);
    let bytes = 0;
    while (out.length < MAX_REPLAY_MESSAGES && bytes < MAX_REPLAY_BYTES && performance.now() < until) {
      socket.receiveTimeout = Math.max(1, Math.ceil(until - performance.now())); // the whole replay's time, not each message's
      let frames: Buffer[];
      try {
        frames = await socket.receive();
      } catch (err) {
        // the time ran out between two messages: what came is kept (thrown, it was all lost and the gap stayed whole)
        if ((err as { code?: unknown }).code === 'EAGAIN') break;
        throw err;
      }
      const [seqBytes, payload] = frames.length >= 3 ? frames.slice(1) : frames;
      if (!seqBytes || !payload) break;
      const seq = readSeq(seqBytes);
      if (seq === END_OF_REPLAY || payload.byteLength === 0) break;
      out.push([seq, payload]);
      bytes += payload.byteLength;
    }
  } finally {
    socket.close();
  }
  return out;
}

/** A live feed: its socket receiving until {@link close}. */
export class ZmqFeed {
  readonly feed: ReplicaFeed;
  private readonly socket: Subscriber;

  /** `onError`: the socket failed for good (the feed stays disconnected, so it turns stale). */
  constructor(target: FeedTarget, options: Omit<ReplicaFeedOptions, 'replay'>, onError: (err: Error) => void) {
    const { replayEndpoint } = target;
    this.feed = new ReplicaFeed({ ...options, ...(replayEndpoint !== '' ? { replay: (from: bigint) => replayFrom(replayEndpoint, from) } : {}) });
    const heartbeat = Math.max(100, Math.min(5_000, Math.floor(options.staleAfterMs / 3)));
    // maxMessageSize: a larger message is not read (ZMQ drops the connection, which reconnects)
    // receiveHighWaterMark: what waits while the feed does not read (its budget spent) stays small
    this.socket = new Subscriber({
      linger: 0,
      reconnectInterval: 100,
      reconnectMaxInterval: 2_000,
      heartbeatInterval: heartbeat,
      heartbeatTimeout: heartbeat * 2,
      maxMessageSize: MAX_MESSAGE_BYTES,
      receiveHighWaterMark: RECEIVE_QUEUE_MESSAGES,
    });
    const events = this.socket.events; // observed before connecting: the first handshake is not missed
    this.socket.subscribe(target.topic);
    this.socket.connect(target.endpoint);
    const failed = (err: unknown): void => {
      this.feed.disconnected();
      onError(err instanceof Error ? err : new Error(String(err)));
    };
    this.watch(events).catch(failed);
    this.run().catch(failed);
  }

  close(): void {
    if (!this.socket.closed) this.socket.close();
  }

  /**
   * Follows the connection through the socket's event observer, read as an async iterator (its
   * EventEmitter mode keeps a `require` of the first module instance that used it, which breaks
   * where modules are loaded more than once, as in a test runner).
   */
  private async watch(events: Subscriber['events']): Promise<void> {
    try {
      for await (const event of events) {
        if (event.type === 'handshake') this.feed.connected();
        else if (event.type === 'disconnect') this.feed.disconnected();
      }
    } catch (err) {
      if (!this.socket.closed) throw err;
    }
  }

  private async run(): Promise<void> {
    try {
      for await (const frames of this.socket) {
        // [topic, seq, payload]; a message of another shape is not an event batch
        const [, seqBytes, payload] = frames;
        if (frames.length !== 3 || !seqBytes || !payload || seqBytes.byteLength !== 8) continue;
        await this.feed.receive(readSeq(seqBytes), payload);
      }
    } catch (err) {
      if (!this.socket.closed) throw err;
    }
  }
}
