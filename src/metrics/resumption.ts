/**
 * `modelgate_stream_resumptions_total{deployment, result, reason}`: what became of each chat or
 * completions stream of a deployment with `resumeStreams` whose replica broke, stalled or sent an
 * error event after the first byte — `resumed` on another replica (reason: what broke it), `refused`
 * (the request or the answer cannot be continued, the engine cannot, or the resumptions are spent) or
 * `failed` (no replica could start the continuation). The reasons are the fixed lists of
 * `RESUME_REASONS` (core); a deployment's series exist, at 0, from its first resumable stream on.
 */
import { Counter, type Registry } from 'prom-client';
import { RESUME_REASONS, type ResumeReason, type ResumeResult } from '../core/types.js';

export class ResumptionMetrics {
  private readonly counter: Counter<'deployment' | 'result' | 'reason'>;
  private readonly known = new Set<string>();

  constructor(registers: Registry[]) {
    this.counter = new Counter({
      name: 'modelgate_stream_resumptions_total',
      help: 'Streams of deployments with resumeStreams that broke after the first byte, by what became of them: resumed on another replica, refused, or failed to resume.',
      labelNames: ['deployment', 'result', 'reason'],
      registers,
    });
  }

  /** The deployment's series, at 0 (once per deployment). */
  know(deployment: string): void {
    if (this.known.has(deployment)) return;
    this.known.add(deployment);
    for (const [result, reasons] of Object.entries(RESUME_REASONS)) for (const reason of reasons) this.counter.inc({ deployment, result, reason }, 0);
  }

  record(deployment: string, result: ResumeResult, reason: ResumeReason): void {
    this.know(deployment);
    this.counter.inc({ deployment, result, reason });
  }
}
