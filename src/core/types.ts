/** Shared shapes of the routing model. Pure data: no behaviour, no I/O. */

export type Engine = 'vllm' | 'sglang' | 'tgi' | 'tei' | 'llamacpp' | 'openai';
/** What a pool's engine serves; each API route needs one (src/api/routes.ts). */
export type Capability = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages' | 'rerank' | 'score' | 'tokenize' | 'audio';

export const ENGINES: readonly Engine[] = ['vllm', 'sglang', 'tgi', 'tei', 'llamacpp', 'openai'];
export const CAPABILITIES: readonly Capability[] = ['chat', 'completions', 'embeddings', 'responses', 'messages', 'rerank', 'score', 'tokenize', 'audio'];

/** What a pool serves when it does not say: an embedding server (TEI) embeds, every other engine generates text. */
export function defaultCapabilities(engine: Engine): Capability[] {
  return engine === 'tei' ? ['embeddings'] : ['chat', 'completions'];
}

/**
 * APIs a pool may declare that its engine serves under another body, which the router does not
 * translate: every such request would fail at the engine. TEI's `/rerank` takes `texts`, the router's
 * rerank API `documents`; TGI's `/tokenize` takes `inputs` and llama.cpp's `content`, the router's
 * tokenize API vLLM's `prompt` or `messages`.
 */
const UNSERVED: Partial<Record<Engine, Partial<Record<Capability, string>>>> = {
  tei: { rerank: "TEI's /rerank takes `texts`, not the rerank API's `documents`" },
  tgi: { tokenize: "TGI's /tokenize takes `inputs`, not vLLM's `prompt` or `messages`" },
  llamacpp: { tokenize: "llama.cpp's /tokenize takes `content`, not vLLM's `prompt` or `messages`" },
};

/** Why each capability a pool declares is one its engine does not serve as the router speaks it (a warning: the pool is still served). */
export function unservedCapabilities(pool: { name: string; engine: Engine; capabilities: readonly Capability[] }): string[] {
  const unserved = UNSERVED[pool.engine] ?? {};
  return pool.capabilities.flatMap((c) =>
    unserved[c] ? [`pool ${pool.name} declares ${c}, which its engine (${pool.engine}) does not serve as the router sends it: ${unserved[c]}; every such request would fail at the engine`] : [],
  );
}

/** The inference APIs the router serves, one per route of the table in src/api/routes.ts. */
export type ApiName = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages' | 'rerank' | 'score' | 'tokenize' | 'detokenize' | 'transcriptions' | 'translations';

/**
 * How an API speaks on the wire: its error envelope, how a stream it cuts short ends, and how its
 * stream reports tokens. `openai`: chat-style chunks, `{"error":{…}}`, `data: [DONE]`; `responses`:
 * typed Responses API events, an `error` event; `anthropic`: Messages API events and Anthropic's envelope.
 */
export type WireDialect = 'openai' | 'responses' | 'anthropic';

/**
 * What became of a resumable stream that broke after its first byte (director/resume.ts), with the
 * bounded reasons of each: what broke a resumed one, why one was refused, why one failed to resume.
 */
export const RESUME_REASONS = {
  resumed: ['upstream_broken', 'idle_timeout', 'error_event'],
  refused: ['n', 'tools', 'logprobs', 'guided_decoding', 'prompt', 'reasoning', 'finished', 'engine', 'max_resumptions'],
  failed: ['no_replica', 'upstream_error', 'connection', 'timeout'],
} as const;
export type ResumeResult = keyof typeof RESUME_REASONS;
export type ResumeReason = (typeof RESUME_REASONS)[ResumeResult][number];

/** What became of a `previous_response_id`: sent to the replica holding it, unknown to the router, its replica gone, or another key's (refused). */
export type PreviousResponseOutcome = 'pinned' | 'unknown' | 'replica_gone' | 'other_route' | 'other_key' | 'unchecked';

/** A pool's timeouts, retries, breaker, admission and health checks (defaults: resilience/settings.ts). */
export interface ResilienceSettings {
  timeouts: {
    /** TCP connect to the engine. */
    connectMs: number;
    /** Request sent → first byte of the response body (a stuck prefill). Bounds a whole non-streamed generation. */
    firstByteMs: number;
    /** Longest silence between two chunks of a stream once it started; a body that is not a stream gets it from its first byte to its last. */
    idleMs: number;
    /** Whole exchange, all attempts included. */
    totalMs: number;
  };
  retries: {
    /** Extra attempts after the first; 0 disables retries. */
    maxRetries: number;
    initialBackoffMs: number;
    maxBackoffMs: number;
    /** An engine asking (Retry-After) for longer than this is not retried in its pool: the request moves on to the route's next pool, or the engine's answer goes to the client. */
    maxRetryAfterMs: number;
  };
  breaker: {
    /** Consecutive failures (connection errors, 5xx, timeouts) that open an endpoint's breaker. */
    failureThreshold: number;
    /** How long an open breaker rejects before letting one probe request through. */
    cooldownMs: number;
    /** Successes after the probe before a single failure stops re-opening it at once. */
    closeAfterSuccesses: number;
  };
  /** Requests at once per replica; 0 means no limit (and no queue). */
  maxConcurrencyPerReplica: number;
  queue: {
    /** Requests that may wait for a free replica; beyond that 429. */
    maxSize: number;
    /** Longest wait in the queue before 429. */
    timeoutMs: number;
  };
  healthCheck: {
    enabled: boolean;
    /** Defaults to the engine's health path (`/health` for vLLM, SGLang, TGI, TEI and llama.cpp). */
    path?: string;
    intervalMs: number;
    timeoutMs: number;
    unhealthyThreshold: number;
    healthyThreshold: number;
  };
  /**
   * Scale from zero: a request for the pool while it has no ready replica waits (in the admission
   * queue, up to `maxWaitMs`) for one to turn ready instead of getting a 503 at once.
   */
  scaleFromZero: {
    enabled: boolean;
    maxWaitMs: number;
  };
}

/** The scorers a pool's scheduling profile can combine (see balancer/scorers.ts). */
export type ScorerName = 'outstanding' | 'queue' | 'kv-cache' | 'prefix' | 'session' | 'lora';
export const SCORER_NAMES: readonly ScorerName[] = ['outstanding', 'queue', 'kv-cache', 'prefix', 'session', 'lora'];

/** Request classes, most important first. */
export type Priority = 'critical' | 'standard' | 'sheddable';
export const PRIORITIES: readonly Priority[] = ['critical', 'standard', 'sheddable'];

/** How a pool picks a replica (defaults: balancer/settings.ts). */
export interface RoutingSettings {
  /** The scheduling profile: each scorer gives every candidate a score in [0,1]; the highest weighted sum wins. */
  scorers: ReadonlyArray<{ name: ScorerName; weight: number }>;
  /** Scraping each replica's own Prometheus metrics (queue, running, KV-cache use). */
  engineMetrics: {
    enabled: boolean;
    /** Defaults to `/metrics`. */
    path?: string;
    intervalMs: number;
    timeoutMs: number;
    /** A sample older than this is ignored, never trusted. */
    staleAfterMs: number;
  };
  prefix: {
    /** Characters per hashed prompt block (about 4 characters per token). */
    blockChars: number;
    /** Blocks of a prompt that are hashed and matched; the rest of a longer prompt is ignored. */
    maxBlocks: number;
    /** Block hashes remembered per replica (LRU) when its engine does not report its KV-cache size (cache_config_info). */
    capacityPerEndpoint: number;
    /** A prefix match stops counting on a replica with more than this many outstanding requests (per unit of weight) above the least-loaded candidate. */
    maxLoadGap: number;
    /**
     * Per-key isolation: prefix affinity matches only the same key's blocks, and a vLLM pool's chat and
     * completions requests get the key's `cache_salt`, so one key cannot probe another's cached prompts.
     */
    isolateKeys: boolean;
  };
  session: {
    /** Request header whose value pins a conversation to a replica. */
    header: string;
    /** Bounded load: a session's replica is skipped while it holds more than loadFactor × the mean load. */
    loadFactor: number;
  };
  /** When engine metrics call a replica saturated; a pool whose fresh replicas all are sheds sheddable requests. */
  saturation: { queueDepth: number; kvCacheUsage: number };
  /** The engines' KV-cache events (vLLM/SGLang `--kv-events-config`), for exact prefix matches (src/kv-events). */
  kvEvents: KvEventsSettings;
  /** LoRA adapters (balancer/lora.ts): placement memory, load guard, and loading adapters on demand. */
  lora: {
    /** A request for an adapter was sent to a replica this recently: the replica counts as holding it. */
    memoryMs: number;
    /** Holding the adapter stops counting on a replica with more than this many outstanding requests (per unit of weight) above the least-loaded candidate. */
    maxLoadGap: number;
    /** Load the adapter through the engine's `/v1/load_lora_adapter` on the chosen replica when the router knows of no replica holding it. */
    loadOnDemand: boolean;
    /** Adapter loads in flight at once per pool; more wait for a free turn. */
    maxConcurrentLoads: number;
    /** Adapter loads in flight at once per replica. */
    maxLoadsPerReplica: number;
    /** Longest wait for one load (its turn included); then the request fails with ADAPTER_LOAD_FAILED. */
    loadTimeoutMs: number;
  };
}

/** A LoRA adapter a deployment serves on its pools' base model: the name the engine serves it under, and where the engine loads it from. */
export interface LoraAdapter {
  name: string;
  /** What `/v1/load_lora_adapter` gets as `lora_path` (default: the name). */
  path?: string;
}

/** How a pool subscribes to its replicas' KV-cache events (defaults: balancer/settings.ts). */
export interface KvEventsSettings {
  enabled: boolean;
  /** Each replica's ZMQ publisher; `{host}` is the replica's address (its pod IP in Kubernetes). */
  endpoint: string;
  /** Each replica's replay socket, asked for missed batches after a sequence gap (unset or '': none). */
  replayEndpoint?: string;
  /** ZMQ topic prefix subscribed to (unset or '': every topic). */
  topic?: string;
  /** A replica whose publisher has been unreachable this long is routed by the estimate again. */
  staleAfterMs: number;
  /**
   * How the router reads the token ids the events carry. `simulator`: with the simulator's tokenizer
   * and chat template, so the router computes the engine's blocks exactly. `huggingface`: with the
   * model's own tokenizer and chat template (`tokenizerDir`): exact for a real engine too, the request
   * side rendering the template. `opaque`: it cannot; events only clear the estimate when the engine's cache is cleared.
   */
  tokenizer: 'simulator' | 'huggingface' | 'opaque';
  /** `huggingface`: the directory holding the model's `tokenizer.json` and `tokenizer_config.json`. */
  tokenizerDir?: string;
  /** Engine blocks remembered per replica (the oldest stored dropped first beyond it). */
  maxBlocksPerReplica: number;
}

/**
 * A pool as discovery reads it (a config file's `pools[]`, a ModelPool): plain data, its settings
 * overrides not yet checked or merged. A PoolResolver turns it into a PoolSpec.
 */
export interface PoolDeclaration {
  name: string;
  engine: Engine;
  servedModelName: string;
  capabilities: readonly Capability[];
  backendKey?: string;
  /** The pool's own `resilience` and `routing` overrides, as written. */
  overrides: { resilience?: unknown; routing?: unknown };
}

/**
 * Checks a pool's overrides and merges them over the router-wide settings (config/pool-settings.ts,
 * the one place that does). `path` prefixes problems (`spec` for a ModelPool).
 */
export type PoolResolver = (pool: PoolDeclaration, path: string) => { spec: PoolSpec } | { problem: string };

/** A group of interchangeable replicas serving one model. */
export interface PoolSpec {
  name: string;
  engine: Engine;
  /** The `model` value the replicas expect; requests are rewritten to it. */
  servedModelName: string;
  capabilities: readonly Capability[];
  /** Sent upstream as `Authorization: Bearer …` instead of the client's key. */
  backendKey?: string;
  /** Timeouts, retries, breaker, admission and health checks, fully resolved. */
  resilience: ResilienceSettings;
  /** Scheduling profile, engine metrics, prefix and session affinity, fully resolved. */
  routing: RoutingSettings;
  /**
   * Set on the view of a pool a LoRA deployment routes to (registry.ts): `servedModelName` is then the
   * adapter's name, and `baseModel` the pool's own served model.
   */
  adapter?: LoraAdapter & { baseModel: string };
}

/** One replica that can take traffic right now. */
export interface Endpoint {
  /** Stable identity: the pod (`namespace/name`) in Kubernetes, the URL in static mode. */
  id: string;
  pool: string;
  /** Base URL, e.g. `http://10.0.0.7:8000`. */
  url: URL;
  /** Relative share of traffic, > 0. */
  weight: number;
}

export interface DeploymentTarget {
  pool: string;
  weight: number;
}

/** What clients call: a model name, a deployment ID or an alias, sent to weighted pools. */
export interface Deployment {
  id: string;
  model: string;
  aliases: readonly string[];
  targets: readonly DeploymentTarget[];
  /** Deployment IDs tried in order when none of this deployment's pools can take the request (before its first byte): in its own namespace. */
  fallbacks: readonly string[];
  /** A ModelDeployment's namespace (Kubernetes mode): its fallbacks are the deployments of this namespace. */
  namespace?: string;
  /**
   * What names the deployment in metrics (`deployment`, `from_deployment`, `to_deployment`), the access
   * log and traces, unique across namespaces: a ModelDeployment's `namespace/name` (two namespaces may
   * each have a `llama`), made once when it is parsed; absent in static mode, where the config's unique
   * `id` is the label. Read it through {@link deploymentLabel}.
   */
  label?: string;
  /** Unix seconds, shown as `created` in /v1/models. */
  created: number;
  /** Its own latency objective, over the config's `slo` (the goodput counters). */
  slo?: Partial<Slo>;
  /** A chat or completions stream whose replica dies mid-way continues on another replica (director/resume.ts). */
  resumeStreams?: boolean;
  /** A LoRA adapter on its pools' base model: requests are sent to the engines under the adapter's name. */
  adapter?: LoraAdapter;
}

/** The deployment's label in metrics, logs and traces: `namespace/name` in Kubernetes mode, the config's `id` in static mode. Made once, not per request. */
export function deploymentLabel(deployment: Deployment): string {
  return deployment.label ?? deployment.id;
}

/** A latency objective, in ms: time to first token, and the mean gap between tokens. */
export interface Slo {
  ttftMs: number;
  itlMs: number;
}

/** One replica's own load, as its engine last reported it on `/metrics`. */
export interface EngineLoad {
  /** Requests queued in the engine, waiting for a batch slot. */
  waiting: number;
  /** Requests in the engine's running batch (0 for engines that report only a queue). */
  running: number;
  /** KV-cache use 0..1, when the engine reports it. */
  kvCacheUsage?: number;
  /** KV-cache size in tokens, when the engine reports it (vLLM and SGLang `cache_config_info`). */
  cacheTokens?: number;
  /** The LoRA adapters of its running and waiting requests and its adapter slots, when the engine reports them (vLLM `lora_requests_info`). */
  lora?: LoraLoad;
  /** Clock time (ms) of the sample. */
  at: number;
  /** This router's outstanding requests to the replica when the sample was taken. */
  localAtSample: number;
}

/** A replica's LoRA adapters as its engine reports them. */
export interface LoraLoad {
  /** Adapters of requests in the running batch (they hold a GPU adapter slot). */
  running: readonly string[];
  /** Adapters of requests waiting to be scheduled. */
  waiting: readonly string[];
  /** Adapter slots: distinct adapters a batch may hold at once (vLLM `--max-loras`). */
  maxLora: number;
}

/** Read side of engine metrics: a replica's fresh load, or undefined (never scraped, failing, or stale). */
export interface EngineLoadSource {
  /** `now`: the source's clock read once by a caller asking for many endpoints (else read per call). */
  load(endpointId: string, now?: number): EngineLoad | undefined;
  /** The clock `load` judges freshness by. */
  now?(): number;
}

/**
 * Read side of KV-cache events: what a replica's engine reported holding. `state`: 0 no fresh report
 * (the estimate answers), 1 a partial one (blocks stored before the router subscribed are missing: a
 * lower bound), 2 complete (exact).
 */
export interface KvPrefixSource {
  state(pool: string, endpointId: string): 0 | 1 | 2;
  /** Leading blocks of `blocks` (balancer/prefix-index `promptBlocks`) the replica's engine holds. */
  match(pool: string, endpointId: string, blocks: readonly number[]): number;
  /**
   * The prompt's text as the pool's engine renders it (`kvEvents.tokenizer: huggingface`, once the
   * model's files are loaded); undefined when the router's own rendering stands (other pools, APIs
   * the template does not take, a template that fails): then the events cannot answer for this prompt.
   */
  promptText?(pool: string, prompt: PromptSource): string | undefined;
}

/** A request's body and API (`chat`, `completions`…), for a pool that renders prompts with the model's own template. */
export interface PromptSource {
  readonly api: string;
  readonly body: Readonly<Record<string, unknown>>;
}

/** Read side of discovery: the current routable endpoints of a pool (an immutable snapshot). */
export interface EndpointSource {
  snapshot(pool: string): readonly Endpoint[];
}

/** Something that must have loaded its initial state before the router is ready. */
export interface Syncable {
  hasSynced(): boolean;
}

/**
 * What happened to a request held for a pool at zero: `held` (began to wait), `served` (a replica
 * turned ready and took it), `timeout` (none within `scaleFromZero.maxWaitMs`), `abandoned` (the
 * client left), `rejected` (the queue was full, or the pool is gone).
 */
export type HoldEvent = 'held' | 'served' | 'timeout' | 'abandoned' | 'rejected';

/**
 * Where the access log writes its lines (to the logger's destination, the lines of one turn of the
 * event loop in one write), and the bindings every line of the logger starts with (`"service":"modelgate"`).
 */
export interface LineSink {
  write(line: string): void;
  /** Writes the lines it still holds now (the router's close). */
  flush?(): void;
  bindings: string;
}

/** What the scheduler decided for one pick, for a request's trace (asked for only when tracing). */
export interface ScheduleInfo {
  candidates: number;
  winner: string;
  /** The best few candidates by total score, best first (none when there was one candidate). */
  top: Array<{ endpoint: string; score: number }>;
}

/** One span of a request's trace: attributes as it goes, then its end. */
export interface TraceSpan {
  set(attributes: Record<string, string | number | boolean | undefined>): void;
  /** `error`: a short reason, marking the span failed. */
  end(error?: string): void;
}

/** An upstream attempt's span, and the `traceparent` the engine gets with it. */
export interface AttemptSpan extends TraceSpan {
  readonly traceparent: string;
  /** The trace's `tracestate` (the client's, when its `traceparent` was taken), for the engine; none when empty. */
  readonly tracestate: string | undefined;
}

/**
 * One request's trace (tracing/otel.ts): the request span, its children, and the event of the first
 * token. Nothing of a prompt or a completion is ever put on it.
 */
export interface RequestTrace {
  readonly traceId: string;
  /** Whether the trace is kept (sampled): only then is its id an exemplar on the latency histograms. */
  readonly sampled: boolean;
  /** A child span of the request: `modelgate.admission`, `modelgate.schedule`. */
  child(name: string): TraceSpan;
  /** A child span for one attempt at an endpoint (kind client). */
  attempt(endpoint: Endpoint): AttemptSpan;
  /** The first token reached the client (an event on the request span; later calls are ignored). */
  firstToken(): void;
  /** Names the request span (`{operation} {model}` once the model is known). */
  rename(name: string): void;
  /** Ends the request span. */
  end(attributes: Record<string, string | number | boolean | undefined>, error?: string): void;
}

/** Starts request traces; absent when tracing is off. */
export interface Tracing {
  /** A trace for a `method` request that arrived `agoMs` ago (it starts then), child of the client's `traceparent` if it sent one. */
  start(name: string, headers: Readonly<Record<string, string | string[] | undefined>>, agoMs: number, method?: string): RequestTrace;
  /** Sends what is buffered and stops. */
  shutdown(): Promise<void>;
}

/**
 * Why `pool` cannot serve a deployment's LoRA adapter (none: it can). Static mode refuses such a
 * config; in Kubernetes mode the target is left out of the deployment's routes and its status says why.
 */
export function adapterProblem(adapter: { name: string }, pool: Pick<PoolSpec, 'name' | 'engine' | 'servedModelName'>): string | undefined {
  if (pool.servedModelName === adapter.name) return `the adapter is named like pool "${pool.name}"'s base model; give the adapter the name its engines serve it under`;
  if (pool.engine !== 'vllm') return `LoRA adapters are served by vLLM pools only; pool "${pool.name}" runs ${pool.engine}`;
  return undefined;
}

/**
 * Whether an endpoint its health checks have not probed yet counts as healthy in `pool`: yes (healthy
 * until proven otherwise), except in a pool that scales from zero with health checks, where a replica
 * is ready only once a probe has passed (one still loading its model must not get held requests).
 * The picker, the ready gauges and the status page all count readiness by this rule.
 */
export function unprobedCountsHealthy(pool: PoolSpec): boolean {
  return !(pool.resilience.scaleFromZero.enabled && pool.resilience.healthCheck.enabled);
}

/** Where a Responses API answer is kept (its pool and replica), and which API key made it (`balancer/response-locations.ts`). */
export interface ResponseLocation {
  pool: string;
  endpoint: string;
  /** The API key (its name) whose request made the response: only it may continue it. */
  owner: string;
}

/** The records every router shares (Redis): what one router remembers, the others can find. */
export interface SharedResponseRecords {
  /**
   * Writes the record: true once it is written; false when it failed or took longer than the store's
   * time limit, or at once while the store's last call timed out (the write still goes out). Never
   * rejects (a write that fails is a record the others will not find).
   */
  save(id: string, location: ResponseLocation): Promise<boolean>;
  /** The record, or undefined when there is none; rejects when the store does not answer. */
  load(id: string): Promise<ResponseLocation | undefined>;
}

/** A request Node's HTTP parser refused (or that ran out of time), as the API server answered it. */
export interface RefusedRequest {
  /** The `x-request-id` its answer carries. */
  requestId: string;
  status: number;
  /** The error code of the answer's envelope (`invalid_request`, `request_timeout`, …). */
  code: string;
  /** The peer's address, as the socket has it. */
  client?: string;
}

/**
 * The pool's admission queue bound (`queue.maxSize`), or undefined when it has none: requests wait in
 * it when the pool limits concurrency, and when it scales from zero (held requests wait there too).
 */
export function queueBound(settings: ResilienceSettings): number | undefined {
  return settings.maxConcurrencyPerReplica > 0 || settings.scaleFromZero.enabled ? settings.queue.maxSize : undefined;
}

/** The router's estimate of a text's tokens where no tokenizer counts them: about four characters a token. */
export function tokensOfChars(chars: number): number {
  return Math.ceil(chars / 4);
}
