/**
 * One attempt to forward a request to one endpoint. http-proxy-middleware carries the request leg
 * through its documented options and events (`router` for the target per attempt, `pathRewrite` for
 * the canonical path, the 'proxyReq' event for exactly the caller's headers and body, a keep-alive
 * agent, the client's disconnect aborting the upstream request); the response leg is ours
 * (`selfHandleResponse`, relay.ts):
 *
 * - nothing reaches the client until the engine sends the first byte of its response body: until then
 *   the attempt can still fail cleanly (connection error, reset, timeout, an error status) and the
 *   caller may retry it elsewhere. vLLM sends a stream's 200 and headers before the prefill, so the
 *   headers alone commit nothing;
 * - non-2xx answers are read (bounded) and returned normalised, for the caller to retry or pass on.
 *
 * Where the library does not let the attempt own the engine's response, http-proxy-gap.ts does.
 */
import { type Agent, type ClientRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { createProxyMiddleware, type RequestHandler } from 'http-proxy-middleware';
import { systemScheduler, type Clock, type Scheduler } from '../core/clock.js';
import { type RouterError } from '../core/errors.js';
import { type Endpoint } from '../core/types.js';
import { retryHeaders } from './headers.js';
import { ownResponse, type OwnListener } from './http-proxy-gap.js';
import { relayResponse, type AttemptControl } from './relay.js';
import { type SseEvent } from './sse-tap.js';
import { MAX_ERROR_BODY_BYTES, normaliseUpstreamError, type NormalisedError } from './upstream-errors.js';

export interface AttemptSpec {
  endpoint: Endpoint;
  body: Buffer;
  /** The path (with any query) the engine gets: the canonical one the router routed. */
  path: string;
  /** Every header the engine gets, except host and content-length, which are set here. */
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
}

export interface ResponseObserver {
  event(event: SseEvent): void;
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

interface Attempt {
  spec: AttemptSpec;
  /** A fresh URL per attempt, so http-proxy's error events can be told apart by their target. */
  target: URL;
  settled: boolean;
  resolve: (result: AttemptResult) => void;
  proxyReq?: ClientRequest;
  timer?: unknown;
}

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
  private readonly attempts = new WeakMap<IncomingMessage, Attempt>();
  private readonly proxy: RequestHandler;

  constructor(
    agent: Agent,
    private readonly clock: Clock,
    private readonly scheduler: Scheduler = systemScheduler,
  ) {
    this.proxy = createProxyMiddleware({
      router: (req) => this.current(req).target,
      pathRewrite: (_path, req) => this.current(req).spec.path,
      changeOrigin: true,
      xfwd: false, // the caller's spec.headers carry X-Forwarded-*, built from what the router saw
      selfHandleResponse: true,
      agent,
      ejectPlugins: true,
      plugins: [
        (server) => {
          server.on('proxyReq', (proxyReq, req) => this.started(proxyReq, req));
          server.on('proxyRes', (proxyRes, req, res) => this.responded(proxyRes, req, res));
          server.on('error', (err, req, _res, target) => {
            if (req) this.errored(err, req, target);
          });
          // The client left and the upstream request was torn down with it.
          server.on('econnreset', (_err, req) => this.settle(this.attempts.get(req), { kind: 'client_gone' }));
        },
      ],
    });
  }

  /** Runs one attempt. The request headers must already be prepared for the upstream. */
  attempt(req: IncomingMessage, res: ServerResponse, spec: AttemptSpec): Promise<AttemptResult> {
    if (res.destroyed || res.writableEnded) return Promise.resolve({ kind: 'client_gone' });
    return new Promise<AttemptResult>((resolve) => {
      const attempt: Attempt = { spec, target: new URL(spec.endpoint.url), settled: false, resolve };
      this.attempts.set(req, attempt);
      const onClose = (): void => this.fail(attempt, { kind: 'client_gone' });
      res.once('close', onClose);
      attempt.resolve = (result) => {
        res.off('close', onClose);
        resolve(result);
      };
      this.arm(attempt, Math.min(spec.timeouts.firstByteMs, spec.deadline - this.clock.now()), () => this.firstByteTimeout(attempt));
      void this.proxy(req, res, (err) => {
        if (err) this.fail(attempt, { kind: 'failed', reason: 'connect', detail: (err as Error).message });
      });
    });
  }

  private current(req: IncomingMessage): Attempt {
    const attempt = this.attempts.get(req);
    if (!attempt) throw new Error('forwarder: request has no attempt');
    return attempt;
  }

  private firstByteTimeout(attempt: Attempt): void {
    const deadline = this.clock.now() >= attempt.spec.deadline;
    this.fail(attempt, { kind: 'failed', reason: deadline ? 'deadline' : 'first_byte_timeout', detail: deadline ? 'total timeout' : `no response within ${attempt.spec.timeouts.firstByteMs} ms` });
  }

  /** Settles the attempt (once) and tears its upstream request down. */
  private fail(attempt: Attempt, result: AttemptResult): void {
    if (attempt.settled) return;
    attempt.proxyReq?.destroy();
    this.settle(attempt, result);
  }

  private settle(attempt: Attempt | undefined, result: AttemptResult): void {
    if (!attempt || attempt.settled) return;
    attempt.settled = true;
    this.disarm(attempt);
    attempt.resolve(result);
  }

  private arm(attempt: Attempt, ms: number, onTimeout: () => void): void {
    this.disarm(attempt);
    attempt.timer = this.scheduler.setTimeout(onTimeout, Math.max(0, ms));
  }

  private disarm(attempt: Attempt): void {
    if (attempt.timer !== undefined) this.scheduler.clearTimeout(attempt.timer);
    attempt.timer = undefined;
  }

  private started(proxyReq: ClientRequest, req: IncomingMessage): void {
    const attempt = this.attempts.get(req);
    if (!attempt || attempt.settled) {
      proxyReq.destroy();
      return;
    }
    attempt.proxyReq = proxyReq;
    // Exactly the caller's headers: whatever http-proxy copied from the client goes (host stays: changeOrigin set it).
    for (const name of proxyReq.getHeaderNames()) if (name !== 'host') proxyReq.removeHeader(name);
    for (const [name, value] of Object.entries(attempt.spec.headers)) if (value !== undefined) proxyReq.setHeader(name, value);
    const socket = proxyReq.socket;
    if (socket?.connecting) {
      const timer = this.scheduler.setTimeout(
        () => this.fail(attempt, { kind: 'failed', reason: 'connect_timeout', detail: `no connection within ${attempt.spec.timeouts.connectMs} ms` }),
        attempt.spec.timeouts.connectMs,
      );
      socket.once('connect', () => this.scheduler.clearTimeout(timer));
      socket.once('close', () => this.scheduler.clearTimeout(timer));
    }
    proxyReq.setHeader('content-length', attempt.spec.body.length);
    proxyReq.write(attempt.spec.body);
  }

  private errored(err: Error, req: IncomingMessage, target: unknown): void {
    const attempt = this.attempts.get(req);
    // A late error of an earlier attempt (torn down on purpose) carries that attempt's target.
    if (!attempt || attempt.settled || (target !== undefined && target !== attempt.target)) return;
    const code = (err as NodeJS.ErrnoException).code;
    const reused = attempt.proxyReq?.reusedSocket === true;
    const reason: FailureReason = code === 'ECONNREFUSED' || code === 'EHOSTUNREACH' || code === 'ENOTFOUND' ? 'connect' : 'reset';
    this.settle(attempt, { kind: 'failed', reason, detail: `${code ?? err.message}${reused ? ' on a reused connection' : ''}` });
  }

  private responded(proxyRes: IncomingMessage, req: IncomingMessage, res: ServerResponse): void {
    const attempt = this.attempts.get(req);
    if (!attempt || attempt.settled) {
      proxyRes.destroy();
      return;
    }
    const on = ownResponse(proxyRes);
    on('error', () => undefined); // 'close' below decides
    const status = proxyRes.statusCode ?? 502;
    if (status < 200 || status >= 300) this.readError(attempt, proxyRes, status, on);
    else relayResponse(attempt.spec, proxyRes, res, status, on, this.control(attempt), this.clock);
  }

  /** The attempt's timer and settlement, lent to the relay. */
  private control(attempt: Attempt): AttemptControl {
    return {
      arm: (ms, onTimeout) => this.arm(attempt, ms, onTimeout),
      disarm: () => this.disarm(attempt),
      settle: (result) => this.settle(attempt, result),
    };
  }

  private readError(attempt: Attempt, proxyRes: IncomingMessage, status: number, on: OwnListener): void {
    const chunks: Buffer[] = [];
    let size = 0;
    this.arm(attempt, Math.min(attempt.spec.timeouts.idleMs, attempt.spec.deadline - this.clock.now()), () => this.fail(attempt, { kind: 'failed', reason: 'reset', detail: 'error body stalled' }));
    on('data', (chunk: Buffer) => {
      if (size >= MAX_ERROR_BODY_BYTES) return;
      chunks.push(chunk);
      size += chunk.length;
    });
    on('end', () => {
      this.settle(attempt, {
        kind: 'upstream_error',
        status,
        error: normaliseUpstreamError(status, Buffer.concat(chunks).subarray(0, MAX_ERROR_BODY_BYTES)),
        headers: retryHeaders(proxyRes.headers),
        retryAfterMs: retryAfterMs(proxyRes.headers),
      });
    });
    on('close', () => {
      if (!proxyRes.complete) this.settle(attempt, { kind: 'failed', reason: 'reset', detail: 'the connection closed while the error body was read' });
    });
  }
}
