/**
 * buildApp(deps): the API app (port 8080) and the admin app (port 9090), for main and for tests.
 * Every step of the data path sets an error code where it fails; `sendError` is the one place that
 * turns errors into a status and the OpenAI envelope.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { type Logger } from 'pino';
import { bearerToken, mayUse, type Principal } from '../auth/key-store.js';
import { type InferenceKind, type ValidRequest, validateRequest } from '../api/validate.js';
import { pickWeighted } from '../balancer/weighted.js';
import { type Clock } from '../core/clock.js';
import { RouterError, toErrorResponse } from '../core/errors.js';
import { chatPromptText } from '../api/prompt-text.js';
import { PRIORITIES, type Deployment, type EndpointSource, type PoolSpec, type Priority } from '../core/types.js';
import { type RouterMetrics, type Route } from '../metrics/metrics.js';
import { type ExchangeRunner, type RouteStep } from '../proxy/exchange.js';
import { DEFAULT_FORWARDED_HEADERS, upstreamHeaders } from '../proxy/headers.js';
import { AddressRanges } from '../core/address-ranges.js';
import { forwardedFor } from './forwarded.js';
import { jsonDepthExceeds } from '../api/json-depth.js';
import { upstreamBody } from '../proxy/body-patch.js';
import { type ModelCatalog } from '../registry/registry.js';
import { bodyReader, bodyTooLarge, bodyTruncated } from './body.js';
import { contextOf, requestIdOf, setContext, type RequestContext } from './context.js';

export interface Authenticator {
  authenticate(key: string): Principal | undefined;
}

/** Reasons the router is not ready; empty when ready. */
export type ReadinessCheck = () => string[];

export interface AppDeps {
  maxBodyBytes: number;
  maxJsonDepth: number;
  keys: Authenticator;
  catalog: () => ModelCatalog;
  endpoints: EndpointSource;
  exchange: ExchangeRunner;
  metrics: RouterMetrics;
  logger: Logger;
  clock: Clock;
  readiness: ReadinessCheck;
  /** The header that may lower a request's priority class (config `priority.header`). */
  priorityHeader?: string;
  /** Seconds a client should wait when a model has no ready replica. */
  noReplicaRetryAfterSeconds?: number;
  /** `server.clientStallTimeoutMs`: a client that accepts no bytes this long is cut. */
  clientStallTimeoutMs?: number;
  /** `server.trustedProxies`: whose `x-forwarded-*` are believed. */
  trustedProxies?: readonly string[];
  /** `server.forwardHeaders`: client headers forwarded on top of the default allow-list. */
  forwardHeaders?: readonly string[];
  random?: () => number;
}

const ROUTES = { '/v1/chat/completions': 'POST', '/v1/embeddings': 'POST', '/v1/models': 'GET', '/v1/models/*id': 'GET' } as const;
/** The path each inference kind is forwarded to. No query parameter is forwarded: none of these routes takes one. */
const UPSTREAM_PATHS: Record<InferenceKind, string> = { chat: '/v1/chat/completions', embeddings: '/v1/embeddings' };
const ROUTE_LABELS: Record<string, Route> = { '/v1/chat/completions': 'chat', '/v1/embeddings': 'embeddings', '/v1/models': 'models' };

function sendError(res: Response, err: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const { status, headers, body } = toErrorResponse(err);
  const ctx = contextOf(res);
  if (ctx && !ctx.failure) ctx.failure = body.error.code ?? 'error';
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
 * For a streamed chat request whose client did not ask for usage: the `stream_options` that asks the
 * engine for it anyway (so tokens are counted). The usage chunk is then removed from what the client
 * gets. `extra_body` is honoured, as the engine would see it.
 */
function streamUsageOverride(body: ValidRequest): Map<string, string> | undefined {
  const extra = body.extra_body ?? undefined;
  const stream = extra && 'stream' in extra ? extra.stream : body.stream;
  if (stream !== true) return undefined;
  const options = extra && 'stream_options' in extra ? extra.stream_options : body.stream_options;
  const current = typeof options === 'object' && options !== null && !Array.isArray(options) ? (options as Record<string, unknown>) : {};
  if (current.include_usage === true) return undefined;
  return new Map([['stream_options', JSON.stringify({ ...current, include_usage: true })]]);
}

/** One answer for a model that does not exist and one the key may not use, so hidden models cannot be enumerated. */
function modelNotFound(model: string): RouterError {
  return new RouterError('MODEL_NOT_FOUND', `The model \`${model.slice(0, 200)}\` does not exist or you do not have access to it.`, { param: 'model' });
}

function supports(pool: PoolSpec, kind: InferenceKind): boolean {
  return pool.capabilities.includes(kind);
}

/** The request's class: its key's, or lower when the priority header asks for lower (never higher). */
function requestPriority(keyPriority: Priority, header: string | string[] | undefined, headerName: string): Priority {
  if (header === undefined) return keyPriority;
  const asked = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase() ?? '';
  if (!(PRIORITIES as readonly string[]).includes(asked)) {
    throw new RouterError('INVALID_REQUEST', `The ${headerName} header must be one of ${PRIORITIES.join(', ')} (got "${asked.slice(0, 40)}").`, { param: headerName });
  }
  return PRIORITIES.indexOf(asked as Priority) > PRIORITIES.indexOf(keyPriority) ? (asked as Priority) : keyPriority;
}

export interface BuiltApp {
  api: express.Express;
  admin: express.Express;
  /** Requests the API app has received and not yet finished answering. */
  activeRequests(): number;
  /** From now on every response asks the client to close its connection (used while draining). */
  closeConnections(): void;
}

export function buildApp(deps: AppDeps): BuiltApp {
  const random = deps.random ?? Math.random;
  const retryAfter = deps.noReplicaRetryAfterSeconds ?? 2;
  const priorityHeader = (deps.priorityHeader ?? 'x-modelgate-priority').toLowerCase();
  const clientStallMs = deps.clientStallTimeoutMs ?? 30_000;
  const trustedProxies = new AddressRanges(deps.trustedProxies ?? []);
  const forwardedHeaders = [...DEFAULT_FORWARDED_HEADERS, ...(deps.forwardHeaders ?? []), priorityHeader];
  let active = 0;
  let draining = false;
  const api = express();
  api.disable('x-powered-by');
  api.set('etag', false);
  // The path checked is the path forwarded: `/V1/CHAT/COMPLETIONS` or a trailing slash is not a route.
  api.set('case sensitive routing', true);
  api.set('strict routing', true);

  api.use((req: Request, res: Response, next: NextFunction) => {
    const origin = req.url.startsWith('/') && !req.url.startsWith('//');
    const ctx: RequestContext = {
      requestId: requestIdOf(req),
      started: deps.clock.now(),
      route: (origin ? ROUTE_LABELS[req.path] : undefined) ?? 'other',
      path: origin ? req.path : req.url.slice(0, 200),
      client: forwardedFor(req, trustedProxies).client,
      closed: false,
      abort: new AbortController(),
    };
    setContext(res, ctx);
    res.setHeader('x-request-id', ctx.requestId);
    if (draining) res.setHeader('connection', 'close');
    active += 1;
    res.once('close', () => {
      const closedAt = deps.clock.now();
      ctx.closed = true;
      if (!res.writableFinished) ctx.abort.abort();
      // The exchange's report (endpoint, attempts, tokens, TTFT) lands just after the response closes.
      void (ctx.exchange ?? Promise.resolve()).finally(() => {
        active -= 1;
        record(req, res, ctx, closedAt);
      });
    });
    next();
  });

  /** One access-log line and the request metrics, once the response has closed and the exchange reported. */
  function record(req: Request, res: Response, ctx: RequestContext, closedAt: number): void {
    const incomplete = !res.writableFinished;
    const status = res.headersSent ? res.statusCode : 499; // 499: the client left before an answer
    const ms = closedAt - ctx.started;
    deps.metrics.recordRequest(ctx.route, ctx.deployment ?? '', ctx.pool ?? '', status, ms / 1000);
    deps.logger.info(
      {
        requestId: ctx.requestId,
        key: ctx.principal?.name,
        client: ctx.client,
        method: req.method,
        path: ctx.path,
        status,
        model: ctx.model,
        durationMs: Math.round(ms * 10) / 10,
        deployment: ctx.deployment,
        pool: ctx.pool,
        fallback: ctx.fallback,
        priority: ctx.priority === 'standard' ? undefined : ctx.priority,
        endpoint: ctx.endpoint,
        upstreamStatus: ctx.upstreamStatus,
        attempts: ctx.attempts,
        ttftMs: ctx.ttftMs === undefined ? undefined : Math.round(ctx.ttftMs * 10) / 10,
        promptTokens: ctx.usage?.estimated ? undefined : ctx.usage?.promptTokens,
        completionTokens: ctx.usage?.completionTokens,
        tokensEstimated: ctx.usage?.estimated,
        bytes: ctx.bytes,
        failure: ctx.failure,
        incomplete: incomplete || undefined,
      },
      'request',
    );
  }

  /** Only origin-form targets (`/v1/…`) are routes: an absolute-form or `//` target is a 404, never forwarded. */
  api.use((req: Request, _res: Response, next: NextFunction) => {
    if (!req.url.startsWith('/') || req.url.startsWith('//')) {
      throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${req.url.slice(0, 200)}. Send requests to a path such as /v1/chat/completions.`);
    }
    next();
  });

  const authenticate = (req: Request, res: Response, next: NextFunction): void => {
    const key = bearerToken(req.headers.authorization);
    if (!key) throw new RouterError('INVALID_API_KEY', 'Missing API key: send it as "Authorization: Bearer <key>".');
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

  const readBody = bodyReader(deps.maxBodyBytes);

  const inference = (kind: InferenceKind) => (req: Request, res: Response): Promise<void> | undefined => {
    const ctx = contextOf(res);
    const raw = req.body as Buffer;
    const text = raw.toString('utf8');
    if (jsonDepthExceeds(text, deps.maxJsonDepth)) {
      throw new RouterError('INVALID_REQUEST', `The request body nests JSON deeper than ${deps.maxJsonDepth} levels.`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new RouterError('INVALID_JSON', `The request body is not valid JSON: ${(err as Error).message}`);
    }
    const body = validateRequest(kind, parsed);
    ctx.model = body.model;
    const catalog = deps.catalog();
    const deployment = catalog.resolve(body.model);
    if (!deployment) throw modelNotFound(body.model);
    ctx.deployment = deployment.id;
    if (!mayUse(ctx.principal as Principal, deployment)) {
      ctx.failure = 'model_not_allowed'; // the operator's log says why; the client learns nothing of the model
      throw modelNotFound(body.model);
    }
    const priority = requestPriority((ctx.principal as Principal).priority, req.headers[priorityHeader], priorityHeader);
    ctx.priority = priority;
    const pools = routeOf(catalog, deployment, kind, body.model);
    const first = pools[0] as { pool: PoolSpec; deployment: string };
    ctx.pool = first.pool.name;
    if (first.deployment !== deployment.id) {
      // none of the deployment's own pools had a ready replica: the route starts at a fallback
      ctx.fallback = first.deployment;
      deps.metrics.recordFallback(deployment.id, '', first.deployment, first.pool.name);
    }
    if (ctx.closed) return; // the client left while the body was read
    const usage = kind === 'chat' ? streamUsageOverride(body) : undefined;
    const forwarded = forwardedFor(req, trustedProxies);
    const route: RouteStep[] = pools.map((step) => {
      const patched = upstreamBody(text, step.pool.servedModelName, body.model, usage);
      const allowed = new Set([...forwardedHeaders, step.pool.routing.session.header.toLowerCase()]);
      return {
        ...step,
        body: patched === text ? raw : Buffer.from(patched, 'utf8'),
        headers: upstreamHeaders(req.headers, allowed, { requestId: ctx.requestId, forwarded, backendKey: step.pool.backendKey }),
      };
    });
    let labels = { deployment: deployment.id, pool: first.pool.name };
    const headers = req.headers;
    ctx.exchange = deps.exchange
      .run(req, res, {
        route,
        request: {
          priority,
          ...(kind === 'chat' ? { promptText: () => chatPromptText(body) } : {}),
          header: (name) => {
            const value = headers[name.toLowerCase()];
            return Array.isArray(value) ? value[0] : value;
          },
        },
        requestId: ctx.requestId,
        path: UPSTREAM_PATHS[kind],
        clientStallMs,
        signal: ctx.abort.signal,
        stripUsageChunk: usage !== undefined,
        onInterToken: (ms) => deps.metrics.recordInterToken(labels, ms / 1000),
      })
      .then((report) => {
        if (report.pool) {
          ctx.pool = report.pool.name;
          labels = { deployment: deployment.id, pool: report.pool.name };
        }
        ctx.fallback = report.fallback ?? ctx.fallback;
        ctx.endpoint = report.endpoint;
        ctx.upstreamStatus = report.upstreamStatus;
        ctx.attempts = report.attempts.length > 1 ? report.attempts : undefined;
        ctx.failure ??= report.failure;
        ctx.ttftMs = report.ttftMs;
        ctx.usage = report.usage;
        ctx.bytes = report.bytes;
        if (report.end) deps.metrics.recordResponseEnd(labels, report.end);
        if (report.ttftMs !== undefined) deps.metrics.recordTimeToFirstToken(labels, report.ttftMs / 1000);
        if (report.usage) deps.metrics.recordTokens(labels, report.usage.estimated ? 0 : report.usage.promptTokens, report.usage.completionTokens);
      });
    return ctx.exchange;
  };

  /** The deployment's pools that serve `kind` and have a ready endpoint: one chosen by target weight first, then the rest by weight. */
  function poolsOf(catalog: ModelCatalog, deployment: Deployment, kind: InferenceKind): { wrongKind: boolean; ready: PoolSpec[] } {
    const known = deployment.targets
      .map((target) => ({ weight: target.weight, pool: catalog.pool(target.pool) }))
      .filter((t): t is { weight: number; pool: PoolSpec } => t.pool !== undefined);
    const capable = known.filter((t) => supports(t.pool, kind));
    const ready = capable.filter((t) => t.weight > 0 && deps.endpoints.snapshot(t.pool.name).length > 0);
    const chosen = pickWeighted(ready, random);
    const rest = ready.filter((t) => t !== chosen).sort((a, b) => b.weight - a.weight);
    return { wrongKind: known.length > 0 && capable.length === 0, ready: [...(chosen ? [chosen] : []), ...rest].map((t) => t.pool) };
  }

  /**
   * The pools a request may go to, in order: the deployment's own (see poolsOf), then each fallback
   * deployment's. A fallback is part of the deployment's definition, so the key's model list is not
   * consulted for it; fallbacks of a fallback are not followed.
   */
  function routeOf(catalog: ModelCatalog, deployment: Deployment, kind: InferenceKind, asked: string): Array<{ pool: PoolSpec; deployment: string }> {
    const own = poolsOf(catalog, deployment, kind);
    if (own.wrongKind) {
      const serves = kind === 'chat' ? 'embeddings' : 'chat completions';
      throw new RouterError('MODEL_CAPABILITY_MISMATCH', `The model \`${asked}\` does not serve ${kind === 'chat' ? 'chat completions' : 'embeddings'}; it serves ${serves}.`, { param: 'model' });
    }
    const route = own.ready.map((pool) => ({ pool, deployment: deployment.id }));
    for (const id of deployment.fallbacks) {
      const fallback = catalog.resolve(id);
      if (!fallback || fallback.id !== id || fallback === deployment) continue;
      for (const pool of poolsOf(catalog, fallback, kind).ready) if (!route.some((r) => r.pool === pool)) route.push({ pool, deployment: fallback.id });
    }
    // No target pool exists (yet, or any more), or none has a ready replica: both are "try later".
    if (route.length === 0) {
      throw new RouterError('NO_READY_REPLICA', `The model \`${asked}\` has no ready replica right now; retry shortly.`, { retryAfterSeconds: retryAfter });
    }
    return route;
  }

  api.post('/v1/chat/completions', authenticate, requireJson, readBody, inference('chat'));
  api.post('/v1/embeddings', authenticate, requireJson, readBody, inference('embeddings'));
  /** Every name the caller's key may use, as OpenAI model objects. */
  const modelsOf = (res: Response): Array<{ id: string; object: 'model'; created: number; owned_by: string }> => {
    const ctx = contextOf(res);
    const catalog = deps.catalog();
    return catalog
      .deployments()
      .filter((d) => mayUse(ctx.principal as Principal, d))
      .flatMap((d) => catalog.namesOf(d).map((id) => ({ id, object: 'model' as const, created: d.created, owned_by: 'modelgate' })));
  };
  api.get('/v1/models', authenticate, (_req: Request, res: Response) => {
    res.json({ object: 'list', data: modelsOf(res) });
  });
  // `client.models.retrieve(id)`: ids may hold a slash (`meta-llama/Llama-3.1-8B`), sent encoded or not.
  api.get('/v1/models/*id', authenticate, (req: Request, res: Response) => {
    const id = ([] as string[]).concat(req.params.id ?? []).join('/');
    const model = modelsOf(res).find((m) => m.id === id);
    if (!model) throw modelNotFound(id);
    contextOf(res).model = id;
    res.json(model);
  });
  for (const [path, method] of Object.entries(ROUTES)) {
    api.all(path, (req: Request) => {
      throw new RouterError('METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}; use ${method}.`);
    });
  }
  api.use((req: Request) => {
    throw new RouterError('ROUTE_NOT_FOUND', `Unknown route ${req.method} ${req.path}. modelgate serves POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models and GET /v1/models/{model}.`);
  });
  api.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const fromBody = !(err instanceof RouterError) && typeof err === 'object' && err !== null ? bodyReaderError(err) : undefined;
    if (!(err instanceof RouterError) && !fromBody) deps.logger.error({ err, requestId: contextOf(res)?.requestId }, 'unexpected error');
    sendError(res, fromBody ?? err);
  });

  const admin = express();
  admin.disable('x-powered-by');
  admin.set('etag', false);
  admin.get('/livez', (_req: Request, res: Response) => {
    res.json({ status: 'ok' });
  });
  admin.get('/readyz', (_req: Request, res: Response) => {
    const reasons = deps.readiness();
    res.status(reasons.length === 0 ? 200 : 503).json(reasons.length === 0 ? { status: 'ready' } : { status: 'not ready', reasons });
  });
  admin.get('/metrics', async (_req: Request, res: Response) => {
    res.setHeader('content-type', deps.metrics.contentType);
    res.end(await deps.metrics.metrics());
  });
  return {
    api,
    admin,
    activeRequests: () => active,
    closeConnections: () => {
      draining = true;
    },
  };
}
