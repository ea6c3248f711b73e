/**
 * The bounded label values of the router's series: each label whose values come from a fixed set has
 * that set here, once, as a constant list and as a string-literal union the `record…` functions take,
 * so a caller cannot pass an unbounded value (an error message, a URL, a key). The lists also seed the
 * counters' known label sets at 0 and are what the test of the exposition holds the live label values to.
 * Labels that name the operator's objects (deployment, pool, endpoint, key name) are bounded by the
 * config and discovery instead.
 */
import { RESUME_REASONS, type ApiName, type HoldEvent, type PreviousResponseOutcome } from '../core/types.js';

/** An inference API's name (the route table's), `models` (GET /v1/models…), `limits` (GET /v1/limits), or `other` (everything else). */
export type Route = ApiName | 'models' | 'limits' | 'other';
export const ROUTES: readonly Route[] = [
  'chat',
  'completions',
  'embeddings',
  'responses',
  'messages',
  'rerank',
  'score',
  'tokenize',
  'detokenize',
  'transcriptions',
  'translations',
  'models',
  'limits',
  'other',
] satisfies readonly Route[];

/** How a started response can end (`modelgate_response_ends_total{end}`). */
export const RESPONSE_ENDS = ['complete', 'client_gone', 'client_stalled', 'upstream_broken', 'idle_timeout', 'deadline', 'engine_error', 'shutdown'] as const;
export type ResponseEnd = (typeof RESPONSE_ENDS)[number];

/** Why admission turns a request away (`modelgate_rejected_requests_total{reason}`). */
export const REJECT_REASONS = ['queue_full', 'queue_timeout', 'shed', 'no_replica_timeout', 'pool_removed', 'no_replica', 'shutdown'] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** How a wait in an admission queue ended (`modelgate_queue_wait_seconds{result}`). */
export const QUEUE_RESULTS = ['admitted', 'timeout', 'abandoned', 'displaced', 'pool_removed', 'no_replica', 'shutdown'] as const;
export type QueueResult = (typeof QUEUE_RESULTS)[number];

/** Results of engine-metrics scrapes (`modelgate_engine_scrapes_total{result}`). */
export const SCRAPE_RESULTS = ['ok', 'error', 'timeout', 'unparsable', 'empty'] as const;
export type ScrapeResult = (typeof SCRAPE_RESULTS)[number];

/** Whether the chosen replica likely had a prompt block cached (`modelgate_prefix_blocks_total{result}`). */
export const PREFIX_RESULTS = ['hit', 'miss'] as const;

/** Why an attempt got no usable answer, before the first byte. */
export const ATTEMPT_FAILURES = ['connect', 'reset', 'connect_timeout', 'first_byte_timeout', 'deadline', 'invalid_answer', 'shutdown'] as const;
/**
 * Engine answers an attempt is named by instead of their status: `served_model_mismatch`, a 404 saying the
 * engine does not have the pool's `servedModelName` (director/exchange.ts `servesNotModel`), a misconfigured pool to alert on.
 */
export const ATTEMPT_REFUSALS = ['served_model_mismatch'] as const;
/** An engine's HTTP status as an attempt's outcome: `upstream_503`. */
export type UpstreamStatus = `upstream_${number}`;
/** How an attempt ended (`modelgate_upstream_attempts_total{outcome}`); `other` stands in for a name outside the set. */
export type AttemptOutcome = 'committed' | 'client_gone' | (typeof ATTEMPT_FAILURES)[number] | (typeof ATTEMPT_REFUSALS)[number] | UpstreamStatus | 'other';
const NAMED_OUTCOMES: ReadonlySet<string> = new Set(['committed', 'client_gone', ...ATTEMPT_FAILURES, ...ATTEMPT_REFUSALS]);
/** `upstream_` and an HTTP status (100…599). */
export const UPSTREAM_STATUS = /^upstream_[1-5][0-9][0-9]$/;

/** The outcomes a retry follows (`modelgate_retries_total{reason}`): the retryable statuses, the failures other than the deadline, and a replica without the pool's model. */
export const RETRY_REASONS = [
  'upstream_429',
  'upstream_502',
  'upstream_503',
  'upstream_504',
  'connect',
  'reset',
  'connect_timeout',
  'first_byte_timeout',
  'invalid_answer',
  'served_model_mismatch',
] as const;
export type RetryReason = (typeof RETRY_REASONS)[number] | 'other';

/**
 * An attempt's outcome as the exchange names it, held to {@link AttemptOutcome}: a name outside the
 * set (a new failure kind the metrics do not know yet) is counted as `other`, never as itself.
 */
export function attemptOutcome(name: string): AttemptOutcome {
  if (NAMED_OUTCOMES.has(name) || UPSTREAM_STATUS.test(name)) return name as AttemptOutcome;
  return 'other';
}

/** A retry's reason held to {@link RetryReason} (`other` for a name outside the set). */
export function retryReason(name: string): RetryReason {
  return (RETRY_REASONS as readonly string[]).includes(name) ? (name as RetryReason) : 'other';
}

/** `modelgate_previous_response_requests_total{outcome}`. */
export const PREVIOUS_RESPONSE_OUTCOMES = ['pinned', 'unknown', 'replica_gone', 'other_route', 'other_key', 'unchecked'] as const satisfies readonly PreviousResponseOutcome[];

/** `modelgate_pool_held_requests_total{event}`. */
export const HOLD_EVENTS = ['held', 'served', 'timeout', 'abandoned', 'rejected'] as const satisfies readonly HoldEvent[];

/** `modelgate_engine_requests{state}`. */
export const ENGINE_STATES = ['waiting', 'running'] as const;

/** `modelgate_keys_reloads_total{result}`, `modelgate_status_writes_total{result}`. */
export const WRITE_RESULTS = ['success', 'failure'] as const;

/** Kubernetes kinds the router watches (`kind` of the discovery series). */
export const WATCHED_KINDS = ['endpointslices', 'modelpools', 'modeldeployments'] as const;
export type WatchedKind = (typeof WATCHED_KINDS)[number];
/** Kinds whose status the router writes (`modelgate_status_writes_total{kind}`). */
export const STATUS_KINDS = ['modelpools', 'modeldeployments'] as const;
export type StatusKind = (typeof STATUS_KINDS)[number];
/** `modelgate_discovery_events_total{type}`. */
export const DISCOVERY_EVENT_TYPES = ['add', 'update', 'delete'] as const;
export type DiscoveryEventType = (typeof DISCOVERY_EVENT_TYPES)[number];

/** The per-key limits' labels. */
export const LIMIT_REASONS = ['requests', 'tokens', 'concurrency', 'budget'] as const;
export type LimitReason = (typeof LIMIT_REASONS)[number];
export const REDIS_OPS = ['admit', 'settle', 'release', 'heartbeat', 'record', 'lookup'] as const;
export type RedisOp = (typeof REDIS_OPS)[number];
export const KEY_OUTCOMES = ['admitted', 'rate_limited', 'quota_exceeded'] as const;
export const TOKEN_TYPES = ['prompt', 'completion'] as const;
export const BUDGET_WINDOWS = ['day', 'month'] as const;

/** `modelgate_goodput_requests_total{result}`. */
export const SLO_RESULTS = ['within', 'outside', 'rejected', 'failed'] as const;
export type SloResult = (typeof SLO_RESULTS)[number];

/** Where a LoRA adapter request went (`modelgate_lora_placements_total{placement}`) and how a load ended. */
export const LORA_PLACEMENTS = ['held', 'free_slot', 'no_slot'] as const;
export type LoraPlacement = (typeof LORA_PLACEMENTS)[number];
export const LORA_LOAD_RESULTS = ['loaded', 'already_loaded', 'failed', 'timeout'] as const;
export type LoraLoadResult = (typeof LORA_LOAD_RESULTS)[number];

/** KV-cache events: their types, a replica's index state, where a prefix prediction came from. */
export const KV_EVENT_TYPES = ['block_stored', 'block_removed', 'all_blocks_cleared'] as const;
export const KV_REPLICA_STATES = ['complete', 'partial', 'unknown'] as const;
export const PREFIX_SOURCES = ['events', 'events-partial', 'estimate'] as const;
export type PrefixSource = (typeof PREFIX_SOURCES)[number];

/** The allowed values of a bounded label: a list, or a pattern. */
export type LabelSet = readonly string[] | RegExp;

/**
 * Every bounded label of every series: metric → label → its allowed values. The test of the
 * exposition under traffic checks the live label values against this table.
 */
export const BOUNDED_LABELS: Readonly<Record<string, Readonly<Record<string, LabelSet>>>> = {
  modelgate_requests_total: { route: ROUTES, code: /^[1-5][0-9][0-9]$/ },
  modelgate_request_duration_seconds: { route: ROUTES },
  modelgate_response_ends_total: { end: RESPONSE_ENDS },
  modelgate_upstream_attempts_total: { outcome: new RegExp(`^(${[...NAMED_OUTCOMES, 'other'].join('|')}|upstream_[1-5][0-9][0-9])$`) },
  modelgate_retries_total: { reason: [...RETRY_REASONS, 'other'] },
  modelgate_queue_wait_seconds: { result: QUEUE_RESULTS },
  modelgate_rejected_requests_total: { reason: REJECT_REASONS },
  modelgate_engine_requests: { state: ENGINE_STATES },
  modelgate_engine_scrapes_total: { result: SCRAPE_RESULTS },
  modelgate_prefix_blocks_total: { result: PREFIX_RESULTS },
  modelgate_previous_response_requests_total: { outcome: PREVIOUS_RESPONSE_OUTCOMES },
  modelgate_goodput_requests_total: { result: SLO_RESULTS },
  modelgate_pool_held_requests_total: { event: HOLD_EVENTS },
  modelgate_limit_rejections_total: { reason: LIMIT_REASONS },
  modelgate_limits_redis_errors_total: { op: REDIS_OPS },
  modelgate_key_requests_total: { outcome: KEY_OUTCOMES },
  modelgate_key_tokens_total: { type: TOKEN_TYPES },
  modelgate_key_budget_remaining_tokens: { window: BUDGET_WINDOWS },
  modelgate_keys_reloads_total: { result: WRITE_RESULTS },
  modelgate_discovery_events_total: { kind: WATCHED_KINDS, type: DISCOVERY_EVENT_TYPES },
  modelgate_discovery_watch_up: { kind: WATCHED_KINDS },
  modelgate_discovery_last_sync_timestamp_seconds: { kind: WATCHED_KINDS },
  modelgate_discovery_watch_restarts_total: { kind: WATCHED_KINDS },
  modelgate_status_writes_total: { kind: STATUS_KINDS, result: WRITE_RESULTS },
  modelgate_stream_resumptions_total: { result: Object.keys(RESUME_REASONS), reason: Object.values(RESUME_REASONS).flat() },
  modelgate_lora_placements_total: { placement: LORA_PLACEMENTS },
  modelgate_lora_adapter_loads_total: { result: LORA_LOAD_RESULTS },
  modelgate_kv_events_received_total: { type: KV_EVENT_TYPES },
  modelgate_kv_events_gaps_total: { recovered: ['true', 'false'] },
  modelgate_kv_events_replicas: { state: KV_REPLICA_STATES },
  modelgate_prefix_predicted_blocks_total: { source: PREFIX_SOURCES, result: PREFIX_RESULTS },
};
