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
import { systemClock, systemScheduler, type Clock } from './core/clock.js';
import { ConfigError } from './config/load.js';
import { KubernetesController } from './controller/kubernetes-controller.js';
import { LeaderElector } from './controller/leader-election.js';
import { createKubeApi, type KubeApi } from './discovery/kubernetes/kube-api.js';
import { KubernetesDiscovery } from './discovery/kubernetes/kubernetes-discovery.js';
import { type DiscoveryWiring } from './discovery/wiring.js';
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
  close(): Promise<void>;
}

export interface RunningRouter extends Router {
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

function staticDiscovery(config: Config, created: number): DiscoveryWiring {
  const endpoints = new StaticEndpoints(config.pools);
  const registry = new Registry(poolsOf(config), deploymentsOf(config, created));
  return {
    endpoints,
    catalog: () => registry,
    poolNames: () => config.pools.map((p) => p.name),
    notReadyReasons: () => (endpoints.hasSynced() ? [] : ['discovery has not synced']),
    watches: () => [],
    isLeader: () => false,
    start: () => undefined,
    stop: () => Promise.resolve(),
  };
}

function kubernetesDiscovery(config: Config, logger: Logger, metrics: () => RouterMetrics, random: () => number, clock: Clock): DiscoveryWiring {
  const d = config.discovery;
  let api: KubeApi;
  try {
    api = createKubeApi(d.kubeconfig);
  } catch (err) {
    throw new ConfigError(`cannot load Kubernetes credentials (${(err as Error).message}); set discovery.kubeconfig or run in a pod with a service account`, 'discovery.kubeconfig');
  }
  const wasUp = new Map<string, boolean>();
  const discovery = new KubernetesDiscovery(api, {
    namespaces: d.namespaces,
    resyncIntervalMs: d.resyncIntervalMs,
    backoff: d.restartBackoffMs,
    scheduler: systemScheduler,
    random,
    onEvent: (kind, type) => metrics().recordDiscoveryEvent(kind, type),
    onWatchState: (kind, namespace, state, error) => {
      const key = `${kind}/${namespace}`;
      if (error !== undefined) {
        metrics().recordWatchRestart(kind, namespace);
        logger.warn({ kind, namespace: namespace || '(all)', error: state.lastError, restarts: state.restarts }, state.synced ? 'Kubernetes watch failed; serving the last known state until it recovers' : 'Kubernetes watch failed before its first sync');
      } else if (wasUp.get(key) !== true) {
        logger.info({ kind, namespace: namespace || '(all)' }, 'Kubernetes watch synced');
      }
      wasUp.set(key, state.up);
    },
  });
  // The controller asks the elector (declared below) only when it is about to write.
  const controller = new KubernetesController(discovery, api, {
    logger,
    mayWriteStatus: () => elector?.isLeader() ?? true,
    onStatusWrite: (kind, ok) => metrics().recordStatusWrite(kind, ok),
  });
  const elector = d.leaderElection.enabled
    ? new LeaderElector(api, {
        namespace: d.leaderElection.leaseNamespace,
        name: d.leaderElection.leaseName,
        identity: d.identity,
        leaseDurationMs: d.leaderElection.leaseDurationMs,
        renewIntervalMs: d.leaderElection.renewIntervalMs,
        clock,
        scheduler: systemScheduler,
        onChange: (leader) => {
          logger.info({ identity: d.identity, lease: `${d.leaderElection.leaseNamespace}/${d.leaderElection.leaseName}` }, leader ? 'became the status writer' : 'no longer the status writer');
          if (leader) controller.syncStatus();
        },
        onError: (err) => logger.warn({ error: (err as Error).message }, 'leader election: lease update failed'),
      })
    : undefined;
  return {
    endpoints: discovery,
    catalog: () => controller.catalog(),
    poolNames: () => discovery.state().pools.map((p) => p.key),
    notReadyReasons: () =>
      discovery
        .watchStates()
        .filter((w) => !w.state.synced)
        .map((w) => `${w.kind} in ${w.namespace || 'all namespaces'} has not synced${w.state.lastError ? ` (${w.state.lastError})` : ''}`),
    watches: () => discovery.watchStates().map((w) => ({ kind: w.kind, namespace: w.namespace, up: w.state.up, lastSyncAt: w.state.lastSyncAt })),
    isLeader: () => elector?.isLeader() ?? false,
    start() {
      discovery.start();
      elector?.start();
    },
    async stop() {
      await elector?.stop();
      await discovery.stop();
      await controller.idle();
    },
  };
}

/** Builds every object of a router from a validated config; loads the keys file. */
export async function createRouter(config: Config, options: RouterOptions = {}): Promise<Router & { logger: Logger }> {
  const logger = options.logger ?? createLogger(config.log.level);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const inFlight = new InFlight();
  // Discovery reports into the metrics, and the metrics read discovery: each refers to the other lazily.
  const metricsRef = (): RouterMetrics => metrics;
  const discovery = config.discovery.mode === 'kubernetes' ? kubernetesDiscovery(config, logger, metricsRef, random, clock) : staticDiscovery(config, Math.floor(Date.now() / 1000));
  const metrics = new RouterMetrics(
    {
      inFlight: () => [...inFlight.byEndpoint()],
      readyEndpoints: () => discovery.poolNames().map((pool) => ({ pool, count: discovery.endpoints.snapshot(pool).length })),
      ...(config.discovery.mode === 'kubernetes' ? { watches: () => discovery.watches(), leader: () => discovery.isLeader() } : {}),
    },
    { processMetrics: options.processMetrics ?? true },
  );
  const keys = new KeyStore(config.auth.keysFile, {
    onReload: (result) => {
      metricsRef().recordKeysReload(result.ok);
      if (result.ok) logger.info({ keys: result.keys }, 'API keys reloaded');
      else logger.error({ error: result.error.message }, 'API keys file rejected; keeping the previous keys');
    },
  });
  await keys.load();
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024, scheduling: 'lifo' });
  let stopping = false;
  const { api, admin } = buildApp({
    maxBodyBytes: config.server.maxBodyBytes,
    keys,
    catalog: () => discovery.catalog(),
    endpoints: discovery.endpoints,
    inFlight,
    forwarder: new Forwarder(agent),
    metrics,
    logger,
    clock,
    readiness: () => [...(stopping ? ['shutting down'] : []), ...discovery.notReadyReasons()],
    random,
  });
  discovery.start();
  keys.watch(config.auth.reloadIntervalMs);
  return {
    api,
    admin,
    inFlight,
    keys,
    logger,
    async close() {
      stopping = true;
      keys.close();
      await discovery.stop();
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
        await router.close();
        await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
      },
    };
  } catch (err) {
    await router.close();
    await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
    throw err;
  }
}
