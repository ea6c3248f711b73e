/**
 * Metrics of the engines' KV-cache events (src/kv-events): what the router receives from each pool's
 * replicas, the sequence gaps it saw, how many replicas it can trust (complete), trusts in part
 * (partial: a lower bound) or routes by the estimate (unknown: stale, gap, never heard), and the
 * prefix hit rate the router predicted for its picks, by where the prediction came from — to set next
 * to the engines' own (vLLM's `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`).
 * Labels are bounded: pool, event type, skip reason, source, result.
 */
import { Counter, Gauge } from './prom.js';
import type { Registry } from 'prom-client';
import { HotCounter } from './hot-counter.js';
import { type PrefixSource } from './labels.js';

/** One pool's feeds at scrape time (kv-events/hub.ts `stats`). */
export interface KvEventsPoolView {
  pool: string;
  replicas: { complete: number; partial: number; unknown: number };
  connected: number;
  blocks: number;
}

export interface KvEventsRecorder {
  batch(pool: string, stored: number, removed: number, cleared: number): void;
  gap(pool: string, recovered: boolean): void;
  /** A batch skipped: `malformed` (not a KVEventBatch, or over the bounds). */
  badPayload(pool: string, reason: 'malformed'): void;
  /** A replica's batch waited `ms` for its share of the event loop. */
  throttled(pool: string, ms: number): void;
  /** A pick's predicted prefix hit: `matched` of `total` blocks, from `source`. */
  predicted(pool: string, source: PrefixSource, matched: number, total: number): void;
}

/** The recorder, and the labelled counters whose series of a pool that left RouterMetrics removes (pool label). */
export interface KvEventsMetrics {
  recorder: KvEventsRecorder;
  counters: ReadonlyArray<Counter<string>>;
  hot: HotCounter<'pool' | 'source' | 'result', [pool: string, source: PrefixSource, result: 'hit' | 'miss']>;
}

export function kvEventsMetrics(registers: Registry[], pools: () => Iterable<KvEventsPoolView>): KvEventsMetrics {
  const received = new Counter({
    name: 'modelgate_kv_events_received_total',
    help: 'KV-cache events received from the replicas, by type (block_stored, block_removed, all_blocks_cleared).',
    labelNames: ['pool', 'type'] as const,
    registers,
  });
  const gaps = new Counter({
    name: 'modelgate_kv_events_gaps_total',
    help: 'Sequence gaps in a replica\'s KV-event stream; recovered="false": no replay filled it, so the replica is routed by the estimate until its cache is cleared.',
    labelNames: ['pool', 'recovered'] as const,
    registers,
  });
  const bad = new Counter({
    name: 'modelgate_kv_events_bad_payloads_total',
    help: 'KV-event messages skipped, by reason: malformed (not a KVEventBatch, or over the bounds).',
    labelNames: ['pool', 'reason'] as const,
    registers,
  });
  const throttled = new Counter({
    name: 'modelgate_kv_events_throttled_seconds_total',
    help: "Time the replicas' KV-event batches waited for their share of the event loop (a tenth each), not reading their publisher meanwhile.",
    labelNames: ['pool'] as const,
    registers,
  });
  // counted on every routed prompt: a hot counter (hot-counter.ts), not a prom-client inc per pick
  const predictedBlocks = new HotCounter<'pool' | 'source' | 'result', [pool: string, source: PrefixSource, result: 'hit' | 'miss']>({
    name: 'modelgate_prefix_predicted_blocks_total',
    help: "Prompt blocks of routed requests the router predicted in the chosen replica's KV cache (hit) or not (miss), by source: events, events-partial, estimate.",
    labelNames: ['pool', 'source', 'result'],
    registers,
  });
  new Gauge({
    name: 'modelgate_kv_events_replicas',
    help: 'Replicas subscribed for KV events, by state: complete (exact), partial (a lower bound), unknown (stale or after a gap: routed by the estimate).',
    labelNames: ['pool', 'state'] as const,
    registers,
    collect() {
      this.reset();
      for (const p of pools()) for (const state of ['complete', 'partial', 'unknown'] as const) this.set({ pool: p.pool, state }, p.replicas[state]);
    },
  });
  new Gauge({
    name: 'modelgate_kv_events_connected_replicas',
    help: 'Replicas whose KV-event publisher the router is connected to now (the rest: not yet, or lost; stale after routing.kvEvents.staleAfterMs).',
    labelNames: ['pool'] as const,
    registers,
    collect() {
      this.reset();
      for (const p of pools()) this.set({ pool: p.pool }, p.connected);
    },
  });
  new Gauge({
    name: 'modelgate_kv_events_blocks',
    help: "Engine KV-cache blocks the router's event index holds, over the pool's replicas.",
    labelNames: ['pool'] as const,
    registers,
    collect() {
      this.reset();
      for (const p of pools()) this.set({ pool: p.pool }, p.blocks);
    },
  });
  const recorder: KvEventsRecorder = {
    batch(pool, stored, removed, cleared) {
      if (stored > 0) received.inc({ pool, type: 'block_stored' }, stored);
      if (removed > 0) received.inc({ pool, type: 'block_removed' }, removed);
      if (cleared > 0) received.inc({ pool, type: 'all_blocks_cleared' }, cleared);
    },
    gap(pool, recovered) {
      gaps.inc({ pool, recovered: String(recovered) });
    },
    badPayload(pool, reason) {
      bad.inc({ pool, reason });
    },
    throttled(pool, ms) {
      throttled.inc({ pool }, ms / 1000);
    },
    predicted(pool, source, matched, total) {
      if (matched > 0) predictedBlocks.inc(matched, pool, source, 'hit');
      if (total > matched) predictedBlocks.inc(total - matched, pool, source, 'miss');
    },
  };
  return { recorder, counters: [received, gaps, bad, throttled], hot: predictedBlocks };
}
