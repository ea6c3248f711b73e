/**
 * Resilience settings of a pool: timeouts, retries, circuit breaker, admission, health checks.
 * RESILIENCE_DEFAULTS is the one table of defaults (the config schema, the CRD and the README quote
 * it). The config's `resilience` block overrides it for every pool, and a pool's own `resilience`
 * overrides that, field by field.
 */
import { type Engine, type ResilienceSettings } from '../core/types.js';

export type { ResilienceSettings };

export const RESILIENCE_DEFAULTS: ResilienceSettings = {
  timeouts: { connectMs: 5_000, firstByteMs: 180_000, idleMs: 60_000, totalMs: 1_800_000 },
  retries: { maxRetries: 2, initialBackoffMs: 25, maxBackoffMs: 1_000, maxRetryAfterMs: 5_000 },
  breaker: { failureThreshold: 5, cooldownMs: 10_000, closeAfterSuccesses: 2 },
  maxConcurrencyPerReplica: 0,
  queue: { maxSize: 256, timeoutMs: 30_000 },
  healthCheck: { enabled: false, intervalMs: 5_000, timeoutMs: 2_000, unhealthyThreshold: 2, healthyThreshold: 2 },
  scaleFromZero: { enabled: false, maxWaitMs: 300_000 },
};

/** Where each engine answers health checks; `openai` (a hosted API) has none. */
export const HEALTH_PATHS: Record<Engine, string | undefined> = {
  vllm: '/health',
  sglang: '/health',
  tgi: '/health',
  tei: '/health',
  llamacpp: '/health',
  openai: undefined,
};

export type ResilienceOverrides = { [K in keyof ResilienceSettings]?: ResilienceSettings[K] extends object ? Partial<ResilienceSettings[K]> : ResilienceSettings[K] };

/** `base` with `overrides` applied field by field (one level of nesting). */
export function mergeResilience(base: ResilienceSettings, overrides: ResilienceOverrides | undefined): ResilienceSettings {
  if (!overrides) return base;
  return {
    timeouts: { ...base.timeouts, ...overrides.timeouts },
    retries: { ...base.retries, ...overrides.retries },
    breaker: { ...base.breaker, ...overrides.breaker },
    maxConcurrencyPerReplica: overrides.maxConcurrencyPerReplica ?? base.maxConcurrencyPerReplica,
    queue: { ...base.queue, ...overrides.queue },
    healthCheck: { ...base.healthCheck, ...overrides.healthCheck },
    scaleFromZero: { ...base.scaleFromZero, ...overrides.scaleFromZero },
  };
}

/** A JSON Schema for resilience overrides (no defaults: they come from RESILIENCE_DEFAULTS). */
export const resilienceOverridesSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    timeouts: {
      type: 'object',
      additionalProperties: false,
      properties: {
        connectMs: { type: 'integer', minimum: 1 },
        firstByteMs: { type: 'integer', minimum: 1 },
        idleMs: { type: 'integer', minimum: 1 },
        totalMs: { type: 'integer', minimum: 1 },
      },
    },
    retries: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxRetries: { type: 'integer', minimum: 0, maximum: 10 },
        initialBackoffMs: { type: 'integer', minimum: 0 },
        maxBackoffMs: { type: 'integer', minimum: 0 },
        maxRetryAfterMs: { type: 'integer', minimum: 0 },
      },
    },
    breaker: {
      type: 'object',
      additionalProperties: false,
      properties: {
        failureThreshold: { type: 'integer', minimum: 1 },
        cooldownMs: { type: 'integer', minimum: 1 },
        closeAfterSuccesses: { type: 'integer', minimum: 1 },
      },
    },
    maxConcurrencyPerReplica: { type: 'integer', minimum: 0 },
    queue: {
      type: 'object',
      additionalProperties: false,
      properties: { maxSize: { type: 'integer', minimum: 0 }, timeoutMs: { type: 'integer', minimum: 1 } },
    },
    healthCheck: {
      type: 'object',
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        path: { type: 'string', pattern: '^/' },
        intervalMs: { type: 'integer', minimum: 100 },
        timeoutMs: { type: 'integer', minimum: 1 },
        unhealthyThreshold: { type: 'integer', minimum: 1 },
        healthyThreshold: { type: 'integer', minimum: 1 },
      },
    },
    scaleFromZero: {
      type: 'object',
      additionalProperties: false,
      properties: { enabled: { type: 'boolean' }, maxWaitMs: { type: 'integer', minimum: 1000, maximum: 3_600_000 } },
    },
  },
} as const;
