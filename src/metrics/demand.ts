/**
 * Per-pool demand, for autoscalers (KEDA's Prometheus trigger, an HPA on an external metric) and for
 * the operator: what this router has in flight to each pool, what waits for a replica, what is held
 * for a pool at zero, and the engines' queue and KV-cache use as this router last sampled them.
 *
 * `modelgate_pool_demand_requests` (in flight + waiting + turned away) is the scaling signal. Summed over the
 * routers, divided by the requests one replica should carry, it is the replica count to aim for —
 * which is exactly what KEDA's `threshold` and an HPA's `AverageValue` target compute, so the router
 * publishes the demand and not a replica count of its own (each router sees only its share).
 *
 * Besides `pool` (the pool's key: `namespace/name` in Kubernetes mode), the gauges carry `pool_namespace`
 * and `pool_name`: an HPA's label selector cannot match a value with a slash.
 */
import { Counter, Gauge } from './prom.js';
import type { Registry } from 'prom-client';
import { type HoldEvent } from '../core/types.js';
import { HOLD_EVENTS } from './labels.js';

/** One pool's demand, read at scrape time. */
export interface PoolDemand {
  pool: string;
  /** Requests sent to its replicas and not yet answered (this router). */
  inFlight: number;
  /** Requests waiting in its admission queue (held ones included). */
  waiting: number;
  /** Requests waiting for a first ready replica (scale from zero). */
  held: number;
  /** Requests turned away for want of capacity, as the concurrency they would have held (wiring/demand.ts `TurnedAway`). */
  turnedAway?: number;
  /** The engines' own queues, summed over replicas with a fresh sample (none: no sample). */
  engineWaiting?: number;
  /** Mean KV-cache use over replicas with a fresh sample that report it. */
  kvCacheUsage?: number;
}

export interface DemandMetrics {
  held: Counter<'pool' | 'pool_namespace' | 'pool_name' | 'event'>;
  /** Whether pool keys are `namespace/name` (Kubernetes mode). */
  namespaced: boolean;
}

/**
 * The pool's key split for label selectors: in Kubernetes mode `ns/name` → (ns, name). A static pool
 * has no namespace, whatever its name holds: `meta-llama/Llama-3.1-8B` is a name, not a namespace.
 */
export function poolLabels(pool: string, namespaced: boolean): { pool: string; pool_namespace: string; pool_name: string } {
  const slash = namespaced ? pool.indexOf('/') : -1;
  return slash < 0 ? { pool, pool_namespace: '', pool_name: pool } : { pool, pool_namespace: pool.slice(0, slash), pool_name: pool.slice(slash + 1) };
}

const LABELS = ['pool', 'pool_namespace', 'pool_name'] as const;

export function demandMetrics(registers: Registry[], demand: () => Iterable<PoolDemand>, namespaced: boolean): DemandMetrics {
  const gauge = (name: string, help: string, value: (d: PoolDemand) => number | undefined): void => {
    new Gauge({
      name,
      help,
      labelNames: LABELS,
      registers,
      collect() {
        this.reset();
        for (const d of demand()) {
          const v = value(d);
          if (v !== undefined) this.set(poolLabels(d.pool, namespaced), v);
        }
      },
    });
  };
  gauge(
    'modelgate_pool_demand_requests',
    "Requests in flight to the pool's replicas, plus requests waiting for one, plus those turned away for want of capacity as the concurrency they would have held (this router): the autoscaling signal. sum() over routers ÷ requests per replica = replicas to aim for.",
    (d) => d.inFlight + d.waiting + (d.turnedAway ?? 0),
  );
  gauge(
    'modelgate_pool_turned_away_requests',
    "Requests turned away for want of the pool's capacity (queue full, queue timeout, shed) in the last minute, per second, times how long the pool's requests hold a replica on average: the part of the demand they make.",
    (d) => d.turnedAway,
  );
  gauge('modelgate_pool_requests_in_flight', "Requests this router has sent to the pool's replicas and not yet seen answered.", (d) => d.inFlight);
  gauge('modelgate_pool_requests_held', 'Requests waiting for a first ready replica of a pool that scales from zero.', (d) => d.held);
  gauge('modelgate_pool_engine_waiting_requests', "Requests queued inside the pool's engines, summed over replicas with a fresh metrics sample.", (d) => d.engineWaiting);
  gauge('modelgate_pool_kv_cache_usage_ratio', "Mean KV-cache use (0..1) of the pool's replicas with a fresh metrics sample.", (d) => d.kvCacheUsage);
  const held = new Counter({
    name: 'modelgate_pool_held_requests_total',
    help: 'Requests held for a pool at zero, by event: held (began to wait), served (a replica turned ready and took it), timeout (none in scaleFromZero.maxWaitMs), abandoned (the client left), rejected (queue full, or the pool is gone).',
    labelNames: [...LABELS, 'event'],
    registers,
  });
  return { held, namespaced };
}

/** Starts a pool's held-requests series at 0, one per event. */
export function seedHolds(metrics: DemandMetrics, pool: string): void {
  const labels = poolLabels(pool, metrics.namespaced);
  for (const event of HOLD_EVENTS) metrics.held.inc({ ...labels, event }, 0);
}

/** Records one {@link HoldEvent}. */
export function recordHold(metrics: DemandMetrics, pool: string, event: HoldEvent): void {
  metrics.held.inc({ ...poolLabels(pool, metrics.namespaced), event });
}
