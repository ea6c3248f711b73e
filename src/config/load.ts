/**
 * Loads the config file: YAML → schema check with defaults → cross-field checks → frozen Config.
 * The only module (with keys-file) that reads the environment or config files.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import { describeSchemaErrors, type SchemaError } from '../core/schema-errors.js';
import { kvEventsProblem, mergeRouting, normalizeScorers, ROUTING_DEFAULTS, type RoutingOverrides, type RoutingSettings } from '../balancer/settings.js';
import { mergeResilience, RESILIENCE_DEFAULTS, type ResilienceOverrides } from '../resilience/settings.js';
import { AddressRanges } from '../core/address-ranges.js';
import { ROUTER_OWNED_HEADERS } from '../proxy/headers.js';
import { adapterProblem } from '../core/types.js';
import { configSchema, type Config, type EndpointConfig } from './schema.js';
import { validatorFor } from '../api/schema-validator.js';

export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID';
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(field ? `${field}: ${message}` : message);
  }
}

const validateConfig = validatorFor('config', 'config', configSchema);

/** Parses YAML text into plain data. Throws {@link ConfigError} with the line of a syntax error. */
export function parseYaml(text: string, source: string): unknown {
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: true });
  const first = doc.errors[0];
  // prettyErrors puts "at line L, column C:" on the message's first line, then a code excerpt
  if (first) throw new ConfigError(`${source}: ${(first.message.split('\n')[0] ?? 'invalid YAML').replace(/:$/, '')}`);
  return doc.toJS() as unknown;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

function checkUrl(raw: string, field: string): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`"${raw}" is not a URL; write it like http://10.0.0.7:8000`, field);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError(`"${raw}" must use http or https`, field);
  if (url.search || url.hash) throw new ConfigError(`"${raw}" must not have a query or fragment`, field);
  // the router never sends a URL's credentials, and the URL is the endpoint's id: in metric labels, logs and the status page
  if (url.username || url.password) {
    throw new ConfigError(
      `"${url.protocol}//…@${url.host}${url.pathname === '/' ? '' : url.pathname}" must not hold credentials (the router does not send them, and the URL is shown in metrics and logs); put the engine's key in the pool's backendKeyFile`,
      field,
    );
  }
}

/** Checks that span fields: unique names, existing target pools, one deployment per client-facing name. */
function crossCheck(config: Config): void {
  const pools = new Set<string>();
  config.pools.forEach((pool, i) => {
    if (pools.has(pool.name)) throw new ConfigError(`pool "${pool.name}" is defined twice`, `pools[${i}].name`);
    pools.add(pool.name);
    const urls = new Set<string>();
    pool.endpoints.forEach((ep, j) => {
      checkUrl(ep.url, `pools[${i}].endpoints[${j}]`);
      if (urls.has(ep.url)) throw new ConfigError(`"${ep.url}" is listed twice in the pool; list it once, with a weight if it should get more`, `pools[${i}].endpoints[${j}]`);
      urls.add(ep.url);
    });
  });
  const owners = new Map<string, string>();
  config.deployments.forEach((dep, i) => {
    const names: Array<[string, string]> = [[dep.id, 'id'], [dep.model, 'model'], ...dep.aliases.map((a, j): [string, string] => [a, `aliases[${j}]`])];
    for (const [value, field] of names) {
      const owner = owners.get(value);
      if (owner !== undefined && owner !== dep.id) {
        throw new ConfigError(`"${value}" already names deployment "${owner}"; a model name, deployment ID or alias must be unique`, `deployments[${i}].${field}`);
      }
      owners.set(value, dep.id);
    }
    dep.targets.forEach((t, j) => {
      if (!pools.has(t.pool)) throw new ConfigError(`pool "${t.pool}" is not defined under pools`, `deployments[${i}].targets[${j}].pool`);
    });
    if (dep.targets.every((t) => t.weight === 0)) throw new ConfigError('at least one target needs a weight above 0', `deployments[${i}].targets`);
    const adapter = dep.adapter;
    dep.targets.forEach((t, j) => {
      const base = config.pools.find((p) => p.name === t.pool);
      const problem = adapter && base ? adapterProblem(adapter, base) : undefined;
      if (problem !== undefined) throw new ConfigError(problem, base?.servedModelName === adapter?.name ? `deployments[${i}].adapter.name` : `deployments[${i}].targets[${j}].pool`);
    });
  });
  const ids = new Set(config.deployments.map((d) => d.id));
  config.deployments.forEach((dep, i) => {
    dep.fallbacks.forEach((f, j) => {
      if (f === dep.id) throw new ConfigError('a deployment cannot be its own fallback', `deployments[${i}].fallbacks[${j}]`);
      if (!ids.has(f)) throw new ConfigError(`deployment "${f}" is not defined under deployments`, `deployments[${i}].fallbacks[${j}]`);
    });
  });
}

/** A routing block's scorer list with weights filled in and each scorer named once. */
function normalizeRouting(routing: RoutingOverrides | undefined, field: string): RoutingOverrides | undefined {
  if (!routing?.scorers) return routing;
  const seen = new Set<string>();
  routing.scorers.forEach((s, i) => {
    if (seen.has(s.name)) throw new ConfigError(`scorer "${s.name}" is listed twice`, `${field}.scorers[${i}]`);
    seen.add(s.name);
  });
  return { ...routing, scorers: normalizeScorers(routing.scorers) };
}

/** The model tokenizer files kvEvents.tokenizer huggingface reads (kv-events/hf-tokenizer.ts). */
const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'];

/** One routing block's KV-event tokenizer directory: resolved against `baseDir`, its files readable now. */
function checkTokenizerDir(kv: RoutingSettings['kvEvents'], baseDir: string, field: string): void {
  const problem = kvEventsProblem(kv);
  if (problem) throw new ConfigError(problem, `${field}.kvEvents.tokenizerDir`);
  if (kv.tokenizerDir === undefined || kv.tokenizerDir === '') return;
  kv.tokenizerDir = resolve(baseDir, kv.tokenizerDir);
  if (!kv.enabled || kv.tokenizer !== 'huggingface') return;
  for (const file of TOKENIZER_FILES) {
    const path = resolve(kv.tokenizerDir, file);
    try {
      accessSync(path, constants.R_OK);
    } catch (err) {
      throw new ConfigError(
        `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): the directory must hold the model's ${TOKENIZER_FILES.join(' and ')}`,
        `${field}.kvEvents.tokenizerDir`,
      );
    }
  }
}

/** Every static pool's effective KV-event settings (its own over the router-wide ones), checked; relative directories resolved. */
function checkTokenizerDirs(config: Config, baseDir: string): void {
  const global = config.routing.kvEvents;
  if (global.tokenizerDir) global.tokenizerDir = resolve(baseDir, global.tokenizerDir);
  config.pools.forEach((pool, i) => {
    const own = pool.routing?.kvEvents;
    if (own?.tokenizerDir) own.tokenizerDir = resolve(baseDir, own.tokenizerDir);
    checkTokenizerDir({ ...global, ...own }, baseDir, pool.routing?.kvEvents ? `pools[${i}].routing` : 'routing');
  });
  if (config.pools.length === 0) checkTokenizerDir({ ...global }, baseDir, 'routing');
}

/**
 * Validates parsed config data. Relative file paths are resolved against `baseDir`; `POD_NAME` and
 * `POD_NAMESPACE` from `env` (the downward API) give the leader-election identity and lease namespace.
 * Throws {@link ConfigError} naming the first offending field.
 */
export function buildConfig(data: unknown, baseDir: string, env: NodeJS.ProcessEnv = {}): Config {
  const copy = structuredClone(data ?? {}) as unknown;
  if (!validateConfig(copy)) {
    // A typo shows up twice (the field it should be is missing, the one written is unknown): report both.
    const described = describeSchemaErrors(validateConfig.errors as SchemaError[]);
    throw new ConfigError(
      described
        .slice(0, 3)
        .map((d) => d.message)
        .join('; ') || 'invalid config',
    );
  }
  const config = copy as Config;
  config.resilience = mergeResilience(RESILIENCE_DEFAULTS, (copy as { resilience?: ResilienceOverrides }).resilience);
  config.routing = mergeRouting(ROUTING_DEFAULTS, normalizeRouting((copy as { routing?: RoutingOverrides }).routing, 'routing'));
  config.pools.forEach((pool, i) => {
    pool.routing = normalizeRouting(pool.routing, `pools[${i}].routing`);
  });
  for (const pool of config.pools) {
    pool.endpoints = (pool.endpoints as Array<string | Partial<EndpointConfig>>).map((ep) => (typeof ep === 'string' ? { url: ep, weight: 1 } : { url: ep.url ?? '', weight: ep.weight ?? 1 }));
  }
  crossCheck(config);
  try {
    new AddressRanges(config.server.trustedProxies);
  } catch (err) {
    throw new ConfigError((err as Error).message, 'server.trustedProxies');
  }
  config.server.forwardHeaders = config.server.forwardHeaders.map((h) => h.toLowerCase());
  config.server.forwardHeaders.forEach((header, i) => {
    if (ROUTER_OWNED_HEADERS.includes(header)) {
      const why = header === 'x-api-key' ? 'is a client credential (the key on /v1/messages)' : 'is set by the router itself';
      throw new ConfigError(`"${header}" ${why} and cannot be forwarded from clients`, `server.forwardHeaders[${i}]`);
    }
  });
  if (config.server.port !== 0 && config.server.port === config.admin.port) {
    throw new ConfigError(`must differ from server.port (both are ${config.server.port})`, 'admin.port');
  }
  if (config.server.headersTimeoutMs > config.server.requestTimeoutMs) {
    throw new ConfigError('must not exceed server.requestTimeoutMs', 'server.headersTimeoutMs');
  }
  const discovery = config.discovery;
  if (discovery.mode === 'kubernetes' && (config.pools.length > 0 || config.deployments.length > 0)) {
    throw new ConfigError('in kubernetes mode pools and deployments come from ModelPool and ModelDeployment objects; remove them from the config', config.pools.length > 0 ? 'pools' : 'deployments');
  }
  if (discovery.restartBackoffMs.initialMs > discovery.restartBackoffMs.maxMs) throw new ConfigError('initialMs must not exceed maxMs', 'discovery.restartBackoffMs');
  if (discovery.leaderElection.renewIntervalMs >= discovery.leaderElection.leaseDurationMs) {
    throw new ConfigError('renewIntervalMs must be shorter than leaseDurationMs', 'discovery.leaderElection.renewIntervalMs');
  }
  discovery.leaderElection.leaseNamespace ??= env.POD_NAMESPACE ?? 'default';
  discovery.identity ??= env.POD_NAME ?? hostname();
  if (discovery.kubeconfig) discovery.kubeconfig = resolve(baseDir, discovery.kubeconfig);
  config.auth.keysFile = resolve(baseDir, config.auth.keysFile);
  checkTokenizerDirs(config, baseDir);
  /** A secret or certificate named by a config field, read now (a missing file stops the start). */
  const readSecret = (file: string, field: string, trim: boolean): { path: string; text: string } => {
    const path = resolve(baseDir, file);
    try {
      const text = readFileSync(path, 'utf8');
      return { path, text: trim ? text.trim() : text };
    } catch (err) {
      throw new ConfigError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, field);
    }
  };
  config.pools.forEach((pool, i) => {
    if (!pool.backendKeyFile) return;
    const { path, text } = readSecret(pool.backendKeyFile, `pools[${i}].backendKeyFile`, true);
    pool.backendKeyFile = path;
    pool.backendKey = text;
  });
  const redis = config.limits.redis;
  if (redis) {
    try {
      new URL(redis.url);
    } catch {
      throw new ConfigError('is not a URL (redis://host:port/db or rediss://…)', 'limits.redis.url');
    }
    if (redis.passwordFile) ({ path: redis.passwordFile, text: redis.password } = readSecret(redis.passwordFile, 'limits.redis.passwordFile', true));
    if (redis.caFile) ({ path: redis.caFile, text: redis.ca } = readSecret(redis.caFile, 'limits.redis.caFile', false));
  }
  return deepFreeze(config);
}

/** Reads and validates the config file named by `file` or, failing that, `MODELGATE_CONFIG`. */
export function loadConfig(file: string | undefined, env: NodeJS.ProcessEnv): Config {
  const path = file ?? env.MODELGATE_CONFIG;
  if (!path) throw new ConfigError('no config file: pass --config FILE or set MODELGATE_CONFIG');
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  return buildConfig(parseYaml(text, path), dirname(resolve(path)), env);
}
