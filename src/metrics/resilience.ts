/**
 * How the router protects clients from failing or overloaded replicas: every upstream attempt and
 * its outcome, retries, fallbacks to the next pool, admission queue waits, limits and rejections,
 * and the state of each endpoint's circuit breaker.
 */
import { Gauge, Histogram } from './prom.js';
import type { Registry } from 'prom-client';
import { HotCounter } from './hot-counter.js';
import { type AttemptOutcome, type RejectReason, type RetryReason } from './labels.js';

/** Live state the admission gauges read at scrape time. */
export interface AdmissionSources {
  /** Admission queue size of each pool that has a concurrency limit. */
  queueLimits(): Iterable<{ pool: string; limit: number }>;
}

/** What {@link observeResilienceGauges} reads at scrape time. */
export interface ResilienceSources {
  breakers: () => Iterable<{ pool: string; endpoint: string; state: 'closed' | 'open' | 'half-open' }>;
  queues: () => Iterable<{ pool: string; depth: number }>;
}

export interface ResilienceMetrics {
  attempts: HotCounter<'pool' | 'endpoint' | 'outcome', [pool: string, endpoint: string, outcome: AttemptOutcome]>;
  /** Answers whose engine reported more completion tokens than the request allowed (api/completion-limit.ts). */
  usageClamped: HotCounter<'pool' | 'endpoint', [pool: string, endpoint: string]>;
  retries: HotCounter<'pool' | 'reason', [pool: string, reason: RetryReason]>;
  queueWait: Histogram<'pool' | 'result'>;
  rejected: HotCounter<'pool' | 'reason', [pool: string, reason: RejectReason]>;
  fallbacks: HotCounter<'from_deployment' | 'from_pool' | 'to_deployment' | 'to_pool', [fromDeployment: string, fromPool: string, toDeployment: string, toPool: string]>;
}

export function resilienceMetrics(registers: Registry[], sources: AdmissionSources): ResilienceMetrics {
  new Gauge({
    name: 'modelgate_queue_limit',
    help: 'Admission queue size of each pool with a concurrency limit (queue.maxSize).',
    labelNames: ['pool'],
    registers,
    collect() {
      this.reset();
      for (const q of sources.queueLimits()) this.set({ pool: q.pool }, q.limit);
    },
  });
  return {
    attempts: new HotCounter({
      name: 'modelgate_upstream_attempts_total',
      help: 'Attempts to forward a request to an endpoint, by outcome (committed, upstream_<status>, connect, reset, first_byte_timeout, invalid_answer, …).',
      labelNames: ['pool', 'endpoint', 'outcome'],
      registers,
    }),
    usageClamped: new HotCounter({
      name: 'modelgate_engine_usage_clamped_total',
      help: 'Answers whose engine reported more completion tokens than the request allowed (max_tokens times its choices, …), charged to the key and counted at that limit instead: a replica that lies about usage, or a buggy one.',
      labelNames: ['pool', 'endpoint'],
      registers,
    }),
    retries: new HotCounter({
      name: 'modelgate_retries_total',
      help: 'Requests retried on another endpoint, by the reason the attempt before failed.',
      labelNames: ['pool', 'reason'],
      registers,
    }),
    queueWait: new Histogram({
      name: 'modelgate_queue_wait_seconds',
      help: "Time requests waited in a pool's admission queue, by how the wait ended (admitted, timeout, abandoned, displaced, pool_removed).",
      labelNames: ['pool', 'result'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    rejected: new HotCounter({
      name: 'modelgate_rejected_requests_total',
      help: 'Requests turned away by admission control, by reason (queue_full, queue_timeout, shed, no_replica_timeout: held for a pool at zero past scaleFromZero.maxWaitMs, pool_removed: the pool it waited for is gone).',
      labelNames: ['pool', 'reason'],
      registers,
    }),
    fallbacks: new HotCounter({
      name: 'modelgate_fallbacks_total',
      help: 'Requests that moved on to the next pool of their route: no replica of a pool could take them, or every attempt in it failed before the first byte.',
      labelNames: ['from_deployment', 'from_pool', 'to_deployment', 'to_pool'],
      registers,
    }),
  };
}

/** Gauges read from the resilience layer at scrape time; registered once per registry. */
export function observeResilienceGauges(registers: Registry[], sources: ResilienceSources & AdmissionSources): void {
  const code = { closed: 0, 'half-open': 1, open: 2 } as const;
  new Gauge({
    name: 'modelgate_breaker_state',
    help: 'Circuit breaker of each endpoint: 0 closed, 1 half-open, 2 open.',
    labelNames: ['pool', 'endpoint'],
    registers,
    collect() {
      this.reset();
      for (const b of sources.breakers()) this.set({ pool: b.pool, endpoint: b.endpoint }, code[b.state]);
    },
  });
  new Gauge({
    name: 'modelgate_queue_depth',
    help: "Requests waiting in each pool's admission queue.",
    labelNames: ['pool'],
    registers,
    collect() {
      this.reset();
      // every pool with a queue at 0 first: an empty queue is 0, not a missing series
      for (const q of sources.queueLimits()) this.set({ pool: q.pool }, 0);
      for (const q of sources.queues()) this.set({ pool: q.pool }, q.depth);
    },
  });
}
