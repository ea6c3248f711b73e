/**
 * Every failure the router reports has a stable code from this one table, with its HTTP status and
 * OpenAI `type`. Codes are set where the failure is found; this module is the only place that turns
 * them into an answer: a JSON envelope (`toErrorResponse`), an SSE error event (`streamErrorEvent`),
 * or the envelope of an engine's own error (`envelope`). The wire `code` is the key in lower case.
 * Each answer is in the route's wire dialect: OpenAI's envelope, or Anthropic's on `/v1/messages`
 * (`errorBody`); a stream ends the way its API ends one (an `error` event on the Responses and
 * Messages APIs).
 *
 * A few codes are never sent because nobody is left to receive them (`CLIENT_GONE`,
 * `CLIENT_STALLED`), or are sent as another (`MODEL_NOT_ALLOWED` answers as `MODEL_NOT_FOUND`, so a
 * key cannot discover models it may not use): they name the failure in the access log and metrics.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { type WireDialect } from './types.js';

interface CodeSpec {
  status: number;
  type: string;
  /** Answered to the client as this code instead (the log keeps the real one). */
  answerAs?: string;
  /**
   * `false`: retrying the request cannot help until an operator acts (a wrong backend key, an endpoint
   * URL that redirects), so the answer says `x-should-retry: false`; the official SDKs would otherwise
   * send it twice more, each reaching the engine, before the client saw the error.
   */
  retry?: false;
}

export const ERROR_CODES = {
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error' },
  INVALID_JSON: { status: 400, type: 'invalid_request_error' },
  MODEL_CAPABILITY_MISMATCH: { status: 400, type: 'invalid_request_error' },
  INVALID_API_KEY: { status: 401, type: 'invalid_request_error' },
  MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  MODEL_NOT_ALLOWED: { status: 404, type: 'invalid_request_error', answerAs: 'MODEL_NOT_FOUND' },
  ROUTE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  RESPONSE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error' },
  REQUEST_TIMEOUT: { status: 408, type: 'invalid_request_error' },
  REQUEST_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error' },
  EXPECTATION_FAILED: { status: 417, type: 'invalid_request_error' },
  REQUEST_HEADER_TOO_LARGE: { status: 431, type: 'invalid_request_error' },
  RATE_LIMIT_EXCEEDED: { status: 429, type: 'requests' },
  INSUFFICIENT_QUOTA: { status: 429, type: 'insufficient_quota' },
  QUEUE_FULL: { status: 429, type: 'rate_limit_error' },
  QUEUE_TIMEOUT: { status: 429, type: 'rate_limit_error' },
  REQUEST_SHED: { status: 429, type: 'rate_limit_error' },
  CLIENT_GONE: { status: 499, type: 'invalid_request_error' },
  CLIENT_STALLED: { status: 499, type: 'invalid_request_error' },
  INTERNAL_ERROR: { status: 500, type: 'server_error' },
  UPSTREAM_CONNECTION_FAILED: { status: 502, type: 'server_error' },
  UPSTREAM_AUTH_FAILED: { status: 502, type: 'server_error', retry: false },
  UPSTREAM_REDIRECT: { status: 502, type: 'server_error', retry: false },
  UPSTREAM_STREAM_BROKEN: { status: 502, type: 'server_error' },
  UPSTREAM_INVALID_ANSWER: { status: 502, type: 'server_error' },
  ADAPTER_LOAD_FAILED: { status: 502, type: 'server_error' },
  SERVED_MODEL_MISMATCH: { status: 502, type: 'server_error', retry: false },
  NO_READY_REPLICA: { status: 503, type: 'server_error' },
  ROUTER_SHUTTING_DOWN: { status: 503, type: 'server_error' },
  UPSTREAM_TIMEOUT: { status: 504, type: 'server_error' },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The lower-case wire form of a code, as logs, metrics and envelopes carry it. */
export type FailureCode = Lowercase<ErrorCode>;

/** Seconds a client is asked to wait when no replica can take its request (`Retry-After`). */
export const NO_REPLICA_RETRY_AFTER_SECONDS = 2;
/** Seconds a client is asked to wait when it was queued out or shed (`Retry-After`). */
export const BUSY_RETRY_AFTER_SECONDS = 1;

export interface RouterErrorOptions {
  /** JSON path of the offending request field, e.g. `messages[0].role`. */
  param?: string | null;
  /** Seconds a client should wait before retrying (sent as `Retry-After`). */
  retryAfterSeconds?: number;
  /** The envelope's `type` when it is not the code's (a rate limit on tokens is `tokens`, on requests `requests`). */
  type?: string;
  /** More headers for the answer (the rate-limit headers, `x-should-retry`). */
  headers?: Readonly<Record<string, string>>;
  cause?: unknown;
}

export class RouterError extends Error {
  readonly param: string | null;
  readonly retryAfterSeconds: number | undefined;
  readonly type: string | undefined;
  readonly headers: Readonly<Record<string, string>> | undefined;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options: RouterErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RouterError';
    this.param = options.param ?? null;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.type = options.type;
    this.headers = options.headers;
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  /** The code the log and metrics record (the real one, even when the client is answered another). */
  get failure(): FailureCode {
    return failureCode(this.code);
  }
}

export function failureCode(code: ErrorCode): FailureCode {
  return code.toLowerCase() as FailureCode;
}

/** The OpenAI error envelope. All four keys are always present. */
export interface ErrorEnvelope {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** An envelope for an error that is not the router's own (an engine's, normalised). */
export function envelope(message: string, type: string, param: string | null, code: string | null): ErrorEnvelope {
  return { error: { message, type, param, code } };
}

function answered(code: ErrorCode): ErrorCode {
  const spec: CodeSpec = ERROR_CODES[code];
  return (spec.answerAs as ErrorCode | undefined) ?? code;
}

export function envelopeOf(err: RouterError): ErrorEnvelope {
  const code = answered(err.code);
  return envelope(err.message, err.type ?? ERROR_CODES[code].type, err.param, failureCode(code));
}

/** Anthropic's error envelope (`/v1/messages`). */
export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string };
}

/** Anthropic's error `type` for an answer with this status. */
function anthropicType(status: number): string {
  const types: Record<number, string> = {
    401: 'authentication_error',
    403: 'permission_error',
    404: 'not_found_error',
    413: 'request_too_large',
    429: 'rate_limit_error',
    503: 'overloaded_error',
    529: 'overloaded_error',
  };
  return types[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

/** An OpenAI envelope (the router's own, or an engine's normalised) as the route's dialect answers it. */
export function errorBody(body: ErrorEnvelope, status: number, dialect: WireDialect): ErrorEnvelope | AnthropicErrorBody {
  if (dialect !== 'anthropic') return body;
  return { type: 'error', error: { type: anthropicType(status), message: body.error.message } };
}

/** `x-should-retry: false` for an answer with this code when retrying cannot help it ({@link CodeSpec}.retry). */
function noRetry(code: ErrorCode): Record<string, string> {
  return (ERROR_CODES[code] as CodeSpec).retry === false ? { 'x-should-retry': 'false' } : {};
}

/** {@link noRetry} for an answer's wire `code` (an engine's answer the router re-coded, `upstream_auth_failed`); an engine's own code gets none. */
export function noRetryHeaders(code: string | null): Record<string, string> {
  const key = code?.toUpperCase();
  return key !== undefined && Object.hasOwn(ERROR_CODES, key) ? noRetry(key as ErrorCode) : {};
}

/** The HTTP answer for any error: RouterErrors by their code, anything else as a bare 500; in the route's dialect. */
export function toErrorResponse(err: unknown): { status: number; headers: Record<string, string>; body: ErrorEnvelope };
export function toErrorResponse(err: unknown, dialect: WireDialect | undefined): { status: number; headers: Record<string, string>; body: ErrorEnvelope | AnthropicErrorBody };
export function toErrorResponse(err: unknown, dialect: WireDialect = 'openai'): { status: number; headers: Record<string, string>; body: ErrorEnvelope | AnthropicErrorBody } {
  const routerError = err instanceof RouterError ? err : new RouterError('INTERNAL_ERROR', 'The router failed to handle the request.');
  const headers: Record<string, string> = { ...noRetry(routerError.code), ...routerError.headers };
  if (routerError.retryAfterSeconds !== undefined) headers['retry-after'] = String(routerError.retryAfterSeconds);
  const status = ERROR_CODES[answered(routerError.code)].status;
  return { status, headers, body: errorBody(envelopeOf(routerError), status, dialect) };
}

/**
 * The longest wait the official SDKs take from an answer's `retry-after-ms` or `Retry-After`: OpenAI's
 * and the AI SDK's. Asked to wait longer, they retry at once on their own backoff (about 0.5 s and 1 s
 * later, all refused again); Anthropic's SDK sleeps the whole wait, however long, inside the call.
 */
export const SDK_MAX_RETRY_AFTER_MS = 60_000;

/** How long an answer's `retry-after-ms` or `Retry-After` (seconds, or an HTTP date) asks a client to wait, in ms, if either does. */
export function retryAfterMs(headers: IncomingHttpHeaders, now = Date.now()): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (headers['retry-after-ms'] !== undefined && Number.isFinite(ms) && ms >= 0) return ms;
  const raw = headers['retry-after'];
  if (typeof raw !== 'string') return undefined;
  const seconds = Number(raw);
  if (raw.trim() !== '' && Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(raw);
  return Number.isFinite(date) ? Math.max(0, date - now) : undefined;
}

/**
 * Writes an error answer (`toErrorResponse`'s, or an engine's passed on) as JSON, the request id in the
 * head it is written with; nothing once the response has started or the client is gone. An answer that
 * asks for a wait longer than the SDKs take (a key's tokens bucket deep in debt, an engine's
 * `Retry-After: 3600`) says `x-should-retry: false`, unless it already says whether to retry: the
 * OpenAI SDK would otherwise retry it twice within 1.5 s, each refused again, and Anthropic's would
 * sleep the whole wait inside the call.
 */
export function writeErrorAnswer(res: ServerResponse, answer: { status: number; headers: Record<string, string>; body: unknown }, requestId: string | undefined): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(answer.body);
  const wait = retryAfterMs(answer.headers);
  const tooLong = wait !== undefined && wait > SDK_MAX_RETRY_AFTER_MS && answer.headers['x-should-retry'] === undefined;
  res.writeHead(answer.status, {
    ...answer.headers,
    ...(tooLong ? { 'x-should-retry': 'false' } : {}),
    ...(requestId === undefined ? {} : { 'x-request-id': requestId }),
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * The final event of a stream the router has to end early, so it never looks finished: OpenAI's
 * `data: {"error":…}` then `[DONE]`; on the Responses API a typed `error` event (numbered after the
 * last event the client got); on the Messages API Anthropic's `error` event.
 */
export function streamErrorEvent(err: RouterError, dialect: WireDialect = 'openai', nextSequence?: number): string {
  const { error } = envelopeOf(err);
  if (dialect === 'anthropic') return `event: error\ndata: ${JSON.stringify(errorBody({ error }, err.status, dialect))}\n\n`;
  if (dialect === 'responses') {
    const event = { type: 'error', code: error.code, message: error.message, param: error.param, ...(nextSequence !== undefined ? { sequence_number: nextSequence } : {}) };
    return `event: error\ndata: ${JSON.stringify(event)}\n\n`;
  }
  return `data: ${JSON.stringify({ error })}\n\ndata: [DONE]\n\n`;
}

/** One answer for a model that does not exist and one the key may not use. */
export function modelNotFound(model: string, hidden = false): RouterError {
  const message = `The model \`${model.slice(0, 200)}\` does not exist or you do not have access to it.`;
  return new RouterError(hidden ? 'MODEL_NOT_ALLOWED' : 'MODEL_NOT_FOUND', message, { param: 'model' });
}

/**
 * The replicas tried answered that they do not serve the model's LoRA adapter (404): a 503 to retry,
 * not the engine's 404 (which names the adapter, not the model the client asked for, and says the
 * model does not exist when the router serves it).
 */
export function noAdapterReplica(): RouterError {
  return new RouterError('NO_READY_REPLICA', 'No replica of this model serves its adapter right now (the engines tried answered that they do not have it); retry shortly.', {
    retryAfterSeconds: NO_REPLICA_RETRY_AFTER_SECONDS,
  });
}

/**
 * The replicas tried answered 404 that they do not have the model the router sent them, the pool's
 * `servedModelName` (a case slip, `Llama-3-8B` for `llama-3-8b`): the deployment is misconfigured. Not
 * the engine's 404, which names that internal name, a model the client never asked for; nor is the name
 * given here. `x-should-retry: false` ({@link CodeSpec}.retry): the router tried the pool's other
 * replicas, and an SDK's retry would only reach the same engines to be refused again.
 */
export function servedModelMismatch(): RouterError {
  return new RouterError(
    'SERVED_MODEL_MISMATCH',
    "This model's deployment is misconfigured: its model servers do not serve the model under the name the router sends them (the pool's servedModelName). Retrying will not help until an operator fixes it.",
  );
}

/** No replica of a model can take a request right now; the client should retry shortly. */
export function noReadyReplica(model?: string): RouterError {
  const what = model === undefined ? 'No replica of this model' : `The model \`${model.slice(0, 200)}\` has no replica that`;
  return new RouterError('NO_READY_REPLICA', `${what} can take requests right now (none ready, or all failing); retry shortly.`, {
    retryAfterSeconds: NO_REPLICA_RETRY_AFTER_SECONDS,
  });
}
