/**
 * What may change while a simulator runs (`POST /sim/config`, `SimServer.configure`): the
 * fault, the random failure rate, health, latency and the metrics dialect. A body with a field of
 * the wrong type is refused whole with a vLLM-style 400.
 */
import { type LatencyModel } from './engine.js';
import { vllmError } from './errors.js';
import { isSimEngine, SIM_ENGINES, type SimEngineKind } from './options.js';
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
}

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
