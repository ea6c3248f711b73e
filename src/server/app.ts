/**
 * buildApp(deps): the API app (port 8080) and the admin app (port 9090), for main and for tests.
 * The API app's middleware opens each request's context (id, child logger, client address), refuses
 * targets that are not plain paths, authenticates, reads the body and hands inference requests to
 * the director (inference.ts). Every error the router answers before the director takes over goes
 * through `sendError` and the one error factory (core/errors.ts).
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { type Logger } from 'pino';
import { API_ROUTES, apiRouteAt } from '../api/routes.js';
import { bearerToken, type Principal } from '../auth/key-store.js';
import { AddressRanges } from '../core/address-ranges.js';
import { type Clock } from '../core/clock.js';
import { type LineSink, type Tracing, type WireDialect } from '../core/types.js';
import { RouterError, toErrorResponse } from '../core/errors.js';
import { type RequestDirector } from '../director/director.js';
import { type Finished } from '../metrics/goodput.js';
import { type Route } from '../metrics/metrics.js';
import { type ModelCatalog } from '../registry/registry.js';
import { AccessLog, type RequestMetrics } from './access-log.js';
import { buildAdminApp, type AdminDeps, type ReadinessCheck } from './admin.js';
import { bodyReader, bodyTooLarge, bodyTruncated } from './body.js';
import { contextOf, requestIdOf, setContext, type RequestContext } from './context.js';
import { forwardedFor } from './forwarded.js';
import { inferenceHandler, type RequestLimits } from './inference.js';
import { getLimits, type LimitsView } from './limits.js';
import { listModels, retrieveModel } from './models.js';

export type { ReadinessCheck };

export interface Authenticator {
  authenticate(key: string): Principal | undefined;
}

export interface AppDeps {
  maxBodyBytes: number;
  /** Largest multipart upload (the audio routes). */
  maxUploadBytes: number;
  maxJsonDepth: number;
  keys: Authenticator;
  /** Per-key limits; absent: no key is limited. */
  limits?: RequestLimits & LimitsView;
  catalog: () => ModelCatalog;
  director: RequestDirector;
  metrics: RequestMetrics & AdminDeps['metrics'];
  logger: Logger;
  /** The logger's destination, for the access log's hand-rendered lines (none: they go through the logger). */
  logSink?: LineSink;
  /** Request traces (none: tracing is off). */
  tracing?: Tracing;
  /** Hears how each request for a deployment ended (the goodput counters). */
  onFinished?: (deployment: string, done: Finished) => void;
  clock: Clock;
  readiness: ReadinessCheck;
  /** The header that may lower a request's priority class (config `priority.header`). */
  priorityHeader: string;
  /** `server.trustedProxies`: whose `x-forwarded-*` are believed. */
  trustedProxies: readonly string[];
  /** The status page (admin `/status`, `/status.json`): its snapshot, and `recordRequest` fed every finished request as the metrics are. */
  status?: NonNullable<AdminDeps['status']> & RequestMetrics;
}

export interface BuiltApp {
  api: express.Express;
  admin: express.Express;
  /** Requests the API app has received and not yet finished answering. */
  activeRequests(): number;
  /** From now on every response asks the client to close its connection (used while draining). */
  closeConnections(): void;
}

/** Every route and its one method, for the 405 answers. */
const ROUTES: Record<string, string> = { ...Object.fromEntries(API_ROUTES.flatMap((r) => r.paths.map((path) => [path, 'POST']))), '/v1/models': 'GET', '/v1/models/*id': 'GET', '/v1/limits': 'GET' };
const ROUTE_LIST = `${API_ROUTES.flatMap((r) => r.paths.map((path) => `POST ${path}`)).join(', ')}, GET /v1/models, GET /v1/models/{model} and GET /v1/limits`;

/** The metrics label and the wire dialect of the route at `path` (an unknown path speaks OpenAI's). */
function routeOf(path: string): { route: Route; dialect: WireDialect } {
  const api = apiRouteAt(path);
  return api ? { route: api.name, dialect: api.dialect } : { route: path === '/v1/models' ? 'models' : path === '/v1/limits' ? 'limits' : 'other', dialect: 'openai' };
}

function sendError(res: Response, err: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const ctx = contextOf(res);
  const { status, headers, body } = toErrorResponse(err, ctx?.dialect);
  if (ctx) ctx.failure ??= err instanceof RouterError ? err.failure : 'internal_error';
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Errors raised by express's body reader (http-errors with a 4xx status), in our codes. */
function bodyReaderError(err: { type?: string; status?: number; message?: string; code?: string }): RouterError | undefined {
  if (err.type === 'entity.too.large' || err.status === 413) return bodyTooLarge();
  if (err.type === 'encoding.unsupported' || err.type === 'charset.unsupported' || err.status === 415) {
    return new RouterError('UNSUPPORTED_MEDIA_TYPE', err.message ?? 'Unsupported body encoding.');
  }
  if (err.code?.startsWith('Z_')) return new RouterError('INVALID_REQUEST', `The request body could not be decompressed (${err.message ?? err.code}).`);
  if (typeof err.status === 'number' && err.status >= 400 && err.status < 500) {
    return err.type === 'request.aborted' || err.type === 'request.size.invalid' ? bodyTruncated() : new RouterError('INVALID_REQUEST', 'The request body could not be read.');
  }
  return undefined;
}

/**
 * Runs `chain` as express runs a route's handlers: each calls `next()` to go on; a handler that throws,
 * returns a rejected promise or calls `next(err)` ends the chain with `fail(err)`.
 */
function runChain(chain: readonly RequestHandler[], req: Request, res: Response, fail: (err: unknown) => void): void {
  let at = 0;
  const next = (err?: unknown): void => {
    if (err !== undefined && err !== null) return fail(err);
    const handler = chain[at++];
    if (!handler) return;
    try {
      const result: unknown = handler(req, res, next);
      if (result instanceof Promise) result.then(undefined, fail);
    } catch (thrown) {
      fail(thrown);
    }
  };
  next();
}

export function buildApp(deps: AppDeps): BuiltApp {
  const priorityHeader = deps.priorityHeader.toLowerCase();
  const trustedProxies = new AddressRanges(deps.trustedProxies);
  const { status } = deps;
  const recorder: RequestMetrics = status
    ? {
        recordRequest: (...args) => {
          deps.metrics.recordRequest(...args);
          status.recordRequest(...args);
        },
      }
    : deps.metrics;
  const accessLog = new AccessLog(deps.logger, recorder, deps.logSink, deps.onFinished);
  let active = 0;
  let draining = false;
  const api = express();
  api.disable('x-powered-by');
  api.set('etag', false);
  // The path checked is the path forwarded: `/V1/CHAT/COMPLETIONS` or a trailing slash is not a route.
  api.set('case sensitive routing', true);
  api.set('strict routing', true);

  const authenticate = (req: Request, res: Response, next: NextFunction): void => {
    // Anthropic's clients send their key as x-api-key; the Messages API takes either
    const anthropic = contextOf(res).dialect === 'anthropic';
    const apiKey = anthropic ? req.headers['x-api-key'] : undefined;
    const key = bearerToken(req.headers.authorization) ?? (typeof apiKey === 'string' && apiKey !== '' ? apiKey : undefined);
    if (!key) throw new RouterError('INVALID_API_KEY', `Missing API key: send it as "Authorization: Bearer <key>"${anthropic ? ' or "x-api-key: <key>"' : ''}.`);
    const principal = deps.keys.authenticate(key);
    if (!principal) throw new RouterError('INVALID_API_KEY', 'Incorrect API key provided.');
    contextOf(res).principal = principal;
    next();
  };

  const requireJson = (req: Request, _res: Response, next: NextFunction): void => {
    if (!req.is(['application/json', '+json'])) {
      throw new RouterError('UNSUPPORTED_MEDIA_TYPE', 'Send the request body as JSON with "Content-Type: application/json".');
    }
    next();
  };
  const requireForm = (req: Request, _res: Response, next: NextFunction): void => {
    if (!req.is('multipart/form-data')) {
      throw new RouterError('UNSUPPORTED_MEDIA_TYPE', 'Send the request body as a form with "Content-Type: multipart/form-data".');
    }
    next();
  };

  const readJson = bodyReader(deps.maxBodyBytes);
  const readUpload = bodyReader(deps.maxUploadBytes);
  const inference = { maxJsonDepth: deps.maxJsonDepth, catalog: deps.catalog, director: deps.director, priorityHeader, ...(deps.limits ? { limits: deps.limits } : {}) };
  // The inference routes, POST only: served from this table by the first middleware, without a walk
  // through express's router (its per-request path matching was a twentieth of the router's CPU).
  const inferenceChains = new Map<string, readonly RequestHandler[]>();
  for (const route of API_ROUTES) {
    const reads = route.body === 'multipart' ? [requireForm, readUpload] : [requireJson, readJson];
    for (const path of route.paths) inferenceChains.set(path, [authenticate, ...reads, inferenceHandler(inference, route)]);
  }
  const handleError = (err: unknown, _req: Request, res: Response): void => {
    const fromBody = !(err instanceof RouterError) && typeof err === 'object' && err !== null ? bodyReaderError(err) : undefined;
    if (!(err instanceof RouterError) && !fromBody) deps.logger.error({ requestId: contextOf(res)?.requestId, err }, 'unexpected error');
    sendError(res, fromBody ?? err);
  };

  api.use((req: Request, res: Response, next: NextFunction) => {
    const origin = req.url.startsWith('/') && !req.url.startsWith('//');
    const requestId = requestIdOf(req);
    const ctx: RequestContext = {
      requestId,
      started: deps.clock.now(),
      ...(origin ? routeOf(req.path) : { route: 'other', dialect: 'openai' }),
      path: origin ? req.path : req.url.slice(0, 200),
      forwarded: forwardedFor(req, trustedProxies),
      closed: false,
      abort: new AbortController(),
    };
    setContext(res, ctx);
    // an inference request's trace starts here, a child of the client's traceparent if it sent one
    if (deps.tracing && origin && apiRouteAt(ctx.path)) ctx.trace = deps.tracing.start(ctx.route, req.headers, 0);
    res.setHeader('x-request-id', ctx.requestId);
    if (draining) res.setHeader('connection', 'close');
    active += 1;
    res.once('close', () => {
      const closedAt = deps.clock.now();
      ctx.closed = true;
      if (!res.writableFinished) ctx.abort.abort();
      // The director's report (endpoint, attempts, tokens, TTFT) lands just after the response closes.
      void (ctx.exchange ?? Promise.resolve()).finally(() => {
        active -= 1;
        accessLog.record(req, res, ctx, closedAt);
      });
    });
    // Only origin-form targets (`/v1/…`) are routes: an absolute-form or `//` target is a 404, never forwarded.
    if (!origin) throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${ctx.path}. Send requests to a path such as /v1/chat/completions.`);
    const chain = req.method === 'POST' ? inferenceChains.get(ctx.path) : undefined;
    if (chain) runChain(chain, req, res, (err) => handleError(err, req, res));
    else next();
  });

  api.get('/v1/models', authenticate, listModels(deps.catalog));
  api.get('/v1/models/*id', authenticate, retrieveModel(deps.catalog));
  api.get('/v1/limits', authenticate, getLimits(deps.limits));
  for (const [path, method] of Object.entries(ROUTES)) {
    api.all(path, (req: Request) => {
      throw new RouterError('METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}; use ${method}.`);
    });
  }
  api.use((req: Request) => {
    throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${req.path}. modelgate serves ${ROUTE_LIST}.`);
  });
  api.use((err: unknown, req: Request, res: Response, _next: NextFunction) => handleError(err, req, res));

  return {
    api,
    admin: buildAdminApp({ readiness: deps.readiness, metrics: deps.metrics, ...(status ? { status } : {}) }),
    activeRequests: () => active,
    closeConnections: () => {
      draining = true;
    },
  };
}
