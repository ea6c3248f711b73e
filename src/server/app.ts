/**
 * buildApp(deps): the API app (port 8080) and the admin app (port 9090), for main and for tests.
 * The API app opens each request's context (id, child logger, client address), refuses targets that
 * are not plain paths, authenticates, reads the body and hands inference requests to the director
 * (inference.ts). Every error the router answers before the director takes over goes through
 * `sendError` and the one error factory (core/errors.ts).
 *
 * The inference routes (a POST to one of the route table's paths, with no query) are served straight
 * from Node's request listener, by a table of handler chains; everything else goes to express (the
 * model list, limits, 404s and 405s, and inference paths with a query). express's per-request work
 * (its router's walk and `next` closures, `res.locals`, and re-prototyping every request and response
 * so that Node's own HTTP code sees objects of another shape) bought the inference routes nothing, and
 * was about a twentieth of the router's CPU and allocations per request (bench/results/profile.md).
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import typeis from 'type-is';
import { type Logger } from 'pino';
import { API_ROUTES, apiRouteAt, type ApiRoute } from '../api/routes.js';
import { bearerToken, type Principal } from '../auth/key-store.js';
import { AddressRanges } from '../core/address-ranges.js';
import { type Clock } from '../core/clock.js';
import { passed } from '../core/phases.js';
import { type LineSink, type RefusedRequest, type Tracing } from '../core/types.js';
import { RouterError, toErrorResponse, writeErrorAnswer } from '../core/errors.js';
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
  /** The principal owning `key`, presented on `connection` (the request's socket, which may remember it). */
  authenticateOn(key: string, connection: object): Principal | undefined;
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
  /** The catalog has not loaded yet (Kubernetes watches not listed): an unknown model is a 503, not a 404. */
  catalogLoading?: () => boolean;
  director: RequestDirector;
  metrics: RequestMetrics & AdminDeps['metrics'];
  logger: Logger;
  /** The logger's destination, for the access log's hand-rendered lines (none: they go through the logger). */
  logSink?: LineSink;
  /** Request traces (none: tracing is off). */
  tracing?: Tracing;
  /** Hears how each request for a deployment (named by its label, core/types.ts `deploymentLabel`) ended: the goodput counters. */
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
  /** The API's request listener: the inference routes directly, the rest through express. */
  api: RequestListener;
  admin: express.Express;
  /** Requests the API app has received and not yet finished answering. */
  activeRequests(): number;
  /** From now on every response asks the client to close its connection (used while draining). */
  closeConnections(): void;
  /**
   * The grace period is over and the open connections are about to be cut: a request whose response
   * ends unfinished from now on is logged with `failure: "shutdown_cut"` (the router's doing, not the
   * client's `client_gone`).
   */
  cutting(): void;
  /** A request the HTTP parser refused, as the API server answered it: its access-log line and count. */
  refused(request: RefusedRequest): void;
}

/** Every route and its one method, for the 405 answers. */
const ROUTES: Record<string, string> = { ...Object.fromEntries(API_ROUTES.flatMap((r) => r.paths.map((path) => [path, 'POST']))), '/v1/models': 'GET', '/v1/models/*id': 'GET', '/v1/limits': 'GET' };
const ROUTE_LIST = `${API_ROUTES.flatMap((r) => r.paths.map((path) => `POST ${path}`)).join(', ')}, GET /v1/models, GET /v1/models/{model} and GET /v1/limits`;

/** The metrics label of a route that is not an inference API's (an unknown path speaks OpenAI's errors). */
function otherRoute(path: string, origin: boolean): Route {
  if (!origin) return 'other';
  // `/v1/models/{model}` (a model's ID may hold slashes) is the same route as the list
  return path === '/v1/models' || (path.startsWith('/v1/models/') && path.length > '/v1/models/'.length) ? 'models' : path === '/v1/limits' ? 'limits' : 'other';
}

/** A request as the handler chains see it: Node's, with the body once it has been read. */
export type ChainRequest = IncomingMessage & { body?: unknown };
/** One handler of a chain: calls `next()` to go on, `next(err)`, throws or rejects to end it with an error. */
export type ChainHandler = (req: ChainRequest, res: ServerResponse, next: (err?: unknown) => void) => unknown;

/** Whether the request has a body of one of `types` (type-is, as express's `req.is`); the usual JSON request without parsing its header. */
function bodyIs(req: IncomingMessage, types: string[]): boolean {
  const declared = req.headers['content-type'];
  if (declared === 'application/json' && types[0] === 'application/json') return typeis.hasBody(req);
  return typeof typeis(req, types) === 'string';
}

function sendError(res: ServerResponse, err: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const ctx = contextOf(res);
  const answer = toErrorResponse(err, ctx?.dialect);
  if (ctx) ctx.failure ??= err instanceof RouterError ? err.failure : 'internal_error';
  writeErrorAnswer(res, answer, ctx?.requestId);
}

/** Errors raised by express's body reader (http-errors with a 4xx status), in our codes. */
function bodyReaderError(err: { type?: string; status?: number; message?: string; code?: string }): RouterError | undefined {
  if (err.type === 'entity.too.large' || err.status === 413) return bodyTooLarge();
  if (err.type === 'encoding.unsupported' || err.type === 'charset.unsupported' || err.status === 415) {
    return new RouterError('UNSUPPORTED_MEDIA_TYPE', err.message ?? 'Unsupported body encoding.');
  }
  if (err.code?.startsWith('Z_')) return new RouterError('INVALID_REQUEST', `The request body could not be decompressed (${err.message ?? err.code}).`);
  // express's router decoding a path parameter such as `/v1/models/%zz`
  if (err instanceof URIError) return new RouterError('INVALID_REQUEST', 'The request path has a malformed percent-encoding.');
  if (typeof err.status === 'number' && err.status >= 400 && err.status < 500) {
    return err.type === 'request.aborted' || err.type === 'request.size.invalid' ? bodyTruncated() : new RouterError('INVALID_REQUEST', 'The request body could not be read.');
  }
  return undefined;
}

/**
 * Runs `chain` as express runs a route's handlers: each calls `next()` to go on; a handler that throws,
 * returns a rejected promise or calls `next(err)` ends the chain with `fail(err)`.
 */
function runChain(chain: readonly ChainHandler[], req: ChainRequest, res: ServerResponse, fail: (err: unknown) => void): void {
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
  let cut = false;
  const authenticate: ChainHandler = (req, res, next) => {
    // Anthropic's clients send their key as x-api-key; the Messages API takes either
    const anthropic = contextOf(res).dialect === 'anthropic';
    const apiKey = anthropic ? req.headers['x-api-key'] : undefined;
    const key = bearerToken(req.headers.authorization) ?? (typeof apiKey === 'string' && apiKey !== '' ? apiKey : undefined);
    if (!key) throw new RouterError('INVALID_API_KEY', `Missing API key: send it as "Authorization: Bearer <key>"${anthropic ? ' or "x-api-key: <key>"' : ''}.`);
    const principal = deps.keys.authenticateOn(key, req.socket);
    if (!principal) throw new RouterError('INVALID_API_KEY', 'Incorrect API key provided.');
    contextOf(res).principal = principal;
    passed(res, 'authenticated');
    next();
  };

  // An inference request's trace starts once its key is known (dated from its arrival), a child of the
  // client's traceparent if it sent one: a client without a valid key cannot have spans exported (its
  // sampled flag past tracing.sampleRatio) nor leave its trace id as an exemplar.
  const tracing = deps.tracing;
  const startTrace: ChainHandler | undefined =
    tracing &&
    ((req, res, next) => {
      const ctx = contextOf(res);
      ctx.trace = tracing.start(ctx.route, req.headers, deps.clock.now() - ctx.started, req.method);
      next();
    });

  const requireJson: ChainHandler = (req, _res, next) => {
    if (!bodyIs(req, ['application/json', '+json'])) {
      throw new RouterError('UNSUPPORTED_MEDIA_TYPE', 'Send the request body as JSON with "Content-Type: application/json".');
    }
    next();
  };
  const requireForm: ChainHandler = (req, _res, next) => {
    if (!bodyIs(req, ['multipart/form-data'])) {
      throw new RouterError('UNSUPPORTED_MEDIA_TYPE', 'Send the request body as a form with "Content-Type: multipart/form-data".');
    }
    next();
  };

  const readJson = bodyReader(deps.maxBodyBytes);
  const readUpload = bodyReader(deps.maxUploadBytes);
  const inference = {
    maxJsonDepth: deps.maxJsonDepth,
    catalog: deps.catalog,
    director: deps.director,
    priorityHeader,
    ...(deps.limits ? { limits: deps.limits } : {}),
    ...(deps.catalogLoading ? { catalogLoading: deps.catalogLoading } : {}),
  };
  // The inference routes, POST only: served from this table by the request listener (below), and by
  // express's first middleware for the same paths with a query.
  const inferenceChains = new Map<string, { api: ApiRoute; chain: readonly ChainHandler[] }>();
  for (const api of API_ROUTES) {
    const reads = api.body === 'multipart' ? [requireForm, readUpload] : [requireJson, readJson];
    const chain = [authenticate, ...(startTrace ? [startTrace] : []), ...reads, inferenceHandler(inference, api)];
    for (const path of api.paths) inferenceChains.set(path, { api, chain });
  }
  const handleError = (err: unknown, res: ServerResponse): void => {
    const fromBody = !(err instanceof RouterError) && typeof err === 'object' && err !== null ? bodyReaderError(err) : undefined;
    if (!(err instanceof RouterError) && !fromBody) deps.logger.error({ requestId: contextOf(res)?.requestId, err }, 'unexpected error');
    sendError(res, fromBody ?? err);
  };

  /** Opens the request's context: its id, route (`api`: the inference API at that path), client, the access log line when it closes. */
  const open = (req: IncomingMessage, res: ServerResponse, path: string, origin: boolean, api: ApiRoute | undefined): RequestContext => {
    const ctx: RequestContext = {
      requestId: requestIdOf(req),
      started: deps.clock.now(),
      route: api ? api.name : otherRoute(path, origin),
      // a path under the Messages API's that is no route (`/v1/messages/count_tokens`) is refused in Anthropic's envelope, which its SDK reads
      dialect: api ? api.dialect : origin && path.startsWith('/v1/messages/') ? 'anthropic' : 'openai',
      // an inference route's path is the one forwarded; any other is only shown, at most 200 characters of it
      path: origin && api ? path : (origin ? path : (req.url ?? '')).slice(0, 200),
      forwarded: forwardedFor(req, trustedProxies),
      closed: false,
      abort: new AbortController(),
    };
    setContext(res, ctx);
    passed(res, 'received');
    // An inference response carries its id in the head it is written with (the relay, the director's
    // and sendError's answers): a header set ahead makes Node's writeHead set every header of the
    // head one at a time, validated and stored, instead of writing them as given.
    if (!api) {
      res.setHeader('x-request-id', ctx.requestId);
      // an Anthropic client (its SDK sends `anthropic-version` on every call) listing models reads the id from `request-id` too
      if (req.headers['anthropic-version'] !== undefined) res.setHeader('request-id', ctx.requestId);
    }
    // Anthropic's clients read the id from `request-id` (the Messages API's own header): set ahead, so
    // every answer on the route has it, the engine's, the relay's and the errors' alike
    else if (api.dialect === 'anthropic') res.setHeader('request-id', ctx.requestId);
    if (draining) res.setHeader('connection', 'close');
    active += 1;
    res.once('close', () => {
      const closedAt = deps.clock.now();
      ctx.closed = true;
      if (!res.writableFinished) ctx.abort.abort();
      const cutHere = cut && !res.writableFinished;
      // The director's report (endpoint, attempts, tokens, TTFT) lands just after the response closes.
      const log = (): void => {
        active -= 1;
        if (cutHere) ctx.failure = 'shutdown_cut';
        accessLog.record(req, res, ctx, closedAt);
      };
      if (ctx.exchange) void ctx.exchange.finally(log);
      else log();
    });
    return ctx;
  };
  const fail = (res: ServerResponse) => (err: unknown) => handleError(err, res);

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  // The path checked is the path forwarded: `/V1/CHAT/COMPLETIONS` or a trailing slash is not a route.
  app.set('case sensitive routing', true);
  app.set('strict routing', true);
  app.use((req: Request, res: Response, next: NextFunction) => {
    const origin = req.url.startsWith('/') && !req.url.startsWith('//');
    const ctx = open(req, res, origin ? req.path : '', origin, origin ? apiRouteAt(req.path) : undefined);
    // Only origin-form targets (`/v1/…`) are routes: an absolute-form or `//` target is a 404, never forwarded.
    if (!origin) throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${ctx.path}. Send requests to a path such as /v1/chat/completions.`);
    const inferenceRoute = req.method === 'POST' ? inferenceChains.get(ctx.path) : undefined;
    if (inferenceRoute) runChain(inferenceRoute.chain, req, res, fail(res));
    else next();
  });

  app.get('/v1/models', authenticate, listModels(deps.catalog));
  app.get('/v1/models/*id', authenticate, retrieveModel(deps.catalog));
  app.get('/v1/limits', authenticate, getLimits(deps.limits));
  for (const [path, method] of Object.entries(ROUTES)) {
    app.all(path, (req: Request) => {
      throw new RouterError('METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}; use ${method}.`);
    });
  }
  app.use((req: Request) => {
    const path = req.path.length > 200 ? `${req.path.slice(0, 200)}…` : req.path;
    throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${path}. modelgate serves ${ROUTE_LIST}.`);
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => handleError(err, res));

  // An inference request: straight to its chain. The same request with a query, or anything else, goes through express.
  const api: RequestListener = (req, res) => {
    const inferenceRoute = req.method === 'POST' && req.url !== undefined ? inferenceChains.get(req.url) : undefined;
    if (!inferenceRoute) return void app(req, res);
    open(req, res, req.url as string, true, inferenceRoute.api);
    runChain(inferenceRoute.chain, req, res, fail(res));
  };

  return {
    api,
    admin: buildAdminApp({ readiness: deps.readiness, metrics: deps.metrics, ...(status ? { status } : {}) }),
    activeRequests: () => active,
    closeConnections: () => {
      draining = true;
    },
    cutting: () => {
      cut = true;
    },
    refused: (request) => accessLog.refused(request),
  };
}
