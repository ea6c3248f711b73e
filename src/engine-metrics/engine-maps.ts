/**
 * Which Prometheus series of each engine feed {@link EngineLoad}: the one table, and how a scraped
 * page is reduced to a load. Counts are summed over every series of a name (vLLM data-parallel ranks
 * `engine="0"`, `engine="1"`; several `model_name`s; SGLang's `dp_rank`s and data-parallel attention
 * groups, each its own queue; never a count's parts, {@link EngineSeries.breakdownLabel}), usage
 * fractions are averaged.
 */
import { type Engine, type EngineLoad, type LoraLoad } from '../core/types.js';
import { scanLabelled, scanLabels, scanSamples } from './parse.js';

/**
 * The series names of one engine. Each field lists names in order of preference: the first name that
 * has a sample is used (newer engine versions first, the older name as a fallback).
 */
export interface EngineSeries {
  /** Requests queued in the engine. */
  readonly waiting: readonly string[];
  /** Requests in the running batch; empty when the engine reports none (the load then says 0). */
  readonly running: readonly string[];
  /** KV-cache use, 0..1; empty when the engine reports none. */
  readonly kvCacheUsage: readonly string[];
  /** The info series whose labels give the KV cache's size: tokens per block × blocks. */
  readonly cacheConfig?: { readonly name: string; readonly blockSize: string; readonly blocks: string };
  /**
   * The info series of LoRA adapters: labels with the comma-separated adapters of running and waiting
   * requests and the adapter slots; its value a timestamp (the series with the latest is current).
   */
  readonly lora?: { readonly name: string; readonly running: string; readonly waiting: string; readonly maxLora: string; readonly rank: string };
  /**
   * A label whose non-empty values split a count into parts, next to the total with it empty: only the
   * total is added. SGLang with priority scheduling writes its queue and running counts under
   * `priority=""` and again per priority (`priority="1"`, …); summing every series would count each
   * request twice.
   */
  readonly breakdownLabel?: string;
  /**
   * Set for engines whose exporter (Rust's metrics-exporter-prometheus: TGI, TEI) shows a gauge only
   * once it is first set, at the replica's first request. A page without any waiting or running series
   * whose samples all have one of these name prefixes, or that has no sample at all, may be an idle
   * replica's — or a broken one's, which the router cannot tell apart: it gives no sample either way
   * ({@link idlePage} only names the scrape's result).
   */
  readonly idlePrefixes?: readonly string[];
}

/** The load figures a page yields; `at` and `localAtSample` are the scraper's to add. */
export type ParsedLoad = Pick<EngineLoad, 'waiting' | 'running' | 'kvCacheUsage' | 'cacheTokens' | 'lora'>;

/** Per engine; undefined means the engine exposes nothing we use (`openai`: never scraped). */
export const ENGINE_SERIES: Readonly<Record<Engine, EngineSeries | undefined>> = {
  vllm: {
    waiting: ['vllm:num_requests_waiting'],
    running: ['vllm:num_requests_running'],
    kvCacheUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    cacheConfig: { name: 'vllm:cache_config_info', blockSize: 'block_size', blocks: 'num_gpu_blocks' },
    lora: { name: 'vllm:lora_requests_info', running: 'running_lora_adapters', waiting: 'waiting_lora_adapters', maxLora: 'max_lora', rank: 'engine' },
  },
  sglang: {
    waiting: ['sglang:num_queue_reqs'],
    running: ['sglang:num_running_reqs'],
    kvCacheUsage: ['sglang:token_usage'],
    cacheConfig: { name: 'sglang:cache_config_info', blockSize: 'page_size', blocks: 'num_pages' },
    breakdownLabel: 'priority',
  },
  tgi: { waiting: ['tgi_queue_size'], running: ['tgi_batch_current_size'], kvCacheUsage: [], idlePrefixes: ['tgi_'] },
  // te_ for the router's series; tei_ for its listwise reranker's
  tei: { waiting: ['te_queue_size'], running: [], kvCacheUsage: [], idlePrefixes: ['te_', 'tei_'] },
  llamacpp: {
    waiting: ['llamacpp:requests_deferred'],
    running: ['llamacpp:requests_processing'],
    // Only some llama.cpp versions export it.
    kvCacheUsage: ['llamacpp:kv_cache_usage_ratio'],
  },
  openai: undefined,
};

/**
 * The load a `/metrics` page reports, or undefined when it reports none: none of the waiting or
 * running series is there (the replica runs another engine than its pool says, has metrics off, or
 * serves an empty page) — for every engine, the page of a TGI or TEI before its first request
 * included ({@link EngineSeries.idlePrefixes}). No load is no signal, not a zero load, and callers
 * must not treat it as one: read as nothing waiting and nothing running, a broken replica serving an
 * empty page had the queue scorer's best score and drew traffic until its breaker opened. Non-finite
 * samples are ignored; counts are floored at 0 and usage is clamped to 0..1.
 */
export function readEngineLoad(series: EngineSeries, text: string): ParsedLoad | undefined {
  const names = [...series.waiting, ...series.running, ...series.kvCacheUsage];
  const sums = new Float64Array(names.length);
  const counts = new Uint32Array(names.length);
  const runningAt = series.waiting.length;
  const kvAt = runningAt + series.running.length;
  scanSamples(
    text,
    names,
    (i, value) => {
      if (!Number.isFinite(value)) return;
      sums[i] = (sums[i] as number) + value;
      counts[i] = (counts[i] as number) + 1;
    },
    series.breakdownLabel,
  );
  const waiting = firstPresent(sums, counts, 0, runningAt);
  const running = firstPresent(sums, counts, runningAt, kvAt);
  if (waiting === undefined && running === undefined) return undefined;
  const kv = firstPresent(sums, counts, kvAt, names.length);
  const load: ParsedLoad = { waiting: Math.max(0, waiting?.sum ?? 0), running: Math.max(0, running?.sum ?? 0) };
  if (kv !== undefined) load.kvCacheUsage = Math.min(1, Math.max(0, kv.sum / kv.count));
  const cacheTokens = series.cacheConfig && cacheSize(text, series.cacheConfig);
  if (cacheTokens !== undefined) load.cacheTokens = cacheTokens;
  const lora = series.lora && loraLoad(text, series.lora);
  if (lora !== undefined) load.lora = lora;
  return load;
}

/**
 * The adapters of a page's LoRA info series: per data-parallel rank the series with the latest
 * timestamp (older label sets linger in vLLM's exporter), their adapters merged and their slots added
 * up. Undefined when the series is missing, malformed, or no series has a usable `max_lora`.
 */
export function loraLoad(text: string, names: NonNullable<EngineSeries['lora']>): LoraLoad | undefined {
  const latest = new Map<string, { labels: Map<string, string>; value: number }>();
  for (const series of scanLabelled(text, names.name)) {
    if (Number.isNaN(series.value)) continue; // a malformed line
    const rank = series.labels.get(names.rank) ?? '';
    const seen = latest.get(rank);
    if (seen === undefined || series.value > seen.value) latest.set(rank, series);
  }
  const running = new Set<string>();
  const waiting = new Set<string>();
  let maxLora = 0;
  for (const { labels } of latest.values()) {
    const slots = Number(labels.get(names.maxLora));
    if (!Number.isInteger(slots) || slots < 0) continue;
    maxLora += slots;
    for (const name of adapterList(labels.get(names.running))) running.add(name);
    for (const name of adapterList(labels.get(names.waiting))) waiting.add(name);
  }
  if (latest.size === 0 || (maxLora === 0 && running.size === 0)) return undefined;
  return { running: [...running], waiting: [...waiting], maxLora };
}

/** `"a, b,c"` → a, b, c (blanks trimmed, empty names dropped). */
function adapterList(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
}

/**
 * Most KV-cache tokens a replica's `cache_config_info` is believed for: more than one rank of any
 * engine holds today (an H200 holds about a million tokens of an 8B model). The router's prefix index
 * remembers as many block hashes for the replica as its cache holds (1/16 of its tokens, ~64 bytes
 * each); a replica that said `num_gpu_blocks="1e12"` had its share of the index never evict, growing
 * with every new prompt sent there, and held every prompt it was ever sent as cached there.
 */
export const MAX_CACHE_TOKENS = 2 ** 24;

/** KV-cache size in tokens from the first series of the info metric (one data-parallel rank's cache: prefixes do not cross ranks); beyond {@link MAX_CACHE_TOKENS}, not believed. */
function cacheSize(text: string, config: NonNullable<EngineSeries['cacheConfig']>): number | undefined {
  const [labels] = scanLabels(text, config.name);
  const tokens = Number(labels?.get(config.blockSize)) * Number(labels?.get(config.blocks));
  return Number.isFinite(tokens) && tokens > 0 && tokens <= MAX_CACHE_TOKENS ? tokens : undefined;
}

/**
 * Whether a page that reports no load ({@link readEngineLoad} undefined) is one the engine's own
 * exporter shows before the replica's first request: no waiting or running series at all, and every
 * sample (if any) of the engine's own prefixes ({@link EngineSeries.idlePrefixes}: TGI, TEI). Such a
 * replica may be idle or broken; the scrape is counted `empty`, not `unparsable` (another engine's
 * page, an error page), and neither logged nor alerted on. Read on the failure path only.
 */
export function idlePage(series: EngineSeries, text: string): boolean {
  if (series.idlePrefixes === undefined || !onlySamplesOf(text, series.idlePrefixes)) return false;
  let loadSeries = false;
  scanSamples(text, [...series.waiting, ...series.running], () => (loadSeries = true), series.breakdownLabel);
  return !loadSeries;
}

/** Whether every sample line of the page names a metric with one of `prefixes` (true for a page with none). */
function onlySamplesOf(text: string, prefixes: readonly string[]): boolean {
  for (let start = 0; start < text.length;) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    let at = start;
    while (at < end && (text.charCodeAt(at) === 0x20 || text.charCodeAt(at) === 0x09 || text.charCodeAt(at) === 0x0d)) at++;
    // a line read in place (no page-sized split at every scrape of a page without load series)
    if (at < end && text.charCodeAt(at) !== 0x23 && !prefixes.some((prefix) => text.startsWith(prefix, at))) return false;
    start = end + 1;
  }
  return true;
}

function firstPresent(sums: Float64Array, counts: Uint32Array, from: number, to: number): { sum: number; count: number } | undefined {
  for (let i = from; i < to; i++) {
    const count = counts[i] as number;
    if (count > 0) return { sum: sums[i] as number, count };
  }
  return undefined;
}
