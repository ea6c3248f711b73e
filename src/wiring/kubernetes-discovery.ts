/**
 * Kubernetes mode: discovery from EndpointSlices and the CRDs, the controller that writes their
 * status, and leader election, connected to the router's logs and metrics. main.ts imports this
 * module only in Kubernetes mode, so a static-mode router never loads @kubernetes/client-node.
 */
import { type Logger } from 'pino';
import { ConfigError } from '../config/load.js';
import { type Config } from '../config/schema.js';
import { systemScheduler, type Clock } from '../core/clock.js';
import { type PoolResolver, type PoolSpec } from '../core/types.js';
import { KubernetesController } from '../controller/kubernetes-controller.js';
import { type PoolMismatch, type PoolWaiting } from '../controller/status.js';
import { LeaderElector } from '../controller/leader-election.js';
import { createKubeApi } from '../discovery/kubernetes/kube-api.js';
import { resolveKubeCredentials } from '../discovery/kubernetes/kube-credentials.js';
import { KubernetesDiscovery } from '../discovery/kubernetes/kubernetes-discovery.js';
import { describeKubeError } from '../discovery/kubernetes/resilient-watch.js';
import { type DiscoveryWiring } from '../discovery/wiring.js';
import { type RouterMetrics } from '../metrics/metrics.js';

/**
 * What `modelgate validate` checks of Kubernetes mode: the kubeconfig file the config names, read as
 * `serve` reads it (a ConfigError naming it when it is missing or unusable). Credentials from the
 * environment (KUBECONFIG, the service account) belong to where `serve` runs, so they are not checked.
 */
export function checkKubeconfig(config: Config, env: NodeJS.ProcessEnv): void {
  if (config.discovery.kubeconfig === undefined) return;
  try {
    resolveKubeCredentials({ file: config.discovery.kubeconfig, env });
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

export function kubernetesDiscovery(config: Config, resolve: PoolResolver, logger: Logger, metrics: () => RouterMetrics, random: () => number, clock: Clock): DiscoveryWiring {
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
        logger.warn(
          { kind, namespace: namespace || '(all)', error: state.lastError, restarts: state.restarts },
          state.synced ? 'Kubernetes watch failed; serving the last known state until it recovers' : 'Kubernetes watch failed before its first sync',
        );
      } else if (wasUp.get(key) !== true) {
        logger.info({ kind, namespace: namespace || '(all)' }, 'Kubernetes watch synced');
      }
      wasUp.set(key, state.up);
    },
  });
  // The controller asks the elector (declared below) only when it is about to write.
  let demand: ((pool: string) => PoolWaiting) | undefined;
  let servedModel: ((pool: PoolSpec) => PoolMismatch | undefined) | undefined;
  const controller = new KubernetesController(discovery, api, {
    logger,
    // Status is written from the whole picture only: before every watch has listed, a pool would read
    // as having no endpoints and a deployment's pools as missing (a new leader's watches may sync late)
    mayWriteStatus: () => discovery.hasSynced() && (elector?.isLeader() ?? true),
    onStatusWrite: (kind, ok) => metrics().recordStatusWrite(kind, ok),
    demand: (pool) => demand?.(pool) ?? { waiting: 0, held: 0 },
    servedModel: (pool) => servedModel?.(pool),
    clock: () => clock.now(),
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
        onError: (err) => logger.warn({ error: describeKubeError(err) }, 'leader election: lease update failed'),
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
    observeDemand(source) {
      demand = source;
    },
    observeServedModel(source) {
      servedModel = source;
    },
    demandChanged: () => controller.syncStatus(),
    onPoolsChanged: (listener) => discovery.onChange(listener),
    start() {
      discovery.start();
      elector?.start();
    },
    async stop() {
      await elector?.stop();
      await discovery.stop();
      await controller.idle();
      controller.stop();
    },
  };
}
