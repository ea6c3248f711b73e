/**
 * Injected faults. The same spec is accepted by the `--fault` flag (every request), the
 * `x-sim-fault` request header (one request) and `POST /sim/config`:
 *
 *   status=503[,retry-after=2]   answer at once with this status and a vLLM error body
 *   hang                         accept the request and never send a byte (until the client leaves)
 *   slow-start=MS                add MS to the time to first token
 *   die-after=N                  destroy the socket after N generated tokens (0 = right after prefill)
 *   stall-after=N                stop sending after N tokens but keep the connection open
 *   error-after=N                after N tokens end with vLLM's in-stream error event (500 if not streaming)
 *
 * Items are separated by commas; `none` is the empty fault.
 */

export interface Fault {
  status?: number;
  retryAfterSeconds?: number;
  hang?: boolean;
  slowStartMs?: number;
  dieAfterTokens?: number;
  stallAfterTokens?: number;
  errorAfterTokens?: number;
}

export class FaultSpecError extends Error {
  readonly code = 'SIM_BAD_FAULT';
}

type NumericFaultKey = Exclude<keyof Fault, 'hang'>;

const NUMERIC: Record<string, { key: NumericFaultKey; min: number; max: number }> = {
  status: { key: 'status', min: 100, max: 599 },
  'retry-after': { key: 'retryAfterSeconds', min: 0, max: 3600 },
  'slow-start': { key: 'slowStartMs', min: 0, max: 3_600_000 },
  'die-after': { key: 'dieAfterTokens', min: 0, max: 1_000_000 },
  'stall-after': { key: 'stallAfterTokens', min: 0, max: 1_000_000 },
  'error-after': { key: 'errorAfterTokens', min: 0, max: 1_000_000 },
};

export function parseFault(spec: string): Fault {
  const fault: Fault = {};
  for (const raw of spec.split(',')) {
    const item = raw.trim();
    if (item === '' || item === 'none') continue;
    if (item === 'hang') {
      fault.hang = true;
      continue;
    }
    const eq = item.indexOf('=');
    const name = eq < 0 ? item : item.slice(0, eq);
    const rule = NUMERIC[name];
    if (!rule) {
      throw new FaultSpecError(`unknown fault "${name}"; use status=N, retry-after=S, hang, slow-start=MS, die-after=N, stall-after=N or error-after=N`);
    }
    const value = Number(item.slice(eq + 1));
    if (eq < 0 || !Number.isInteger(value) || value < rule.min || value > rule.max) {
      throw new FaultSpecError(`fault "${name}" needs an integer from ${rule.min} to ${rule.max}`);
    }
    fault[rule.key] = value;
  }
  return fault;
}

/** Later faults override earlier ones field by field. */
export function mergeFaults(...faults: Fault[]): Fault {
  return Object.assign({}, ...faults) as Fault;
}
