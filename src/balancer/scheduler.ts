/**
 * The scheduling framework: filtered candidates → scorers (each in [0,1], weighted, from the pool's
 * profile) → the highest total wins; a tie goes to a weighted random draw among the tied, so an idle
 * fleet is shared by weight and a burst of equal scores does not all land on one replica. Pure: the
 * caller supplies loads, engine samples, prefix matches and randomness.
 */
import { type EngineLoad, type Endpoint, type RoutingSettings } from '../core/types.js';
import { estimatedLoads, SCORERS, type ScoringInput } from './scorers.js';

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
  if (candidates.length === 0) return undefined;
  if (candidates.length === 1) return { endpoint: candidates[0] as Endpoint, index: 0 };
  const input: ScoringInput = {
    candidates,
    local,
    engine,
    load: estimatedLoads(candidates, local, engine),
    prefixMatched: request.prefixMatched ?? [],
    prefixTotal: request.prefixTotal ?? 0,
    sessionKey: request.sessionKey,
    settings,
  };
  const total = new Float64Array(candidates.length);
  for (const { name, weight } of settings.scorers) {
    if (weight <= 0) continue;
    const scores = SCORERS[name](input);
    for (let i = 0; i < total.length; i++) total[i] = (total[i] as number) + weight * (scores[i] as number);
  }
  let chosen = 0;
  let best = -Infinity;
  let tiedWeight = 0;
  candidates.forEach((ep, i) => {
    const score = total[i] as number;
    if (score > best + TIE) {
      best = score;
      chosen = i;
      tiedWeight = ep.weight;
    } else if (score >= best - TIE) {
      // keep each tied candidate with probability weight / (weight of the tied so far)
      tiedWeight += ep.weight;
      if (random() * tiedWeight < ep.weight) chosen = i;
    }
  });
  return { endpoint: candidates[chosen] as Endpoint, index: chosen };
}
