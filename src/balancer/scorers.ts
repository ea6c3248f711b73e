/**
 * The scorers a scheduling profile combines. Each gives every candidate a score in [0,1] (higher is
 * better); the scheduler adds them up by weight. A load signal x is scored against the least loaded
 * candidate as (min + 1)/(x + 1): the least loaded scores 1, one twice as busy (+1) about ½. A ratio,
 * not a min–max rank: with every batch full, one request more (8 against 7) is a small difference and
 * scores small — min–max would give it the scorer's full weight and let it outvote a cached prefix
 * (measured: the prefix benchmark's first run). A replica without a fresh engine sample gets the mean
 * score of those with one (neutral): stale figures are ignored, never trusted. Pure.
 */
import { type EngineLoad, type Endpoint, type RoutingSettings, type ScorerName } from '../core/types.js';
import { sessionTarget } from './session-affinity.js';

/** What the scorers see of one pick. Arrays are indexed like `candidates`. */
export interface ScoringInput {
  candidates: readonly Endpoint[];
  /** This router's outstanding requests per candidate (exact, not per weight). */
  local: readonly number[];
  /** Each candidate's fresh engine sample, or undefined. */
  engine: ReadonlyArray<EngineLoad | undefined>;
  /** Best load estimate per unit of weight: see {@link estimatedLoads}. */
  load: readonly number[];
  /** Leading prompt blocks each candidate likely holds in its KV cache. */
  prefixMatched: readonly number[];
  /** Blocks of this request's prompt (0: nothing to match). */
  prefixTotal: number;
  /** The request's session key, if it sent one. */
  sessionKey: string | undefined;
  settings: RoutingSettings;
}

export type Scorer = (input: ScoringInput) => Float64Array;

/**
 * Per candidate, per unit of weight: this router's outstanding requests, or — when the engine's sample
 * is fresh and says more — what the engine reported (from every router), moved by this router's own
 * sends and completions since the sample. One router alone sees the same number either way.
 */
export function estimatedLoads(candidates: readonly Endpoint[], local: readonly number[], engine: ReadonlyArray<EngineLoad | undefined>): number[] {
  return candidates.map((ep, i) => {
    const mine = local[i] ?? 0;
    const sample = engine[i];
    const reported = sample ? sample.waiting + sample.running + mine - sample.localAtSample : 0;
    return Math.max(mine, reported) / ep.weight;
  });
}

/** Ratio score (min + 1)/(x + 1) of "lower is better" loads ≥ 0; undefined values get the mean of the others' scores. */
export function loadScores(values: ReadonlyArray<number | undefined>): Float64Array {
  const out = new Float64Array(values.length);
  let min = Infinity;
  for (const v of values) if (v !== undefined && v < min) min = v;
  if (min === Infinity) return out.fill(1);
  let sum = 0;
  let known = 0;
  values.forEach((v, i) => {
    if (v === undefined) return;
    out[i] = (min + 1) / (v + 1);
    sum += out[i];
    known++;
  });
  const neutral = sum / known;
  values.forEach((v, i) => {
    if (v === undefined) out[i] = neutral;
  });
  return out;
}

/** Fewest outstanding requests from this router, per unit of weight. */
const outstanding: Scorer = ({ candidates, local }) => loadScores(candidates.map((ep, i) => (local[i] ?? 0) / ep.weight));

/** Fewest requests queued and running as the engines report them (so other routers' traffic counts). */
const queue: Scorer = ({ candidates, engine, load }) => loadScores(candidates.map((_, i) => (engine[i] ? load[i] : undefined)));

/** Most free KV cache, as the engines report it. */
const kvCache: Scorer = ({ candidates, engine }) => {
  const usage = candidates.map((_, i) => engine[i]?.kvCacheUsage);
  const out = new Float64Array(usage.length);
  const known = usage.filter((u): u is number => u !== undefined);
  const neutral = known.length === 0 ? 1 : known.reduce((a, u) => a + (1 - Math.min(1, u)), 0) / known.length;
  usage.forEach((u, i) => {
    out[i] = u === undefined ? neutral : 1 - Math.min(1, Math.max(0, u));
  });
  return out;
};

/**
 * Longest share of the prompt already in a replica's cache — except on a replica more than
 * `prefix.maxLoadGap` requests (per unit of weight) busier than the least-loaded candidate: there the
 * match counts for nothing, so a popular prompt spills to a quieter replica (which then holds it too).
 */
const prefix: Scorer = ({ load, prefixMatched, prefixTotal, settings }) => {
  const out = new Float64Array(load.length);
  if (prefixTotal === 0) return out;
  const least = Math.min(...load);
  load.forEach((l, i) => {
    out[i] = l - least > settings.prefix.maxLoadGap ? 0 : (prefixMatched[i] ?? 0) / prefixTotal;
  });
  return out;
};

/** 1 for the replica a session key maps to (rendezvous hashing with bounded load), 0 elsewhere. */
const session: Scorer = ({ candidates, load, sessionKey, settings }) => {
  const out = new Float64Array(candidates.length);
  if (sessionKey === undefined) return out;
  const target = sessionTarget(candidates, sessionKey, (i) => load[i] as number, settings.session.loadFactor);
  if (target >= 0) out[target] = 1;
  return out;
};

export const SCORERS: Record<ScorerName, Scorer> = { outstanding, queue, 'kv-cache': kvCache, prefix, session };
