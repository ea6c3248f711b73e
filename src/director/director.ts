/**
 * The request director: owns one inference request from its resolved deployment to its final report.
 * It plans the route (route-plan.ts), prepares what each pool's engines get (upstream-request.ts),
 * runs the attempts — admission, scheduling, forwarding, retries, moving on (exchange.ts) — and
 * reports the response's timing and tokens. Every API of the route table (api/routes.ts) goes the
 * same way; what differs is data in its table entry. A Responses API follow-up (`previous_response_id`)
 * goes only to the replica that made the response it names, when the router knows which one that is.
 * The server parses, authenticates and hands over; it makes no routing decision.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { type FormPart } from '../api/multipart.js';
import { type ApiRoute } from '../api/routes.js';
import { choicesOf } from '../api/valid-request.js';
import { type ValidRequest } from '../api/validate.js';
import { type ResponseLocations } from '../balancer/response-locations.js';
import { RouterError } from '../core/errors.js';
import {
  type Deployment,
  deploymentLabel,
  type Endpoint,
  type EndpointSource,
  type Engine,
  type PoolSpec,
  type PreviousResponseOutcome,
  type Priority,
  type RequestTrace,
  type ResumeReason,
  type ResumeResult,
} from '../core/types.js';
import { type ForwardedFor } from '../proxy/headers.js';
import { type ModelCatalog } from '../registry/registry.js';
import { type ExchangeReport, type ExchangeRunner } from './exchange.js';
import { planRoute, type PlannedPool } from './route-plan.js';
import { asksStream, requestRefusal, StreamSplice, type ResumePlan } from './resume.js';
import { encodedForms, routeSteps, streamUsageOverride } from './upstream-request.js';

/** The APIs whose streams end with a last event every engine sends (relay.ts `endsStream`). */
const KNOWN_STREAM_END = new Set(['chat', 'completions', 'responses', 'messages']);

/**
 * The choices a chat or completions stream carries, when more than one: the request's `n` — for
 * completions, `n` for each of its prompts (a list of strings, or of token-id lists).
 */
function streamChoicesOf(api: string, body: ValidRequest): { streamChoices?: number } {
  const choices = choicesOf(api, body);
  return choices > 1 ? { streamChoices: choices } : {};
}

/**
 * The shortest stop string that may hold a stream's text back long enough to matter: an engine holds
 * back up to a stop string's length less one character of text that could be its start (vLLM), so a
 * stream of a request with a stop string this long may go silent with nothing wrong with the replica.
 */
export const HOLD_BACK_CHARS = 32;

/** Whether the request names a stop string of {@link HOLD_BACK_CHARS} or more (`stop`, or the Messages API's `stop_sequences`). */
export function holdsBackText(body: ValidRequest): boolean {
  const fields = body as { stop?: unknown; stop_sequences?: unknown };
  for (const stop of [fields.stop, fields.stop_sequences]) {
    if (typeof stop === 'string' && stop.length >= HOLD_BACK_CHARS) return true;
    if (Array.isArray(stop) && stop.some((s) => typeof s === 'string' && s.length >= HOLD_BACK_CHARS)) return true;
  }
  return false;
}

/** A validated, authorised request, as the server hands it over. */
export interface DirectedRequest {
  api: ApiRoute;
  /** The path the client called (one of the API's paths): the engine gets the same. */
  path: string;
  deployment: Deployment;
  /** The model as the client named it. */
  asked: string;
  body: ValidRequest;
  /** The body as received, and as text (empty for a form). */
  raw: Buffer;
  text: string;
  /** A multipart body's parts. */
  form?: readonly FormPart[];
  priority: Priority;
  /** The API key's name: a stored response is continued only by the key that made it; keys take turns in queues. */
  tenant: string;
  /** The key's fair-share weight when requests queue. */
  weight: number;
  /** Hears each streamed content event (the key's token limits count them as they flow). */
  onContent?: () => void;
  /** The whole answer came, before its last bytes go to the client (the key's concurrency slot is freed then). */
  onAnswered?: () => void;
  /** The key's prefix-cache salt, for a pool that isolates keys (auth/key-store.ts `Principal.cacheSalt`). */
  cacheSalt: string;
  /** The request's prompt text, made once (server/inference.ts); absent: made here from the body. */
  promptText?: () => string;
  requestId: string;
  /** The `x-request-id` the engine gets (server/context.ts `engineRequestIdOf`). */
  engineRequestId: string;
  /** The client's request headers (only the allow-listed ones go on). */
  headers: IncomingHttpHeaders;
  forwarded: ForwardedFor;
  /** Aborts when the client leaves. */
  signal: AbortSignal;
  /** The request's trace, when tracing is on. */
  trace?: RequestTrace;
}

/** What happened, for the access log: the exchange's report, and where the request went. */
export interface DirectorReport extends ExchangeReport {
  /** The pool that answered, or was tried last. */
  poolName: string;
  /** The model name that pool's engines serve (the request's `model` as the engine got it). */
  servedModel: string;
  /** The serving pool's engine (vllm, sglang, …). */
  engine: Engine;
}

/** The response metrics the director records (RouterMetrics implements them). */
export interface ResponseMetrics {
  /** `traceId`: the request's trace when it is sampled (the bucket's exemplar). */
  recordTimeToFirstToken(labels: { deployment: string; pool: string }, seconds: number, traceId?: string): void;
  recordInterToken(deployment: string, pool: string, seconds: number): void;
  recordTokens(labels: { deployment: string; pool: string }, prompt: number, completion: number): void;
  recordResponseEnd(labels: { deployment: string; pool: string }, end: string): void;
  recordFallback(fromDeployment: string, fromPool: string, toDeployment: string, toPool: string): void;
  recordPreviousResponse(outcome: PreviousResponseOutcome): void;
  /** An answer's engine reported more completion tokens than the request allowed ({@link ApiRoute.completionLimit}): charged that limit. */
  recordUsageClamped?(pool: string, endpoint: string): void;
  /** What became of a resumable deployment's stream that broke after its first byte (resume.ts has the reasons). */
  recordStreamResumption?(deployment: string, result: ResumeResult, reason: ResumeReason): void;
}

export interface DirectorDeps {
  catalog: () => ModelCatalog;
  endpoints: EndpointSource;
  exchange: Pick<ExchangeRunner, 'run'>;
  metrics: ResponseMetrics;
  random: () => number;
  /** Client headers engines get: the default allow-list, `server.forwardHeaders`, the priority header. */
  forwardedHeaders: readonly string[];
  /** `server.clientStallTimeoutMs`. */
  clientStallMs: number;
  /** Which replica holds each Responses API answer. */
  responses: ResponseLocations;
}

/** What the server needs of the director (tests hand the server a stand-in). */
export type RequestDirector = Pick<Director, 'direct'>;

export class Director {
  /** Each pool's header allow-list (the router-wide list plus its session header), made once per pool. */
  private readonly allowed = new WeakMap<PoolSpec, ReadonlySet<string>>();

  constructor(private readonly deps: DirectorDeps) {}

  private allowedHeaders(pool: PoolSpec): ReadonlySet<string> {
    let allowed = this.allowed.get(pool);
    if (!allowed) {
      allowed = new Set([...this.deps.forwardedHeaders, pool.routing.session.header.toLowerCase()]);
      this.allowed.set(pool, allowed);
    }
    return allowed;
  }

  /**
   * Sends the request along its route and resolves with the report once the response has ended.
   * Rejects (nothing sent yet) when no route can be planned: MODEL_CAPABILITY_MISMATCH, NO_READY_REPLICA.
   */
  async direct(req: IncomingMessage, res: ServerResponse, request: DirectedRequest): Promise<DirectorReport> {
    const { deps } = this;
    const { deployment, api, body } = request;
    let planned = planRoute({ catalog: deps.catalog(), hasEndpoints: (pool) => deps.endpoints.snapshot(pool).length > 0, random: deps.random }, deployment, api.capability, request.asked);
    const continued = api.continues ? body[api.continues] : undefined;
    const pinned = api.continues ? await this.pinned(request, planned) : undefined;
    if (pinned) planned = [pinned.step];
    const first = planned[0] as PlannedPool;
    const label = deploymentLabel(deployment); // the route's steps name their deployments by label too
    if (first.deployment !== label) {
      // none of the deployment's own pools had a ready replica: the route starts at a fallback
      deps.metrics.recordFallback(label, '', first.deployment, first.pool.name);
    }
    const usage = api.asksStreamUsage ? streamUsageOverride(body) : undefined;
    const forms = request.form ? await encodedForms(planned, request) : undefined;
    const headers = request.headers;
    const promptText = api.promptText;
    const report = await deps.exchange.run(req, res, {
      route: routeSteps(planned, request, usage, (pool) => this.allowedHeaders(pool), forms),
      request: {
        priority: request.priority,
        tenant: request.tenant,
        weight: request.weight,
        requestId: request.requestId,
        ...(promptText ? { promptText: request.promptText ?? (() => promptText(body)), prompt: { api: api.name, body } } : {}),
        ...(pinned ? { only: pinned.endpoint } : {}),
        header: (name) => {
          const value = headers[name.toLowerCase()];
          return Array.isArray(value) ? value[0] : value;
        },
      },
      requestId: request.requestId,
      path: request.path,
      clientStallMs: deps.clientStallMs,
      signal: request.signal,
      stripUsageChunk: usage !== undefined,
      dialect: api.dialect,
      knownStreamEnd: KNOWN_STREAM_END.has(api.name),
      ...(api.countsAnswerText ? { countsAnswerText: true } : {}),
      ...(api.body === 'json' ? { answersJson: true } : {}),
      ...streamChoicesOf(api.name, body),
      ...(holdsBackText(body) ? { holdsBackText: true } : {}),
      ...(request.onContent ? { onContent: request.onContent } : {}),
      ...(request.onAnswered ? { onAnswered: request.onAnswered } : {}),
      // a stored Responses API answer is recorded as soon as its id is read, and its last bytes wait
      // for the record: the follow-up the client sends the moment it has them finds it, through any router
      ...(api.continues && body.store !== false ? { onResponseId: (id: string, endpoint: string, pool: string) => deps.responses.remember(id, { pool, endpoint, owner: request.tenant }) } : {}),
      // the engine's 404 for an id it does not hold quotes it: never the engine lacking the pool's adapter
      ...(typeof continued === 'string' && continued !== '' ? { quoted: continued } : {}),
      ...(request.trace ? { trace: request.trace } : {}),
      ...(deployment.resumeStreams ? this.resumePlan(request) : {}),
      onInterToken: (pool, ms) => deps.metrics.recordInterToken(label, pool, ms / 1000),
    });
    const labels = { deployment: label, pool: report.pool?.name ?? first.pool.name };
    if (report.end) deps.metrics.recordResponseEnd(labels, report.end);
    if (report.ttftMs !== undefined) deps.metrics.recordTimeToFirstToken(labels, report.ttftMs / 1000, request.trace?.sampled ? request.trace.traceId : undefined);
    if (report.usage) {
      // an engine is believed only as far as the request lets an answer go: what it says beyond is not charged
      const limit = api.completionLimit?.(body);
      if (limit !== undefined && report.usage.completionTokens > limit) {
        report.usage = { ...report.usage, completionTokens: limit };
        deps.metrics.recordUsageClamped?.(labels.pool, report.endpoint ?? '');
      }
      deps.metrics.recordTokens(labels, report.usage.estimated ? 0 : report.usage.promptTokens, report.usage.completionTokens);
    }
    const fallback = report.fallback ?? (first.deployment !== label ? first.deployment : undefined);
    const pool = report.pool ?? first.pool;
    return { ...report, poolName: labels.pool, servedModel: pool.servedModelName, engine: pool.engine, ...(fallback ? { fallback } : {}) };
  }

  /** For a chat or completions stream of a deployment with `resumeStreams`: how the exchange may resume it. */
  private resumePlan(request: DirectedRequest): { resume: ResumePlan } | undefined {
    const { api, body, deployment } = request;
    if ((api.name !== 'chat' && api.name !== 'completions') || !asksStream(body)) return undefined;
    const { metrics } = this.deps;
    const record: ResumePlan['record'] = (result, reason) => metrics.recordStreamResumption?.(deploymentLabel(deployment), result, reason);
    const refused = requestRefusal(api.name, body);
    return { resume: refused ? { refused, record } : { splice: new StreamSplice(api.name, body), record } };
  }

  /**
   * For a request continuing a stored response: the route step of the pool holding it, and its replica
   * — when the router knows where it is (its own record, else the routers' shared one) and that replica
   * is still in the route. Otherwise the request is routed like any other (the engine answers for an
   * id it does not hold). An id another key made is answered 404 here, as if it did not exist, and
   * never reaches the engine.
   */
  private async pinned(request: DirectedRequest, planned: readonly PlannedPool[]): Promise<{ step: PlannedPool; endpoint: string } | undefined> {
    const field = request.api.continues;
    const id = field && request.body[field];
    if (typeof id !== 'string' || id === '') return undefined;
    const { location, unanswered } = await this.deps.responses.lookup(id);
    if (location && location.owner !== request.tenant) {
      this.deps.metrics.recordPreviousResponse('other_key');
      throw new RouterError('RESPONSE_NOT_FOUND', `Response with id '${id.slice(0, 200)}' not found.`, { param: field });
    }
    if (unanswered) {
      this.deps.metrics.recordPreviousResponse('unchecked');
      return undefined;
    }
    const step = location && planned.find((p) => p.pool.name === location.pool);
    const endpoint = step && location ? heldBy(this.deps.endpoints.snapshot(step.pool.name), location.endpoint) : undefined;
    // a record whose pool this request's route does not take (the follow-up names another model) says nothing of its replica
    this.deps.metrics.recordPreviousResponse(!location ? 'unknown' : endpoint ? 'pinned' : step ? 'replica_gone' : 'other_route');
    return step && endpoint ? { step, endpoint } : undefined;
  }
}

/**
 * The id, among a pool's endpoints, of the replica a record names: the same id, or — for a record an
 * earlier version wrote in Kubernetes mode, when a replica was its pod alone (`ns/pod`) — that pod's
 * endpoint (`ns/pod:port`; a pool has one port), so follow-ups survive the upgrade.
 */
function heldBy(endpoints: readonly Endpoint[], recorded: string): string | undefined {
  let legacy: string | undefined;
  for (const ep of endpoints) {
    if (ep.id === recorded) return ep.id;
    if (ep.id.length > recorded.length && ep.id.startsWith(recorded) && ep.id.charCodeAt(recorded.length) === 0x3a && /^\d+$/.test(ep.id.slice(recorded.length + 1))) legacy = ep.id;
  }
  return legacy;
}
