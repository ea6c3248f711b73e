/**
 * One access-log line and the request metrics per request, written once its response has closed.
 *
 * The line is rendered here, member by member, and written to the logger's destination as pino would
 * write it (`{"level":30,"time":…,"service":"modelgate","requestId":…,…,"msg":"request"}`): it is the
 * one line every request writes, and pino's general serialisation of an object with twenty optional
 * members was a tenth of the router's allocations per request. Without the logger's destination
 * (a logger not made by `createLogger`) the same members go through `logger.info`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Logger } from 'pino';
import { type LineSink, type RefusedRequest } from '../core/types.js';
import { type Finished } from '../metrics/goodput.js';
import { type Route } from '../metrics/metrics.js';
import { type RequestContext } from './context.js';

export interface RequestMetrics {
  /** `traceId`: the request's trace when it is sampled (the duration bucket's exemplar). */
  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number, traceId?: string): void;
}

const tenths = (ms: number): number => Math.round(ms * 10) / 10;

/**
 * The answer did not reach its end: the response was cut, the router ended a stream the engine broke,
 * went silent in or ran past the deadline with its error event, or the engine ended it with its own
 * (a response that finished, but an answer cut short).
 */
function incomplete(res: ServerResponse, ctx: RequestContext): boolean {
  const end = ctx.report?.end;
  return !res.writableFinished || end === 'upstream_broken' || end === 'idle_timeout' || end === 'deadline' || end === 'shutdown' || ctx.report?.engineError !== undefined;
}
/** Why the request did not end well (the router's, or its exchange's); undefined when it did. */
const failureOf = (ctx: RequestContext): string | undefined => ctx.failure ?? ctx.report?.failure;
/** The client left, or stopped reading and was cut: the client's doing, not the server's. */
const clientEnded = (failure: string | undefined): boolean => failure === 'client_gone' || failure === 'client_stalled';
const str = (name: string, value: string | undefined): string => (value === undefined ? '' : `,"${name}":${JSON.stringify(value)}`);
const num = (name: string, value: number | undefined): string => (value === undefined ? '' : `,"${name}":${Number.isFinite(value) ? value : 'null'}`);

/**
 * The official SDKs' retry count of a request that is one of their retries (`x-stainless-retry-count`,
 * which the OpenAI and Anthropic SDKs send on every call, 0 on its first request): the operator tells
 * an SDK's retries of one call from new calls. A value that is not a small whole number is no count.
 */
function clientRetry(req: IncomingMessage): number | undefined {
  const raw = req.headers['x-stainless-retry-count'];
  if (typeof raw !== 'string' || raw.length > 2) return undefined;
  const count = Number(raw);
  return Number.isInteger(count) && count > 0 ? count : undefined;
}

/** The line's members after `requestId`, each with its leading comma. Members without a value are left out. */
function members(req: IncomingMessage, res: ServerResponse, ctx: RequestContext, status: number, ms: number): string {
  const report = ctx.report;
  const usage = report?.usage;
  return (
    str('key', ctx.principal?.name) +
    str('client', ctx.forwarded.client) +
    str('method', req.method) +
    str('path', ctx.path) +
    num('status', status) +
    str('model', ctx.model) +
    num('durationMs', tenths(ms)) +
    str('deployment', ctx.deployment) +
    str('pool', report?.poolName) +
    str('fallback', report?.fallback) +
    str('priority', ctx.priority === 'standard' ? undefined : ctx.priority) +
    str('endpoint', report?.endpoint) +
    num('upstreamStatus', report?.upstreamStatus) +
    (report && report.attempts.length > 1 ? `,"attempts":${JSON.stringify(report.attempts)}` : '') +
    num('clientRetry', clientRetry(req)) +
    num('ttftMs', report?.ttftMs === undefined ? undefined : tenths(report.ttftMs)) +
    num('promptTokens', usage?.estimated ? undefined : usage?.promptTokens) +
    num('completionTokens', usage?.completionTokens) +
    (usage?.estimated === undefined ? '' : `,"tokensEstimated":${usage.estimated}`) +
    num('bytes', report?.bytes) +
    str('failure', failureOf(ctx)) +
    (incomplete(res, ctx) ? ',"incomplete":true' : '')
  );
}

/** The GenAI semantic conventions' operation names of the APIs (others keep the API's name). */
const GEN_AI_OPERATIONS: Record<string, string> = { chat: 'chat', messages: 'chat', responses: 'chat', completions: 'text_completion', embeddings: 'embeddings' };

/** `gen_ai.operation.name` of a request on `route` (an API's name): what its span is named by, with the model. */
export function genAiOperation(route: string): string {
  return GEN_AI_OPERATIONS[route] ?? route;
}

/** Ends the request's span with what the request came to (no prompt or completion text, ever). */
function endTrace(ctx: RequestContext, status: number): void {
  const report = ctx.report;
  const usage = report?.usage;
  const failure = failureOf(ctx);
  // a server span's error is the server's: a 5xx, or an answer begun and cut short by the engine or
  // the router; a 4xx (the client's mistake, a limit) or a client that left or stopped reading leaves
  // its status unset, as OpenTelemetry's HTTP conventions say, so trace error rates are not the clients'
  const error = status >= 500 || (status < 400 && failure !== undefined && !clientEnded(failure)) ? (failure ?? `status ${status}`) : undefined;
  ctx.trace?.end(
    {
      'gen_ai.operation.name': genAiOperation(ctx.route),
      // the serving software, as the pool names it (vllm, sglang, …): the conventions' provider, for a self-hosted model
      'gen_ai.provider.name': report?.engine,
      'gen_ai.request.model': ctx.model,
      // only an answer the engine began has a model that produced it (not a 503 held, nor attempts that all failed)
      'gen_ai.response.model': report?.end !== undefined ? report.servedModel : undefined,
      'gen_ai.usage.input_tokens': usage && !usage.estimated ? usage.promptTokens : undefined,
      'gen_ai.usage.output_tokens': usage?.completionTokens,
      'http.response.status_code': status,
      'modelgate.deployment': ctx.deployment,
      'modelgate.pool': report?.poolName,
      'modelgate.endpoint': report?.endpoint,
      'modelgate.attempts': report?.attempts.length,
      'modelgate.ttft_ms': report?.ttftMs,
      'error.type': error === undefined ? undefined : (failure ?? String(status)),
    },
    error,
  );
}

export class AccessLog {
  /**
   * `sink`: the logger's destination (wiring/logger.ts `lineSinkOf`); without it lines go through
   * `logger.info`. `finished`: hears how each request for a deployment ended (the goodput counters).
   */
  constructor(
    private readonly logger: Logger,
    private readonly metrics: RequestMetrics,
    private readonly sink?: LineSink,
    private readonly finished?: (deployment: string, done: Finished) => void,
  ) {}

  record(req: IncomingMessage, res: ServerResponse, ctx: RequestContext, closedAt: number): void {
    const status = res.headersSent ? res.statusCode : 499; // 499: the client left before an answer
    const ms = closedAt - ctx.started;
    const trace = ctx.trace;
    this.metrics.recordRequest(ctx.route, ctx.deployment ?? '', ctx.report?.poolName ?? '', status, ms / 1000, trace?.sampled ? trace.traceId : undefined);
    if (this.finished && ctx.deployment !== undefined) {
      const report = ctx.report;
      const done = {
        status,
        incomplete: incomplete(res, ctx),
        clientEnded: clientEnded(failureOf(ctx)),
        durationMs: ms,
        // what the client waited for its first token: from its arrival (the queue, a replica held for, retries)
        ...(report?.ttftMs === undefined ? {} : { ttftMs: report.firstTokenAt !== undefined ? report.firstTokenAt - ctx.started : report.ttftMs }),
        ...(report?.usage ? { completionTokens: report.usage.completionTokens } : {}),
      };
      this.finished(ctx.deployment, done);
    }
    if (ctx.trace) endTrace(ctx, status);
    if (!this.logger.isLevelEnabled('info')) return;
    // only a sampled trace exists at the collector: an unsampled one's id would lead nowhere
    const rest = (ctx.trace?.sampled ? str('traceId', ctx.trace.traceId) : '') + members(req, res, ctx, status, ms);
    this.line(ctx.requestId, rest);
  }

  /**
   * A request Node's HTTP parser refused (or that ran out of time), answered by the API server: counted
   * as route `other` and logged like any request, with the peer's address as its client and the
   * answer's error code as its failure (it has no key, path or model the router could read).
   */
  refused(request: RefusedRequest): void {
    this.metrics.recordRequest('other', '', '', request.status, 0);
    if (!this.logger.isLevelEnabled('info')) return;
    this.line(request.requestId, str('client', request.client) + num('status', request.status) + str('failure', request.code));
  }

  private line(requestId: string, rest: string): void {
    const { sink } = this;
    if (sink) {
      sink.write(`{"level":30,"time":${Date.now()},${sink.bindings},"requestId":${JSON.stringify(requestId)}${rest},"msg":"request"}\n`);
    } else {
      this.logger.info(JSON.parse(`{"requestId":${JSON.stringify(requestId)}${rest}}`) as object, 'request');
    }
  }
}
