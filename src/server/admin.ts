/**
 * The admin app (port 9090): liveness, readiness, the Prometheus exposition (OpenMetrics to a scraper
 * that asks for it, as Prometheus does, the classic text format otherwise) and the status page
 * (`/status`, HTML, and `/status.json`, its JSON twin). Nothing secret.
 */
import express, { type Request, type Response } from 'express';
import { OPENMETRICS_CONTENT_TYPE, prefersOpenMetrics } from '../metrics/openmetrics.js';
import { type StatusSnapshot } from './status.js';
import { renderStatusPage, STATUS_PAGE_CSP } from './status-page.js';

/** Reasons the router is not ready; empty when ready. */
export type ReadinessCheck = () => string[];

export interface AdminDeps {
  readiness: ReadinessCheck;
  /** The classic text format; with `openMetrics`, OpenMetrics (exemplars included) to a scraper that prefers it. */
  metrics: { contentType: string; metrics(): Promise<string>; openMetrics?(): Promise<string> };
  /** The fleet's state for the status page; absent: no `/status` routes. */
  status?: { snapshot(): StatusSnapshot };
}

export function buildAdminApp(deps: AdminDeps): express.Express {
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
  admin.get('/metrics', async (req: Request, res: Response) => {
    const { metrics } = deps;
    res.setHeader('vary', 'accept');
    if (metrics.openMetrics && prefersOpenMetrics(req.headers.accept)) {
      const text = await metrics.openMetrics();
      res.setHeader('content-type', OPENMETRICS_CONTENT_TYPE);
      res.end(text);
      return;
    }
    const text = await metrics.metrics();
    res.setHeader('content-type', metrics.contentType);
    res.end(text);
  });
  const { status } = deps;
  if (status) {
    admin.get('/status', (_req: Request, res: Response) => {
      res.setHeader('cache-control', 'no-store');
      res.setHeader('content-security-policy', STATUS_PAGE_CSP);
      res.setHeader('x-content-type-options', 'nosniff');
      res.type('html').send(renderStatusPage(status.snapshot()));
    });
    admin.get('/status.json', (_req: Request, res: Response) => {
      res.setHeader('cache-control', 'no-store');
      res.json(status.snapshot());
    });
  }
  return admin;
}
