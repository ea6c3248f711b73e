/**
 * The config file's JSON Schema. It is the one table of defaults: ajv fills them in (`useDefaults`),
 * the README quotes them, and unknown fields are errors (`additionalProperties: false`).
 */
import { CAPABILITIES, ENGINES, type Capability, type Engine } from '../core/types.js';
import { NAME_PATTERN } from '../core/schema-errors.js';
import { routingOverridesSchema, type RoutingOverrides } from '../balancer/settings.js';
import { type LoraAdapter, type RoutingSettings, type Slo } from '../core/types.js';
import { defaultLimitsSchema, type LimitFields } from '../limits/settings.js';
import { resilienceOverridesSchema, type ResilienceOverrides, type ResilienceSettings } from '../resilience/settings.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface EndpointConfig {
  url: string;
  weight: number;
}

export interface PoolConfig {
  name: string;
  engine: Engine;
  servedModelName: string;
  /** Unset: the engine's defaults (core/types `defaultCapabilities`). */
  capabilities?: Capability[];
  endpoints: EndpointConfig[];
  /** File holding the key sent upstream; read at load into {@link PoolConfig.backendKey}. */
  backendKeyFile?: string;
  backendKey?: string;
  /** This pool's overrides of the config-wide `resilience` block. */
  resilience?: ResilienceOverrides;
  /** This pool's overrides of the config-wide `routing` block. */
  routing?: RoutingOverrides;
}

export interface DeploymentConfig {
  id: string;
  model: string;
  aliases: string[];
  targets: Array<{ pool: string; weight: number }>;
  /** Deployment IDs tried in order when this one has no replica that can take the request. */
  fallbacks: string[];
  /** This deployment's latency objective, over the config's `slo` (metrics/goodput.ts). */
  slo?: Partial<Slo>;
  /** A LoRA adapter served on the target pools' base model; the engines get `model` set to its name. */
  adapter?: LoraAdapter;
  /** Continue a chat or completions stream on another replica when its replica dies mid-way (director/resume.ts); absent: off. */
  resumeStreams?: boolean;
}

export interface DiscoveryConfig {
  mode: 'static' | 'kubernetes';
  /** Kubernetes: namespaces to watch; empty means all. */
  namespaces: string[];
  /** Kubernetes: kubeconfig file; absent: $KUBECONFIG, the in-cluster service account, then ~/.kube/config. */
  kubeconfig?: string;
  /** Kubernetes: full relist of every watched kind this often, dropping anything no longer listed. */
  resyncIntervalMs: number;
  /** Kubernetes: restart delay after a watch fails, doubling from `initialMs` up to `maxMs`, jittered. */
  restartBackoffMs: { initialMs: number; maxMs: number };
  leaderElection: { enabled: boolean; leaseName: string; leaseNamespace: string; leaseDurationMs: number; renewIntervalMs: number };
  /** This replica's name in leader election (POD_NAME, else the host name). */
  identity: string;
}

export interface ServerConfig {
  host: string;
  port: number;
  maxBodyBytes: number;
  /** Largest multipart upload (the audio routes) accepted. */
  maxUploadBytes: number;
  /** Responses API answers whose replica the router remembers, so `previous_response_id` follow-ups reach it (LRU). */
  rememberedResponses: number;
  /** Deepest JSON nesting accepted in a request body. */
  maxJsonDepth: number;
  /** Slowloris guards: time to receive the headers, and the whole request. */
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  /** Idle keep-alive connections are closed after this (longer than a load balancer's idle timeout). */
  keepAliveTimeoutMs: number;
  /** On SIGTERM: time between failing /readyz and refusing new connections. */
  shutdownDelayMs: number;
  /** On SIGTERM: time in-flight requests and streams get to finish before they are cut. */
  gracePeriodMs: number;
  /** A client that accepts no response bytes for this long, while the router holds its response, is cut. */
  clientStallTimeoutMs: number;
  /** Proxies (IPs, CIDRs) whose `x-forwarded-*` the router believes; from anyone else they are replaced. */
  trustedProxies: string[];
  /** Client request headers forwarded to engines on top of the default allow-list. */
  forwardHeaders: string[];
}

export interface RedisLimitsConfig {
  /** redis:// or rediss:// (TLS). */
  url: string;
  username?: string;
  /** File holding the password; read at load into {@link RedisLimitsConfig.password}. */
  passwordFile?: string;
  password?: string;
  /** TLS even with a redis:// URL. */
  tls: boolean;
  /** CA bundle for TLS; read at load into {@link RedisLimitsConfig.ca}. */
  caFile?: string;
  ca?: string;
  keyPrefix: string;
  /** A Redis call slower than this counts as Redis not answering, for that request. */
  timeoutMs: number;
  /** How often settled and streamed tokens are written to Redis. */
  flushIntervalMs: number;
  /** Router replicas assumed until their heartbeats in Redis say how many there are. */
  expectedRouters: number;
  /** Every request waits for Redis's answer, however far from its limits (else only near them). */
  strict: boolean;
  /** How long the routers' shared record of a Responses API answer (its replica and key) is kept. */
  responsesTtlHours: number;
}

export interface LimitsConfig {
  /** Limits of keys whose entry sets none of that kind. */
  defaults: LimitFields;
  /** Per-key usage metrics, labelled by key name. */
  keyMetrics: boolean;
  /** Shared counts; unset: each router counts alone. */
  redis?: RedisLimitsConfig;
}

export interface Config {
  server: ServerConfig;
  admin: { host: string; port: number };
  log: { level: LogLevel };
  /** Every deployment's latency objective unless it sets its own (metrics/goodput.ts). */
  slo: Slo;
  /** OpenTelemetry request traces (tracing/otel.ts); `endpoint` absent: the OTEL_EXPORTER_OTLP_* variables. */
  tracing: { enabled: boolean; endpoint?: string; sampleRatio: number; serviceName: string };
  auth: { keysFile: string; reloadIntervalMs: number };
  discovery: DiscoveryConfig;
  /** Resilience for every pool (RESILIENCE_DEFAULTS, overridden by the config's `resilience` block). */
  resilience: ResilienceSettings;
  /** Routing for every pool (ROUTING_DEFAULTS, overridden by the config's `routing` block). */
  routing: RoutingSettings;
  /** The request header that may lower a request's priority class below its key's. */
  priority: { header: string };
  /** Per-key limits (the keys file holds each key's own). */
  limits: LimitsConfig;
  pools: PoolConfig[];
  deployments: DeploymentConfig[];
}

const name = { type: 'string', minLength: 1, maxLength: 253, pattern: NAME_PATTERN } as const;
const port = { type: 'integer', minimum: 0, maximum: 65535 } as const;

/** An address to listen on: an IPv4 or IPv6 address, or a host name (what is not an address of this machine is found when the router listens). */
const HOST_PATTERN = '^[A-Za-z0-9._:%-]+$';

/** A latency objective (ms): time to first token and the mean gap between tokens. */
const sloSchema = {
  type: 'object',
  additionalProperties: false,
  properties: { ttftMs: { type: 'integer', minimum: 1 }, itlMs: { type: 'integer', minimum: 1 } },
} as const;

export const configSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['auth'],
  properties: {
    server: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', pattern: HOST_PATTERN, default: '0.0.0.0' },
        port: { ...port, default: 8080 },
        maxBodyBytes: { type: 'integer', minimum: 1024, default: 10 * 1024 * 1024 },
        maxUploadBytes: { type: 'integer', minimum: 1024, default: 25 * 1024 * 1024 },
        rememberedResponses: { type: 'integer', minimum: 0, default: 100_000 },
        maxJsonDepth: { type: 'integer', minimum: 4, maximum: 1000, default: 64 },
        headersTimeoutMs: { type: 'integer', minimum: 100, default: 15_000 },
        requestTimeoutMs: { type: 'integer', minimum: 100, default: 60_000 },
        keepAliveTimeoutMs: { type: 'integer', minimum: 100, default: 65_000 },
        shutdownDelayMs: { type: 'integer', minimum: 0, default: 5_000 },
        gracePeriodMs: { type: 'integer', minimum: 0, default: 30_000 },
        clientStallTimeoutMs: { type: 'integer', minimum: 100, default: 30_000 },
        trustedProxies: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true, default: [] },
        forwardHeaders: { type: 'array', items: { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$" }, uniqueItems: true, default: [] },
      },
    },
    admin: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', pattern: HOST_PATTERN, default: '0.0.0.0' },
        port: { ...port, default: 9090 },
      },
    },
    log: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: { level: { enum: LOG_LEVELS, default: 'info' } },
    },
    slo: { ...sloSchema, default: {}, properties: { ttftMs: { ...sloSchema.properties.ttftMs, default: 2000 }, itlMs: { ...sloSchema.properties.itlMs, default: 100 } } },
    tracing: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        enabled: { type: 'boolean', default: false },
        endpoint: { type: 'string', pattern: '^https?://' },
        sampleRatio: { type: 'number', minimum: 0, maximum: 1, default: 1 },
        serviceName: { type: 'string', minLength: 1, default: 'modelgate' },
      },
    },
    auth: {
      type: 'object',
      additionalProperties: false,
      required: ['keysFile'],
      properties: {
        keysFile: { type: 'string', minLength: 1 },
        reloadIntervalMs: { type: 'integer', minimum: 50, default: 2000 },
      },
    },
    discovery: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        mode: { enum: ['static', 'kubernetes'], default: 'static' },
        namespaces: { type: 'array', items: { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 }, uniqueItems: true, default: [] },
        kubeconfig: { type: 'string', minLength: 1 },
        resyncIntervalMs: { type: 'integer', minimum: 100, default: 30000 },
        restartBackoffMs: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: { initialMs: { type: 'integer', minimum: 10, default: 500 }, maxMs: { type: 'integer', minimum: 10, default: 30000 } },
        },
        leaderElection: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            enabled: { type: 'boolean', default: true },
            leaseName: { type: 'string', minLength: 1, default: 'modelgate' },
            leaseNamespace: { type: 'string', minLength: 1 },
            leaseDurationMs: { type: 'integer', minimum: 1000, default: 15000 },
            renewIntervalMs: { type: 'integer', minimum: 100, default: 5000 },
          },
        },
        identity: { type: 'string', minLength: 1 },
      },
    },
    resilience: resilienceOverridesSchema,
    routing: routingOverridesSchema,
    priority: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: { header: { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", default: 'x-modelgate-priority' } },
    },
    limits: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        defaults: defaultLimitsSchema,
        keyMetrics: { type: 'boolean', default: false },
        redis: {
          type: 'object',
          additionalProperties: false,
          required: ['url'],
          properties: {
            url: { type: 'string', pattern: '^rediss?://' },
            username: { type: 'string', minLength: 1 },
            passwordFile: { type: 'string', minLength: 1 },
            tls: { type: 'boolean', default: false },
            caFile: { type: 'string', minLength: 1 },
            keyPrefix: { type: 'string', pattern: '^[^{}]*$', default: 'modelgate:' },
            timeoutMs: { type: 'integer', minimum: 1, maximum: 10_000, default: 50 },
            flushIntervalMs: { type: 'integer', minimum: 10, maximum: 60_000, default: 250 },
            expectedRouters: { type: 'integer', minimum: 1, default: 1 },
            strict: { type: 'boolean', default: false },
            responsesTtlHours: { type: 'integer', minimum: 1, maximum: 8_760, default: 168 },
          },
        },
      },
    },
    pools: {
      type: 'array',
      default: [],
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name', 'servedModelName'],
        properties: {
          name,
          engine: { enum: ENGINES, default: 'vllm' },
          servedModelName: { type: 'string', minLength: 1 },
          capabilities: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: CAPABILITIES } },
          endpoints: {
            type: 'array',
            default: [],
            items: {
              description: 'an http(s) URL or {url, weight}',
              anyOf: [
                { type: 'string', minLength: 1 },
                {
                  type: 'object',
                  additionalProperties: false,
                  required: ['url'],
                  properties: { url: { type: 'string', minLength: 1 }, weight: { type: 'number', exclusiveMinimum: 0 } }, // weight defaults to 1 (ajv applies no defaults inside anyOf)
                },
              ],
            },
          },
          backendKeyFile: { type: 'string', minLength: 1 },
          resilience: resilienceOverridesSchema,
          routing: routingOverridesSchema,
        },
      },
    },
    deployments: {
      type: 'array',
      default: [],
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['id', 'model', 'targets'],
        properties: {
          id: name,
          model: name,
          aliases: { type: 'array', items: name, uniqueItems: true, default: [] },
          targets: {
            type: 'array',
            minItems: 1,
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['pool'],
              properties: { pool: name, weight: { type: 'number', minimum: 0, default: 100 } },
            },
          },
          fallbacks: { type: 'array', items: name, uniqueItems: true, default: [] },
          slo: sloSchema,
          adapter: {
            type: 'object',
            additionalProperties: false,
            required: ['name'],
            properties: { name, path: { type: 'string', minLength: 1, maxLength: 4096 } },
          },
          resumeStreams: { type: 'boolean' },
        },
      },
    },
  },
} as const;
