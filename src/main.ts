/**
 * The composition root: builds every object of a running router from a Config, starts the API and
 * admin servers, and stops them. Nothing else constructs long-lived objects or reads the environment.
 */
import http, { type Server } from 'node:http';
import { type Express } from 'express';
import { type AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { KeyStore } from './auth/key-store.js';
import { InFlight } from './balancer/in-flight.js';
import { systemClock, type Clock } from './core/clock.js';
import { type Deployment, type PoolSpec } from './core/types.js';
import { type Config } from './config/schema.js';
import { StaticEndpoints } from './discovery/static.js';
import { RouterMetrics } from './metrics/metrics.js';
import { Forwarder } from './proxy/forwarder.js';
import { Registry } from './registry/registry.js';
import { buildApp } from './server/app.js';

export interface RouterOptions {
  logger?: Logger;
  clock?: Clock;
  random?: () => number;
  /** Register Node's default process metrics (off in tests that build many routers). */
  processMetrics?: boolean;
}

/** A router built from a config, not yet listening: its two apps and the state tests look at. */
export interface Router {
  api: Express;
  admin: Express;
  inFlight: InFlight;
  keys: KeyStore;
  /** Marks the router as stopping (readiness fails) and releases what it holds. */
  close(): void;
}

export interface RunningRouter extends Omit<Router, 'close'> {
  /** e.g. http://127.0.0.1:8080 */
  apiUrl: string;
  adminUrl: string;
  close(): Promise<void>;
}

export function createLogger(level: Config['log']['level']): Logger {
  return pino({ level, base: { service: 'modelgate' }, redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization'], censor: '[redacted]' } });
}

function listen(server: Server, port: number, host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address() as AddressInfo;
      const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${address.port}`);
    });
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

function poolsOf(config: Config): PoolSpec[] {
  return config.pools.map((p) => ({
    name: p.name,
    engine: p.engine,
    servedModelName: p.servedModelName,
    capabilities: p.capabilities,
    ...(p.backendKey ? { backendKey: p.backendKey } : {}),
  }));
}

function deploymentsOf(config: Config, created: number): Deployment[] {
  return config.deployments.map((d) => ({ id: d.id, model: d.model, aliases: d.aliases, targets: d.targets, created }));
}

/** Builds every object of a router from a validated config; loads the keys file. */
export async function createRouter(config: Config, options: RouterOptions = {}): Promise<Router & { logger: Logger }> {
  const logger = options.logger ?? createLogger(config.log.level);
  const clock = options.clock ?? systemClock;
  const registry = new Registry(poolsOf(config), deploymentsOf(config, Math.floor(Date.now() / 1000)));
  const endpoints = new StaticEndpoints(config.pools);
  const inFlight = new InFlight();
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024, scheduling: 'lifo' });
  const endpointPool = new Map(config.pools.flatMap((p) => p.endpoints.map((e) => [e.url, p.name] as const)));
  const metrics = new RouterMetrics(
    {
      inFlight: () => [...inFlight.entries()].map(([endpoint, count]) => ({ pool: endpointPool.get(endpoint) ?? '', endpoint, count })),
      readyEndpoints: () => config.pools.map((p) => ({ pool: p.name, count: endpoints.snapshot(p.name).length })),
    },
    { processMetrics: options.processMetrics ?? true },
  );
  const keys = new KeyStore(config.auth.keysFile, {
    onReload: (result) => {
      metrics.recordKeysReload(result.ok);
      if (result.ok) logger.info({ keys: result.keys }, 'API keys reloaded');
      else logger.error({ error: result.error.message }, 'API keys file rejected; keeping the previous keys');
    },
  });
  await keys.load();
  let stopping = false;
  const { api, admin } = buildApp({
    maxBodyBytes: config.server.maxBodyBytes,
    keys,
    catalog: () => registry,
    endpoints,
    inFlight,
    forwarder: new Forwarder(agent),
    metrics,
    logger,
    clock,
    readiness: () => [...(stopping ? ['shutting down'] : []), ...(endpoints.hasSynced() ? [] : ['discovery has not synced'])],
    ...(options.random ? { random: options.random } : {}),
  });
  keys.watch(config.auth.reloadIntervalMs);
  return {
    api,
    admin,
    inFlight,
    keys,
    logger,
    close() {
      stopping = true;
      keys.close();
      agent.destroy();
    },
  };
}

/** Builds a router and starts its API and admin servers. */
export async function startRouter(config: Config, options: RouterOptions = {}): Promise<RunningRouter> {
  const router = await createRouter(config, options);
  const apiServer = http.createServer({ noDelay: true, keepAlive: true }, router.api);
  const adminServer = http.createServer(router.admin);
  try {
    const apiUrl = await listen(apiServer, config.server.port, config.server.host);
    const adminUrl = await listen(adminServer, config.admin.port, config.admin.host);
    router.logger.info({ api: apiUrl, admin: adminUrl, pools: config.pools.length, deployments: config.deployments.length }, 'modelgate listening');
    return {
      ...router,
      apiUrl,
      adminUrl,
      async close() {
        router.close();
        await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
      },
    };
  } catch (err) {
    router.close();
    await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
    throw err;
  }
}
