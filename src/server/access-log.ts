/** One access-log line and the request metrics per request, written once its response has closed. */
import { type Request, type Response } from 'express';
import { type Route } from '../metrics/metrics.js';
import { type RequestContext } from './context.js';

export interface RequestMetrics {
  recordRequest(route: Route, deployment: string, pool: string, code: number, seconds: number): void;
}

const tenths = (ms: number | undefined): number | undefined => (ms === undefined ? undefined : Math.round(ms * 10) / 10);

export function recordRequest(metrics: RequestMetrics, req: Request, res: Response, ctx: RequestContext, closedAt: number): void {
  const status = res.headersSent ? res.statusCode : 499; // 499: the client left before an answer
  const ms = closedAt - ctx.started;
  const report = ctx.report;
  metrics.recordRequest(ctx.route, ctx.deployment ?? '', report?.poolName ?? '', status, ms / 1000);
  ctx.log.info(
    {
      key: ctx.principal?.name,
      client: ctx.forwarded.client,
      method: req.method,
      path: ctx.path,
      status,
      model: ctx.model,
      durationMs: tenths(ms),
      deployment: ctx.deployment,
      pool: report?.poolName,
      fallback: report?.fallback,
      priority: ctx.priority === 'standard' ? undefined : ctx.priority,
      endpoint: report?.endpoint,
      upstreamStatus: report?.upstreamStatus,
      attempts: report && report.attempts.length > 1 ? report.attempts : undefined,
      ttftMs: tenths(report?.ttftMs),
      promptTokens: report?.usage?.estimated ? undefined : report?.usage?.promptTokens,
      completionTokens: report?.usage?.completionTokens,
      tokensEstimated: report?.usage?.estimated,
      bytes: report?.bytes,
      failure: ctx.failure ?? report?.failure,
      incomplete: !res.writableFinished || undefined,
    },
    'request',
  );
}
