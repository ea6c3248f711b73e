/** Per-request state the handlers fill in and the access log and metrics read when the response closes. */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Principal } from '../auth/key-store.js';
import { type Priority, type RequestTrace, type WireDialect } from '../core/types.js';
import { type DirectorReport } from '../director/director.js';
import { type Route } from '../metrics/metrics.js';
import { type ForwardedFor } from '../proxy/headers.js';

export interface RequestContext {
  requestId: string;
  /** Monotonic ms at arrival. */
  started: number;
  route: Route;
  /** How the route speaks: which error envelope the client gets (Anthropic's on /v1/messages). */
  dialect: WireDialect;
  /** The request path as routed (or the raw target, cut short, when it is not a path). */
  path: string;
  /** What the router saw of the connection (`x-forwarded-*` for engines), and the client's address: the peer, or the right-most untrusted hop behind a trusted proxy. */
  forwarded: ForwardedFor & { client: string };
  closed: boolean;
  principal?: Principal;
  /** The model the client asked for, as it named it: at most {@link MAX_SHOWN_MODEL} characters of it (set with {@link shownModel}). */
  model?: string;
  /** The deployment's label (core/types.ts `deploymentLabel`: `namespace/name` in Kubernetes mode, the config's ID in static mode). */
  deployment?: string;
  priority?: Priority;
  /** Why the request did not end well, as an error code. */
  failure?: string;
  /** The director's report, once the response has ended. */
  report?: DirectorReport;
  /** Aborts when the client leaves before its response finished. */
  abort: AbortController;
  /** Settles when the director has filled in its report. */
  exchange?: Promise<void>;
  /** The request's trace, when tracing is on (an inference request). */
  trace?: RequestTrace;
}

const SAFE_REQUEST_ID = /^[\w.:@-]{1,128}$/;

/** The client's `x-request-id` when it is a reasonable token, else a new one. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && SAFE_REQUEST_ID.test(given) ? given : randomUUID();
}

/**
 * The `x-request-id` the engine gets: the router's own id as it is, a client's with a random suffix
 * (`client-id.1a2b3c4d`, so the engine's log still finds it). vLLM takes the header as its request's
 * id — it aborts by it, and makes the answer's id (a stored response's too) from it —, so two clients
 * sending the same id, or one guessing another's, must not meet in one engine.
 */
export function engineRequestIdOf(req: IncomingMessage, requestId: string): string {
  return req.headers['x-request-id'] === requestId ? `${requestId}.${randomUUID().slice(0, 8)}` : requestId;
}

/** Where a response carries its request's context: a symbol, as the inference routes never pass through express (no `res.locals` there). */
const CONTEXT = Symbol('modelgate.context');

export function contextOf(res: ServerResponse): RequestContext {
  return (res as ServerResponse & { [CONTEXT]: RequestContext })[CONTEXT];
}

export function setContext(res: ServerResponse, ctx: RequestContext): void {
  (res as ServerResponse & { [CONTEXT]: RequestContext })[CONTEXT] = ctx;
}

/** The longest model name the access log and a trace show; a longer one is cut (with `…`), as the error message cuts it. */
export const MAX_SHOWN_MODEL = 200;

/** The model name as the access log and traces show it: one request cannot write a line of megabytes. */
export function shownModel(model: string): string {
  return model.length > MAX_SHOWN_MODEL ? `${model.slice(0, MAX_SHOWN_MODEL)}…` : model;
}
