/** The HTTP servers' lifecycle: listening (a failure is a config error naming the field) and closing. */
import http, { expectsContinue } from '../core/node-http.js';
import type { IncomingMessage, RequestListener, Server, ServerResponse } from 'node:http';
import { systemSleep } from '../core/clock.js';
import { RouterError, toErrorResponse, writeErrorAnswer } from '../core/errors.js';
import { type ServerConfig } from '../config/schema.js';
import { type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ConfigError } from '../config/load.js';
import { type RefusedRequest } from '../core/types.js';
import { randomUUID } from 'node:crypto';

/** Why a listen failed, as a config error naming the field (`server` or `admin`). */
/** `field`: the port's field (`server.port`); an address that is not this machine's is its host's (`server.host`). */
function listenError(err: NodeJS.ErrnoException, field: string, host: string, port: number): ConfigError {
  const where = `${host}:${port}`;
  const why =
    err.code === 'EADDRINUSE'
      ? `${where} is already in use (another process, or the other of server.port and admin.port)`
      : err.code === 'EACCES'
        ? `permission denied to listen on ${where} (ports below 1024 need privileges)`
        : err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND'
          ? `${host} is not an address of this machine`
          : `cannot listen on ${where} (${err.code ?? err.message})`;
  return new ConfigError(why, err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND' ? field.replace(/\.port$/, '.host') : field);
}

export function listen(server: Server, port: number, host: string, field: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => reject(listenError(err, field, host, port));
    server.once('error', failed);
    server.listen(port, host, () => {
      server.off('error', failed);
      const address = server.address() as AddressInfo;
      const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${address.port}`);
    });
  });
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

/**
 * The API server. Slowloris guards: a client gets headersTimeoutMs to send its headers and
 * requestTimeoutMs for its whole request. Node enforces both only when it checks, every
 * connectionsCheckingInterval (30 s by default), so the check runs at least as often as the headers
 * timeout.
 */
/** `refused`: hears each request the HTTP parser refused and the server answered (its access-log line, its count). */
export function createApiServer(server: ServerConfig, handler: RequestListener, refused?: (request: RefusedRequest) => void): Server {
  // An HTTP/1.1 request without `Host` (RFC 9112 3.2): Node's own check answered it 400 with an empty
  // body and no request id, and nothing logged or counted it. Answered here in the envelope instead.
  const serve: RequestListener = (req, res) => {
    if (req.headers.host === undefined && req.httpVersionMinor === 1 && req.httpVersionMajor === 1)
      return void refuse(req, res, new RouterError('INVALID_REQUEST', 'An HTTP/1.1 request needs a Host header.'), refused);
    handler(req, res);
  };
  const api = http.createServer(
    {
      requireHostHeader: false,
      noDelay: true,
      keepAlive: true,
      headersTimeout: server.headersTimeoutMs,
      requestTimeout: server.requestTimeoutMs,
      keepAliveTimeout: server.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1_000, server.headersTimeoutMs),
    },
    serve,
  );
  api.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket, refused));
  // `Expect: 100-continue`: Node's own listener sends `100 Continue` at once, before the request is
  // looked at, so a client without a valid key, or with a body too large or of the wrong type, sent
  // its whole body to be refused. This one hands the request over as it is; the body reader sends
  // `100 Continue` when it starts to read (core/node-http.ts `expectsContinue`), and an answer before it
  // (401, 404, 413, 415) goes out without one, the connection closed (Node's rule: the body never came).
  api.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    expectsContinue.add(req);
    serve(req, res);
  });
  // CONNECT: Node hands the socket to a `connect` listener, and without one closes it unanswered and
  // unlogged. The router is no proxy: a 405 in OpenAI's envelope, the access log's line, the connection closed.
  api.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    answerOnSocket(new RouterError('METHOD_NOT_ALLOWED', 'CONNECT is not allowed: modelgate is not a proxy. Send requests to a path such as /v1/chat/completions.'), socket, refused);
  });
  api.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    refuse(req, res, new RouterError('EXPECTATION_FAILED', 'The router supports only "Expect: 100-continue".'), refused);
  });
  return api;
}

/** A request the server refuses before the router sees it: its answer in the envelope with a fresh id, the access log's line, the connection closed. */
function refuse(req: IncomingMessage, res: ServerResponse, error: RouterError, refused?: (request: RefusedRequest) => void): void {
  const answer = toErrorResponse(error);
  const requestId = randomUUID();
  res.shouldKeepAlive = false;
  writeErrorAnswer(res, answer, requestId);
  const client = req.socket.remoteAddress;
  refused?.({ requestId, status: answer.status, code: answer.body.error.code ?? 'invalid_request', ...(client ? { client } : {}) });
}

/** A request Node's HTTP parser refused, or that ran out of time, as the router's error. */
function clientErrorOf(err: NodeJS.ErrnoException): RouterError {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new RouterError('REQUEST_HEADER_TOO_LARGE', 'The request headers are larger than the router accepts (16 KiB).');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new RouterError('REQUEST_TIMEOUT', 'The request was not received in time (server.headersTimeoutMs for its headers, server.requestTimeoutMs for all of it).');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new RouterError('REQUEST_TOO_LARGE', 'The request body has chunk extensions larger than the router accepts.');
    default:
      return new RouterError('INVALID_REQUEST', `The request is not valid HTTP/1.1 (${err.code ?? 'unparsable'}); the connection is closed.`);
  }
}

/**
 * Node's `clientError` (a request it could not parse, or one that ran out of time): answered in
 * OpenAI's envelope with an `x-request-id`, and the connection closed, as Node's default answers with
 * an empty body; `refused` hears it (the access log's line). Nothing
 * is written when the socket cannot take it, or when a response on that connection has already
 * started (a pipelined request's error while an earlier answer streams): its bytes would corrupt that
 * answer, so the connection is only closed, as Node's own handler does. That check reads the socket's
 * current response (`_httpMessage`, what Node's handler reads itself): test/wiring/client-errors.test.ts pins it.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, refused?: (request: RefusedRequest) => void): void {
  if (err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  answerOnSocket(clientErrorOf(err), socket, refused);
}

/**
 * `error` written on the raw socket, the connection closed after it (see {@link answerClientError});
 * only closed when the socket cannot take it or a response on it has started.
 */
function answerOnSocket(error: RouterError, socket: Duplex, refused?: (request: RefusedRequest) => void): void {
  const current = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (!socket.writable || (current !== undefined && current !== null && current.headersSent)) {
    socket.destroy();
    return;
  }
  const answer = toErrorResponse(error);
  const body = JSON.stringify(answer.body);
  // a fresh id: whatever x-request-id the client sent is in headers the parser did not finish
  const requestId = randomUUID();
  // closed once written, as Node's own handler does: a client that keeps its side open holds nothing
  socket.once('finish', () => socket.destroy());
  socket.end(
    `HTTP/1.1 ${answer.status} ${http.STATUS_CODES[answer.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
  );
  const client = (socket as Duplex & { remoteAddress?: string }).remoteAddress;
  refused?.({ requestId, status: answer.status, code: answer.body.error.code ?? 'invalid_request', ...(client ? { client } : {}) });
}

/** Longest wait, after the grace period, for the requests it cut to write their access-log lines. */
const CUT_SETTLE_MS = 2_000;

/**
 * Stops taking connections (idle keep-alive ones close now), gives the requests still open up to
 * `gracePeriodMs` to finish, then ends those it can end with an answer and waits for them (at most
 * {@link CUT_SETTLE_MS}): `refuseWaiting` answers the requests still waiting for a replica (503, rather
 * than a connection cut with no answer: a client retries a 503, not always a reset), `endInFlight` ends
 * the requests still at an engine (one whose engine has not answered a 503, a stream its error event:
 * an SDK then reports why, instead of a network error or an answer that merely stops). Then it cuts
 * what is left (`beforeCut` hears it first) and waits for their access-log lines. Once `hurried`
 * aborts, the grace period is over at once. Resolves with how many requests were answered 503 in the
 * queues, how many others ended so, and how many were cut.
 */
export async function drain(
  server: Server,
  active: () => number,
  gracePeriodMs: number,
  hooks: { refuseWaiting?: () => number; endInFlight?: () => void; beforeCut?: () => void; hurried?: AbortSignal } = {},
): Promise<{ cut: number; refused: number; ended: number }> {
  const closed = closeServer(server);
  const deadline = performance.now() + gracePeriodMs;
  while (active() > 0 && performance.now() < deadline && hooks.hurried?.aborted !== true) await systemSleep(20);
  const open = active();
  const refused = open > 0 ? (hooks.refuseWaiting?.() ?? 0) : 0;
  if (open > 0) hooks.endInFlight?.();
  // those answers are written now (an error answer, a stream's last event: a moment): each is counted out when written
  const answered = performance.now() + CUT_SETTLE_MS;
  while (open > 0 && active() > 0 && performance.now() < answered) await systemSleep(5);
  const ended = Math.max(0, open - refused - active());
  const cut = active();
  if (cut > 0) hooks.beforeCut?.();
  server.closeAllConnections();
  // the requests just cut end now: each is counted out once its exchange has settled and its
  // access-log line is written (a moment), before the caller flushes the log and exits
  const written = performance.now() + CUT_SETTLE_MS;
  while (active() > 0 && performance.now() < written) await systemSleep(20);
  await closed;
  return { cut, refused, ended };
}
