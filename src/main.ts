/**
 * The composition root: builds every object of a running router from a Config, starts the API and
 * admin servers, and stops them. Nothing else constructs long-lived objects or reads the environment.
 */
import http from './core/node-http.js';
import { type Express } from 'express';
import type { RequestListener } from 'node:http';
import { getHeapStatistics } from 'node:v8';
import { type Logger } from 'pino';
import { KeyStore } from './auth/key-store.js';
import { InFlight } from './balancer/in-flight.js';
import { PrefixIndex } from './balancer/prefix-index.js';
import { AdapterPlacements } from './balancer/lora.js';
import { ResponseLocations } from './balancer/response-locations.js';
import { systemClock, systemScheduler, systemSleep, type Clock } from './core/clock.js';
import { deploymentLabel, type RefusedRequest, unservedCapabilities } from './core/types.js';
import { type Config } from './config/schema.js';
import { RouterMetrics } from './metrics/metrics.js';
import { attemptOutcome, retryReason } from './metrics/labels.js';
import { API_ROUTES } from './api/routes.js';
import { Director } from './director/director.js';
import { ExchangeRunner } from './director/exchange.js';
import { DEFAULT_FORWARDED_HEADERS } from './proxy/headers.js';
import { Limiter } from './limits/limiter.js';
import { sharedLimits } from './wiring/limits.js';
import { createEngineAgent } from './proxy/engine-agent.js';
import { Forwarder, SHUTTING_DOWN } from './proxy/forwarder.js';
import { AdmissionQueues, shuttingDownError } from './resilience/admission.js';
import { BreakerRegistry } from './resilience/breaker.js';
import { HealthChecker } from './resilience/health-checker.js';
import { EngineMetricsScraper } from './engine-metrics/scraper.js';
import { KvEventsHub } from './kv-events/hub.js';
import { AdapterLoader } from './engine-metrics/adapter-loader.js';
import { EndpointPicker } from './resilience/picker.js';
import { HoldReporter, poolDemand, TurnedAway } from './wiring/demand.js';
import { ServedModelWatch } from './wiring/served-model-watch.js';
import { doubledLimitNames, unknownModelNames } from './config/keys-file.js';
import { poolResolver } from './config/pool-settings.js';
import { buildApp } from './server/app.js';
import { RecentTraffic, statusBoard } from './server/status.js';
import { closeServer, createApiServer, drain, listen } from './wiring/servers.js';
import { staticDiscovery } from './wiring/static-discovery.js';
import { createLogger, lineSinkOf } from './wiring/logger.js';
import { badPayloadLog, exportWatch, keptClosedLog, servedModelLog } from './wiring/log-watches.js';
import { sloResult } from './metrics/goodput.js';
import { discoveryGauges } from './wiring/gauges.js';
import { ListedEndpoints } from './wiring/listed-endpoints.js';
import { HeldEvents, heldEventsLimit } from './proxy/held-events.js';

export interface RouterOptions {
  logger?: Logger;
  clock?: Clock;
  random?: () => number;
  /** Register Node's default process metrics (off in tests that build many routers). */
  processMetrics?: boolean;
  /** How long an endpoint no snapshot lists keeps its state ({@link FORGET_ENDPOINTS_AFTER_MS}; tests set 0). */
  forgetEndpointsAfterMs?: number;
}

/** How long the state of an endpoint that left every snapshot is kept (a readiness blip keeps it). */
export const FORGET_ENDPOINTS_AFTER_MS = 60_000;
/** How often endpoints past that are looked for when discovery does not change. */
const PRUNE_INTERVAL_MS = 15_000;

/** A router built from a config, not yet listening: its two apps and the state tests look at. */
export interface Router {
  /** The API's request listener (the inference routes directly, the rest through express). */
  api: RequestListener;
  admin: Express;
  inFlight: InFlight;
  keys: KeyStore;
  breakers: BreakerRegistry;
  /** The status page's recent traffic per pool. */
  recent: RecentTraffic;
  /** Fails /readyz and asks every client to close its connection after its response. */
  beginShutdown(): void;
  /** Requests received and not yet answered in full. */
  activeRequests(): number;
  /**
   * The grace period is over: every request waiting for a replica (queued or held) is answered 503
   * now, and so is every later one, instead of being cut without an answer. Returns how many waited.
   */
  refuseWaiting(): number;
  /**
   * The grace period is over: every engine request still in flight is ended (SHUTTING_DOWN): a stream
   * ends with its error event (`router_shutting_down`), a request whose engine has not answered yet is
   * answered 503 `router_shutting_down`, a non-streamed body under way is cut.
   */
  endInFlight(): void;
  /** The connections still open are about to be cut: their requests are logged `failure: "shutdown_cut"`, not `client_gone`. */
  cutting(): void;
  /** A request the API server's HTTP parser refused, as it answered it (the access log's line, the count). */
  refused(request: RefusedRequest): void;
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
  shutdown(): Promise<{ cut: number; refused: number; ended: number }>;
  /**
   * A second signal during {@link shutdown}: what is left of the shutdown delay and the grace period
   * ends now (what can be answered is, the rest is cut, the access log flushed), for someone at a
   * terminal who pressed Ctrl+C twice rather than wait out the grace period.
   */
  hurry(): void;
}

export { createLogger };

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
    config.discovery.mode === 'kubernetes'
      ? (await import('./wiring/kubernetes-discovery.js')).kubernetesDiscovery(config, resolve, logger, metricsRef, random, clock)
      : staticDiscovery(config, Math.floor(Date.now() / 1000), resolve);
  // a pool declaring an API its engine takes in another shape: said at start, as `modelgate validate` says it
  if (config.discovery.mode !== 'kubernetes') for (const pool of discovery.pools()) for (const warning of unservedCapabilities(pool)) logger.warn({ pool: pool.name }, warning);
  // The ready gauges read the health checks and breakers built below, at scrape time only.
  const readiness = { isHealthy: (id: string, unknown: boolean) => health.isHealthy(id, unknown), breakers: () => breakers.states() };
  // Breakers (an opossum circuit and its timer, about 7 KiB each), prefix memory, adapter placements and
  // attempt series of endpoints no snapshot has listed for a minute (pods replaced), or last listed by a
  // pool that left, are dropped, at a change of discovery, the timer below, or a scrape (the series).
  const listed = new ListedEndpoints(options.forgetEndpointsAfterMs ?? FORGET_ENDPOINTS_AFTER_MS, () => clock.now());
  const kept = (): ReadonlySet<string> => listed.update(discovery.pools().map((p) => [p.name, discovery.endpoints.snapshot(p.name).map((e) => e.id)] as const));
  const metrics = new RouterMetrics(
    { ...discoveryGauges(discovery, inFlight, config.discovery.mode === 'kubernetes', readiness, API_ROUTES), liveEndpoints: kept },
    {
      processMetrics: options.processMetrics ?? true,
      exemplars: config.tracing.enabled, // sampled trace ids on the latency histograms; off, they are plain histograms
    },
  );
  // what a reload of the keys file means for the per-key series (set once the limits' metrics exist)
  let keysReloaded = (): void => undefined;
  const keys = new KeyStore(config.auth.keysFile, {
    onReload: (result) => {
      metricsRef().recordKeysReload(result.ok);
      if (result.ok) {
        logger.info({ keys: result.keys }, 'API keys reloaded');
        keysReloaded();
      } else logger.error({ error: result.error.message }, 'API keys file rejected; keeping the previous keys');
    },
    // in static mode every deployment is known: a key naming none of them (a typo, a deployment not in
    // the config) cannot use it, or its limit never applies; nor does a second limit for one deployment
    // under another of its names; said at start-up and on each reload
    onLoaded: (entries) => {
      if (config.discovery.mode === 'kubernetes') return;
      for (const u of unknownModelNames(entries, config.deployments)) logger.warn({ key: u.key, field: u.field, name: u.name }, 'API key names no deployment');
      for (const d of doubledLimitNames(entries, config.deployments)) {
        logger.warn({ key: d.key, deployment: d.deployment, names: d.names, applies: d.applies }, 'API key limits one deployment under several names; one entry applies');
      }
    },
  });
  await keys.load();
  const agent = createEngineAgent();
  // A transition a request's outcome triggered is logged on that request's child logger (its id bound).
  const breakerLog = logger.child({ component: 'breaker' });
  const breakers = new BreakerRegistry(
    (pool, endpoint, state, cause) => {
      const log = cause === undefined ? breakerLog : breakerLog.child({ requestId: cause });
      log[state === 'open' ? 'warn' : 'info']({ pool, endpoint, state }, `circuit breaker ${state}`);
    },
    systemScheduler,
    // server errors the engine answered ask the replica's health check before they open its breaker
    (pool, endpoint) => health.confirm(pool, endpoint),
    keptClosedLog(breakerLog, () => clock.now()),
    () => clock.now(),
  );
  // the demand's share for requests turned away for want of capacity (autoscaling)
  const turnedAway = new TurnedAway(() => clock.now());
  const admission = new AdmissionQueues(systemScheduler, () => clock.now(), {
    onDequeued: (pool, ms, result) => metrics.recordQueueWait(pool, ms / 1000, result),
    onRejected: (pool, reason) => {
      metrics.recordRejected(pool, reason);
      if (reason === 'queue_full' || reason === 'queue_timeout' || reason === 'shed') turnedAway.rejected(pool);
    },
  });
  const healthLog = logger.child({ component: 'health-check' });
  const health = new HealthChecker({
    endpoints: discovery.endpoints,
    pools: () => discovery.pools(),
    scheduler: systemScheduler,
    now: () => clock.now(),
    onChange: (pool, endpoint, healthy) => {
      healthLog[healthy ? 'info' : 'warn']({ pool, endpoint }, healthy ? 'health check passes: endpoint in rotation' : 'health check failing: endpoint ejected');
      if (healthy) admission.notify(pool); // requests held for a pool at zero go at once
    },
  });
  const prefixIndex = new PrefixIndex();
  // KV-cache events: zeromq is loaded only once a pool enables them.
  const kvLog = logger.child({ component: 'kv-events' });
  const badPayloadLogged = badPayloadLog(kvLog, () => clock.now());
  const kvMetrics = metrics.observeKvEvents(() => kvEvents.stats());
  const kvEvents = new KvEventsHub({
    endpoints: discovery.endpoints,
    pools: () => discovery.pools(),
    scheduler: systemScheduler,
    now: () => clock.now(),
    events: {
      onBatch: (pool, stored, removed, cleared) => kvMetrics.batch(pool, stored, removed, cleared),
      onGap: (pool, recovered) => kvMetrics.gap(pool, recovered),
      onBadPayload: (pool, endpoint, message, reason) => {
        kvMetrics.badPayload(pool, reason);
        badPayloadLogged(pool, endpoint, message, reason);
      },
      onThrottled: (pool, endpoint, ms) => {
        kvMetrics.throttled(pool, ms);
        badPayloadLogged(pool, endpoint, `a batch waited ${Math.round(ms)} ms`, 'throttled');
      },
      onError: (pool, endpoint, err) => kvLog.error({ pool, endpoint, error: err.message }, 'KV-event subscription failed: the replica is routed by the prefix estimate'),
      onCleared: (endpoint) => prefixIndex.forget(endpoint),
      onSharedFeed: (pool, address, endpoints) =>
        kvLog.warn(
          { pool, address, endpoints },
          'KV-event publisher shared by several replicas (engines on one host): none of them is subscribed, the prefix estimate routes them; give each engine a publisher address of its own ({port} in kvEvents.endpoint)',
        ),
    },
  });
  const scrapeLog = logger.child({ component: 'engine-metrics' });
  const engineMetrics = new EngineMetricsScraper({
    endpoints: discovery.endpoints,
    pools: () => discovery.pools(),
    scheduler: systemScheduler,
    now: () => clock.now(),
    localCount: (endpoint) => inFlight.count(endpoint),
    onScrape: (pool, _endpoint, result) => metrics.recordEngineScrape(pool, result),
    onFailing: (pool, endpoint, result, why) =>
      scrapeLog.warn({ pool, endpoint, result, error: why }, "engine metrics scrape failed: the replica is scored without its engine's load until a scrape works again"),
    onRecovered: (pool, endpoint, failed) => scrapeLog.info({ pool, endpoint, failed }, 'engine metrics scrape works again'),
  });
  const adapterPlacements = new AdapterPlacements();
  const loraLog = logger.child({ component: 'lora' });
  const adapterLoads = new AdapterLoader({
    scheduler: systemScheduler,
    onLoad: (pool, adapter, endpoint, result, message) => {
      metrics.recordLoraLoad(pool, result);
      if (result === 'loaded') loraLog.info({ pool, adapter, endpoint }, 'LoRA adapter loaded');
      else if (result !== 'already_loaded') loraLog.warn({ pool, adapter, endpoint, result, reason: message }, 'LoRA adapter load failed');
    },
  });
  const picker = new EndpointPicker({
    endpoints: discovery.endpoints,
    inFlight,
    breakers,
    health,
    admission,
    engine: engineMetrics,
    prefixIndex,
    kvPrefix: kvEvents,
    adapterPlacements,
    adapterLoads,
    now: () => clock.now(),
    random,
    events: {
      onPicked: (pool, matched, total) => metrics.recordPrefixBlocks(pool, matched, total),
      onPrefixPredicted: (pool, source, matched, total) => kvMetrics.predicted(pool, source, matched, total),
      onAdapterPlaced: (pool, placement) => metrics.recordLoraPlacement(pool, placement),
      onShed: (pool) => {
        metrics.recordRejected(pool, 'shed');
        turnedAway.rejected(pool);
      },
      onReleased: (pool, ms) => turnedAway.served(pool, ms / 1000),
      onHold: (pool, event) => holds.record(pool, event),
    },
  });
  const prune = (): void => {
    const keep = kept();
    breakers.retain(keep);
    prefixIndex.retain(keep);
    adapterPlacements.retain(keep);
    metrics.forgetEndpoints(keep);
  };
  // A pool that leaves discovery takes its waiting requests with it: they are answered (or move on to
  // the route's next pool) at once, not when their wait runs out; its endpoints' breakers go too.
  let poolNames = new Set(discovery.pools().map((p) => p.name));
  let deploymentLabels = new Set(discovery.catalog().deployments().map(deploymentLabel));
  // the status page's per-pool latency rings, fed by the access log (about 8 KiB a pool)
  const recent = new RecentTraffic(() => clock.now());
  // pools whose replicas said they do not serve the pool's servedModelName, for the status page and the ModelPool status
  const servedModel = new ServedModelWatch(
    () => Date.now(),
    () => discovery.demandChanged(),
  );
  discovery.observeServedModel((pool) => servedModel.of(pool));
  discovery.onPoolsChanged(() => {
    const now = new Set(discovery.pools().map((p) => p.name));
    const removed = [...poolNames].filter((name) => !now.has(name));
    for (const name of now) if (!poolNames.has(name)) picker.poolAdded(name);
    poolNames = now;
    turnedAway.retain(now);
    recent.retain(now);
    servedModel.retain(discovery.pools(), (pool) => discovery.endpoints.snapshot(pool));
    for (const name of removed) {
      const waiting = picker.poolRemoved(name);
      if (waiting > 0) logger.warn({ pool: name, requests: waiting }, 'pool removed: the requests waiting for it were answered 503 no_ready_replica (or went on to a fallback)');
    }
    // a replica that joined takes the requests queued for its pool now; a pool left with none answers them
    for (const pool of discovery.pools()) {
      const answered = picker.endpointsChanged(pool);
      if (answered > 0)
        logger.warn({ pool: pool.name, requests: answered }, 'pool has no ready replica left: the requests waiting for it were answered 503 no_ready_replica (or went on to a fallback)');
    }
    // every change of discovery (pods replaced, pools and deployments gone): the state of what left goes with it
    prune();
    const deploymentsNow = new Set(discovery.catalog().deployments().map(deploymentLabel));
    if (removed.length > 0 || [...deploymentLabels].some((label) => !deploymentsNow.has(label))) void metrics.forgetGone();
    deploymentLabels = deploymentsNow;
  });
  const holds = new HoldReporter({ logger, metrics, held: (pool) => picker.heldRequests(pool), demandChanged: () => discovery.demandChanged(), scheduler: systemScheduler });
  discovery.observeDemand((pool) => ({ waiting: admission.depth(pool), held: picker.heldRequests(pool) }));
  metrics.observeDemand(() => poolDemand(discovery, { inFlight, admission, picker, engine: engineMetrics, turnedAway }), config.discovery.mode === 'kubernetes');
  const servedModelLogged = servedModelLog(logger, () => clock.now());
  const exchange = new ExchangeRunner({
    forwarder: new Forwarder(agent, clock, systemScheduler, new HeldEvents(heldEventsLimit(getHeapStatistics().heap_size_limit, process.constrainedMemory()))),
    picker,
    clock,
    sleep: systemSleep,
    random,
    events: {
      onAttempt: (pool, endpoint, outcome, adapter) => {
        metrics.recordAttempt(pool, endpoint, attemptOutcome(outcome));
        servedModel.attempted(pool, endpoint, outcome, adapter);
      },
      onRetry: (pool, reason) => metrics.recordRetry(pool, retryReason(reason)),
      onFallback: (from, to) => metrics.recordFallback(from.deployment, from.pool.name, to.deployment, to.pool.name),
      onServedModelMismatch: (pool, endpoint, said) => {
        servedModelLogged(pool, endpoint, said);
        servedModel.seen(pool, endpoint);
      },
    },
  });
  metrics.observeResilience({ breakers: () => breakers.states(), queues: () => admission.depths() });
  metrics.observeRouting({ engine: () => engineMetrics.samples(), prefixBlocks: () => prefixIndex.size() });
  const limitEvents = metrics.observeLimits({ redis: config.limits.redis !== undefined, keyMetrics: config.limits.keyMetrics });
  const shared = config.limits.redis ? await sharedLimits(config.limits.redis, logger, (op) => limitEvents.onSharedError?.(op)) : undefined;
  const director = new Director({
    catalog: () => discovery.catalog(),
    endpoints: discovery.endpoints,
    exchange,
    metrics,
    random,
    forwardedHeaders: [...DEFAULT_FORWARDED_HEADERS, ...config.server.forwardHeaders, config.priority.header.toLowerCase()],
    clientStallMs: config.server.clientStallTimeoutMs,
    responses: new ResponseLocations(config.server.rememberedResponses, shared?.responses),
  });
  keysReloaded = () => limitEvents.keysNow?.(keys.names());
  keysReloaded(); // the file's names at start: the keys that may come to have series
  const limitsLog = logger.child({ component: 'limits' });
  const limiter = new Limiter({
    defaults: config.limits.defaults,
    clock,
    wallNow: () => Date.now(),
    scheduler: systemScheduler,
    ...(shared ? { shared: { store: shared.store, flushIntervalMs: shared.flushIntervalMs, expectedRouters: shared.expectedRouters, strict: shared.strict, answering: shared.answering } } : {}),
    events: {
      ...limitEvents,
      onShared: (up, error) => {
        limitEvents.onShared?.(up);
        if (!up && !error) return; // not answering at start: already logged
        if (up) limitsLog.info('Redis answers again: limits are shared by every router again');
        else limitsLog.error({ error: error?.message }, 'Redis is not answering: counting limits locally, each router taking its share, until it is back');
      },
      onSharedLost: () => {
        limitsLog.error(
          "Redis lost the shared limits' counts (restarted without persistence, failed over to an empty replica, flushed, or evicted under memory pressure): this router puts back its requests' concurrency slots and the budgets it last saw; per-minute buckets are full again, and Responses API records are gone",
        );
        limitEvents.onSharedLost?.();
      },
      onCarried: (keys) => limitsLog.info({ keys }, 'Redis took what this router counted while it was not answering: the requests and tokens of these keys count there now'),
    },
  });
  limiter.start();
  let stopping = false;
  const logSink = lineSinkOf(logger);
  // The OpenTelemetry SDK is loaded only when tracing is on.
  const tracing = config.tracing.enabled ? (await import('./tracing/otel.js')).createTracing(config.tracing, exportWatch(logger)) : undefined;
  const notReadyReasons = (): string[] => [...(stopping ? ['shutting down'] : []), ...discovery.notReadyReasons()];
  // The admin status page reads the same live state as the gauges, plus recent traffic fed by the access log.
  const status = statusBoard({
    now: () => clock.now(),
    wallNow: () => Date.now(),
    catalog: () => discovery.catalog(),
    pools: () => discovery.pools(),
    endpoints: discovery.endpoints,
    health,
    breakers,
    inFlight,
    engine: engineMetrics,
    admission,
    held: (pool) => picker.heldRequests(pool),
    prefixIndexBlocks: () => prefixIndex.size(),
    notReady: notReadyReasons,
    recent,
    servedModel,
  });

  const app = buildApp({
    maxBodyBytes: config.server.maxBodyBytes,
    maxUploadBytes: config.server.maxUploadBytes,
    maxJsonDepth: config.server.maxJsonDepth,
    keys,
    limits: limiter,
    catalog: () => discovery.catalog(),
    catalogLoading: () => discovery.notReadyReasons().length > 0,
    director,
    metrics,
    logger,
    ...(logSink ? { logSink } : {}),
    ...(tracing ? { tracing } : {}),
    onFinished: (deployment, done) => {
      // the deployment's own objective over the config's, field by field (found by its label: its ID
      // may be another namespace's deployment's too, or a name it lost)
      const own = discovery.catalog().labelled(deployment)?.slo;
      const result = sloResult(done, own ? { ...config.slo, ...own } : config.slo);
      if (result) metrics.recordGoodput(deployment, result);
    },
    clock,
    readiness: notReadyReasons,
    status,
    priorityHeader: config.priority.header,
    trustedProxies: config.server.trustedProxies,
  });
  discovery.start();
  health.start();
  engineMetrics.start();
  kvEvents.start();
  keys.watch(config.auth.reloadIntervalMs);
  const pruner = setInterval(prune, PRUNE_INTERVAL_MS);
  pruner.unref();
  return {
    api: app.api,
    admin: app.admin,
    inFlight,
    keys,
    breakers,
    recent,
    logger,
    beginShutdown() {
      stopping = true;
      app.closeConnections();
    },
    activeRequests: () => app.activeRequests(),
    refuseWaiting: () => admission.closeAll(shuttingDownError),
    endInFlight: () => agent.endAll(SHUTTING_DOWN),
    cutting: () => app.cutting(),
    refused: (request) => app.refused(request),
    async close() {
      stopping = true;
      clearInterval(pruner);
      holds.stop();
      keys.close();
      health.stop();
      engineMetrics.stop();
      kvEvents.stop();
      await discovery.stop();
      breakers.shutdown();
      await agent.destroy();
      await limiter.stop();
      await shared?.close();
      // the last spans go to the collector; one that is away or refuses does not stop the shutdown
      await tracing?.shutdown().catch(() => undefined);
      logSink?.flush?.(); // the access log's last lines (they wait at most LINE_BATCH_MS otherwise)
    },
  };
}

/** Builds a router and starts its API and admin servers. */
export async function startRouter(config: Config, options: RouterOptions = {}): Promise<RunningRouter> {
  const router = await createRouter(config, options);
  const apiServer = createApiServer(config.server, router.api, (request) => router.refused(request));
  const adminServer = http.createServer(router.admin);
  try {
    const apiUrl = await listen(apiServer, config.server.port, config.server.host, 'server.port');
    const adminUrl = await listen(adminServer, config.admin.port, config.admin.host, 'admin.port');
    router.logger.info({ api: apiUrl, admin: adminUrl, pools: config.pools.length, deployments: config.deployments.length }, 'modelgate listening');
    const hurried = new AbortController();
    return {
      ...router,
      apiUrl,
      adminUrl,
      hurry() {
        if (hurried.signal.aborted) return;
        router.logger.warn('second signal: the shutdown ends its wait now');
        hurried.abort();
      },
      async close() {
        await router.close();
        apiServer.closeAllConnections();
        await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
      },
      async shutdown() {
        const { shutdownDelayMs, gracePeriodMs } = config.server;
        router.beginShutdown();
        router.logger.info({ shutdownDelayMs, gracePeriodMs }, 'shutting down: readiness failed, draining');
        await systemSleep(shutdownDelayMs, hurried.signal).catch(() => undefined);
        const { cut, refused, ended } = await drain(apiServer, () => router.activeRequests(), gracePeriodMs, {
          hurried: hurried.signal,
          refuseWaiting: () => router.refuseWaiting(),
          endInFlight: () => router.endInFlight(),
          beforeCut: () => router.cutting(),
        });
        if (refused > 0) router.logger.warn({ refused }, 'grace period over: the requests still waiting for a replica were answered 503');
        if (ended > 0) router.logger.warn({ ended }, 'grace period over: the requests still at an engine were ended (streams with their error event, the others 503)');
        if (cut > 0) router.logger.warn({ cut }, 'grace period over: the requests still open were cut');
        await router.close();
        await closeServer(adminServer);
        router.logger.info({ cut, refused, ended }, 'shut down');
        return { cut, refused, ended };
      },
    };
  } catch (err) {
    await router.close();
    await Promise.all([closeServer(apiServer), closeServer(adminServer)]);
    throw err;
  }
}
