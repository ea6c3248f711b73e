/**
 * The composition root: builds every object of a running router from a Config, starts the API and
 * admin servers, and stops them. Nothing else constructs long-lived objects or reads the environment.
 */
import http, { type Server } from 'node:http';
import { type Express } from 'express';
import { type AddressInfo } from 'node:net';
import { pino, type DestinationStream, type Logger } from 'pino';
import { KeyStore } from './auth/key-store.js';
import { InFlight } from './balancer/in-flight.js';
import { PrefixIndex } from './balancer/prefix-index.js';
import { systemClock, systemScheduler, systemSleep, type Clock } from './core/clock.js';
import { ConfigError } from './config/load.js';
import { KubernetesController } from './controller/kubernetes-controller.js';
import { LeaderElector } from './controller/leader-election.js';
import { createKubeApi } from './discovery/kubernetes/kube-api.js';
import { KubernetesDiscovery } from './discovery/kubernetes/kubernetes-discovery.js';
import { type DiscoveryWiring } from './discovery/wiring.js';
import { type Deployment, type PoolDeclaration, type PoolResolver, type PoolSpec } from './core/types.js';
import { type Config } from './config/schema.js';
import { StaticEndpoints } from './discovery/static.js';
import { RouterMetrics } from './metrics/metrics.js';
import { Director } from './director/director.js';
import { ExchangeRunner } from './director/exchange.js';
import { DEFAULT_FORWARDED_HEADERS } from './proxy/headers.js';
import { Forwarder } from './proxy/forwarder.js';
import { AdmissionQueues } from './resilience/admission.js';
import { BreakerRegistry } from './resilience/breaker.js';
import { HealthChecker } from './resilience/health-checker.js';
import { EngineMetricsScraper } from './engine-metrics/scraper.js';
import { EndpointPicker } from './resilience/picker.js';
import { Registry } from './registry/registry.js';
import { poolResolver } from './config/pool-settings.js';
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
  breakers: BreakerRegistry;
  /** Fails /readyz and asks every client to close its connection after its response. */
  beginShutdown(): void;
  /** Requests received and not yet answered in full. */
  activeRequests(): number;
  /** Marks the router as stopping (readiness fails) and releases what it holds. */
  close(): Promise<void>;
}

export interface RunningRouter extends Router {
  /** e.g. http://127.0.0.1:8080 */
  apiUrl: string;
  adminUrl: string;
  /** Stops at once, cutting open connections. */
  close(): Promise<void>;
  /**
   * The SIGTERM path: fail /readyz, keep accepting for `server.shutdownDelayMs` (while endpoints
   * controllers take the pod out of Services), then refuse new connections and give in-flight
   * requests and streams up to `server.gracePeriodMs` to finish before cutting what is left.
   */
  shutdown(): Promise<{ cut: number }>;
}

/** The router's logger: JSON lines on stdout, or on `destination` (the demo's pretty printer). */
export function createLogger(level: Config['log']['level'], destination?: DestinationStream): Logger {
  const options = { level, base: { service: 'modelgate' }, redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization'], censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}

/** Why a listen failed, as a config error naming the field (`server` or `admin`). */
function listenError(err: NodeJS.ErrnoException, field: string, host: string, port: number): ConfigError {
  const where = `${host}:${port}`;
  const why =
    err.code === 'EADDRINUSE'
      ? `${where} is already in use (another process, or the other of server.port and admin.port)`
      : err.code === 'EACCES'
        ? `permission denied to listen on ${where} (ports below 1024 need privileges)`
        : err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND'
          ? `${host} is not an address of this machine`
          : `cannot listen on ${where} (${err.code ?? err.message})`;
  return new ConfigError(why, field);
}

function listen(server: Server, port: number, host: string, field: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => reject(listenError(err, field, host, port));
    server.once('error', failed);
    server.listen(port, host, () => {
      server.off('error', failed);
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

/** The config's pools, resolved like any other pool declaration. */
function poolsOf(config: Config, resolve: PoolResolver): PoolSpec[] {
  return config.pools.map((p, i) => {
    const declared: PoolDeclaration = {
      name: p.name,
      engine: p.engine,
      servedModelName: p.servedModelName,
      capabilities: p.capabilities,
      ...(p.backendKey ? { backendKey: p.backendKey } : {}),
      overrides: { ...(p.resilience ? { resilience: p.resilience } : {}), ...(p.routing ? { routing: p.routing } : {}) },
    };
    const resolved = resolve(declared, `pools[${i}]`);
    if ('problem' in resolved) throw new ConfigError(resolved.problem);
    return resolved.spec;
  });
}

function deploymentsOf(config: Config, created: number): Deployment[] {
  return config.deployments.map((d) => ({ id: d.id, model: d.model, aliases: d.aliases, targets: d.targets, fallbacks: d.fallbacks, created }));
}

function staticDiscovery(config: Config, created: number, resolve: PoolResolver): DiscoveryWiring {
  const endpoints = new StaticEndpoints(config.pools);
  const pools = poolsOf(config, resolve);
  const registry = new Registry(pools, deploymentsOf(config, created));
  return {
    endpoints,
    catalog: () => registry,
    pools: () => pools,
    notReadyReasons: () => (endpoints.hasSynced() ? [] : ['discovery has not synced']),
    watches: () => [],
    isLeader: () => false,
    start: () => undefined,
    stop: () => Promise.resolve(),
  };
}

function kubernetesDiscovery(config: Config, resolve: PoolResolver, logger: Logger, metrics: () => RouterMetrics, random: () => number, clock: Clock): DiscoveryWiring {
  const d = config.discovery;
  let api: ReturnType<typeof createKubeApi>;
  try {
    api = createKubeApi({ file: d.kubeconfig, env: process.env });
  } catch (err) {
    throw new ConfigError((err as Error).message); // one line: the unusable file, or every source tried
  }
  logger.info(api.credentials, 'Kubernetes credentials loaded'); // where from, context and server: no secret
  const wasUp = new Map<string, boolean>();
  const discovery = new KubernetesDiscovery(api, {
    namespaces: d.namespaces,
    resolvePool: resolve,
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
    pools: () => discovery.state().pools.flatMap((p) => (p.spec ? [p.spec] : [])),
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
  // Every pool, from the config or a ModelPool, gets its settings here: defaults ⊕ config ⊕ the pool's own.
  const resolve = poolResolver({ resilience: config.resilience, routing: config.routing });
  const discovery =
    config.discovery.mode === 'kubernetes' ? kubernetesDiscovery(config, resolve, logger, metricsRef, random, clock) : staticDiscovery(config, Math.floor(Date.now() / 1000), resolve);
  const metrics = new RouterMetrics(
    {
      inFlight: () => [...inFlight.byEndpoint()],
      readyEndpoints: () => discovery.pools().map((pool) => ({ pool: pool.name, count: discovery.endpoints.snapshot(pool.name).length })),
      deploymentReadyEndpoints: () => {
        const catalog = discovery.catalog();
        return catalog.deployments().map((d) => ({
          deployment: d.id,
          count: d.targets.filter((t) => t.weight > 0 && catalog.pool(t.pool)).reduce((n, t) => n + discovery.endpoints.snapshot(t.pool).length, 0),
        }));
      },
      queueLimits: () => discovery.pools().filter((p) => p.resilience.maxConcurrencyPerReplica > 0).map((p) => ({ pool: p.name, limit: p.resilience.queue.maxSize })),
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
  const breakers = new BreakerRegistry((pool, endpoint, state) => {
    logger[state === 'open' ? 'warn' : 'info']({ pool, endpoint, state }, `circuit breaker ${state}`);
  });
  const admission = new AdmissionQueues(systemScheduler, () => clock.now(), {
    onDequeued: (pool, ms, result) => metrics.recordQueueWait(pool, ms / 1000, result),
    onRejected: (pool, reason) => metrics.recordRejected(pool, reason),
  });
  const health = new HealthChecker({
    endpoints: discovery.endpoints,
    pools: () => discovery.pools(),
    scheduler: systemScheduler,
    now: () => clock.now(),
    onChange: (pool, endpoint, healthy) => logger[healthy ? 'info' : 'warn']({ pool, endpoint }, healthy ? 'health check passes again: endpoint back in rotation' : 'health check failing: endpoint ejected'),
  });
  const prefixIndex = new PrefixIndex();
  const engineMetrics = new EngineMetricsScraper({
    endpoints: discovery.endpoints,
    pools: () => discovery.pools(),
    scheduler: systemScheduler,
    now: () => clock.now(),
    localCount: (endpoint) => inFlight.count(endpoint),
    onScrape: (pool, _endpoint, result) => metrics.recordEngineScrape(pool, result),
  });
  const picker = new EndpointPicker({
    endpoints: discovery.endpoints,
    inFlight,
    breakers,
    health,
    admission,
    engine: engineMetrics,
    prefixIndex,
    random,
    events: {
      onPicked: (pool, matched, total) => metrics.recordPrefixBlocks(pool, matched, total),
      onShed: (pool) => metrics.recordRejected(pool, 'shed'),
    },
  });
  const exchange = new ExchangeRunner({
    forwarder: new Forwarder(agent, clock),
    picker,
    clock,
    sleep: systemSleep,
    random,
    events: {
      onAttempt: (pool, endpoint, outcome) => metrics.recordAttempt(pool, endpoint, outcome),
      onRetry: (pool, reason) => metrics.recordRetry(pool, reason),
      onFallback: (from, to) => metrics.recordFallback(from.deployment, from.pool.name, to.deployment, to.pool.name),
    },
  });
  metrics.observeResilience({ breakers: () => breakers.states(), queues: () => admission.depths() });
  metrics.observeRouting({ engine: () => engineMetrics.samples(), prefixBlocks: () => prefixIndex.size() });
  const director = new Director({
    catalog: () => discovery.catalog(),
    endpoints: discovery.endpoints,
    exchange,
    metrics,
    random,
    forwardedHeaders: [...DEFAULT_FORWARDED_HEADERS, ...config.server.forwardHeaders, config.priority.header.toLowerCase()],
    clientStallMs: config.server.clientStallTimeoutMs,
  });
  let stopping = false;
  const app = buildApp({
    maxBodyBytes: config.server.maxBodyBytes,
    maxJsonDepth: config.server.maxJsonDepth,
    keys,
    catalog: () => discovery.catalog(),
    director,
    metrics,
    logger,
    clock,
    readiness: () => [...(stopping ? ['shutting down'] : []), ...discovery.notReadyReasons()],
    priorityHeader: config.priority.header,
    trustedProxies: config.server.trustedProxies,
  });
  discovery.start();
  health.start();
  engineMetrics.start();
  keys.watch(config.auth.reloadIntervalMs);
  // Breakers and prefix memory of endpoints that are gone (pods replaced) are dropped.
  const pruner = setInterval(() => {
    const live = new Set(discovery.pools().flatMap((p) => discovery.endpoints.snapshot(p.name).map((e) => e.id)));
    breakers.retain(live);
    prefixIndex.retain(live);
  }, 60_000);
  pruner.unref();
  return {
    api: app.api,
    admin: app.admin,
    inFlight,
    keys,
    breakers,
    logger,
    beginShutdown() {
      stopping = true;
      app.closeConnections();
    },
    activeRequests: () => app.activeRequests(),
    async close() {
      stopping = true;
      clearInterval(pruner);
      keys.close();
      health.stop();
      engineMetrics.stop();
      await discovery.stop();
      breakers.shutdown();
      agent.destroy();
    },
  };
}

/** Builds a router and starts its API and admin servers. */
export async function startRouter(config: Config, options: RouterOptions = {}): Promise<RunningRouter> {
  const router = await createRouter(config, options);
  // Slowloris guards: a client gets headersTimeoutMs to send its headers and requestTimeoutMs for its
  // whole request. Node enforces both only when it checks, every connectionsCheckingInterval (30 s by
  // default), so the check runs at least as often as the headers timeout.
  const apiServer = http.createServer(
    {
      noDelay: true,
      keepAlive: true,
      headersTimeout: config.server.headersTimeoutMs,
      requestTimeout: config.server.requestTimeoutMs,
      keepAliveTimeout: config.server.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1_000, config.server.headersTimeoutMs),
    },
    router.api,
  );
  const adminServer = http.createServer(router.admin);
  try {
    const apiUrl = await listen(apiServer, config.server.port, config.server.host, 'server.port');
    const adminUrl = await listen(adminServer, config.admin.port, config.admin.host, 'admin.port');
    router.logger.info({ api: apiUrl, admin: adminUrl, pools: config.pools.length, deployments: config.deployments.length }, 'modelgate listening');
    return {
      ...router,
      apiUrl,
      adminUrl,
      async close() {
        await router.close();
        apiServer.closeAllConnections();
        await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
      },
      async shutdown() {
        const { shutdownDelayMs, gracePeriodMs } = config.server;
        router.beginShutdown();
        router.logger.info({ shutdownDelayMs, gracePeriodMs }, 'shutting down: readiness failed, draining');
        await systemSleep(shutdownDelayMs);
        const closed = closeServer(apiServer); // no new connections; idle keep-alive ones close now
        const deadline = Date.now() + gracePeriodMs;
        while (router.activeRequests() > 0 && Date.now() < deadline) await systemSleep(20);
        const cut = router.activeRequests();
        if (cut > 0) router.logger.warn({ cut }, 'grace period over: cutting the requests still open');
        apiServer.closeAllConnections();
        await closed;
        await router.close();
        await closeServer(adminServer);
        router.logger.info({ cut }, 'shut down');
        return { cut };
      },
    };
  } catch (err) {
    await router.close();
    await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
    throw err;
  }
}
