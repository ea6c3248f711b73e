/**
 * What an attempt's result means for the request and for the endpoint: whether it may be retried,
 * after how long, and how it moves the endpoint's circuit breaker. Pure.
 */
import { RouterError } from '../core/errors.js';
import { type ResilienceSettings } from '../core/types.js';
import { type AttemptResult } from '../proxy/forwarder.js';
import { type AttemptOutcome } from '../resilience/breaker.js';

/** Engine statuses that say "not now" or "not me": worth another replica. */
const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);

/** An attempt that got nowhere for a reason another replica (or pool) may not share. */
export function retryable(result: AttemptResult): boolean {
  if (result.kind === 'failed') return result.reason !== 'deadline' && result.reason !== 'shutdown';
  return result.kind === 'upstream_error' && RETRYABLE_STATUS.has(result.status);
}

/** How the attempt moves its endpoint's breaker. 429 and 503 are backpressure: the engine is alive. */
export function breakerOutcome(result: AttemptResult): AttemptOutcome {
  switch (result.kind) {
    case 'committed':
      return 'answered'; // counted when the answer ends (the exchange reports how: EndpointBreaker.answerEnded)
    case 'upstream_error':
      if (result.status === 429 || result.status === 503) return 'backpressure';
      return result.status >= 500 ? 'failure' : 'success';
    case 'failed':
      // the total timeout ran out: time spent elsewhere (queues, other replicas) is not this endpoint's fault; nor is the router's shutdown
      return result.reason === 'deadline' || result.reason === 'shutdown' ? 'unknown' : 'failure';
    case 'client_gone':
      return 'unknown'; // says nothing about the endpoint (and a half-open probe so ended proves nothing)
  }
}

/** The attempt's outcome as the access log and the attempts metric name it. */
export function outcomeName(result: AttemptResult): string {
  switch (result.kind) {
    case 'committed':
      return 'committed';
    case 'upstream_error':
      return `upstream_${result.status}`;
    case 'failed':
      return result.reason;
    case 'client_gone':
      return 'client_gone';
  }
}

/** The router's answer when the last attempt failed without any answer from the engine. */
export function failureError(result: Extract<AttemptResult, { kind: 'failed' }>): RouterError {
  if (result.reason === 'shutdown')
    return new RouterError('ROUTER_SHUTTING_DOWN', 'This router is shutting down and the model server had not answered yet; retry the request (another router will take it).', {
      retryAfterSeconds: 1,
    });
  if (result.reason === 'invalid_answer') return new RouterError('UPSTREAM_INVALID_ANSWER', `The model server answered with what the router cannot pass on (${result.detail}).`);
  const timedOut = result.reason === 'first_byte_timeout' || result.reason === 'connect_timeout' || result.reason === 'deadline';
  return timedOut
    ? new RouterError('UPSTREAM_TIMEOUT', `The model server did not answer in time (${result.detail}).`)
    : new RouterError('UPSTREAM_CONNECTION_FAILED', `The model server could not be reached or dropped the connection (${result.detail}).`);
}

/** Backoff before retry `n` (0-based): doubling from the initial delay, capped, "equal jitter". */
export function retryDelay(n: number, retries: ResilienceSettings['retries'], random: () => number): number {
  const ceiling = Math.min(retries.maxBackoffMs, retries.initialBackoffMs * 2 ** n);
  return ceiling / 2 + random() * (ceiling / 2);
}

/** ms to wait before retry `n` (0-based) in a pool, or undefined when no retry may follow. */
export function retryWait(n: number, result: AttemptResult, retries: ResilienceSettings['retries'], random: () => number): number | undefined {
  if (n >= retries.maxRetries) return undefined;
  const backoff = retryDelay(n, retries, random);
  const asked = result.kind === 'upstream_error' ? result.retryAfterMs : undefined;
  if (asked === undefined) return backoff;
  return asked > retries.maxRetryAfterMs ? undefined : Math.max(backoff, asked);
}
