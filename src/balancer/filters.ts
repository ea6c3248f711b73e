/**
 * Filters: which endpoints a request may go to, decided on plain data — a snapshot of what the picker
 * knows about each endpoint at the moment of a pick (health, breaker, in-flight count, whether this
 * request already tried it). Pure: the state comes in, the survivors go out, in their input order.
 * Scorers (scorers.ts) then rank the survivors.
 */
import { type Endpoint } from '../core/types.js';

/** One endpoint as a pick sees it. */
export interface CandidateState {
  endpoint: Endpoint;
  /** Passes its active health checks (always true when they are off). */
  healthy: boolean;
  /** Its breaker lets a request through (closed, or half-open with the probe free). */
  breakerAvailable: boolean;
  /** Requests this router has outstanding on it. */
  inFlight: number;
  /** This request was already sent to it. */
  tried: boolean;
}

export type CandidateFilter = (candidates: readonly CandidateState[]) => CandidateState[];

/** Endpoints that fail their health checks are out. */
export const healthy: CandidateFilter = (candidates) => candidates.filter((c) => c.healthy);

/** Endpoints whose breaker is open (or whose half-open probe is taken) are out. */
export const breakerAllows: CandidateFilter = (candidates) => candidates.filter((c) => c.breakerAvailable);

/** Endpoints this request already tried are out — unless none other is left, then any may be tried again. */
export const untried: CandidateFilter = (candidates) => {
  const fresh = candidates.filter((c) => !c.tried);
  return fresh.length > 0 ? fresh : [...candidates];
};

/** Endpoints at `limit` requests per unit of weight are out (`limit` 0: no limit). */
export function underConcurrencyLimit(limit: number): CandidateFilter {
  return (candidates) => (limit === 0 ? [...candidates] : candidates.filter((c) => c.inFlight < limit * c.endpoint.weight));
}

/** Whether one endpoint can take traffic at all: healthy, and its breaker allows it. */
export function isUsable(c: Pick<CandidateState, 'healthy' | 'breakerAvailable'>): boolean {
  return c.healthy && c.breakerAvailable;
}

/** Endpoints that can take traffic at all: healthy, and their breaker allows it. */
export function usable(candidates: readonly CandidateState[]): CandidateState[] {
  return candidates.filter(isUsable);
}

/**
 * The endpoints a pick may choose from: `underConcurrencyLimit(limit)(untried(usable(candidates)))`,
 * fused into one pass with one array, as it runs on every pick over the whole pool.
 */
export function pickable(candidates: readonly CandidateState[], concurrencyLimit: number): CandidateState[] {
  const anyFresh = candidates.some((c) => isUsable(c) && !c.tried);
  return candidates.filter((c) => isUsable(c) && mayPick(c.endpoint, c.inFlight, c.tried, anyFresh, concurrencyLimit));
}

/** Whether a pick over these usable endpoints leaves out the ones the request tried: it does while one is untried. */
export function skipsTried(usable: readonly Endpoint[], tried: ReadonlySet<string>): boolean {
  return tried.size > 0 && usable.some((ep) => !tried.has(ep.id));
}

/**
 * {@link pickable}'s rule for one usable endpoint, for a caller that keeps the usable endpoints between
 * picks rather than a snapshot per pick: not tried (while `skipTried`, see {@link skipsTried}), and under
 * the concurrency limit.
 */
export function mayPick(endpoint: Endpoint, inFlight: number, tried: boolean, skipTried: boolean, concurrencyLimit: number): boolean {
  return (!skipTried || !tried) && (concurrencyLimit === 0 || inFlight < concurrencyLimit * endpoint.weight);
}
