/**
 * `modelgate_stream_resumptions_total{deployment, result, reason}`: what became of each chat or
 * completions stream of a deployment with `resumeStreams` whose replica broke, stalled or sent an
 * error event after the first byte — `resumed` on another replica (reason: what broke it), `refused`
 * (the request or the answer cannot be continued, the engine cannot, or the resumptions are spent) or
 * `failed` (no replica could start the continuation). The reasons are the fixed lists of
 * `RESUME_REASONS` (core). RouterMetrics seeds a deployment's series at 0 before each scrape while the
 * deployment has `resumeStreams`, and removes them when it leaves.
 */
import type { Registry } from 'prom-client';
import { RESUME_REASONS, type ResumeReason, type ResumeResult } from '../core/types.js';
import { HotCounter } from './hot-counter.js';

export class ResumptionMetrics {
  readonly counter: HotCounter<'deployment' | 'result' | 'reason', [deployment: string, result: ResumeResult, reason: ResumeReason]>;

  constructor(registers: Registry[]) {
    this.counter = new HotCounter({
      name: 'modelgate_stream_resumptions_total',
      help: 'Streams of deployments with resumeStreams that broke after the first byte, by what became of them: resumed on another replica, refused, or failed to resume.',
      labelNames: ['deployment', 'result', 'reason'],
      registers,
    });
  }

  /** The deployment's series, at 0. */
  seed(deployment: string): void {
    for (const [result, reasons] of Object.entries(RESUME_REASONS)) for (const reason of reasons) this.counter.seed(deployment, result as ResumeResult, reason);
  }

  record(deployment: string, result: ResumeResult, reason: ResumeReason): void {
    this.counter.inc(1, deployment, result, reason);
  }
}
