/**
 * The admin app (port 9090): liveness, readiness, the Prometheus exposition (OpenMetrics to a scraper
 * that asks for it, as Prometheus does, the classic text format otherwise) and the status page
 * (`/status`, HTML, and `/status.json`, its JSON twin). Nothing secret.
 */
import express, { type Request, type Response } from 'express';
import { systemClock, type Clock } from '../core/clock.js';
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
  /** Times the status page's builds (default: the system clock). */
  clock?: Clock;
}

/**
 * A status build that took this long is served again to the requests that come within
 * {@link REUSE_FACTOR} times as long after it (at most {@link REUSE_MAX_MS}): on a fleet of thousands of
 * replicas a build takes tens of milliseconds of the loop every tenant's requests share, and the admin
 * port answers without a key. A quick build (every fleet but the largest) is never reused.
 */
const REUSE_AFTER_BUILD_MS = 20;
const REUSE_FACTOR = 10;
const REUSE_MAX_MS = 2000;

/** The status page's snapshot and its two renderings, built at most once per reuse window. */
function statusViews(snapshot: () => StatusSnapshot, clock: Clock): () => { html: () => string; json: () => string } {
  let views: { html: () => string; json: () => string; until: number } | undefined;
  return () => {
    const now = clock.now();
    if (views && now < views.until) return views;
    const snap = snapshot();
    let html: string | undefined;
    let json: string | undefined;
    const built = { html: () => (html ??= renderStatusPage(snap)), json: () => (json ??= JSON.stringify(snap)), until: 0 };
    const took = clock.now() - now;
    built.until = took >= REUSE_AFTER_BUILD_MS ? clock.now() + Math.min(took * REUSE_FACTOR, REUSE_MAX_MS) : 0;
    views = built;
    return built;
  };
}

/** Concurrent calls share the one render in progress (a scrape that comes after it ends gets a new one). */
function coalesced(render: () => Promise<string>): () => Promise<string> {
  let pending: Promise<string> | undefined;
  return () => {
    if (pending) return pending;
    const started = render();
    pending = started;
    const done = (): void => {
      if (pending === started) pending = undefined;
    };
    started.then(done, done);
    return started;
  };
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
  // Scrapes that arrive together (several Prometheus replicas, or a flood of requests to the unauthenticated
  // port) share one render: on a large fleet one is tens of milliseconds of the loop.
  const { metrics } = deps;
  const classic = coalesced(() => metrics.metrics());
  const openMetrics = metrics.openMetrics ? coalesced(() => (metrics.openMetrics as () => Promise<string>)()) : undefined;
  admin.get('/metrics', async (req: Request, res: Response) => {
    res.setHeader('vary', 'accept');
    if (openMetrics && prefersOpenMetrics(req.headers.accept)) {
      const text = await openMetrics();
      res.setHeader('content-type', OPENMETRICS_CONTENT_TYPE);
      res.end(text);
      return;
    }
    const text = await classic();
    res.setHeader('content-type', metrics.contentType);
    res.end(text);
  });
  const { status } = deps;
  if (status) {
    const views = statusViews(() => status.snapshot(), deps.clock ?? systemClock);
    admin.get('/status', (req: Request, res: Response) => {
      // `/status/` would resolve the page's relative link to `/status/status.json`: send it to the page's own address
      if (req.path.endsWith('/')) return res.redirect(301, '../status');
      res.setHeader('cache-control', 'no-store');
      res.setHeader('content-security-policy', STATUS_PAGE_CSP);
      res.setHeader('x-content-type-options', 'nosniff');
      res.type('html').send(views().html());
    });
    admin.get('/status.json', (_req: Request, res: Response) => {
      res.setHeader('cache-control', 'no-store');
      res.type('json').send(views().json());
    });
  }
  return admin;
}
