/**
 * One request's life on the simulated engine once admitted: the prefill (with its prefix-cache
 * lookup), one wait per decoded token, and the finish that frees its batch slot and records stats.
 */
import { type SimEngine } from './engine.js';
import { type FinishReason } from './stats.js';

export function abortError(): Error {
  const err = new Error('The operation was aborted');
  err.name = 'AbortError';
  return err;
}

/** One admitted request: it holds a batch slot until {@link finish}. */
export class Sequence {
  /** Prompt plus generated tokens held in the KV cache. */
  kvTokens = 0;
  private finishedWith: FinishReason | undefined;

  constructor(
    private readonly engine: SimEngine,
    readonly arrivedAt: number,
    readonly startedAt: number,
  ) {}

  get finishReason(): FinishReason | undefined {
    return this.finishedWith;
  }

  /**
   * Runs the prefill: waits the time to first token and returns how many prompt tokens were
   * served from the prefix cache. `blockHashes` is empty for requests that are not cached.
   */
  async prefill(promptTokens: number, blockHashes: readonly number[], extraMs: number, signal?: AbortSignal): Promise<number> {
    const { engine } = this;
    const cached = Math.min(engine.matchPrefix(blockHashes), Math.max(0, promptTokens - 1));
    const latency = engine.latency;
    const delay = engine.scaleDelay(latency.ttftOverheadMs + (promptTokens - cached) * latency.prefillMsPerToken) + extraMs;
    // Like vLLM, the prompt's KV blocks are allocated when the request is scheduled, not when its prefill ends.
    this.kvTokens = promptTokens;
    await this.wait(delay, signal);
    engine.storePrefix(blockHashes);
    const stats = engine.stats;
    stats.promptTokens += promptTokens;
    stats.prefixQueries += promptTokens;
    stats.prefixHits += cached;
    stats.ttft.observe((engine.deps.clock.now() - this.arrivedAt) / 1000);
    return cached;
  }

  /** Waits one inter-token interval, then accounts `tokens` newly generated tokens. */
  async decode(tokens: number, signal?: AbortSignal): Promise<void> {
    await this.wait(this.engine.scaleDelay(this.engine.latency.itlMs), signal);
    this.accountGenerated(tokens);
  }

  /** Accounts tokens produced by the prefill step itself (the first token of each choice). */
  accountGenerated(tokens: number): void {
    this.kvTokens += tokens;
    this.engine.stats.generationTokens += tokens;
  }

  /** Ends the request and frees its slot. Idempotent: the first reason wins. */
  finish(reason: FinishReason): void {
    if (this.finishedWith) return;
    this.finishedWith = reason;
    const { stats, deps } = this.engine;
    stats.finished[reason] += 1;
    stats.e2e.observe((deps.clock.now() - this.arrivedAt) / 1000);
    this.engine.release(this);
  }

  private async wait(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) throw abortError();
    // A zero-latency engine (benchmarks) must not pay a timer per token.
    if (ms > 0) await this.engine.deps.sleep(ms, signal);
  }
}
