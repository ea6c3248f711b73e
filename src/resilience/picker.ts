/**
 * Chooses the endpoint for one attempt: the pool's snapshot, minus endpoints failing active health
 * checks and endpoints whose breaker rejects, minus endpoints already tried by this request (unless
 * nothing else is left), minus endpoints at `maxConcurrencyPerReplica`; then the least outstanding
 * requests per unit of weight. When every usable endpoint is full, the request waits in the
 * pool's admission queue.
 */
import { pickLeastOutstanding } from '../balancer/least-outstanding.js';
import { type InFlight } from '../balancer/in-flight.js';
import { RouterError } from '../core/errors.js';
import { type Endpoint, type EndpointSource, type PoolSpec } from '../core/types.js';
import { type AdmissionQueues } from './admission.js';
import { type BreakerRegistry, type BreakerTicket } from './breaker.js';

export interface Picked {
  endpoint: Endpoint;
  ticket: BreakerTicket;
  /** Gives the concurrency slot back (idempotent) and lets a queued request in. */
  release(): void;
}

export interface HealthView {
  isHealthy(endpointId: string): boolean;
}

export interface PickerDeps {
  endpoints: EndpointSource;
  inFlight: InFlight;
  breakers: BreakerRegistry;
  health: HealthView;
  admission: AdmissionQueues;
  random: () => number;
}

export class EndpointPicker {
  constructor(private readonly deps: PickerDeps) {}

  /**
   * An endpoint for the next attempt at `pool`. Rejects with NO_READY_REPLICA when no endpoint can
   * take traffic at all, with QUEUE_FULL / QUEUE_TIMEOUT from admission, or with an AbortError.
   */
  pick(pool: PoolSpec, tried: ReadonlySet<string>, signal?: AbortSignal): Promise<Picked> {
    if (this.usable(pool).length === 0) {
      return Promise.reject(new RouterError('NO_READY_REPLICA', 'No replica of this model can take requests right now (none ready, or all failing); retry shortly.', { retryAfterSeconds: 2 }));
    }
    return this.deps.admission.admit(pool.name, () => this.take(pool, tried), pool.resilience.queue, signal);
  }

  /** A committed stream that the engine broke counts against its endpoint's breaker. */
  recordStreamFailure(pool: PoolSpec, endpointId: string): void {
    this.deps.breakers.get(endpointId, pool.name, pool.resilience.breaker).recordFailure();
  }

  private usable(pool: PoolSpec): Endpoint[] {
    const { endpoints, health, breakers } = this.deps;
    return endpoints.snapshot(pool.name).filter((ep) => health.isHealthy(ep.id) && breakers.get(ep.id, pool.name, pool.resilience.breaker).available());
  }

  private take(pool: PoolSpec, tried: ReadonlySet<string>): Picked | undefined {
    const { inFlight, breakers, admission, random } = this.deps;
    const usable = this.usable(pool);
    const fresh = usable.filter((ep) => !tried.has(ep.id));
    const limit = pool.resilience.maxConcurrencyPerReplica;
    const candidates = (fresh.length > 0 ? fresh : usable).filter((ep) => limit === 0 || inFlight.count(ep.id) < limit * ep.weight);
    const endpoint = pickLeastOutstanding(candidates, (ep) => inFlight.count(ep.id), random);
    if (!endpoint) return undefined;
    const ticket = breakers.get(endpoint.id, pool.name, pool.resilience.breaker).begin();
    if (!ticket) return undefined; // its half-open probe slot was just taken
    const releaseSlot = inFlight.acquire(endpoint.id, pool.name);
    let released = false;
    return {
      endpoint,
      ticket,
      release: () => {
        if (released) return;
        released = true;
        releaseSlot();
        admission.notify(pool.name);
      },
    };
  }
}
