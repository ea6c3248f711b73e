/**
 * What may change while a simulator runs (`POST /sim/config`, `SimServer.configure`): the
 * fault, the random failure rate, health, latency, the metrics dialect, and a new model load. A body
 * with a field of the wrong type is refused whole with a vLLM-style 400.
 */
import { type LatencyModel } from './engine.js';
import { vllmError } from './errors.js';
import { isSimEngine, SIM_ENGINES, SIM_FLAGS, type SimEngineKind } from './options.js';
import { RequestError } from './request-checks.js';

/** What `POST /sim/config` and `SimServer.configure` may change while running. */
export interface SimRuntimeConfig {
  fault?: string;
  failureRate?: number;
  failureStatus?: number;
  unhealthy?: boolean;
  latency?: Partial<LatencyModel>;
  /** Whose metric names `/metrics` uses from now on. */
  engine?: SimEngineKind;
  /** Loads the model (again) for this many ms from now, as `--load-time-ms` does at start; 0 ends a load at once. */
  loadTimeMs?: number;
}

const MAX_LOAD_MS = SIM_FLAGS.loadTimeMs.max ?? Infinity;

/** Checks the body of `POST /sim/config`; latency keys must be ones `currentLatency` has. */
export function parseRuntimeConfig(raw: unknown, currentLatency: LatencyModel): SimRuntimeConfig {
  const body = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
  const bad = (field: string): never => {
    throw new RequestError(vllmError(400, 'BadRequestError', `${field} has the wrong type`, field));
  };
  const out: SimRuntimeConfig = {};
  if (body.fault !== undefined) out.fault = typeof body.fault === 'string' ? body.fault : bad('fault');
  if (body.failureRate !== undefined) out.failureRate = typeof body.failureRate === 'number' && body.failureRate >= 0 && body.failureRate <= 1 ? body.failureRate : bad('failureRate');
  if (body.failureStatus !== undefined) out.failureStatus = Number.isInteger(body.failureStatus) ? (body.failureStatus as number) : bad('failureStatus');
  if (body.unhealthy !== undefined) out.unhealthy = typeof body.unhealthy === 'boolean' ? body.unhealthy : bad('unhealthy');
  if (body.loadTimeMs !== undefined) {
    const ms = body.loadTimeMs;
    if (typeof ms !== 'number' || !(ms >= 0 && ms <= MAX_LOAD_MS)) throw new RequestError(vllmError(400, 'BadRequestError', `loadTimeMs must be a number from 0 to ${MAX_LOAD_MS}`, 'loadTimeMs'));
    out.loadTimeMs = ms;
  }
  if (body.engine !== undefined) {
    if (!isSimEngine(body.engine)) throw new RequestError(vllmError(400, 'BadRequestError', `engine must be one of ${SIM_ENGINES.join(', ')}`, 'engine'));
    out.engine = body.engine;
  }
  if (body.latency !== undefined) {
    if (typeof body.latency !== 'object' || body.latency === null) bad('latency');
    const latency: Partial<LatencyModel> = {};
    for (const [k, v] of Object.entries(body.latency as Record<string, unknown>)) {
      if (!(k in currentLatency) || typeof v !== 'number' || v < 0) bad(`latency.${k}`);
      latency[k as keyof LatencyModel] = v as number;
    }
    out.latency = latency;
  }
  return out;
}
