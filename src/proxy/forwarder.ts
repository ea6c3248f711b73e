/**
 * One attempt to forward a request to one endpoint: the request leg is one `http.request` on the
 * router's keep-alive agent with exactly the caller's path, headers and body; the response leg is
 * relay.ts. The attempt owns the engine's response from its first event:
 *
 * - nothing reaches the client until the engine sends the first byte of its response body: until then
 *   the attempt can still fail cleanly (connection error, reset, timeout, an error status) and the
 *   caller may retry it elsewhere. vLLM sends a stream's 200 and headers before the prefill, so the
 *   headers alone commit nothing;
 * - non-2xx answers are read (bounded) and returned normalised, for the caller to retry or pass on.
 *
 * Until issue 18 this leg went through http-proxy-middleware. With the response leg ours
 * (`selfHandleResponse`) and the request's headers, path and body all the caller's, the library only
 * copied headers the forwarder then removed, parsed a URL per attempt and added listeners the attempt
 * had to take back off (the old http-proxy-gap.ts); in the profile that was ~5% of the router's CPU
 * per request (bench/results/profile.md), for nothing the router used.
 */
import http from '../core/node-http.js';
import type { Agent, ClientRequest, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { systemScheduler, type Clock, type Scheduler } from '../core/clock.js';
import { type RouterError } from '../core/errors.js';
import { passed } from '../core/phases.js';
import { type Endpoint } from '../core/types.js';
import { retryHeaders } from './headers.js';
import { relayResponse, type AttemptControl } from './relay.js';
import { type SseEvent, type SseSegment } from './sse-tap.js';
import { MAX_ERROR_BODY_BYTES, normaliseUpstreamError, type NormalisedError } from './upstream-errors.js';

export interface AttemptSpec {
  endpoint: Endpoint;
  body: Buffer;
  /** The path (with any query) the engine gets: the canonical one the router routed. */
  path: string;
  /** Every header the engine gets, except host and content-length, which are set here (and Node's `Connection: keep-alive`). */
  headers: OutgoingHttpHeaders;
  requestId: string;
  /** `clientStallMs`: longest time a client may accept no bytes while the router holds a response for it. */
  timeouts: { connectMs: number; firstByteMs: number; idleMs: number; clientStallMs: number };
  /** Monotonic ms (the injected clock) by which the whole exchange must have ended. */
  deadline: number;
  /** Sees the response as it passes (token accounting, time to first token). */
  observe?: ResponseObserver;
  /**
   * The router asked the engine for usage the client did not ask for: drop the usage-only chunk from
   * what the client gets. Only then are stream bytes written per complete event.
   */
  stripUsageChunk?: boolean;
  /** The event that ends a stream the router cuts short, in the API's dialect (default: OpenAI's error chunk and `[DONE]`). */
  errorEvent?: (err: RouterError) => string;
  /** Rewrites each complete event of a stream on its way to the client ('' drops it). With it, only whole events are written. */
  rewrite?: (segment: SseSegment) => string;
  /**
   * The caller may continue this stream elsewhere: when the engine breaks or stalls after the first
   * byte, or `cut()` says its stream ended cut short (an error event the rewrite held back), the
   * client's response is left open on an event boundary, with no error event, for the caller to go on
   * with or end. Needs `rewrite`.
   */
  resumable?: { cut(): boolean };
  /** An earlier attempt already committed the client's response: this one's first byte sends no status line or headers. */
  continues?: boolean;
}

export interface ResponseObserver {
  /** `at`: when it was read, on the injected clock (the events of one chunk share a reading). */
  event(event: SseEvent, at?: number): void;
  body(chunk: Buffer): void;
  bodyEnd(): void;
}

export type FailureReason = 'connect' | 'connect_timeout' | 'reset' | 'first_byte_timeout' | 'deadline';
export type StreamEnd = 'complete' | 'client_gone' | 'client_stalled' | 'upstream_broken' | 'idle_timeout' | 'deadline';

export type AttemptResult =
  /** The first byte went to the client; `done` settles when the response has ended. */
  | { kind: 'committed'; status: number; done: Promise<{ end: StreamEnd; bytes: number }> }
  /** The engine answered with an error status (body read, nothing sent yet). */
  | { kind: 'upstream_error'; status: number; error: NormalisedError; headers: Record<string, string>; retryAfterMs: number | undefined }
  /** No usable answer (nothing sent yet). */
  | { kind: 'failed'; reason: FailureReason; detail: string }
  | { kind: 'client_gone' };

/**
 * One attempt's state: its single timer and its settlement, which the relay borrows as its
 * {@link AttemptControl}. Its fields are set once, in the constructor, and never given another
 * function: with `resolve` replaced after construction by a closure over the client's response, every
 * request's attempt, response and buffers survived young-generation GCs into the old generation
 * (about 550 KB promoted per scavenge at 500 requests/s against 10 KB without, and scavenge pauses
 * of 1.5–3.5 against 0.6–1.1 ms; --trace-gc-nvp, the rest of the router unchanged).
 */
class Attempt implements AttemptControl {
  settled = false;
  proxyReq?: ClientRequest;
  private timer: unknown;

  constructor(
    readonly spec: AttemptSpec,
    private readonly resolve: (result: AttemptResult) => void,
    private readonly scheduler: Scheduler,
    /** The client's response, and the 'close' listener this attempt keeps on it until it settles. */
    private readonly res: ServerResponse,
    private readonly onClientClose: () => void,
  ) {}

  arm(ms: number, onTimeout: () => void): void {
    this.disarm();
    this.timer = this.scheduler.setTimeout(onTimeout, Math.max(0, ms));
  }

  disarm(): void {
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Settles the attempt (once). */
  settle(result: AttemptResult): void {
    if (this.settled) return;
    this.settled = true;
    this.disarm();
    this.res.off('close', this.onClientClose);
    this.resolve(result);
  }
}

/** 'close' decides what a response's error means. */
const ignore = (): void => undefined;

/** Retry-After (seconds or HTTP date) or retry-after-ms, in ms. */
export function retryAfterMs(headers: IncomingMessage['headers'], now = Date.now()): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (headers['retry-after-ms'] !== undefined && Number.isFinite(ms) && ms >= 0) return ms;
  const raw = headers['retry-after'];
  if (typeof raw !== 'string') return undefined;
  const seconds = Number(raw);
  if (raw.trim() !== '' && Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(raw);
  return Number.isFinite(date) ? Math.max(0, date - now) : undefined;
}

export class Forwarder {
  constructor(
    private readonly agent: Agent,
    private readonly clock: Clock,
    private readonly scheduler: Scheduler = systemScheduler,
  ) {}

  /** Runs one attempt. The request headers must already be prepared for the upstream. */
  attempt(_req: IncomingMessage, res: ServerResponse, spec: AttemptSpec): Promise<AttemptResult> {
    if (res.destroyed || res.writableEnded) return Promise.resolve({ kind: 'client_gone' });
    return new Promise<AttemptResult>((resolve) => {
      const onClose = (): void => this.fail(attempt, { kind: 'client_gone' });
      const attempt = new Attempt(spec, resolve, this.scheduler, res, onClose);
      res.once('close', onClose);
      attempt.arm(Math.min(spec.timeouts.firstByteMs, spec.deadline - this.clock.now()), () => this.firstByteTimeout(attempt));
      this.send(attempt, res);
    });
  }

  /** The request leg: the endpoint's address and base path, the spec's path, host, headers and body. */
  private send(attempt: Attempt, res: ServerResponse): void {
    const { endpoint, path, headers, body, timeouts } = attempt.spec;
    const url = endpoint.url;
    const base = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '');
    const proxyReq = http.request({
      hostname: url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname,
      port: url.port,
      method: 'POST',
      path: base + path,
      headers: requestHeaders(url.host, headers, body.length),
      agent: this.agent,
    });
    attempt.proxyReq = proxyReq;
    proxyReq.on('response', (proxyRes: IncomingMessage) => this.responded(attempt, proxyRes, res));
    proxyReq.on('error', (err: Error) => this.errored(attempt, err));
    proxyReq.once('socket', (socket) => {
      if (!socket.connecting) return;
      const timer = this.scheduler.setTimeout(() => this.fail(attempt, { kind: 'failed', reason: 'connect_timeout', detail: `no connection within ${timeouts.connectMs} ms` }), timeouts.connectMs);
      // Both listeners go once either fires: a 'close' listener left on a kept-alive socket held this
      // attempt (its request, response and buffers) for as long as the connection lived.
      const settled = (): void => {
        this.scheduler.clearTimeout(timer);
        socket.off('connect', settled);
        socket.off('close', settled);
      };
      socket.on('connect', settled);
      socket.on('close', settled);
    });
    proxyReq.end(body);
    passed(res, 'sent');
  }

  private firstByteTimeout(attempt: Attempt): void {
    const deadline = this.clock.now() >= attempt.spec.deadline;
    this.fail(attempt, { kind: 'failed', reason: deadline ? 'deadline' : 'first_byte_timeout', detail: deadline ? 'total timeout' : `no response within ${attempt.spec.timeouts.firstByteMs} ms` });
  }

  /** Settles the attempt (once) and tears its upstream request down. */
  private fail(attempt: Attempt, result: AttemptResult): void {
    if (attempt.settled) return;
    attempt.proxyReq?.destroy();
    attempt.settle(result);
  }

  private errored(attempt: Attempt, err: Error): void {
    if (attempt.settled) return;
    const code = (err as NodeJS.ErrnoException).code;
    const reused = attempt.proxyReq?.reusedSocket === true;
    const reason: FailureReason = code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'ENOTFOUND' ? 'connect' : 'reset';
    attempt.settle({ kind: 'failed', reason, detail: `${code ?? err.message}${reused ? ' on a reused connection' : ''}` });
  }

  private responded(attempt: Attempt, proxyRes: IncomingMessage, res: ServerResponse): void {
    passed(res, 'responded');
    if (attempt.settled) {
      proxyRes.destroy();
      return;
    }
    proxyRes.on('error', ignore);
    const status = proxyRes.statusCode ?? 502;
    if (status < 200 || status >= 300) this.readError(attempt, proxyRes, status);
    else relayResponse(attempt.spec, proxyRes, res, status, attempt, this.clock);
  }

  private readError(attempt: Attempt, proxyRes: IncomingMessage, status: number): void {
    const chunks: Buffer[] = [];
    let size = 0;
    attempt.arm(Math.min(attempt.spec.timeouts.idleMs, attempt.spec.deadline - this.clock.now()), () => this.fail(attempt, { kind: 'failed', reason: 'reset', detail: 'error body stalled' }));
    proxyRes.on('data', (chunk: Buffer) => {
      if (size >= MAX_ERROR_BODY_BYTES) return;
      chunks.push(chunk);
      size += chunk.length;
    });
    proxyRes.on('end', () => {
      attempt.settle({
        kind: 'upstream_error',
        status,
        error: normaliseUpstreamError(status, Buffer.concat(chunks).subarray(0, MAX_ERROR_BODY_BYTES)),
        headers: retryHeaders(proxyRes.headers),
        retryAfterMs: retryAfterMs(proxyRes.headers),
      });
    });
    proxyRes.on('close', () => {
      if (!proxyRes.complete) attempt.settle({ kind: 'failed', reason: 'reset', detail: 'the connection closed while the error body was read' });
    });
  }
}

/**
 * What the engine gets: host first, as a client would send it; then exactly the caller's headers (the
 * absent ones left out: `http.request` refuses an undefined value); then the body's length; and Node's
 * `Connection: keep-alive`. As a flat list, which Node writes as it is: given an object, it sets each
 * header one by one first (validated, lower-cased, stored), about a tenth of a request's cost in Node's
 * HTTP client in a micro-benchmark.
 */
function requestHeaders(host: string, headers: OutgoingHttpHeaders, length: number): string[] {
  const out = ['host', host];
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const each of value) out.push(name, each);
    else out.push(name, typeof value === 'string' ? value : String(value));
  }
  out.push('content-length', String(length));
  return out;
}
