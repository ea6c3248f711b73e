/**
 * Forwards one exchange to one endpoint. http-proxy-middleware carries the request leg (target per
 * exchange, keep-alive agent, header copy, the client's disconnect aborting the upstream request);
 * the response leg is ours (`selfHandleResponse`): 2xx bodies and SSE streams pass through chunk by
 * chunk as they arrive, with backpressure; non-2xx bodies are normalised into the OpenAI envelope.
 */
import { type Agent, type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { createProxyMiddleware, type RequestHandler } from 'http-proxy-middleware';
import { RouterError, toErrorResponse, type ErrorEnvelope } from '../core/errors.js';
import { type Endpoint } from '../core/types.js';
import { clientResponseHeaders, retryHeaders } from './headers.js';
import { MAX_ERROR_BODY_BYTES, normaliseUpstreamError } from './upstream-errors.js';

export interface Exchange {
  endpoint: Endpoint;
  /** The body to send upstream. */
  body: Buffer;
  requestId: string;
  /** Called once, when the client's response has closed (finished or not). */
  onClose: (outcome: ExchangeOutcome) => void;
}

export interface ExchangeOutcome {
  /** Status the engine answered with, if it answered. */
  upstreamStatus: number | undefined;
  /** Status the client got (0 if nothing was sent). */
  status: number;
  /** The client's response did not finish: the client left, or the stream broke. */
  incomplete: boolean;
  /** Why the exchange failed, as an error code, if it did. */
  failure: string | undefined;
  /** Body bytes relayed from the engine. */
  bytes: number;
}

type Phase = 'connecting' | 'responding' | 'failed';

interface State {
  exchange: Exchange;
  phase: Phase;
  upstreamStatus: number | undefined;
  failure: string | undefined;
  bytes: number;
}

const STREAM_BROKEN = JSON.stringify({
  error: { message: 'The model server closed the stream before it finished.', type: 'server_error', param: null, code: 'upstream_stream_broken' },
} satisfies ErrorEnvelope);

function writeJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function isEventStream(contentType: string | undefined): boolean {
  return contentType?.toLowerCase().startsWith('text/event-stream') ?? false;
}

export class Forwarder {
  private readonly states = new WeakMap<IncomingMessage, State>();
  private readonly proxy: RequestHandler;

  constructor(agent: Agent) {
    this.proxy = createProxyMiddleware({
      router: (req) => this.state(req).exchange.endpoint.url,
      changeOrigin: true,
      xfwd: true,
      selfHandleResponse: true,
      agent,
      ejectPlugins: true,
      plugins: [
        (server) => {
          server.on('proxyReq', (proxyReq, req) => this.writeBody(proxyReq, req));
          server.on('proxyRes', (proxyRes, req, res) => this.relay(proxyRes, req, res));
          server.on('error', (err, req, res) => {
            if (req && res && 'writeHead' in res) this.connectFailed(err, req, res);
          });
          // The client left and the upstream request was torn down with it: nothing to answer.
          server.on('econnreset', () => undefined);
        },
      ],
    });
  }

  /** Starts the exchange. The request headers must already be prepared for the upstream. */
  forward(req: IncomingMessage, res: ServerResponse, exchange: Exchange): void {
    const state: State = { exchange, phase: 'connecting', upstreamStatus: undefined, failure: undefined, bytes: 0 };
    this.states.set(req, state);
    res.once('close', () =>
      exchange.onClose({
        upstreamStatus: state.upstreamStatus,
        status: res.headersSent ? res.statusCode : 0,
        incomplete: !res.writableFinished,
        failure: state.failure,
        bytes: state.bytes,
      }),
    );
    void this.proxy(req, res, (err) => {
      if (err) this.connectFailed(err as Error, req, res);
    });
  }

  private state(req: IncomingMessage): State {
    const state = this.states.get(req);
    if (!state) throw new Error('forwarder: request has no exchange');
    return state;
  }

  private writeBody(proxyReq: ClientRequest, req: IncomingMessage): void {
    const { body } = this.state(req).exchange;
    proxyReq.setHeader('content-length', body.length);
    proxyReq.write(body);
  }

  private connectFailed(err: Error, req: IncomingMessage, res: ServerResponse): void {
    const state = this.states.get(req);
    if (!state || state.phase !== 'connecting') return;
    state.phase = 'failed';
    state.failure = 'upstream_connection_failed';
    const code = (err as NodeJS.ErrnoException).code;
    const failure = new RouterError('UPSTREAM_CONNECTION_FAILED', `The model server could not be reached${code ? ` (${code})` : ''}.`, { cause: err });
    const { status, headers, body } = toErrorResponse(failure);
    writeJson(res, status, body, headers);
  }

  private relay(proxyRes: IncomingMessage, req: IncomingMessage, res: ServerResponse): void {
    const state = this.state(req);
    state.phase = 'responding';
    const status = proxyRes.statusCode ?? 502;
    state.upstreamStatus = status;
    if (res.destroyed || res.writableEnded) {
      proxyRes.destroy();
      return;
    }
    if (status < 200 || status >= 300) {
      this.relayError(proxyRes, status, state, res);
      return;
    }
    res.writeHead(status, clientResponseHeaders(proxyRes.headers, state.exchange.requestId));
    const stream = isEventStream(proxyRes.headers['content-type']);
    if (stream) res.flushHeaders();
    proxyRes.on('data', (chunk: Buffer) => {
      state.bytes += chunk.length;
      if (!res.write(chunk)) {
        proxyRes.pause();
        res.once('drain', () => proxyRes.resume());
      }
    });
    proxyRes.on('end', () => {
      if (!res.writableEnded) res.end();
    });
    // Registered before http-proxy's own listener, which destroys the client response: a broken
    // stream first gets a final error event, so the client can tell it from a finished answer.
    proxyRes.once('error', () => {
      state.failure = 'upstream_stream_broken';
      if (stream && !res.writableEnded && !res.destroyed) res.end(`data: ${STREAM_BROKEN}\n\ndata: [DONE]\n\n`);
    });
  }

  private relayError(proxyRes: IncomingMessage, status: number, state: State, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    let size = 0;
    proxyRes.on('data', (chunk: Buffer) => {
      if (size >= MAX_ERROR_BODY_BYTES) return;
      chunks.push(chunk);
      size += chunk.length;
    });
    proxyRes.once('end', () => {
      const normalised = normaliseUpstreamError(status, Buffer.concat(chunks).subarray(0, MAX_ERROR_BODY_BYTES));
      state.failure = normalised.envelope.error.code ?? `upstream_${status}`;
      writeJson(res, normalised.status, normalised.envelope, { ...retryHeaders(proxyRes.headers), 'x-request-id': state.exchange.requestId });
    });
    proxyRes.once('error', () => {
      state.failure = 'upstream_connection_failed';
      const { status: code, headers, body } = toErrorResponse(new RouterError('UPSTREAM_CONNECTION_FAILED', 'The model server failed while answering.'));
      writeJson(res, code, body, headers);
    });
  }
}
