/**
 * The attempts of one request along its route: pick an endpoint, forward, and — only while nothing
 * has reached the client — retry on another endpoint (the same one only when the pool has no other
 * left) or move on to the next pool. A request that waits in a pool's admission queue (every replica
 * at its concurrency limit) is answered 429 there; it does not move on, as the pool is busy, not
 * failing. Retries: after a
 * connection error, a reset, a timeout before the first byte, or a 429/502/503/504 from the engine; at
 * most `retries.maxRetries` per pool, with jittered backoff, honouring the engine's Retry-After up to
 * `retries.maxRetryAfterMs`, all within `timeouts.totalMs`. Moving on: whenever a pool cannot produce a
 * first byte — no replica can take the request, or a retryable failure leaves no untried replica in it
 * (or no retry budget) — the same request goes to the route's next pool. Moving on is not a retry;
 * the route is finite and the total timeout still holds. Each attempt also moves its breaker.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { isAbortError, type Clock, type Sleep } from '../core/clock.js';
import { passed } from '../core/phases.js';
import { errorBody, noAdapterReplica, noRetryHeaders, RouterError, servedModelMismatch, streamErrorEvent, toErrorResponse, writeErrorAnswer } from '../core/errors.js';
import { type PoolSpec, type RequestTrace, type ScheduleInfo, type WireDialect } from '../core/types.js';
import { type AttemptResult, type AttemptSpec, type Forwarder, type StreamEnd } from '../proxy/forwarder.js';
import { brokenError, FINAL_EVENT, streamEnd } from '../proxy/relay.js';
import { streamError } from '../proxy/upstream-errors.js';
import { ResponseMeter, type MeterWatch, type TokenUsage } from '../proxy/usage.js';
import { type EndpointPicker, type Picked, type PickRequest } from '../resilience/picker.js';
import { MAX_RESUMPTIONS, RESUMING_ENGINES, type FailedReason, type ResumePlan, type StreamSplice } from './resume.js';
import { breakerOutcome, failureError, outcomeName, retryable, retryWait } from './retry-policy.js';

export interface AttemptRecord {
  endpoint: string;
  /** committed, upstream_<status>, a failure reason, or client_gone. */
  outcome: string;
  ms: number;
}

/** What the exchange did, for the access log and metrics. */
export interface ExchangeReport {
  attempts: AttemptRecord[];
  /** Last endpoint tried. */
  endpoint?: string;
  /** The pool that answered (or was tried last), when it is not the route's first. */
  pool?: PoolSpec;
  /** The fallback deployment used, when the request left its own deployment. */
  fallback?: string;
  upstreamStatus?: number;
  /** Why the exchange did not end well: an error code (the router's, or the engine's passed on). */
  failure?: string;
  /** How a committed response ended: `engine_error`, a stream the engine ended with its own server-error event. */
  end?: StreamEnd | 'engine_error';
  /** The engine ended a committed stream with its own error event (relayed re-wrapped): its code. */
  engineError?: string;
  /** Token counts: the engine's usage, or an estimate from a stream that ended without it. */
  usage?: TokenUsage;
  /** ms from the committed attempt's request to its first content event (streams). */
  ttftMs?: number;
  /** When that first content event came, on the injected clock (the request's wait before it: queue, retries and all). */
  firstTokenAt?: number;
  /** Body bytes relayed from the engine. */
  bytes?: number;
  /** An attempt's request went out to an engine, and no engine refused it with an error status. */
  engineHad?: true;
}

export interface ExchangeEvents {
  /** Each attempt's outcome; `adapter`: it asked for the pool's LoRA adapter, not its base model (`servedModelName`). */
  onAttempt?: (pool: string, endpoint: string, outcome: string, adapter: boolean) => void;
  onRetry?: (pool: string, reason: string) => void;
  /** The request moved on from `from` (no replica could take it) to `to`. */
  onFallback?: (from: RouteStep, to: RouteStep) => void;
  /**
   * A replica answered 404 that it does not have the pool's `servedModelName` (the deployment is
   * misconfigured; see {@link servesNotModel}): `said` is the engine's message. Called at each such attempt.
   */
  onServedModelMismatch?: (pool: PoolSpec, endpoint: string, said: string) => void;
}

/** One pool of a request's route, with the body and headers as that pool's engines must get them. */
export interface RouteStep {
  pool: PoolSpec;
  readonly body: Buffer;
  /** Every header this pool's engines get (its own key, its session header, x-forwarded-*). */
  readonly headers: OutgoingHttpHeaders;
  /** The deployment this pool serves the request for (the requested one, or a fallback). */
  deployment: string;
}

/** What the exchange needs of its collaborators (tests hand it stand-ins). */
export interface ExchangeDeps {
  forwarder: Pick<Forwarder, 'attempt'>;
  picker: Pick<EndpointPicker, 'pick' | 'hasUntried' | 'recordAnswerEnd' | 'adapterMissing'>;
  clock: Clock;
  sleep: Sleep;
  random: () => number;
  events?: ExchangeEvents;
}

export interface ExchangePlan {
  /** Pools in the order they are tried; at least one. */
  route: readonly RouteStep[];
  /** Priority, prompt and session of the request, for the scheduler. */
  request: PickRequest;
  requestId: string;
  /** The canonical path the engine gets. */
  path: string;
  /** A client that accepts no bytes this long is cut (`client_stalled`), never blamed on the engine. */
  clientStallMs: number;
  /** Aborts when the client leaves. */
  signal: AbortSignal;
  /** The router asked the engine for stream usage the client did not ask for (see Forwarder). */
  stripUsageChunk?: boolean;
  /** How the API speaks: its error envelope, how a cut stream ends, how its stream reports tokens (default `openai`). */
  dialect?: WireDialect;
  /**
   * The API's streams have a known last event (chat, completions, responses, messages): one that ends
   * without it ends as broken. The audio APIs' streams have none the engines agree on.
   */
  knownStreamEnd?: boolean;
  /** A non-streamed answer without token usage is counted by its text (speech to text; routes.ts `countsAnswerText`). */
  countsAnswerText?: boolean;
  /** The API answers JSON when it does not stream (every API with a JSON body): an answer that is not JSON is no answer. */
  answersJson?: boolean;
  /** The choices a chat or completions stream carries (the request's `n`, when over 1): each must finish before the stream has. */
  streamChoices?: number;
  /** The request names a long stop string (director.ts `holdsBackText`): its stream may go silent with nothing wrong with the replica. */
  holdsBackText?: boolean;
  /** Each inter-token gap of a committed stream, in ms, with the pool that streams it. */
  onInterToken?: (pool: string, ms: number) => void;
  /** Each content event of a stream (a token on its way to the client). */
  onContent?: () => void;
  /** The whole answer came, before its last bytes go to the client. */
  onAnswered?: () => void;
  /**
   * The Responses API answer's id, as soon as it is read, with the replica and pool answering: a
   * promise returned (its record's write) holds the answer's last bytes until it settles.
   */
  onResponseId?: (id: string, endpoint: string, pool: string) => Promise<boolean> | undefined;
  /**
   * Text of the request an engine's 404 may quote back (the Responses API's `previous_response_id`): not
   * read as the engine saying it lacks the pool's adapter (see {@link namesMissingModel}).
   */
  quoted?: string;
  /** The request's trace: a span for each scheduling and each attempt. */
  trace?: RequestTrace;
  /** A stream of a deployment with `resumeStreams`: what to do when it breaks after its first byte (resume.ts). */
  resume?: ResumePlan;
}

/** The engine's own error event of each dialect, re-wrapped (upstream-errors.ts), made once. */
const ENGINE_ERROR: Record<WireDialect, NonNullable<AttemptSpec['engineError']>> = {
  openai: (event) => streamError('openai', event),
  anthropic: (event) => streamError('anthropic', event),
  responses: (event) => streamError('responses', event),
};

/** Where the request is on its route, and what it has spent there. */
interface Position {
  step: number;
  tried: Set<string>;
  /** Retries spent in the current pool (each pool has its own budget). */
  retries: number;
  /** A replica that answered it lacks the pool's adapter was put back to be tried again, loading it (once a request). */
  reloaded?: boolean;
}

/** A scheduling span's attributes: the pool, how many replicas could take the request, the winner and the best few scores. */
function scheduleAttributes(pool: string, info: ScheduleInfo): Record<string, string | number> {
  const out: Record<string, string | number> = { 'modelgate.pool': pool, 'modelgate.candidates': info.candidates, 'modelgate.winner': info.winner };
  info.top.forEach((t, i) => {
    out[`modelgate.top.${i}.endpoint`] = t.endpoint;
    out[`modelgate.top.${i}.score`] = Math.round(t.score * 1000) / 1000;
  });
  return out;
}

/**
 * An engine's message without the text of the request it may quote back (`quoted`: a Responses API
 * `previous_response_id`, "Response with id '…' not found."), so that a client's own id cannot pass for
 * the engine naming a model. Read only on an error answer.
 */
function ownWords(message: string, quoted?: string): string {
  return quoted ? message.split(quoted).join('') : message;
}

/**
 * Whether an engine's 404 message says `name` is a model it does not have (vLLM: "The model `name` does
 * not exist."). `quoted`: text of the request the engine may quote back, taken out first ({@link ownWords}).
 */
export function namesMissingModel(message: string, name: string, quoted?: string): boolean {
  const own = ownWords(message, quoted);
  return own.includes(`\`${name}\``) || (own.includes(name) && /does not exist|not found|no adapter/i.test(own));
}

/**
 * Whether `name` is in `message` between quotes, as engines quote the model they lack (backticks: vLLM,
 * OpenAI; single quotes: SGLang; double quotes): whole (`Llama-3-8B` not inside `Llama-3-8B-Instruct`),
 * and never a word of the engine's own (a model named `File` is not read into llama.cpp's "File Not Found").
 */
function namesQuoted(message: string, name: string): boolean {
  return message.includes(`\`${name}\``) || message.includes(`'${name}'`) || message.includes(`"${name}"`);
}

/** The outcome an attempt refused so is named by, in the access log, the attempts metric and the retries metric. */
export const SERVED_MODEL_MISMATCH = 'served_model_mismatch';

/**
 * llama.cpp's router mode (`llama-server --models-dir` / `--models-preset`) for a `model` it does not
 * have: 400 `{"error":{"code":400,"message":"model not found","type":"invalid_request_error"}}`, naming no
 * model (tools/server `router_validate_model`). Its single-model server reads no `model` and never says it.
 */
const LLAMACPP_NO_MODEL = /^\s*model not found\.?\s*$/i;

/**
 * Whether an engine's error answer says it does not have the pool's base model, the `servedModelName` the
 * router put in the body: the pool's name does not match what its engines serve. A 404 whose message quotes
 * the name ({@link namesQuoted}), in backticks or with "does not exist" / "not found" (vLLM: "The model
 * \`Llama-3-8B\` does not exist.", OpenAI's API: "The model \`x\` does not exist or you do not have access
 * to it.", SGLang: "The model 'x' does not exist", as its `/v1/models/{model}` answers), or, from a
 * `llamacpp` pool, llama.cpp's router-mode 400 "model not found" ({@link LLAMACPP_NO_MODEL}), whose
 * message is that alone. A 404 for a path the engine lacks ("Not Found", llama.cpp's "File Not Found") or for
 * a Responses API id it does not hold (`quoted`, taken out first: {@link ownWords}) is not it. A LoRA pool's
 * view names its adapter, whose 404 the exchange reads as the adapter's. Read only on an error answer: an
 * answer that went well pays nothing.
 */
export function servesNotModel(pool: Pick<PoolSpec, 'servedModelName' | 'adapter' | 'engine'>, status: number, message: string, quoted?: string): boolean {
  if (pool.adapter !== undefined) return false;
  if (status === 400) return pool.engine === 'llamacpp' && LLAMACPP_NO_MODEL.test(message);
  if (status !== 404) return false;
  const name = pool.servedModelName;
  const own = ownWords(message, quoted);
  if (!namesQuoted(own, name)) return false;
  // the phrase is the message's, not part of the name (a pool's model named `not found`)
  return own.includes(`\`${name}\``) || /does not exist|not found/i.test(own.split(name).join('\u0000'));
}

export class ExchangeRunner {
  constructor(private readonly deps: ExchangeDeps) {}

  async run(req: IncomingMessage, res: ServerResponse, plan: ExchangePlan): Promise<ExchangeReport> {
    passed(res, 'planned');
    const { clock } = this.deps;
    const first = plan.route[0] as RouteStep;
    const deadline = clock.now() + first.pool.resilience.timeouts.totalMs;
    // http-proxy adds a few 'close'/'error' listeners to the client response per attempt: bounded by
    // the retry cap and the route, so the limit is sized to them rather than left to warn.
    const rounds = 1 + (plan.resume ? MAX_RESUMPTIONS : 0); // each resumption may try as many replicas again
    res.setMaxListeners(Math.max(res.getMaxListeners(), 8 + 4 * rounds * (first.pool.resilience.retries.maxRetries + 1) * plan.route.length));
    const report: ExchangeReport = { attempts: [] };
    const at: Position = { step: 0, tried: new Set(), retries: 0 };
    const moveOn = (): boolean => this.moveOn(plan, at, report, deadline);
    for (;;) {
      const step = plan.route[at.step] as RouteStep;
      let picked: Picked;
      const scheduling = plan.trace?.child('modelgate.schedule');
      try {
        const request = scheduling ? { ...plan.request, onScheduled: (info: ScheduleInfo) => scheduling.set(scheduleAttributes(step.pool.name, info)) } : plan.request;
        // Only the route's last pool holds a request while it scales from zero; the others move it on.
        picked = await this.deps.picker.pick(step.pool, at.tried, plan.signal, request, deadline - clock.now(), at.step === plan.route.length - 1);
        passed(res, 'picked');
        scheduling?.end();
      } catch (err) {
        scheduling?.end(err instanceof RouterError ? err.code.toLowerCase() : isAbortError(err) ? 'client_gone' : 'error');
        if (isAbortError(err)) return { ...report, failure: 'client_gone' };
        if (err instanceof RouterError && err.code === 'NO_READY_REPLICA' && moveOn()) continue;
        return this.fail(res, plan, report, err);
      }
      if (clock.now() >= deadline) {
        picked.release(); // the wait for a replica used up the total timeout: no attempt is started
        return this.fail(res, plan, report, new RouterError('UPSTREAM_TIMEOUT', 'The request ran past its total timeout while it waited for a replica.'));
      }
      at.tried.add(picked.endpoint.id);
      const { result, meter, misnamed } = await this.attempt(req, res, plan, step, picked, deadline, report);
      if (result.kind === 'committed') {
        const ended = await this.committed(step, picked, result, meter, report, plan, plan.resume?.splice);
        return plan.resume ? this.resumeBroken(req, res, plan, plan.resume, at, ended, deadline) : ended;
      }
      picked.release();
      if (result.kind === 'client_gone') return { ...report, failure: 'client_gone' };
      if (result.kind === 'upstream_error') report.upstreamStatus = result.status;
      // A LoRA pool's replica that answers 404 naming its adapter (lacksAdapter) does not serve it: the request
      // goes on to a replica that may, as after a 503. Given up, the client is told its model has no replica
      // serving it. Any other 404 (a Responses API id the replica does not hold) is the request's, passed on as it is.
      const adapterMissing = this.lacksAdapter(plan, step, picked, result, at);
      // A replica that answers it does not have the pool's own model (servesNotModel): the pool's
      // servedModelName is not what its engines serve. The request goes on to the pool's other replicas (in a
      // rolling update some may serve the name), then to the route's next pool; given up, the client is told
      // the deployment is misconfigured (502 served_model_mismatch), never the engine's answer naming the served name.
      const notServed = adapterMissing || misnamed;
      const giveUp = (): ExchangeReport =>
        adapterMissing
          ? this.fail(res, plan, report, noAdapterReplica())
          : misnamed
            ? this.fail(res, plan, report, servedModelMismatch())
            : result.kind === 'upstream_error'
              ? this.passOn(res, plan, report, result)
              : this.fail(res, plan, report, failureError(result));
      if (!(retryable(result) || notServed) || plan.signal.aborted) return giveUp();
      // no other replica here to have the adapter or the model (and none put back to load it): the next pool, or the answer
      if (notServed && !this.deps.picker.hasUntried(step.pool, at.tried, plan.request)) {
        if (moveOn()) continue;
        return giveUp();
      }
      const wait = retryWait(at.retries, result, step.pool.resilience.retries, this.deps.random);
      const mayRetry = wait !== undefined && clock.now() + wait < deadline;
      // This pool has had its chance when no replica is left untried or its retries are spent: move on.
      if ((!mayRetry || !this.deps.picker.hasUntried(step.pool, at.tried, plan.request)) && moveOn()) continue;
      if (!mayRetry) return giveUp();
      at.retries += 1;
      this.deps.events?.onRetry?.(step.pool.name, misnamed ? SERVED_MODEL_MISMATCH : outcomeName(result));
      try {
        if (wait > 0) await this.deps.sleep(wait, plan.signal);
      } catch {
        return { ...report, failure: 'client_gone' };
      }
    }
  }

  /**
   * Whether a LoRA pool's replica answered 404 naming the adapter as a model it does not have (vLLM: "The
   * model `x` does not exist."): it does not serve it (never loaded there, or lost with a restart or an
   * unload), and stops counting as holding it; with loadOnDemand it is put back to be tried once more (a
   * request's once), loading the adapter first.
   */
  private lacksAdapter(plan: ExchangePlan, step: RouteStep, picked: Picked, result: AttemptResult, at: Position): boolean {
    const adapter = step.pool.adapter;
    if (result.kind !== 'upstream_error' || result.status !== 404 || adapter === undefined || !namesMissingModel(result.error.envelope.error.message, adapter.name, plan.quoted)) return false;
    this.deps.picker.adapterMissing(step.pool, picked.endpoint.id);
    if (step.pool.routing.lora.loadOnDemand && !at.reloaded) {
      at.reloaded = true;
      at.tried.delete(picked.endpoint.id);
    }
    return true;
  }

  /** One attempt at the picked endpoint; its outcome settles the breaker ticket and is recorded. */
  private async attempt(
    req: IncomingMessage,
    res: ServerResponse,
    plan: ExchangePlan,
    step: RouteStep,
    picked: Picked,
    deadline: number,
    report: ExchangeReport,
    continuation?: Buffer,
  ): Promise<{ result: AttemptResult; meter: ResponseMeter; misnamed: boolean }> {
    const { clock } = this.deps;
    const { endpoint } = picked;
    const settings = step.pool.resilience;
    const started = clock.now();
    const { onInterToken, onContent, onAnswered, onResponseId } = plan;
    const dialect = plan.dialect ?? 'openai';
    const watch: MeterWatch = {
      // the engine's work is done: its replica's concurrency slot is free, whatever the answer's last bytes still wait for
      answered: () => {
        picked.release();
        onAnswered?.();
      },
    };
    if (onInterToken) watch.interToken = (ms: number) => onInterToken(step.pool.name, ms);
    if (onContent) watch.content = onContent;
    if (onResponseId) watch.responseId = (id: string) => onResponseId(id, endpoint.id, step.pool.name);
    const meter = new ResponseMeter(clock, started, dialect, watch, plan.countsAnswerText === true);
    const span = plan.trace?.attempt(endpoint);
    // a stream that may be resumed is written whole events at a time, and left open when it breaks
    const splice = plan.resume?.splice && RESUMING_ENGINES.has(step.pool.engine) ? plan.resume.splice : undefined;
    const spec: AttemptSpec = {
      endpoint,
      body: continuation ?? step.body,
      path: plan.path,
      // with tracing, the engine gets the attempt's own trace context (vLLM continues the trace): its
      // tracestate too, which is the client's only when the router took the client's traceparent
      headers: span ? { ...step.headers, traceparent: span.traceparent, tracestate: span.tracestate } : step.headers,
      requestId: plan.requestId,
      timeouts: { connectMs: settings.timeouts.connectMs, firstByteMs: settings.timeouts.firstByteMs, idleMs: settings.timeouts.idleMs, clientStallMs: plan.clientStallMs },
      deadline,
      observe: meter,
      stripUsageChunk: plan.stripUsageChunk ?? false,
      errorEvent: (err) => streamErrorEvent(err, dialect, meter.nextSequence()),
      engineError: ENGINE_ERROR[dialect],
    };
    if (plan.knownStreamEnd) {
      spec.endOfStream = streamEnd(dialect, plan.streamChoices);
      spec.finalEvent = FINAL_EVENT[dialect];
    }
    if (splice) {
      spec.rewrite = (segment) => splice.rewrite(segment);
      spec.resumable = { cut: () => splice.errored };
    }
    if (continuation) spec.continues = true;
    const result = await this.deps.forwarder.attempt(req, res, spec);
    // The request went to an engine, and no engine refused it: it is charged its prompt whatever came of it.
    if (meter.sent && result.kind !== 'upstream_error') report.engineHad = true;
    // A first byte late at a second replica for the same request: the request is what takes long (a long
    // non-streamed generation), not the replicas, and only its first such timeout counts against a breaker.
    // (Counted at every replica it was retried on, four long requests of one tenant opened every breaker of
    // a pool, and every other tenant got 503.)
    const repeated = result.kind === 'failed' && result.reason === 'first_byte_timeout' && report.attempts.some((a) => a.outcome === 'first_byte_timeout');
    // the engine does not have the pool's model (servesNotModel): a misconfigured pool, not a sick replica; the engine
    // answered, alive, and the breaker is moved neither way, as by backpressure (counted a success, as other 4xx are,
    // it would have ended the run of failures of a replica failing otherwise too)
    const misnamed = result.kind === 'upstream_error' && servesNotModel(step.pool, result.status, result.error.envelope.error.message, plan.quoted);
    // an error the engine answered may be the request's doing: it does not open the breaker unasked (breaker.ts); its key is for the log
    const counted = misnamed ? 'backpressure' : repeated ? 'unknown' : breakerOutcome(result);
    picked.ticket.settle(counted, counted === 'failure' ? { key: plan.request.tenant, answered: result.kind === 'upstream_error' && result.status === 500 } : undefined);
    const outcome = misnamed ? SERVED_MODEL_MISMATCH : outcomeName(result);
    if (misnamed) this.deps.events?.onServedModelMismatch?.(step.pool, endpoint.id, result.error.envelope.error.message);
    if (span) {
      span.set({ 'modelgate.outcome': outcome, 'http.response.status_code': result.kind === 'committed' || result.kind === 'upstream_error' ? result.status : undefined });
      // a committed stream's span ends when its response does
      // (in error when the engine ended it with its error event, or it broke; not for a client that left or stopped reading)
      if (result.kind === 'committed')
        void result.done.then(({ end, engineError }) =>
          span.end(end === 'complete' ? (engineError && engineError.status >= 500 ? 'engine_error' : undefined) : end === 'client_gone' || end === 'client_stalled' ? undefined : end),
        );
      else span.end(outcome);
    }
    report.endpoint = endpoint.id;
    report.attempts.push({ endpoint: endpoint.id, outcome, ms: Math.round(clock.now() - started) });
    this.deps.events?.onAttempt?.(step.pool.name, endpoint.id, outcome, step.pool.adapter !== undefined);
    return { result, meter, misnamed };
  }

  /** The response reached the client: wait for it to end and report how. */
  private async committed(
    step: RouteStep,
    picked: Picked,
    result: Extract<AttemptResult, { kind: 'committed' }>,
    meter: ResponseMeter,
    report: ExchangeReport,
    plan: Pick<ExchangePlan, 'requestId' | 'holdsBackText' | 'request' | 'answersJson'>,
    splice?: StreamSplice,
  ): Promise<ExchangeReport> {
    const { requestId, holdsBackText } = plan;
    report.upstreamStatus = result.status;
    const { end, bytes, engineError } = await result.done;
    picked.release();
    report.end = end;
    report.bytes = (report.bytes ?? 0) + bytes;
    delete report.failure; // a continuation that ends well ends the request well
    const usage = splice ? splice.usage(meter.finalUsage()) : meter.finalUsage();
    if (usage) report.usage = usage;
    // a resumed stream's first token is the first attempt's
    if (meter.ttftMs !== undefined && report.ttftMs === undefined) {
      report.ttftMs = meter.ttftMs;
      report.firstTokenAt = meter.firstTokenAt;
    }
    // The attempt counted nothing when the answer began (`answered`): its breaker hears how it ended. A
    // success counted at the first byte reset the failure count, so a replica whose every stream broke
    // after a few tokens was never taken out.
    let counted: 'success' | 'failure' | undefined = 'success';
    if (end === 'upstream_broken' || end === 'idle_timeout') {
      // a stream whose request names a long stop string may go silent on its own (the engine holds its text
      // back while it could be the stop string's start), which every tenant may ask for: it moves no breaker
      const ownSilence = end === 'idle_timeout' && holdsBackText === true;
      counted = ownSilence ? undefined : 'failure';
      report.failure = end === 'upstream_broken' ? 'upstream_stream_broken' : 'upstream_timeout';
    } else if (end === 'deadline') {
      counted = undefined; // the request's own time ran out: nothing said of the engine
      report.failure = 'upstream_timeout';
    } else if (end === 'shutdown') {
      counted = undefined; // the router's own doing: nothing said of the engine
      report.failure = 'router_shutting_down';
    } else if (end === 'client_gone' || end === 'client_stalled') {
      counted = undefined; // the client's doing: nothing said of the engine either way
      report.failure = end;
    } else if (meter.noAnswer(plan.answersJson === true)) {
      // A 2xx that is no answer (empty, or not JSON from an API that answers JSON) is the replica's
      // failure, whatever its health path says: answered at once, it drew most of the pool's requests
      counted = 'failure';
      report.failure = 'upstream_invalid_answer';
    } else if (engineError) {
      // the engine ended the stream with its own error: a server error counts against its breaker and is
      // its own end (ModelgateStreamsCut); a 4xx one (a tool call it could not parse) is the request's
      if (engineError.status >= 500) report.end = 'engine_error';
      report.failure = engineError.code;
      report.engineError = engineError.code;
      if (engineError.status >= 500) counted = 'failure';
      // busy (TGI's `overloaded`): as an answered 429 is backpressure, the breaker is not moved either way
      else if (engineError.status === 429) counted = undefined;
    }
    // the engine's own server-error event is an answer a request may cause (on a resumable stream the
    // splice holds it back, so the stream ends broken: the splice says it erred; a 4xx one it passes on,
    // as engineError); a cut or silent stream is not
    const answered = engineError !== undefined || splice?.errored === true;
    if (counted) this.deps.picker.recordAnswerEnd(step.pool, picked.endpoint.id, counted, requestId, counted === 'failure' ? { key: plan.request.tenant, answered } : undefined);
    return report;
  }

  /**
   * A committed stream of a resumable request has ended: when its replica broke, stalled or sent an
   * error event, continue it on another replica (as often as resume.ts allows), else end it with the
   * error event the relay left to the exchange. Each outcome is counted.
   */
  private async resumeBroken(req: IncomingMessage, res: ServerResponse, plan: ExchangePlan, resume: ResumePlan, at: Position, report: ExchangeReport, deadline: number): Promise<ExchangeReport> {
    for (;;) {
      const end = report.end;
      if (end !== 'upstream_broken' && end !== 'idle_timeout') return report;
      const splice = resume.splice;
      const cause = splice?.errored ? 'error_event' : end;
      const refused = resume.refused ?? (RESUMING_ENGINES.has((plan.route[at.step] as RouteStep).pool.engine) ? splice?.refusal() : 'engine');
      if (refused || !splice) {
        resume.record('refused', refused ?? 'engine');
        return this.endBroken(res, plan, report, end);
      }
      const failed = await this.continueStream(req, res, plan, at, report, deadline, splice);
      if (failed === 'client_gone') return { ...report, failure: 'client_gone' };
      if (failed) {
        resume.record('failed', failed);
        return this.endBroken(res, plan, report, end);
      }
      resume.record('resumed', cause);
    }
  }

  /**
   * One continuation: a replica that has not had the request (its pool's, then the deployment's next
   * pools' that can continue), the continuation body, its stream spliced in until it ends. Returns
   * why none could start, or nothing once one has (`report` then says how it ended).
   */
  private async continueStream(
    req: IncomingMessage,
    res: ServerResponse,
    plan: ExchangePlan,
    at: Position,
    report: ExchangeReport,
    deadline: number,
    splice: StreamSplice,
  ): Promise<FailedReason | 'client_gone' | undefined> {
    const { clock, picker } = this.deps;
    const deployment = (plan.route[at.step] as RouteStep).deployment;
    let failure: FailedReason = 'no_replica';
    let tries = 0;
    for (;;) {
      const step = plan.route[at.step] as RouteStep;
      if (plan.signal.aborted) return 'client_gone';
      if (clock.now() >= deadline) return 'timeout';
      if (tries > step.pool.resilience.retries.maxRetries || !picker.hasUntried(step.pool, at.tried, plan.request)) {
        const next = plan.route[at.step + 1];
        if (!next || next.deployment !== deployment || !RESUMING_ENGINES.has(next.pool.engine)) return failure;
        at.step += 1;
        at.tried = new Set();
        tries = 0;
        report.pool = next.pool;
        continue;
      }
      let picked: Picked;
      try {
        picked = await picker.pick(step.pool, at.tried, plan.signal, plan.request, deadline - clock.now(), false);
      } catch (err) {
        if (isAbortError(err)) return 'client_gone';
        tries = Infinity; // no replica of this pool can take it now: the next pool, if one can continue
        continue;
      }
      at.tried.add(picked.endpoint.id);
      tries += 1;
      splice.begin();
      const { result, meter, misnamed } = await this.attempt(req, res, plan, step, picked, deadline, report, splice.continuationBody(step.body));
      if (result.kind === 'committed') {
        splice.resumed();
        await this.committed(step, picked, result, meter, report, plan, splice);
        return undefined;
      }
      picked.release();
      if (result.kind === 'client_gone') return 'client_gone';
      failure = result.kind === 'upstream_error' ? 'upstream_error' : result.reason === 'deadline' || result.reason.endsWith('timeout') ? 'timeout' : 'connection';
      // as a first attempt goes on (run): a replica without the pool's model or adapter is not the stream's end,
      // another replica of the pool (then the next pool that can continue) may serve it
      if (!(retryable(result) || misnamed || this.lacksAdapter(plan, step, picked, result, at))) return failure;
    }
  }

  /** Ends a stream the relay left open (nothing resumes it) with the error event of how it broke. */
  private endBroken(res: ServerResponse, plan: ExchangePlan, report: ExchangeReport, end: 'upstream_broken' | 'idle_timeout'): ExchangeReport {
    if (!res.writableEnded && !res.destroyed) res.end(streamErrorEvent(brokenError(end), plan.dialect ?? 'openai'));
    report.failure = end === 'upstream_broken' ? 'upstream_stream_broken' : 'upstream_timeout';
    return report;
  }

  /** Moves the request on to the route's next pool, if there is one, the client is still there and time is left. */
  private moveOn(plan: ExchangePlan, at: Position, report: ExchangeReport, deadline: number): boolean {
    const next = plan.route[at.step + 1];
    if (!next || plan.signal.aborted || this.deps.clock.now() >= deadline) return false;
    this.deps.events?.onFallback?.(plan.route[at.step] as RouteStep, next);
    at.step += 1;
    at.tried = new Set();
    at.retries = 0;
    at.reloaded = false;
    report.pool = next.pool;
    if (next.deployment !== plan.route[0]?.deployment) report.fallback = next.deployment;
    return true;
  }

  /** Passes an engine's error answer on (status kept, body in the OpenAI envelope). */
  private passOn(res: ServerResponse, plan: ExchangePlan, report: ExchangeReport, result: Extract<AttemptResult, { kind: 'upstream_error' }>): ExchangeReport {
    const { status } = result.error;
    // an engine's answer the router turned into one of its own codes (upstream_auth_failed, upstream_redirect) says whether to retry as that code does
    const headers = { ...result.headers, ...noRetryHeaders(result.error.envelope.error.code) };
    writeErrorAnswer(res, { status, headers, body: errorBody(result.error.envelope, status, plan.dialect ?? 'openai') }, plan.requestId);
    return { ...report, failure: result.error.envelope.error.code ?? `upstream_${result.status}` };
  }

  /** Answers with the router's own error. */
  private fail(res: ServerResponse, plan: ExchangePlan, report: ExchangeReport, err: unknown): ExchangeReport {
    const answer = toErrorResponse(err, plan.dialect);
    // A timeout the router has already retried: the official SDKs would send the request twice more, each
    // going through every attempt again (a hung replica, or a generation longer than firstByteMs, got 9
    // attempts per call, 27 minutes at the defaults); the router's retries were theirs.
    if (err instanceof RouterError && err.code === 'UPSTREAM_TIMEOUT' && report.attempts.length > 1) answer.headers['x-should-retry'] = 'false';
    writeErrorAnswer(res, answer, plan.requestId);
    return { ...report, failure: err instanceof RouterError ? err.failure : 'internal_error' };
  }
}
