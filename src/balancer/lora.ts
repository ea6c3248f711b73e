/**
 * LoRA-aware placement: a request for an adapter goes to a replica that holds the adapter, else to one
 * with a free adapter slot (the most free first, so distinct adapters spread over the pool instead of
 * piling onto the least-loaded replica), and last to one whose slots are all taken (there it waits for
 * a slot to drain, then for the adapter to load).
 *
 * What a replica holds comes from two sources: its engine's sample (vLLM's `lora_requests_info`: the
 * adapters of its running and waiting requests, and `max_lora` slots) and {@link AdapterPlacements},
 * this router's own record of where it sent each adapter lately — it covers the second between two
 * scrapes, an adapter loaded but idle (which vLLM does not report), and engines without samples.
 * Pure: the record is plain data the picker keeps; time comes in as arguments.
 */
import { type EngineLoad, type Endpoint, type LoraLoad, type RoutingSettings } from '../core/types.js';

/** The score of a replica holding the adapter. */
export const HELD_SCORE = 1;
/** A replica with free adapter slots scores between these: FREE_BASE + FREE_SPAN × (free slots / slots). */
const FREE_BASE = 0.3;
const FREE_SPAN = 0.3;

/** Where a pick put a request for an adapter, as the router saw it: the replica held it, had a free slot, or had none. */
export type LoraPlacement = 'held' | 'free_slot' | 'no_slot';

/**
 * Which adapters this router sent to which replica, and when (a request sent, or a load done). Bounded:
 * entries older than the longest memory asked for are swept out as new ones come in.
 */
export class AdapterPlacements {
  private readonly byEndpoint = new Map<string, Map<string, number>>();
  /** Replicas that answered lately that they lack an adapter (404): endpoint → adapter → when. Their samples' word is not taken for it. */
  private readonly lacking = new Map<string, Map<string, number>>();
  private records = 0;
  private longestMemoryMs = 0;

  /** `adapter` went to `endpointId` at `now`; `memoryMs` is how long the pool remembers it. */
  record(adapter: string, endpointId: string, now: number, memoryMs: number): void {
    if (memoryMs > this.longestMemoryMs) this.longestMemoryMs = memoryMs;
    let adapters = this.byEndpoint.get(endpointId);
    if (!adapters) this.byEndpoint.set(endpointId, (adapters = new Map<string, number>()));
    adapters.delete(adapter); // re-inserted last: each map stays in order of last use
    adapters.set(adapter, now);
    this.lacking.get(endpointId)?.delete(adapter);
    if (++this.records % 1024 === 0) this.sweep(now - this.longestMemoryMs);
  }

  /**
   * Whether `adapter` went to `endpointId` after `since` and, when the engine's sample gives its slots
   * (`reported`), is still among the last `maxLora` distinct adapters there (the engine evicts the least
   * recently used): the adapters sent there after it, and those the sample lists that were not, count
   * as having pushed it down. Allocates nothing.
   */
  holds(adapter: string, endpointId: string, since: number, reported?: LoraLoad): boolean {
    const adapters = this.byEndpoint.get(endpointId);
    const at = adapters?.get(adapter);
    if (adapters === undefined || at === undefined || at <= since) return false;
    if (reported === undefined) return true;
    let newer = 0;
    for (const sentAt of adapters.values()) if (sentAt > at) newer++;
    for (const name of reported.running) if (pushes(adapters, name, adapter, at)) newer++;
    for (const name of reported.waiting) if (!reported.running.includes(name) && pushes(adapters, name, adapter, at)) newer++;
    return newer < reported.maxLora;
  }

  /**
   * How many distinct adapters went to `endpointId` after `since` that `reported` does not list: slots
   * the engine's sample does not show, because the adapter went there after the sample or sits idle in
   * its slot (vLLM reports only the adapters of running and waiting requests). Allocates nothing.
   */
  unreported(endpointId: string, since: number, reported: LoraLoad | undefined): number {
    const adapters = this.byEndpoint.get(endpointId);
    if (!adapters) return 0;
    let count = 0;
    for (const [adapter, at] of adapters) {
      if (at > since && !(reported !== undefined && (reported.running.includes(adapter) || reported.waiting.includes(adapter)))) count++;
    }
    return count;
  }

  /** Forgets that `adapter` went to `endpointId` (its load there failed). */
  forget(adapter: string, endpointId: string): void {
    const adapters = this.byEndpoint.get(endpointId);
    adapters?.delete(adapter);
    if (adapters?.size === 0) this.byEndpoint.delete(endpointId);
  }

  /**
   * `endpointId` answered at `now` that it does not serve `adapter` (lost with a restart or an unload,
   * or never loaded there): it no longer counts as holding it, and until the adapter goes there again
   * (or the memory passes) its engine's sample listing it is not believed either (it may be older).
   */
  missing(adapter: string, endpointId: string, now: number): void {
    this.forget(adapter, endpointId);
    let adapters = this.lacking.get(endpointId);
    if (!adapters) this.lacking.set(endpointId, (adapters = new Map<string, number>()));
    adapters.set(adapter, now);
  }

  /** Whether `endpointId` answered after `since` that it lacks `adapter`, and it has not gone there since. */
  lacks(adapter: string, endpointId: string, since: number): boolean {
    const at = this.lacking.get(endpointId)?.get(adapter);
    return at !== undefined && at > since;
  }

  /** Forgets the replicas not in `live` (pruned with the prefix memory). */
  retain(live: ReadonlySet<string>): void {
    for (const id of this.byEndpoint.keys()) if (!live.has(id)) this.byEndpoint.delete(id);
    for (const id of this.lacking.keys()) if (!live.has(id)) this.lacking.delete(id);
  }

  /** Replicas with at least one remembered adapter. */
  get size(): number {
    return this.byEndpoint.size;
  }

  private sweep(before: number): void {
    for (const map of [this.byEndpoint, this.lacking]) {
      for (const [id, adapters] of map) {
        for (const [adapter, at] of adapters) if (at <= before) adapters.delete(adapter);
        if (adapters.size === 0) map.delete(id);
      }
    }
  }
}

/** Whether an adapter an engine reports, `name`, takes a slot not counted among those sent after `adapter` (sent at `at`). */
function pushes(sent: ReadonlyMap<string, number>, name: string, adapter: string, at: number): boolean {
  if (name === adapter) return false;
  const sentAt = sent.get(name);
  return sentAt === undefined || sentAt <= at;
}

/** Whether an engine's sample lists `adapter` among its running or waiting requests' adapters. */
export function reportsAdapter(lora: LoraLoad | undefined, adapter: string): boolean {
  return lora !== undefined && (lora.running.includes(adapter) || lora.waiting.includes(adapter));
}

/** Distinct adapters a sample lists (running, and waiting ones not also running). Allocates nothing. */
export function distinctAdapters(lora: LoraLoad): number {
  let count = lora.running.length;
  for (const name of lora.waiting) if (!lora.running.includes(name)) count++;
  return count;
}

/**
 * One replica's score for a request for `adapter`: {@link HELD_SCORE} when it holds the adapter (`held`
 * 1: the router's record says so; or, `held` 0, its sample lists it; `held` -1: it answered lately that
 * it lacks it, whatever an older sample says); otherwise FREE_BASE + FREE_SPAN × free/slots
 * while it has a free slot — adapters the router sent there lately that the sample does not list
 * (`unreported`: idle in a slot, or sent since) count as taken —
 * and 0 with none. Without a sample the slots are unknown: FREE_BASE + FREE_SPAN / (1 + unreported), so
 * the replica this router sent the fewest other adapters to comes first.
 */
export function adapterScore(adapter: string, lora: LoraLoad | undefined, held: number, unreported: number): number {
  if (held > 0 || (held === 0 && reportsAdapter(lora, adapter))) return HELD_SCORE;
  if (lora === undefined) return FREE_BASE + FREE_SPAN / (1 + unreported);
  const slots = lora.maxLora;
  const free = slots - distinctAdapters(lora) - unreported;
  return free > 0 && slots > 0 ? FREE_BASE + FREE_SPAN * (free / slots) : 0;
}

/** The placement a score stands for. */
export function placementOf(score: number): LoraPlacement {
  return score >= HELD_SCORE ? 'held' : score > 0 ? 'free_slot' : 'no_slot';
}

/** What the `lora` scorer reads of a pick, besides the candidates and their loads. */
export interface LoraInput {
  /** The adapter the request is for. */
  adapter: string;
  /** 1 where the router's record says the candidate holds the adapter; -1 where the candidate answered lately that it lacks it (its sample listing it is not believed); else 0. */
  held: ArrayLike<number>;
  /** Per candidate: adapters the router sent there within the memory that its sample does not list. */
  unreported: ArrayLike<number>;
}

/**
 * Adds `weight` × {@link adapterScore} of the first `count` candidates to `out` — except that holding
 * the adapter counts as the lowest free-slot score on a candidate more than `lora.maxLoadGap` requests (per unit of
 * weight) busier than the least loaded, so a hot adapter spills onto a quieter replica (which then
 * holds it too). Nothing without `lora` (a request for a base model).
 */
export function addLoraScores(
  candidates: readonly Endpoint[],
  count: number,
  engine: ReadonlyArray<EngineLoad | undefined>,
  load: ArrayLike<number>,
  lora: LoraInput | undefined,
  settings: RoutingSettings,
  out: Float64Array,
  weight: number,
): Float64Array {
  if (lora === undefined) return out;
  let least = Infinity;
  for (let i = 0; i < count; i++) if ((load[i] as number) < least) least = load[i] as number;
  const gap = settings.lora.maxLoadGap;
  const { adapter, held, unreported } = lora;
  for (let i = 0; i < count; i++) {
    const sample = engine[i]?.lora;
    let score = adapterScore(adapter, sample, held[i] ?? 0, unreported[i] ?? 0);
    // past the guard it scores like a replica with the fewest free slots: the load scorers decide
    if (score >= HELD_SCORE && (load[i] as number) - least > gap) score = FREE_BASE;
    out[i] = (out[i] as number) + weight * score;
  }
  return out;
}
