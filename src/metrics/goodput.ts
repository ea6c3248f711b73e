/**
 * Goodput per deployment: how many of the requests offered to it were served within its latency
 * objective, once the ones turned away are counted too. A request is offered when it resolved to a
 * deployment and was not the client's own mistake (a 4xx other than 429) nor abandoned by its client:
 * before an answer (499), or during one (it left, or stopped reading and was cut: a user's "stop
 * generating" says nothing of the service) — unless what it had waited already missed the objective,
 * which counts `outside` (users give up on slow answers). It is then:
 *
 * - `within`: answered 2xx, complete, and within the SLO — time to first token ≤ `ttftMs` and the
 *   mean gap between tokens ≤ `itlMs` for a stream (the gap estimated as the time after the first
 *   token over the tokens after it); for an answer that is not streamed (its first byte is its whole
 *   generation), within `ttftMs + itlMs × completion tokens`;
 * - `outside`: answered 2xx, complete, but slower than that;
 * - `rejected`: turned away for want of capacity — 429 (a queue, shedding, the key's limits) or 503;
 * - `failed`: every other outcome (a 5xx, a stream cut short).
 *
 * goodput = within ÷ (within + outside + rejected + failed). Every known deployment's four series
 * exist at 0 before its first request (`RouterMetrics` seeds them before each scrape and removes a
 * deployment's when it leaves), so `rate()` sees the first event of each.
 */
import type { Registry } from 'prom-client';
import { type Slo } from '../core/types.js';
import { HotCounter } from './hot-counter.js';

import { SLO_RESULTS, type SloResult } from './labels.js';

export { SLO_RESULTS, type SloResult };

/** What the access log knows of a finished request. */
export interface Finished {
  status: number;
  /** The response ended before its end (cut, or the client left). */
  incomplete: boolean;
  /** The client left, or stopped reading and was cut, before the answer's end. */
  clientEnded?: boolean;
  durationMs: number;
  /** Streams only: ms from the request's arrival to the first content event (what its client waited: the router's queue and retries included). */
  ttftMs?: number;
  completionTokens?: number;
}

/** Where a request falls against `slo`; undefined when it does not count as offered. */
export function sloResult(done: Finished, slo: Slo): SloResult | undefined {
  const { status } = done;
  if (status === 429 || status === 503) return 'rejected';
  // a client that left before an answer (499) is not counted either, unless it had waited past the objective
  if (status === 499) return missedSoFar(done, slo) ? 'outside' : undefined;
  if (status >= 400 && status < 500) return undefined;
  if (status >= 500 || status < 200 || status >= 300) return 'failed';
  // a client that left mid-answer is not counted, unless what it had waited already missed the objective
  // (users give up on slow answers: left out, those would make goodput read higher the slower the service)
  if (done.clientEnded) return missedSoFar(done, slo) ? 'outside' : undefined;
  if (done.incomplete) return 'failed';
  const tokens = done.completionTokens ?? 0;
  if (done.ttftMs === undefined) return done.durationMs <= slo.ttftMs + slo.itlMs * tokens ? 'within' : 'outside';
  const meanGap = tokens > 1 ? (done.durationMs - done.ttftMs) / (tokens - 1) : 0;
  return done.ttftMs <= slo.ttftMs && meanGap <= slo.itlMs ? 'within' : 'outside';
}

/**
 * Whether the part of an answer its client waited for already missed `slo`: its first token late (or
 * none by then), or its tokens so far slower; an answer not streamed (no first token of its own), its
 * time past what its tokens so far allow.
 */
function missedSoFar(done: Finished, slo: Slo): boolean {
  if (done.ttftMs === undefined) return done.durationMs > slo.ttftMs + slo.itlMs * (done.completionTokens ?? 0);
  if (done.ttftMs > slo.ttftMs) return true;
  const tokens = done.completionTokens ?? 0;
  return tokens > 1 && (done.durationMs - done.ttftMs) / (tokens - 1) > slo.itlMs;
}

/** `modelgate_goodput_requests_total{deployment, result}`. */
export function goodputCounter(registers: Registry[]): HotCounter<'deployment' | 'result', [deployment: string, result: SloResult]> {
  return new HotCounter({
    name: 'modelgate_goodput_requests_total',
    help: 'Requests offered to each deployment, by how they fared against its SLO: within, outside (served, but slower), rejected (429/503), failed. Goodput = within / all.',
    labelNames: ['deployment', 'result'],
    registers,
  });
}
