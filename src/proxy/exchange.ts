/**
 * One client request, start to end: pick an endpoint, attempt, and — only while nothing has reached
 * the client — retry on another endpoint after a connection error, a reset, a timeout before the
 * first byte, or a 429/502/503/504 from the engine. At most `retries.maxRetries` extra attempts, with
 * jittered backoff, honouring the engine's Retry-After up to `retries.maxRetryAfterMs`, all within
 * `timeouts.totalMs`. Each attempt's outcome also moves the endpoint's circuit breaker.
 *
 * Fallbacks: the plan's route lists pools in order (the chosen pool, the deployment's other pools,
 * then its fallback deployments' pools). Whenever a pool cannot produce a first byte — no replica can
 * take the request (none ready, or every breaker open), or a retryable failure leaves no untried
 * replica in it (or no retry budget) — and nothing has reached the client, the same request moves on
 * to the next pool. Moving on is not a retry; the route is finite and the total timeout still holds.
 */
import { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { isAbortError, type Clock, type Sleep } from '../core/clock.js';
import { RouterError, toErrorResponse } from '../core/errors.js';
import { type PoolSpec } from '../core/types.js';
import { type AttemptOutcome } from '../resilience/breaker.js';
import { type EndpointPicker, type PickRequest } from '../resilience/picker.js';
import { type AttemptResult, type Forwarder, type StreamEnd } from './forwarder.js';
import { ResponseMeter, type TokenUsage } from './usage.js';

const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);

export interface AttemptRecord {
  endpoint: string;
  /** committed, upstream_<status>, a failure reason, or client_gone. */
  outcome: string;
  ms: number;
}

/** What the exchange did, for the access log and metrics. */
export interface ExchangeReport {
  attempts: AttemptRecord[];
  /** Last endpoint tried. */
  endpoint?: string;
  /** The pool that answered (or was tried last), when it is not the route's first. */
  pool?: PoolSpec;
  /** The fallback deployment used, when the request left its own deployment. */
  fallback?: string;
  upstreamStatus?: number;
  /** Why the exchange did not end well, as an error code. */
  failure?: string;
  /** How a committed response ended. */
  end?: StreamEnd;
  /** Token counts from the engine's usage, when it reported them. */
  usage?: TokenUsage;
  /** ms from the committed attempt's request to its first content event (streams). */
  ttftMs?: number;
  /** Body bytes relayed from the engine. */
  bytes?: number;
}

export interface ExchangeEvents {
  onAttempt?: (pool: string, endpoint: string, outcome: string) => void;
  onRetry?: (pool: string, reason: string) => void;
  /** The request moved on from `from` (no replica could take it) to `to`. */
  onFallback?: (from: RouteStep, to: RouteStep) => void;
}

/** One pool of a request's route, with the body as that pool's engine must see it. */
export interface RouteStep {
  pool: PoolSpec;
  body: Buffer;
  /** Every header this pool's engines get (its own key, its session header, x-forwarded-*). */
  headers: OutgoingHttpHeaders;
  /** The deployment this pool serves the request for (the requested one, or a fallback). */
  deployment: string;
}

export interface ExchangeDeps {
  forwarder: Forwarder;
  picker: EndpointPicker;
  clock: Clock;
  sleep: Sleep;
  random: () => number;
  events?: ExchangeEvents;
}

export interface ExchangePlan {
  /** Pools in the order they are tried; at least one. */
  route: readonly RouteStep[];
  /** Priority, prompt and session of the request, for the scheduler. */
  request: PickRequest;
  requestId: string;
  /** The canonical path the engine gets. */
  path: string;
  /** A client that accepts no bytes this long is cut (`client_stalled`), never blamed on the engine. */
  clientStallMs: number;
  /** Aborts when the client leaves. */
  signal: AbortSignal;
  /** The router asked the engine for stream usage the client did not ask for (see Forwarder). */
  stripUsageChunk?: boolean;
  /** Each inter-token gap of a committed stream, in ms. */
  onInterToken?: (ms: number) => void;
}

function writeJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function breakerOutcome(result: AttemptResult): AttemptOutcome {
  switch (result.kind) {
    case 'committed':
      return 'success';
    case 'upstream_error':
      if (result.status === 429 || result.status === 503) return 'backpressure';
      return result.status >= 500 ? 'failure' : 'success';
    case 'failed':
      return 'failure';
    case 'client_gone':
      return 'backpressure'; // says nothing about the endpoint
  }
}

function outcomeName(result: AttemptResult): string {
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

function failureError(result: Extract<AttemptResult, { kind: 'failed' }>): RouterError {
  const timedOut = result.reason === 'first_byte_timeout' || result.reason === 'connect_timeout' || result.reason === 'deadline';
  return timedOut
    ? new RouterError('UPSTREAM_TIMEOUT', `The model server did not answer in time (${result.detail}).`)
    : new RouterError('UPSTREAM_CONNECTION_FAILED', `The model server could not be reached or dropped the connection (${result.detail}).`);
}

/** Backoff before retry `n` (0-based): doubling from the initial delay, capped, "equal jitter". */
export function retryDelay(n: number, retries: PoolSpec['resilience']['retries'], random: () => number): number {
  const ceiling = Math.min(retries.maxBackoffMs, retries.initialBackoffMs * 2 ** n);
  return ceiling / 2 + random() * (ceiling / 2);
}

export class ExchangeRunner {
  constructor(private readonly deps: ExchangeDeps) {}

  async run(req: IncomingMessage, res: ServerResponse, plan: ExchangePlan): Promise<ExchangeReport> {
    const { forwarder, picker, clock } = this.deps;
    let step = 0;
    let { pool, body, headers } = plan.route[0] as RouteStep;
    let settings = pool.resilience;
    const deadline = clock.now() + settings.timeouts.totalMs;
    // http-proxy adds a few 'close'/'error' listeners to the client response per attempt: bounded by
    // the retry cap, so the limit is sized to it rather than left to warn.
    res.setMaxListeners(Math.max(res.getMaxListeners(), 8 + 4 * (settings.retries.maxRetries + 1)));
    let tried = new Set<string>();
    const report: ExchangeReport = { attempts: [] };
    /** Retries spent in the current pool (each pool has its own budget). */
    let retries = 0;
    /** Moves the request on to the route's next pool, if there is one and the client is still there. */
    const moveOn = (): boolean => {
      const next = plan.route[step + 1];
      if (!next || plan.signal.aborted || clock.now() >= deadline) return false;
      this.deps.events?.onFallback?.(plan.route[step] as RouteStep, next);
      step += 1;
      ({ pool, body, headers } = next);
      settings = pool.resilience;
      tried = new Set();
      retries = 0;
      report.pool = pool;
      if (next.deployment !== plan.route[0]?.deployment) report.fallback = next.deployment;
      return true;
    };
    for (;;) {
      let picked;
      try {
        picked = await picker.pick(pool, tried, plan.signal, plan.request);
      } catch (err) {
        if (isAbortError(err)) return { ...report, failure: 'client_gone' };
        if (err instanceof RouterError && err.code === 'NO_READY_REPLICA' && moveOn()) continue;
        return this.fail(res, report, err);
      }
      const { endpoint } = picked;
      tried.add(endpoint.id);
      report.endpoint = endpoint.id;
      const started = clock.now();
      const meter = new ResponseMeter(clock, started, plan.onInterToken);
      const result = await forwarder.attempt(req, res, {
        endpoint,
        body,
        path: plan.path,
        headers,
        requestId: plan.requestId,
        timeouts: { ...settings.timeouts, clientStallMs: plan.clientStallMs },
        deadline,
        observe: { event: (e) => meter.onEvent(e), body: (c) => meter.onBody(c), bodyEnd: () => meter.onBodyEnd() },
        stripUsageChunk: plan.stripUsageChunk ?? false,
      });
      picked.ticket.settle(breakerOutcome(result));
      const outcome = outcomeName(result);
      report.attempts.push({ endpoint: endpoint.id, outcome, ms: Math.round(clock.now() - started) });
      this.deps.events?.onAttempt?.(pool.name, endpoint.id, outcome);

      if (result.kind === 'committed') {
        report.upstreamStatus = result.status;
        const { end, bytes } = await result.done;
        picked.release();
        report.end = end;
        report.bytes = bytes;
        const usage = meter.finalUsage();
        if (usage) report.usage = usage;
        if (meter.ttftMs !== undefined) report.ttftMs = meter.ttftMs;
        if (end === 'upstream_broken' || end === 'idle_timeout') {
          this.deps.picker.recordStreamFailure(pool, endpoint.id);
          report.failure = end === 'upstream_broken' ? 'upstream_stream_broken' : 'upstream_timeout';
        } else if (end === 'deadline') report.failure = 'upstream_timeout';
        else if (end === 'client_gone' || end === 'client_stalled') report.failure = end; // the client's doing: no breaker failure
        return report;
      }
      picked.release();
      if (result.kind === 'client_gone') return { ...report, failure: 'client_gone' };
      if (result.kind === 'upstream_error') report.upstreamStatus = result.status;

      const retryable = (result.kind === 'failed' && result.reason !== 'deadline') || (result.kind === 'upstream_error' && RETRYABLE_STATUS.has(result.status));
      const giveUp = (): ExchangeReport => (result.kind === 'upstream_error' ? this.passOn(res, report, result) : this.fail(res, report, failureError(result)));
      if (!retryable || plan.signal.aborted) return giveUp();
      const wait = this.retryWait(retries, result, settings.retries);
      const mayRetry = wait !== undefined && clock.now() + wait < deadline;
      // This pool has had its chance when no replica is left untried or its retries are spent: move on.
      if ((!mayRetry || !picker.hasUntried(pool, tried)) && moveOn()) continue;
      if (!mayRetry) return giveUp();
      retries += 1;
      this.deps.events?.onRetry?.(pool.name, result.kind === 'failed' ? result.reason : `upstream_${result.status}`);
      try {
        if (wait > 0) await this.deps.sleep(wait, plan.signal);
      } catch {
        return { ...report, failure: 'client_gone' };
      }
    }
  }

  /** ms to wait before retry `n` (0-based) in a pool, or undefined when no retry may follow. */
  private retryWait(n: number, result: AttemptResult, retries: PoolSpec['resilience']['retries']): number | undefined {
    if (n >= retries.maxRetries) return undefined;
    const backoff = retryDelay(n, retries, this.deps.random);
    const asked = result.kind === 'upstream_error' ? result.retryAfterMs : undefined;
    if (asked === undefined) return backoff;
    return asked > retries.maxRetryAfterMs ? undefined : Math.max(backoff, asked);
  }

  /** Passes an engine's error answer on (status kept, body in the OpenAI envelope). */
  private passOn(res: ServerResponse, report: ExchangeReport, result: Extract<AttemptResult, { kind: 'upstream_error' }>): ExchangeReport {
    writeJson(res, result.error.status, result.error.envelope, result.headers);
    return { ...report, failure: result.error.envelope.error.code ?? `upstream_${result.status}` };
  }

  /** Answers with the router's own error. */
  private fail(res: ServerResponse, report: ExchangeReport, err: unknown): ExchangeReport {
    const { status, headers, body } = toErrorResponse(err);
    writeJson(res, status, body, headers);
    return { ...report, failure: body.error.code ?? 'error' };
  }
}
