/** The admin app (port 9090): liveness, readiness and the Prometheus exposition. Nothing secret. */
import express, { type Request, type Response } from 'express';

/** Reasons the router is not ready; empty when ready. */
export type ReadinessCheck = () => string[];

export interface AdminDeps {
  readiness: ReadinessCheck;
  metrics: { contentType: string; metrics(): Promise<string> };
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
  admin.get('/metrics', async (_req: Request, res: Response) => {
    res.setHeader('content-type', deps.metrics.contentType);
    res.end(await deps.metrics.metrics());
  });
  return admin;
}
