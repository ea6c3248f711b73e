/** Per-request state the handlers fill in and the access log and metrics read when the response closes. */
import { randomUUID } from 'node:crypto';
import { type Request, type Response } from 'express';
import { type Principal } from '../auth/key-store.js';
import { type Priority } from '../core/types.js';
import { type Route } from '../metrics/metrics.js';
import { type AttemptRecord } from '../proxy/exchange.js';
import { type TokenUsage } from '../proxy/usage.js';

export interface RequestContext {
  requestId: string;
  /** Monotonic ms at arrival. */
  started: number;
  route: Route;
  /** The request path as routed (or the raw target, cut short, when it is not a path). */
  path: string;
  /** The client's address: the peer, or the right-most untrusted hop when the peer is a trusted proxy. */
  client: string;
  closed: boolean;
  principal?: Principal;
  /** The model the client asked for, as it named it. */
  model?: string;
  deployment?: string;
  pool?: string;
  /** The fallback deployment that served the request, if any. */
  fallback?: string;
  priority?: Priority;
  endpoint?: string;
  upstreamStatus?: number;
  failure?: string;
  /** Streams: ms from the request sent upstream to the first content event. */
  ttftMs?: number;
  usage?: TokenUsage;
  /** Body bytes relayed from the engine. */
  bytes?: number;
  /** Every attempt, when there was more than one. */
  attempts?: AttemptRecord[];
  /** Aborts when the client leaves before its response finished. */
  abort: AbortController;
  /** Settles when the forwarded exchange has filled in its report. */
  exchange?: Promise<void>;
}

const SAFE_REQUEST_ID = /^[\w.:@-]{1,128}$/;

/** The client's `x-request-id` when it is a reasonable token, else a new one. */
export function requestIdOf(req: Request): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && SAFE_REQUEST_ID.test(given) ? given : randomUUID();
}

export function contextOf(res: Response): RequestContext {
  return (res.locals as { ctx: RequestContext }).ctx;
}

export function setContext(res: Response, ctx: RequestContext): void {
  (res.locals as { ctx: RequestContext }).ctx = ctx;
}
