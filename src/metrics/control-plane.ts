/**
 * What the router learns off the request path: reloads of the API keys file (and whether the file in
 * force is the one on disk) and, in Kubernetes
 * mode, watch events, watch restarts and health, status writes and which replica holds the lease.
 */
import { Counter, Gauge } from './prom.js';
import type { Registry } from 'prom-client';
import { DISCOVERY_EVENT_TYPES, STATUS_KINDS, WATCHED_KINDS, WRITE_RESULTS } from './labels.js';

/** Live state the watch and lease gauges read at scrape time; absent outside Kubernetes mode. */
export interface ControlPlaneSources {
  /** Kubernetes mode: every watch (kind × namespace) and its health. */
  watches?(): Iterable<{ kind: string; namespace: string; up: boolean; lastSyncAt: number | undefined }>;
  /** Kubernetes mode: whether this replica holds the status-writer lease. */
  leader?(): boolean;
}

export interface ControlPlaneMetrics {
  keyReloads: Counter<'result'>;
  /** 1 while the keys in force are the file's content, 0 while the file is rejected (the keys before it stay). */
  keysFileValid: Gauge<string>;
  discoveryEvents: Counter<'kind' | 'type'>;
  watchRestarts: Counter<'kind' | 'namespace'>;
  statusWrites: Counter<'kind' | 'result'>;
}

export function controlPlaneMetrics(registers: Registry[], sources: ControlPlaneSources): ControlPlaneMetrics {
  if (sources.watches) {
    const watches = sources.watches.bind(sources);
    new Gauge({
      name: 'modelgate_discovery_watch_up',
      help: '1 while a watch is healthy, 0 while it is failing (the last known state keeps serving).',
      labelNames: ['kind', 'namespace'],
      registers,
      collect() {
        this.reset();
        for (const w of watches()) this.set({ kind: w.kind, namespace: w.namespace }, w.up ? 1 : 0);
      },
    });
    new Gauge({
      name: 'modelgate_discovery_last_sync_timestamp_seconds',
      help: 'When each watch last completed a full list (Unix seconds).',
      labelNames: ['kind', 'namespace'],
      registers,
      collect() {
        this.reset();
        for (const w of watches()) if (w.lastSyncAt !== undefined) this.set({ kind: w.kind, namespace: w.namespace }, w.lastSyncAt / 1000);
      },
    });
  }
  if (sources.leader) {
    const leader = sources.leader.bind(sources);
    new Gauge({
      name: 'modelgate_leader',
      help: '1 on the replica that holds the status-writer lease.',
      registers,
      collect() {
        this.set(leader() ? 1 : 0);
      },
    });
  }
  const metrics: ControlPlaneMetrics = {
    keyReloads: new Counter({
      name: 'modelgate_keys_reloads_total',
      help: 'Reloads of the API keys file, by result (success or failure).',
      labelNames: ['result'],
      registers,
    }),
    keysFileValid: new Gauge({
      name: 'modelgate_keys_file_valid',
      help: '1 while the API keys in force are what the keys file holds; 0 while the file is rejected (the keys before it stay in force: a key removed from the file still works).',
      registers,
    }),
    discoveryEvents: new Counter({
      name: 'modelgate_discovery_events_total',
      help: 'Watch events applied, by kind (endpointslices, modelpools, modeldeployments) and type (add, update, delete).',
      labelNames: ['kind', 'type'],
      registers,
    }),
    watchRestarts: new Counter({
      name: 'modelgate_discovery_watch_restarts_total',
      help: 'Watches restarted after an error or a failed relist.',
      labelNames: ['kind', 'namespace'],
      registers,
    }),
    statusWrites: new Counter({
      name: 'modelgate_status_writes_total',
      help: 'Status writes to ModelPool and ModelDeployment objects, by result.',
      labelNames: ['kind', 'result'],
      registers,
    }),
  };
  // the label sets known in advance, at 0: Kubernetes-only ones in Kubernetes mode only
  for (const result of WRITE_RESULTS) metrics.keyReloads.inc({ result }, 0);
  metrics.keysFileValid.set(1); // the router starts only with a keys file it accepted
  if (sources.watches) for (const kind of WATCHED_KINDS) for (const type of DISCOVERY_EVENT_TYPES) metrics.discoveryEvents.inc({ kind, type }, 0);
  if (sources.leader) for (const kind of STATUS_KINDS) for (const result of WRITE_RESULTS) metrics.statusWrites.inc({ kind, result }, 0);
  return metrics;
}
