/**
 * Upstream error bodies in every engine's dialect, turned into the OpenAI envelope with the same
 * status: vLLM `{"error":{…,"code":404}}` (integer code), old vLLM and TEI flat `{"message",…}`,
 * TGI `{"error":"…","error_type":"…"}`, FastAPI `{"detail":…}`, plain text (a 4xx's only, and no HTML),
 * or nothing at all.
 */
import { envelope, envelopeOf, errorBody, RouterError, type ErrorEnvelope } from '../core/errors.js';
import { type WireDialect } from '../core/types.js';

export interface NormalisedError {
  status: number;
  envelope: ErrorEnvelope;
}

/** Most of an upstream error body worth reading; the rest is dropped. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;
const MAX_MESSAGE_CHARS = 2000;

/** The `type` values OpenAI's API uses; an engine's own (vLLM's `BadRequestError`, TGI's `validation`) is mapped onto them. */
const OPENAI_TYPES = new Set(['invalid_request_error', 'authentication_error', 'permission_error', 'not_found_error', 'rate_limit_error', 'server_error', 'insufficient_quota']);

/** OpenAI's `type` for an error with this status. */
function openAiType(status: number): string {
  if (status === 429) return 'rate_limit_error';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

const str = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value : undefined);

function clip(message: string): string {
  return message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS)}…` : message;
}

/**
 * The first line of a stack trace: Python's header or a frame of it, a JavaScript frame, a Rust panic's
 * location, Go's goroutine dump. An engine may put one in an error's message (a server catching every
 * exception and answering its formatted traceback): file paths, versions and code lines of its insides.
 */
const TRACE_LINE = /^(?:Traceback \(most recent call last\)|\s*File "[^"\n]*", line \d+|\s+at \S.*:\d+(?::\d+)?\)?$|.*panicked at .*\.rs:\d+|goroutine \d+ \[)/m;

/**
 * An engine's message as the client sees it: what comes before a stack trace in it, or nothing when it
 * starts with one. Only its start is searched (a trace that begins past what {@link clip} keeps is cut
 * with the rest, and a line of hostile text costs the search its length squared: at 64 KiB, 0.1 s).
 */
function withoutTrace(message: string): string | undefined {
  const head = message.length > MAX_MESSAGE_CHARS + 256 ? message.slice(0, MAX_MESSAGE_CHARS + 256) : message;
  const at = head.search(TRACE_LINE);
  if (at < 0) return message;
  return str(message.slice(0, at).trim());
}

/**
 * A body that is not JSON, as far as the client sees it: an engine's plain-text refusal of a request
 * (a 4xx) is passed on; a page of HTML, or the text of a server error (a Python traceback, a proxy's
 * error page), describes the engine's insides, not the request, and is left out (the message names the status).
 */
function shownText(status: number, text: string): string | undefined {
  return status >= 500 || text.startsWith('<') ? undefined : str(text);
}

/** An engine's exception class as a code (vLLM's `InternalServerError`, `BadRequestError`): its insides, not an OpenAI code. */
const EXCEPTION_NAME = /^[A-Z][A-Za-z0-9]*(?:Error|Exception)$/;

/** OpenAI's string codes where an engine's error means the same thing. */
function codeFor(status: number, message: string, param: string | null, upstreamCode: unknown): string | null {
  if (typeof upstreamCode === 'string' && upstreamCode !== '' && !EXCEPTION_NAME.test(upstreamCode)) return upstreamCode;
  if (status === 404 && param === 'model') return 'model_not_found';
  if (status === 400 && /maximum context length|exceeds the available context size/i.test(message)) return 'context_length_exceeded';
  return null;
}

function fromJson(status: number, data: unknown): { message?: string; type?: string; param: string | null; code: unknown } {
  if (typeof data !== 'object' || data === null) return { param: null, code: undefined };
  const body = data as Record<string, unknown>;
  const nested = body.error;
  if (typeof nested === 'object' && nested !== null) {
    const e = nested as Record<string, unknown>;
    return { message: str(e.message), type: str(e.type), param: str(e.param) ?? null, code: e.code };
  }
  // TGI: its error_type (overloaded, validation, generation, …) is the closest thing to a code
  if (typeof nested === 'string') return { message: nested, type: str(body.error_type), param: null, code: str(body.error_type) };
  if (str(body.message)) return { message: str(body.message), type: str(body.type), param: str(body.param) ?? null, code: body.code };
  if (body.detail !== undefined) return { message: typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail), param: null, code: undefined };
  return { param: null, code: undefined };
}

/**
 * The status and envelope the client gets for an upstream non-2xx answer. Three kinds change:
 * 401/403 mean the engine refused the router's own credentials, which the client cannot fix, so they
 * become 502; TGI's 424 (generation failed) becomes 502 so that clients treat it as a server failure;
 * a redirect (3xx) is not followed (an engine URL that redirects is a misconfigured pool) and becomes
 * 502 too: passed on, a 304 to a POST would reach the client with no body at all.
 */
export function normaliseUpstreamError(status: number, body: Buffer): NormalisedError {
  const text = body.toString('utf8').trim();
  let parsed: ReturnType<typeof fromJson> = { param: null, code: undefined };
  let plain: string | undefined;
  try {
    parsed = fromJson(status, JSON.parse(text) as unknown);
  } catch {
    // a body cut at MAX_ERROR_BODY_BYTES whose JSON no longer parses is no message: the status is named instead
    plain = body.length >= MAX_ERROR_BODY_BYTES && /^[[{]/.test(text) ? undefined : shownText(status, text);
  }
  if (status >= 300 && status < 400) {
    const redirect = new RouterError('UPSTREAM_REDIRECT', `The model server answered with a redirect (status ${status}), which the router does not follow; check the pool's endpoint URL.`);
    return { status: redirect.status, envelope: envelopeOf(redirect) };
  }
  if (status === 401 || status === 403) {
    const refused = new RouterError('UPSTREAM_AUTH_FAILED', `The model server refused the router's credentials (status ${status}); check the pool's backend key.`);
    return { status: refused.status, envelope: envelopeOf(refused) };
  }
  const outStatus = status === 424 ? 502 : status;
  const said = parsed.message ?? plain;
  const message = clip((said !== undefined ? withoutTrace(said) : undefined) ?? `The model server answered with status ${status}.`);
  return {
    status: outStatus,
    envelope: envelope(message, parsed.type !== undefined && OPENAI_TYPES.has(parsed.type) ? parsed.type : openAiType(outStatus), parsed.param, codeFor(status, message, parsed.param, parsed.code)),
  };
}

/** Anthropic's error types, as statuses (an engine serving the Messages API names its errors so). */
const ANTHROPIC_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 503,
};

/**
 * TGI's `error_type`s as the statuses TGI answers them with when not streaming (router/src/server.rs,
 * `From<InferError> for (StatusCode, …)`). A streamed request is validated after TGI sent its 200, so
 * its error comes as `data:{"error":"…","error_type":"validation"}`, with no status of its own.
 */
const TGI_STATUS: Record<string, number> = {
  validation: 422,
  template_error: 422,
  missing_template_variable: 422,
  tool_error: 422,
  overloaded: 429,
  generation: 424,
  incomplete_generation: 500,
};

/** An error event an engine sent inside a stream, in the router's envelope for the stream's dialect. */
export interface StreamError {
  /** The status the error would have had as an answer (what its type is made from). */
  status: number;
  /** The envelope's code (its type, without one): the access log's `failure`. */
  code: string;
  /** The event to relay instead of the engine's (on chat and completions without a `[DONE]`: the engine's own follows it). */
  text: string;
}

/** An OpenAI-dialect event that is an error (`{"error": …}`), in any JSON spacing. */
export const OPENAI_ERROR = /^\{\s*"error"\s*:/;

/**
 * The engine's own error event in a stream (vLLM's `data: {"error": {…, "code": 500}}`, llama.cpp's
 * `error: {"code": 500, …}` block, which the tap reads as an `event: error`, an `event: error` on the
 * Responses or Messages API), re-wrapped as the router wraps an error answer: OpenAI's types and codes,
 * Anthropic's envelope on the Messages API. Undefined for any other event.
 */
export function streamError(dialect: WireDialect, event: { data: string; event?: string }): StreamError | undefined {
  if (event.event !== 'error' && (dialect === 'openai' ? !OPENAI_ERROR.test(event.data) : !event.data.startsWith('{"type":"error"'))) return undefined;
  let inner: Record<string, unknown> = {};
  try {
    const body = JSON.parse(event.data) as unknown;
    if (typeof body === 'object' && body !== null) {
      const nested = (body as Record<string, unknown>).error;
      inner = (typeof nested === 'object' && nested !== null ? nested : body) as Record<string, unknown>;
    }
  } catch {
    // not JSON: its text is the message
  }
  // vLLM puts the status in `code`; Anthropic's dialect names it by type, TGI's by `error_type`; otherwise a server error
  const given = typeof inner.code === 'number' && inner.code >= 400 && inner.code < 600 ? inner.code : (statusOfType(inner) ?? 500);
  const { status: answered, envelope: wrapped } = normaliseUpstreamError(given === 401 || given === 403 ? 500 : given, Buffer.from(event.data));
  // the status the client would have had: TGI's 424 (generation failed) is a 502, a server error, as an answer is
  const status = given === 401 || given === 403 ? given : answered;
  const { error } = wrapped;
  const code = error.code ?? error.type;
  if (dialect === 'anthropic') return { status, code, text: `event: error\ndata: ${JSON.stringify(errorBody(wrapped, status, 'anthropic'))}\n\n` };
  if (dialect === 'responses') {
    const sequence = typeof inner.sequence_number === 'number' ? { sequence_number: inner.sequence_number } : {};
    // the event has no type of error beside its code: a code-less error is named by its type (`server_error`, as OpenAI's events are)
    return { status, code, text: `event: error\ndata: ${JSON.stringify({ type: 'error', code, message: error.message, param: error.param, ...sequence })}\n\n` };
  }
  return { status, code, text: `data: ${JSON.stringify(wrapped)}\n\n` };
}

/** The status an error event's type names: Anthropic's `type`, TGI's `error_type` beside its string `error`. */
function statusOfType(inner: Record<string, unknown>): number | undefined {
  if (typeof inner.type === 'string') return ANTHROPIC_STATUS[inner.type];
  if (typeof inner.error === 'string' && typeof inner.error_type === 'string') return TGI_STATUS[inner.error_type];
  return undefined;
}
