/**
 * Every failure the router reports has a stable code from this one table. Codes are set where the
 * failure is found; the HTTP status and the OpenAI-style envelope are chosen only at the edge
 * (server/error-mapper). The wire `code` is the table key in lower case, e.g. `model_not_found`.
 */

export const ERROR_CODES = {
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error' },
  INVALID_JSON: { status: 400, type: 'invalid_request_error' },
  MODEL_CAPABILITY_MISMATCH: { status: 400, type: 'invalid_request_error' },
  INVALID_API_KEY: { status: 401, type: 'invalid_request_error' },
  MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  ROUTE_NOT_FOUND: { status: 404, type: 'invalid_request_error' },
  METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error' },
  REQUEST_TOO_LARGE: { status: 413, type: 'invalid_request_error' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, type: 'invalid_request_error' },
  QUEUE_FULL: { status: 429, type: 'rate_limit_error' },
  QUEUE_TIMEOUT: { status: 429, type: 'rate_limit_error' },
  REQUEST_SHED: { status: 429, type: 'rate_limit_error' },
  UPSTREAM_CONNECTION_FAILED: { status: 502, type: 'server_error' },
  UPSTREAM_AUTH_FAILED: { status: 502, type: 'server_error' },
  NO_READY_REPLICA: { status: 503, type: 'server_error' },
  UPSTREAM_TIMEOUT: { status: 504, type: 'server_error' },
  INTERNAL_ERROR: { status: 500, type: 'server_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface RouterErrorOptions {
  /** JSON path of the offending request field, e.g. `messages[0].role`. */
  param?: string | null;
  /** Seconds a client should wait before retrying (sent as `Retry-After`). */
  retryAfterSeconds?: number;
  cause?: unknown;
}

export class RouterError extends Error {
  readonly param: string | null;
  readonly retryAfterSeconds: number | undefined;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options: RouterErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RouterError';
    this.param = options.param ?? null;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }
}

/** The OpenAI error envelope. All four keys are always present. */
export interface ErrorEnvelope {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export function envelopeOf(err: RouterError): ErrorEnvelope {
  return { error: { message: err.message, type: ERROR_CODES[err.code].type, param: err.param, code: err.code.toLowerCase() } };
}

/** The HTTP answer for any error: RouterErrors by their code, anything else as a bare 500. */
export function toErrorResponse(err: unknown): { status: number; headers: Record<string, string>; body: ErrorEnvelope } {
  const routerError = err instanceof RouterError ? err : new RouterError('INTERNAL_ERROR', 'The router failed to handle the request.');
  const headers: Record<string, string> = {};
  if (routerError.retryAfterSeconds !== undefined) headers['retry-after'] = String(routerError.retryAfterSeconds);
  return { status: routerError.status, headers, body: envelopeOf(routerError) };
}
