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
import { addLoraScores, type LoraInput } from './lora.js';
import { sessionTarget } from './session-affinity.js';

/** What the scorers see of one pick. Arrays are indexed like `candidates`. */
export interface ScoringInput {
  candidates: readonly Endpoint[];
  /**
   * How many candidates there are (default `candidates.length`): every array is read, and every
   * score written, only up to it, so a caller can pass buffers it reuses from pick to pick.
   */
  count?: number;
  /** This router's outstanding requests per candidate (exact, not per weight). */
  local: ArrayLike<number>;
  /** Each candidate's fresh engine sample, or undefined. */
  engine: ReadonlyArray<EngineLoad | undefined>;
  /** Best load estimate per unit of weight: see {@link estimatedLoads}. */
  load: ArrayLike<number>;
  /** Leading prompt blocks each candidate likely holds in its KV cache. */
  prefixMatched: ArrayLike<number>;
  /** Blocks of this request's prompt (0: nothing to match). */
  prefixTotal: number;
  /** The request's session key, if it sent one. */
  sessionKey: string | undefined;
  /** The request's LoRA adapter and the router's record of it per candidate (none: a base-model request). */
  lora?: LoraInput;
  settings: RoutingSettings;
}

/**
 * Adds each candidate's score, times `weight` (default 1), to `out` (default: a new array of zeros) and
 * returns it: the scheduler sums a profile into one array, in the profile's order, with no array per
 * scorer. A scorer that scores every candidate 0 leaves `out` as it is.
 */
export type Scorer = (input: ScoringInput, out?: Float64Array, weight?: number) => Float64Array;

/**
 * Per candidate, per unit of weight: this router's outstanding requests, or — when the engine's sample
 * is fresh and says more — what the engine reported (from every router), moved by this router's own
 * sends and completions since the sample. One router alone sees the same number either way.
 */
export function estimatedLoads(candidates: readonly Endpoint[], local: ArrayLike<number>, engine: ReadonlyArray<EngineLoad | undefined>): number[] {
  return Array.from(estimateLoads(candidates, local, engine, candidates.length, new Float64Array(candidates.length)));
}

/** {@link estimatedLoads} of the first `count` candidates, written to `out`. */
export function estimateLoads(candidates: readonly Endpoint[], local: ArrayLike<number>, engine: ReadonlyArray<EngineLoad | undefined>, count: number, out: Float64Array): Float64Array {
  for (let i = 0; i < count; i++) out[i] = estimatedLoad(local[i] ?? 0, engine[i], (candidates[i] as Endpoint).weight);
  return out;
}

/** One candidate's {@link estimatedLoads}: `mine` outstanding here, its engine sample, its weight. */
export function estimatedLoad(mine: number, sample: EngineLoad | undefined, weight: number): number {
  const reported = sample ? sample.waiting + sample.running + mine - sample.localAtSample : 0;
  // Math.max, but cheaper in a hot loop (a count is never NaN; a NaN report still wins)
  return perWeight(mine >= reported ? mine : reported, weight);
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

/** `x / weight`; most weights are 1, and a division is the dearest step of a pass over a fleet. */
function perWeight(x: number, weight: number): number {
  return weight === 1 ? x : x / weight;
}

/*
 * The scorers below compute what `loadScores` would over their signal, to the same bits, in passes over
 * the candidates that allocate nothing: the scheduler runs them over a whole fleet on every pick.
 */

/** Fewest outstanding requests from this router, per unit of weight. */
const outstanding: Scorer = ({ candidates, local, count = candidates.length }, out = new Float64Array(count), weight = 1) => {
  let min = Infinity;
  for (let i = 0; i < count; i++) {
    const v = perWeight(local[i] ?? 0, (candidates[i] as Endpoint).weight);
    if (v < min) min = v;
  }
  for (let i = 0; i < count; i++) out[i] = (out[i] as number) + weight * ((min + 1) / (perWeight(local[i] ?? 0, (candidates[i] as Endpoint).weight) + 1));
  return out;
};

/** Fewest requests queued and running as the engines report them (so other routers' traffic counts). */
const queue: Scorer = ({ candidates, engine, load, count = candidates.length }, out = new Float64Array(count), weight = 1) => {
  let min = Infinity;
  for (let i = 0; i < count; i++) if (engine[i] !== undefined && (load[i] as number) < min) min = load[i] as number;
  if (min === Infinity) return addToAll(out, count, weight * 1);
  let sum = 0;
  let known = 0;
  for (let i = 0; i < count; i++) {
    if (engine[i] === undefined) continue;
    sum += (min + 1) / ((load[i] as number) + 1);
    known++;
  }
  const neutral = sum / known;
  for (let i = 0; i < count; i++) out[i] = (out[i] as number) + weight * (engine[i] === undefined ? neutral : (min + 1) / ((load[i] as number) + 1));
  return out;
};

/**
 * Most free KV cache, as the engines report it. Clamped as by Math.min and Math.max (NaN stays NaN, and
 * 1 - -0 is 1 - +0), with comparisons, which cost far less in a pass over a fleet.
 */
const kvCache: Scorer = ({ candidates, engine, count = candidates.length }, out = new Float64Array(count), weight = 1) => {
  let free = 0;
  let known = 0;
  for (let i = 0; i < count; i++) {
    const u = engine[i]?.kvCacheUsage;
    if (u === undefined) continue;
    free += 1 - (u > 1 ? 1 : u);
    known++;
  }
  const neutral = known === 0 ? 1 : free / known;
  if (known === 0) return addToAll(out, count, weight * neutral);
  for (let i = 0; i < count; i++) {
    const u = engine[i]?.kvCacheUsage;
    out[i] = (out[i] as number) + weight * (u === undefined ? neutral : 1 - (u > 1 ? 1 : u < 0 ? 0 : u));
  }
  return out;
};

/**
 * Longest share of the prompt already in a replica's cache — except on a replica more than
 * `prefix.maxLoadGap` requests (per unit of weight) busier than the least-loaded candidate: there the
 * match counts for nothing, so a popular prompt spills to a quieter replica (which then holds it too).
 */
const prefix: Scorer = ({ candidates, load, prefixMatched, prefixTotal, settings, count = candidates.length }, out = new Float64Array(count), weight = 1) => {
  if (prefixTotal === 0) return out;
  let least = Infinity;
  for (let i = 0; i < count; i++) if ((load[i] as number) < least) least = load[i] as number;
  const gap = settings.prefix.maxLoadGap;
  for (let i = 0; i < count; i++) {
    const matched = prefixMatched[i] ?? 0;
    if (matched !== 0 && !((load[i] as number) - least > gap)) out[i] = (out[i] as number) + weight * (matched / prefixTotal);
  }
  return out;
};

/** 1 for the replica a session key maps to (rendezvous hashing with bounded load), 0 elsewhere. */
const session: Scorer = ({ candidates, load, sessionKey, settings, count = candidates.length }, out = new Float64Array(count), weight = 1) => {
  if (sessionKey === undefined) return out;
  const target = sessionTarget(candidates, sessionKey, (i) => load[i] as number, settings.session.loadFactor, count);
  if (target >= 0) out[target] = (out[target] as number) + weight * 1;
  return out;
};

/** Holds the request's LoRA adapter, else most free adapter slots (balancer/lora.ts); 0 for every candidate of a base-model request. */
const lora: Scorer = ({ candidates, engine, load, lora: input, settings, count = candidates.length }, out = new Float64Array(count), weight = 1) =>
  addLoraScores(candidates, count, engine, load, input, settings, out, weight);

/** `out[i] += value` for the first `count` entries. */
function addToAll(out: Float64Array, count: number, value: number): Float64Array {
  for (let i = 0; i < count; i++) out[i] = (out[i] as number) + value;
  return out;
}

export const SCORERS: Record<ScorerName, Scorer> = { outstanding, queue, 'kv-cache': kvCache, prefix, session, lora };
