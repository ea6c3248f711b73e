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
import { type LineSink } from '../core/types.js';
import { type Finished } from '../metrics/goodput.js';
import { type Route } from '../metrics/metrics.js';
import { type RequestContext } from './context.js';

export interface RequestMetrics {
  /** `traceId`: the request's trace when it is sampled (the duration bucket's exemplar). */
  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number, traceId?: string): void;
}

const tenths = (ms: number): number => Math.round(ms * 10) / 10;
/** Whether a JSON string must escape something in `text` (every surrogate counts, so that JSON.stringify judges pairs and lone ones). */
function needsEscape(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return true;
  }
  return false;
}

/**
 * A line's members as parts, joined once: one flat string, without the intermediate strings of
 * concatenating member after member (they were most of the access log's allocations per request).
 * `member` is the member's `,"name":` prefix.
 */
class Parts {
  readonly parts: string[] = [];

  str(member: string, value: string | undefined): void {
    if (value === undefined) return;
    if (needsEscape(value)) this.parts.push(member, JSON.stringify(value));
    else this.parts.push(member, '"', value, '"');
  }

  num(member: string, value: number | undefined): void {
    if (value !== undefined) this.parts.push(member, Number.isFinite(value) ? String(value) : 'null');
  }

  raw(text: string): void {
    this.parts.push(text);
  }
}

/** The line's members after `requestId`, each with its leading comma. Members without a value are left out. */
function members(line: Parts, req: IncomingMessage, res: ServerResponse, ctx: RequestContext, status: number, ms: number): void {
  const report = ctx.report;
  const usage = report?.usage;
  line.str(',"key":', ctx.principal?.name);
  line.str(',"client":', ctx.forwarded.client);
  line.str(',"method":', req.method);
  line.str(',"path":', ctx.path);
  line.num(',"status":', status);
  line.str(',"model":', ctx.model);
  line.num(',"durationMs":', tenths(ms));
  line.str(',"deployment":', ctx.deployment);
  line.str(',"pool":', report?.poolName);
  line.str(',"fallback":', report?.fallback);
  line.str(',"priority":', ctx.priority === 'standard' ? undefined : ctx.priority);
  line.str(',"endpoint":', report?.endpoint);
  line.num(',"upstreamStatus":', report?.upstreamStatus);
  if (report && report.attempts.length > 1) line.raw(`,"attempts":${JSON.stringify(report.attempts)}`);
  line.num(',"ttftMs":', report?.ttftMs === undefined ? undefined : tenths(report.ttftMs));
  line.num(',"promptTokens":', usage?.estimated ? undefined : usage?.promptTokens);
  line.num(',"completionTokens":', usage?.completionTokens);
  if (usage?.estimated !== undefined) line.raw(`,"tokensEstimated":${usage.estimated}`);
  line.num(',"bytes":', report?.bytes);
  line.str(',"failure":', ctx.failure ?? report?.failure);
  if (!res.writableFinished) line.raw(',"incomplete":true');
}

/** The GenAI semantic conventions' operation names of the APIs (others keep the API's name). */
const GEN_AI_OPERATIONS: Record<string, string> = { chat: 'chat', messages: 'chat', responses: 'chat', completions: 'text_completion', embeddings: 'embeddings' };

/** Ends the request's span with what the request came to (no prompt or completion text, ever). */
function endTrace(ctx: RequestContext, status: number): void {
  const report = ctx.report;
  const usage = report?.usage;
  const failure = ctx.failure ?? report?.failure;
  ctx.trace?.end(
    {
      'gen_ai.operation.name': GEN_AI_OPERATIONS[ctx.route] ?? ctx.route,
      'gen_ai.request.model': ctx.model,
      'gen_ai.response.model': report?.servedModel,
      'gen_ai.usage.input_tokens': usage && !usage.estimated ? usage.promptTokens : undefined,
      'gen_ai.usage.output_tokens': usage?.completionTokens,
      'http.response.status_code': status,
      'modelgate.deployment': ctx.deployment,
      'modelgate.pool': report?.poolName,
      'modelgate.endpoint': report?.endpoint,
      'modelgate.attempts': report?.attempts.length,
      'modelgate.ttft_ms': report?.ttftMs,
    },
    status >= 500 || failure !== undefined ? (failure ?? `status ${status}`) : undefined,
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
        incomplete: !res.writableFinished,
        durationMs: ms,
        ...(report?.ttftMs === undefined ? {} : { ttftMs: report.ttftMs }),
        ...(report?.usage ? { completionTokens: report.usage.completionTokens } : {}),
      };
      this.finished(ctx.deployment, done);
    }
    if (ctx.trace) endTrace(ctx, status);
    if (!this.logger.isLevelEnabled('info')) return;
    const { sink } = this;
    const line = new Parts();
    if (sink) line.raw(`{"level":30,"time":${Date.now()},${sink.bindings}`);
    line.str(sink ? ',"requestId":' : '{"requestId":', ctx.requestId);
    if (ctx.trace) line.str(',"traceId":', ctx.trace.traceId);
    members(line, req, res, ctx, status, ms);
    if (sink) {
      line.raw(',"msg":"request"}\n');
      sink.destination.write(line.parts.join(''));
    } else {
      line.raw('}');
      this.logger.info(JSON.parse(line.parts.join('')) as object, 'request');
    }
  }
}
