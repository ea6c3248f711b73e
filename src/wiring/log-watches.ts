/** Log lines a steady fault would repeat without bound: said when it starts, then at most once a minute or when it ends (the router's breakers, its trace export, KV-event payloads skipped, a pool's model its replicas do not serve). */
import { type Logger } from 'pino';
import { type PoolSpec } from '../core/types.js';

/** How often, at most, a replica's breaker kept closed is logged (each time its health check passed, after server errors its engine answered). */
const KEPT_CLOSED_LOG_MS = 60_000;

/**
 * Logs a breaker kept closed at `warn`, at most once a minute per replica, with how many times since
 * the last line: a tenant sending requests its engine chokes on would otherwise write a line every few requests.
 */
export function keptClosedLog(log: Logger, clock: () => number): (pool: string, endpoint: string, keys: string[], failures: number) => void {
  const last = new Map<string, { at: number; since: number }>();
  return (pool, endpoint, keys, failures) => {
    const now = clock();
    const seen = last.get(endpoint);
    if (seen && now - seen.at < KEPT_CLOSED_LOG_MS) return void (seen.since += 1);
    if (last.size > 10_000) last.clear(); // endpoints come and go: the map stays bounded
    last.set(endpoint, { at: now, since: 0 });
    log.warn(
      { pool, endpoint, keys, failures, ...(seen && seen.since > 0 ? { alsoSince: seen.since } : {}) },
      'circuit breaker kept closed: server errors from a replica that passes its health check',
    );
  };
}

/**
 * Says when trace export to the collector starts failing (once, with why) and when it works again,
 * with every span lost meanwhile: those of the batches the collector refused or never got, and those
 * the batch processor dropped because its queue was full. Spans dropped for a full queue while the
 * collector takes batches (it is slower than the spans come) are said at most once a minute.
 */
export function exportWatch(logger: Logger, now: () => number = Date.now): { exported(ok: boolean, spans: number, error?: Error): void; queueFull(spans: number): void } {
  const log = logger.child({ component: 'tracing' });
  let failing = false;
  /** Spans lost and not yet said. */
  let lost = 0;
  let saidFullAt = -Infinity;
  return {
    exported(ok, spans, error) {
      if (!ok) {
        if (!failing) log.warn({ error: error?.message ?? 'unknown', spans }, 'trace export failed: spans are dropped until the collector takes them again');
        failing = true;
        lost += spans;
      } else if (failing) {
        log.info({ dropped: lost }, 'trace export works again');
        failing = false;
        lost = 0;
      }
    },
    queueFull(spans) {
      lost += spans;
      if (failing || now() - saidFullAt < 60_000) return;
      saidFullAt = now();
      log.warn({ dropped: lost }, 'trace spans dropped: the export queue is full (the collector is slower than the spans come; OTEL_BSP_MAX_QUEUE_SIZE)');
      lost = 0;
    },
  };
}

/** How often, at most, a replica's skipped KV-event messages are logged after the first. */
const BAD_PAYLOAD_LOG_MS = 60_000;

/**
 * Logs a KV-event message skipped (not a KVEventBatch or over the bounds), or one that waited for
 * the replica's share of the event loop (`throttled`), each reason on its own, at `warn`: a replica's first, then at most one line a minute that says how many more were skipped since. A publisher can
 * send such messages as fast as the network carries them (a flood wrote 112,000 lines in 5 s);
 * `modelgate_kv_events_bad_payloads_total` counts every one.
 */
export function badPayloadLog(log: Logger, clock: () => number): (pool: string, endpoint: string, message: string, reason?: string) => void {
  const last = new Map<string, { at: number; since: number }>();
  return (pool, endpoint, message, reason = 'malformed') => {
    const now = clock();
    const key = `${pool} ${endpoint} ${reason}`;
    const seen = last.get(key);
    if (seen && now - seen.at < BAD_PAYLOAD_LOG_MS) return void (seen.since += 1);
    if (last.size > 10_000) last.clear(); // replicas come and go: the map stays bounded
    last.set(key, { at: now, since: 0 });
    log.warn(
      { pool, endpoint, reason, error: message, ...(seen && seen.since > 0 ? { alsoSkipped: seen.since } : {}) },
      reason === 'throttled'
        ? "KV-event messages read late: the replica's batches take more than their share of the event loop (what its publisher cannot queue is dropped: a gap)"
        : 'KV-event message skipped: not a KVEventBatch',
    );
  };
}

/** How often, at most, a replica without its pool's model is logged after the first. */
const SERVED_MODEL_LOG_MS = 60_000;

/**
 * Logs a replica that answered 404 that it does not have its pool's `servedModelName` (director/exchange.ts
 * `servesNotModel`) at `warn`: a pool and replica's first, then at most one line a minute that says how many
 * more since. A misconfigured pool under load would otherwise write a line a request;
 * `modelgate_upstream_attempts_total{outcome="served_model_mismatch"}` counts every one.
 */
export function servedModelLog(log: Logger, clock: () => number): (pool: PoolSpec, endpoint: string, said: string) => void {
  const last = new Map<string, { at: number; since: number }>();
  return (pool, endpoint, said) => {
    const now = clock();
    const key = `${pool.name} ${endpoint}`;
    const seen = last.get(key);
    if (seen && now - seen.at < SERVED_MODEL_LOG_MS) return void (seen.since += 1);
    if (last.size > 10_000) last.clear(); // replicas come and go: the map stays bounded
    last.set(key, { at: now, since: 0 });
    log.warn(
      { pool: pool.name, endpoint, servedModelName: pool.servedModelName, engine: pool.engine, said: said.slice(0, 300), ...(seen && seen.since > 0 ? { alsoSince: seen.since } : {}) },
      "replica does not serve the pool's servedModelName (404 naming it): the pool or its engine is misconfigured (compare the engine's GET /v1/models); its requests are answered 502 served_model_mismatch when no other replica serves it (logged once a minute per replica)",
    );
  };
}
