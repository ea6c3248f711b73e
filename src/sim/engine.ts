/**
 * The simulated inference engine: what a small vLLM replica does with time and load.
 *
 * - At most `maxNumSeqs` requests run at once (continuous batching); the rest wait FIFO in a queue of
 *   at most `maxWaiting`, and past that a request is refused ({@link QueueFullError}).
 * - Prefill takes `ttftOverheadMs + uncachedPromptTokens × prefillMsPerToken`; every further token
 *   takes `itlMs`. Both grow linearly with the batch: × `1 + (loadFactor − 1)·(running − 1)/(maxNumSeqs − 1)`.
 * - A prefix cache of `kvCacheBlocks` blocks (LRU) remembers hashed prompt blocks, so a prompt whose
 *   leading blocks were seen recently prefills faster.
 */
import { type Clock, type Sleep } from '../core/clock.js';
import { gaussian, type Rng } from './prng.js';
import { PrefixCache } from './prefix-cache.js';
import { abortError, Sequence } from './sequence.js';
import { EngineStats } from './stats.js';

// Callers outside the engine's files keep importing these from here.
export { promptBlockHashes } from './prefix-cache.js';
export { Sequence } from './sequence.js';

export interface LatencyModel {
  /** Fixed cost of a prefill, in ms. */
  ttftOverheadMs: number;
  /** Prefill cost per uncached prompt token, in ms. */
  prefillMsPerToken: number;
  /** Time per generated token after the first with one running request, in ms. */
  itlMs: number;
  /** ≥ 1: how much slower prefill and decode are with a full batch than with one request. */
  loadFactor: number;
  /** Relative standard deviation applied to every delay (0 = deterministic). */
  jitter: number;
}

export interface EngineConfig {
  maxNumSeqs: number;
  maxWaiting: number;
  /** Tokens per KV-cache block (the unit of prefix caching). */
  blockSize: number;
  kvCacheBlocks: number;
  latency: LatencyModel;
}

export interface EngineDeps {
  clock: Clock;
  sleep: Sleep;
  /** Randomness for jitter only; text randomness is the request's own. */
  rng: Rng;
}

export class QueueFullError extends Error {
  readonly code = 'SIM_QUEUE_FULL';
  constructor(limit: number) {
    super(`The server is overloaded: the waiting queue is full (${limit} requests). Retry later.`);
  }
}

interface Waiter {
  resolve: (seq: Sequence) => void;
  reject: (err: Error) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
  enqueuedAt: number;
}

export class SimEngine {
  readonly stats = new EngineStats();
  private readonly running = new Set<Sequence>();
  private readonly waiting: Waiter[] = [];
  /** Its listener is the KV-event publisher (sim/kv-events.ts), when `--kv-events-port` is set. */
  readonly prefixCache: PrefixCache;

  constructor(
    private config: EngineConfig,
    readonly deps: EngineDeps,
  ) {
    this.prefixCache = new PrefixCache(config.blockSize, config.kvCacheBlocks);
  }

  get numRunning(): number {
    return this.running.size;
  }

  get numWaiting(): number {
    return this.waiting.length;
  }

  get latency(): LatencyModel {
    return this.config.latency;
  }

  setLatency(latency: LatencyModel): void {
    this.config = { ...this.config, latency };
  }

  /** Fraction of KV blocks held by running requests, 0..1, as `vllm:kv_cache_usage_perc`. */
  kvCacheUsage(): number {
    let blocks = 0;
    for (const seq of this.running) blocks += Math.ceil(seq.kvTokens / this.config.blockSize);
    return Math.min(1, blocks / this.config.kvCacheBlocks);
  }

  /** Tokens held in the KV cache by running requests (SGLang's and llama.cpp's unit). */
  kvCacheTokens(): number {
    let tokens = 0;
    for (const seq of this.running) tokens += seq.kvTokens;
    return tokens;
  }

  /**
   * Takes a batch slot, waiting in the queue if the batch is full.
   * Throws {@link QueueFullError} synchronously when the queue is full, so a caller can tell
   * "accepted" from "refused" before it awaits the slot.
   */
  acquire(signal?: AbortSignal): Promise<Sequence> {
    if (signal?.aborted) return Promise.reject(abortError());
    const arrivedAt = this.deps.clock.now();
    if (this.running.size < this.config.maxNumSeqs && this.waiting.length === 0) {
      return Promise.resolve(this.start(arrivedAt));
    }
    if (this.waiting.length >= this.config.maxWaiting) throw new QueueFullError(this.config.maxWaiting);
    return new Promise<Sequence>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        enqueuedAt: arrivedAt,
        onAbort: () => {
          const at = this.waiting.indexOf(waiter);
          if (at >= 0) this.waiting.splice(at, 1);
          this.stats.finished.abort += 1;
          reject(abortError());
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** The batch-size multiplier for prefill and decode delays right now. */
  loadMultiplier(): number {
    const { maxNumSeqs, latency } = this.config;
    if (maxNumSeqs <= 1) return 1;
    return 1 + ((latency.loadFactor - 1) * (Math.max(1, this.running.size) - 1)) / (maxNumSeqs - 1);
  }

  /** Applies load and jitter to a nominal delay. */
  scaleDelay(nominalMs: number): number {
    const jitter = this.config.latency.jitter;
    const noise = jitter > 0 ? Math.min(1.7, Math.max(0.3, 1 + jitter * gaussian(this.deps.rng))) : 1;
    return nominalMs * this.loadMultiplier() * noise;
  }

  /** Tokens of the prompt already in the prefix cache (leading blocks only), refreshing their recency. */
  matchPrefix(blockHashes: readonly number[]): number {
    return this.prefixCache.match(blockHashes);
  }

  storePrefix(blockHashes: readonly number[]): void {
    this.prefixCache.store(blockHashes);
  }

  get blockSize(): number {
    return this.config.blockSize;
  }

  get kvCacheBlocks(): number {
    return this.config.kvCacheBlocks;
  }

  private start(arrivedAt: number): Sequence {
    const seq = new Sequence(this, arrivedAt, this.deps.clock.now());
    this.running.add(seq);
    this.stats.queueTime.observe((seq.startedAt - arrivedAt) / 1000);
    return seq;
  }

  /** Called by {@link Sequence.finish}: frees the slot and admits waiters in arrival order. */
  release(seq: Sequence): void {
    this.running.delete(seq);
    while (this.running.size < this.config.maxNumSeqs) {
      const next = this.waiting.shift();
      if (!next) break;
      next.signal?.removeEventListener('abort', next.onAbort);
      next.resolve(this.start(next.enqueuedAt));
    }
  }
}
