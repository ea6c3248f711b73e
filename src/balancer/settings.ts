/**
 * Routing settings of a pool: the scheduling profile, engine-metrics scraping, prefix and session
 * affinity, and the saturation thresholds. ROUTING_DEFAULTS is the one table of defaults (the config
 * schema, the CRD and the README quote it). The config's `routing` block overrides it for every pool
 * and a pool's own `routing` overrides that: `scorers` as a whole list, every other group field by field.
 *
 * Why these weights (bench/results/prefix.md, prefix-tuning.md): a cached prefix saves most of a
 * prefill, worth far more than one request's difference in load, so `prefix` (10) outweighs the load
 * scorers together (3.25) until the load guard (`maxLoadGap`) releases it. `kv-cache` is a tie-breaker:
 * a sample up to a second old, at weight 1 it outvoted one request's load difference and queued
 * requests while another replica had a free slot (11–35% of the time, against 0% at 0.25). `session`
 * outweighs everything, or the header would not pin anything. `lora` (10, balancer/lora.ts) scores only
 * requests for a LoRA adapter: a replica holding the adapter skips an adapter load and the wait for a
 * free adapter slot, worth several requests of load (bench/results/lora.md).
 */
import { SCORER_NAMES, type RoutingSettings } from '../core/types.js';

export type { RoutingSettings };

export const ROUTING_DEFAULTS: RoutingSettings = {
  scorers: [
    { name: 'outstanding', weight: 2 },
    { name: 'queue', weight: 1 },
    { name: 'kv-cache', weight: 0.25 },
    { name: 'prefix', weight: 10 },
    { name: 'session', weight: 20 },
    { name: 'lora', weight: 10 },
  ],
  engineMetrics: { enabled: true, intervalMs: 1_000, timeoutMs: 500, staleAfterMs: 3_000 },
  prefix: { blockChars: 64, maxBlocks: 256, capacityPerEndpoint: 16_384, maxLoadGap: 4, isolateKeys: false },
  session: { header: 'x-session-id', loadFactor: 1.25 },
  saturation: { queueDepth: 5, kvCacheUsage: 0.8 },
  kvEvents: { enabled: false, endpoint: 'tcp://{host}:5557', staleAfterMs: 10_000, tokenizer: 'opaque', maxBlocksPerReplica: 65_536 },
  lora: { memoryMs: 30_000, maxLoadGap: 8, loadOnDemand: false, maxConcurrentLoads: 4, maxLoadsPerReplica: 1, loadTimeoutMs: 30_000 },
};

export interface RoutingOverrides {
  scorers?: RoutingSettings['scorers'];
  engineMetrics?: Partial<RoutingSettings['engineMetrics']>;
  prefix?: Partial<RoutingSettings['prefix']>;
  session?: Partial<RoutingSettings['session']>;
  saturation?: Partial<RoutingSettings['saturation']>;
  kvEvents?: Partial<RoutingSettings['kvEvents']>;
  lora?: Partial<RoutingSettings['lora']>;
}

/** `base` with `overrides` applied: `scorers` replaced as a list, the other groups field by field. */
export function mergeRouting(base: RoutingSettings, overrides: RoutingOverrides | undefined): RoutingSettings {
  if (!overrides) return base;
  return {
    scorers: overrides.scorers ?? base.scorers,
    engineMetrics: { ...base.engineMetrics, ...overrides.engineMetrics },
    prefix: { ...base.prefix, ...overrides.prefix },
    session: { ...base.session, ...overrides.session },
    saturation: { ...base.saturation, ...overrides.saturation },
    kvEvents: { ...base.kvEvents, ...overrides.kvEvents },
    lora: { ...base.lora, ...overrides.lora },
  };
}

/** Why merged KV-event settings cannot work (a huggingface tokenizer without its directory), or undefined. */
export function kvEventsProblem(k: RoutingSettings['kvEvents']): string | undefined {
  if (!k.enabled || k.tokenizer !== 'huggingface' || (k.tokenizerDir ?? '') !== '') return undefined;
  return "kvEvents.tokenizer huggingface needs kvEvents.tokenizerDir: the directory holding the model's tokenizer.json and tokenizer_config.json";
}

/** A JSON Schema for routing overrides (no defaults: they come from ROUTING_DEFAULTS). */
export const routingOverridesSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    scorers: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name'],
        properties: { name: { enum: SCORER_NAMES }, weight: { type: 'number', minimum: 0, maximum: 1000 } },
      },
    },
    engineMetrics: {
      type: 'object',
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        path: { type: 'string', pattern: '^/' },
        intervalMs: { type: 'integer', minimum: 100 },
        timeoutMs: { type: 'integer', minimum: 10 },
        staleAfterMs: { type: 'integer', minimum: 100 },
      },
    },
    prefix: {
      type: 'object',
      additionalProperties: false,
      properties: {
        blockChars: { type: 'integer', minimum: 8, maximum: 4096 },
        maxBlocks: { type: 'integer', minimum: 1, maximum: 4096 },
        capacityPerEndpoint: { type: 'integer', minimum: 16, maximum: 10_000_000 },
        maxLoadGap: { type: 'number', minimum: 0 },
        isolateKeys: { type: 'boolean' },
      },
    },
    session: {
      type: 'object',
      additionalProperties: false,
      properties: {
        header: { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$" },
        loadFactor: { type: 'number', minimum: 1 },
      },
    },
    saturation: {
      type: 'object',
      additionalProperties: false,
      properties: {
        queueDepth: { type: 'integer', minimum: 1 },
        kvCacheUsage: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      },
    },
    kvEvents: {
      type: 'object',
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        endpoint: { type: 'string', pattern: '^(tcp|ipc)://' },
        replayEndpoint: { type: 'string', pattern: '^$|^(tcp|ipc)://' },
        topic: { type: 'string', maxLength: 256 },
        staleAfterMs: { type: 'integer', minimum: 100, maximum: 3_600_000 },
        tokenizer: { enum: ['simulator', 'huggingface', 'opaque'] },
        tokenizerDir: { type: 'string', minLength: 1, maxLength: 4096 },
        maxBlocksPerReplica: { type: 'integer', minimum: 16, maximum: 10_000_000 },
      },
    },
    lora: {
      type: 'object',
      additionalProperties: false,
      properties: {
        memoryMs: { type: 'integer', minimum: 0, maximum: 3_600_000 },
        maxLoadGap: { type: 'number', minimum: 0 },
        loadOnDemand: { type: 'boolean' },
        maxConcurrentLoads: { type: 'integer', minimum: 1, maximum: 1000 },
        maxLoadsPerReplica: { type: 'integer', minimum: 1, maximum: 100 },
        loadTimeoutMs: { type: 'integer', minimum: 100, maximum: 600_000 },
      },
    },
  },
} as const;

/** Scorer weights default to 1 when a list entry leaves them out. */
export function normalizeScorers(scorers: ReadonlyArray<{ name: RoutingSettings['scorers'][number]['name']; weight?: number }>): RoutingSettings['scorers'] {
  return scorers.map((s) => ({ name: s.name, weight: s.weight ?? 1 }));
}
