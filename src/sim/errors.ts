/**
 * Error bodies exactly as vLLM (≥ 0.10.1) writes them: nested `error`, `code` the HTTP status as an
 * integer, `type` the exception name. The router has to normalise these, so the double must send them.
 */

export interface VllmError {
  status: number;
  type: string;
  message: string;
  param: string | null;
  headers?: Record<string, string>;
}

export function vllmError(status: number, type: string, message: string, param: string | null = null): VllmError {
  return { status, type, message, param };
}

export const badRequest = (message: string, param: string | null = null): VllmError => vllmError(400, 'BadRequestError', message, param);

export const modelNotFound = (model: string): VllmError => vllmError(404, 'NotFoundError', `The model \`${model}\` does not exist.`, 'model');

/** Compact JSON body, key order as vLLM: message, type, param, code. */
export function errorBody(err: VllmError): string {
  return JSON.stringify({ error: { message: err.message, type: err.type, param: err.param, code: err.status } });
}

/**
 * The in-stream error event vLLM sends after the 200 went out. vLLM builds it with Python's
 * `json.dumps`, hence the spaces after `:` and `,` (unlike its normal chunks).
 */
export function streamErrorEvent(err: VllmError): string {
  const q = JSON.stringify;
  return `data: {"error": {"message": ${q(err.message)}, "type": ${q(err.type)}, "param": ${q(err.param)}, ` + `"code": ${err.status}}}\n\ndata: [DONE]\n\n`;
}

/** The phrase vLLM uses as `type` for failures injected with a bare status. */
export function typeForStatus(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequestError';
    case 401:
      return 'Unauthorized';
    case 404:
      return 'NotFoundError';
    case 429:
      return 'RateLimitError';
    case 501:
      return 'NotImplementedError';
    case 503:
      return 'ServiceUnavailableError';
    default:
      return status >= 500 ? 'InternalServerError' : 'BadRequestError';
  }
}
