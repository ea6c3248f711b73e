/** Counters and histograms the simulated engine keeps, named after vLLM's own series. */

/** Finish reasons as vLLM labels `vllm:request_success_total` (plus `error` for injected failures). */
export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

/** Cumulative Prometheus-style histogram (seconds). */
export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }

  observe(seconds: number): void {
    this.sum += seconds;
    this.count += 1;
    for (let i = 0; i < this.buckets.length; i++) {
      if (seconds <= (this.buckets[i] ?? Infinity)) this.counts[i] = (this.counts[i] ?? 0) + 1;
    }
  }
}

/** vLLM's bucket edges for time to first token and end-to-end latency. */
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];

export class EngineStats {
  promptTokens = 0;
  generationTokens = 0;
  prefixQueries = 0;
  prefixHits = 0;
  readonly finished: Record<FinishReason, number> = { stop: 0, length: 0, abort: 0, error: 0 };
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly e2e = new Histogram(E2E_BUCKETS);
  readonly queueTime = new Histogram(E2E_BUCKETS);
}
