/**
 * Carries out a request's {@link Fault} (see `faults.ts` for the spec) on the live response: the
 * faults that act before the engine is involved (`status`, `hang`) and those that act after a
 * number of generated tokens (`die-after`, `stall-after`, `error-after`).
 */
import type { ServerResponse } from 'node:http';
import { typeForStatus, vllmError } from './errors.js';
import { type Fault } from './faults.js';
import { abortOnClose, untilAborted, VLLM_ERRORS, type ErrorDialect } from './http-io.js';
import { type Sequence } from './sequence.js';

/** Handles `status` and `hang` (errors written in the route's dialect). Returns true when the request is fully dealt with. */
export async function earlyFault(fault: Fault, res: ServerResponse, errors: ErrorDialect = VLLM_ERRORS): Promise<boolean> {
  if (fault.status !== undefined) {
    const err = vllmError(fault.status, typeForStatus(fault.status), `Injected failure (status ${fault.status}).`);
    if (fault.retryAfterSeconds !== undefined) err.headers = { 'retry-after': String(fault.retryAfterSeconds) };
    errors.send(res, err);
    return true;
  }
  if (fault.hang) {
    await untilAborted(abortOnClose(res));
    return true;
  }
  return false;
}

/**
 * Fault checks after `tokens` tokens. Returns true when the fault ended the request
 * (`die-after`, `error-after`) or after a `stall-after` once the client left.
 */
export async function midFault(fault: Fault, tokens: number, res: ServerResponse, seq: Sequence, signal: AbortSignal, stream: boolean, errors: ErrorDialect = VLLM_ERRORS): Promise<boolean> {
  if (fault.dieAfterTokens === tokens) {
    res.socket?.destroy();
    seq.finish('abort');
    return true;
  }
  if (fault.stallAfterTokens === tokens) {
    await untilAborted(signal);
    return true;
  }
  if (fault.errorAfterTokens === tokens) {
    const err = vllmError(500, 'InternalServerError', 'Internal server error');
    if (stream) res.end(errors.streamEnd(err));
    else errors.send(res, err);
    seq.finish('error');
    return true;
  }
  return false;
}
