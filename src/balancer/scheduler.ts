/**
 * The scheduling framework: filtered candidates → scorers (each in [0,1], weighted, from the pool's
 * profile) → the highest total wins; a tie goes to a weighted random draw among the tied, so an idle
 * fleet is shared by weight and a burst of equal scores does not all land on one replica. Pure: the
 * caller supplies loads, engine samples, prefix matches and randomness.
 */
import { type EngineLoad, type Endpoint, type RoutingSettings } from '../core/types.js';
import { estimateLoads, SCORERS, type ScoringInput } from './scorers.js';

export interface ScheduleRequest {
  /** Leading prompt blocks each candidate holds (empty or zeros: no prefix to match). */
  prefixMatched?: readonly number[];
  prefixTotal?: number;
  sessionKey?: string;
}

export interface Decision {
  endpoint: Endpoint;
  index: number;
}

/**
 * What {@link choose} scores: the first `count` entries of each array are the candidates. `load`, when
 * given, is each candidate's `estimatedLoad` (scorers.ts), worked out by a caller that gathers the
 * candidates one by one anyway; otherwise `choose` works it out.
 */
export type Candidates = Omit<ScoringInput, 'load' | 'count'> & { count: number; load?: ArrayLike<number> };

/** Buffers {@link choose} scores in, reused from pick to pick; see {@link scheduleBuffers}. */
export interface ScheduleBuffers {
  readonly load: Float64Array;
  readonly total: Float64Array;
}

/** Buffers for up to `capacity` candidates. */
export function scheduleBuffers(capacity: number): ScheduleBuffers {
  return { load: new Float64Array(capacity), total: new Float64Array(capacity) };
}

/** Totals closer than this are a tie (floating-point sums of the same scores in another order). */
const TIE = 1e-9;

export function schedule(
  candidates: readonly Endpoint[],
  local: readonly number[],
  engine: ReadonlyArray<EngineLoad | undefined>,
  request: ScheduleRequest,
  settings: RoutingSettings,
  random: () => number = Math.random,
): Decision | undefined {
  const { prefixMatched = [], prefixTotal = 0, sessionKey } = request;
  const input: Candidates = { candidates, count: candidates.length, local, engine, prefixMatched, prefixTotal, sessionKey, settings };
  const index = choose(input, scheduleBuffers(candidates.length), random);
  return index < 0 ? undefined : { endpoint: candidates[index] as Endpoint, index };
}

/**
 * {@link schedule} for a caller that keeps its candidates in buffers it reuses: the index of the chosen
 * candidate, or -1 when there is none. `buffers` must hold at least `count` entries.
 */
export function choose(input: Candidates, buffers: ScheduleBuffers, random: () => number = Math.random): number {
  const { candidates, count, settings } = input;
  if (count === 0) return -1;
  if (count === 1) return 0;
  const scoring: ScoringInput = { ...input, load: input.load ?? estimateLoads(candidates, input.local, input.engine, count, buffers.load) };
  const total = buffers.total.fill(0, 0, count);
  for (const { name, weight } of settings.scorers) if (weight > 0) SCORERS[name](scoring, total, weight);
  let chosen = 0;
  let best = -Infinity;
  let tiedWeight = 0;
  for (let i = 0; i < count; i++) {
    const { weight } = candidates[i] as Endpoint;
    const score = total[i] as number;
    if (score > best + TIE) {
      best = score;
      chosen = i;
      tiedWeight = weight;
    } else if (score >= best - TIE) {
      // keep each tied candidate with probability weight / (weight of the tied so far)
      tiedWeight += weight;
      if (random() * tiedWeight < weight) chosen = i;
    }
  }
  return chosen;
}
