/**
 * Which Prometheus series of each engine feed {@link EngineLoad}: the one table, and how a scraped
 * page is reduced to a load. Counts are summed over every series of a name (vLLM data-parallel ranks
 * `engine="0"`, `engine="1"`; several `model_name`s), usage fractions are averaged.
 */
import { type Engine, type EngineLoad } from '../core/types.js';
import { scanLabels, scanSamples } from './parse.js';

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
}

/** The load figures a page yields; `at` and `localAtSample` are the scraper's to add. */
export type ParsedLoad = Pick<EngineLoad, 'waiting' | 'running' | 'kvCacheUsage' | 'cacheTokens'>;

/** Per engine; undefined means the engine exposes nothing we use (`openai`: never scraped). */
export const ENGINE_SERIES: Readonly<Record<Engine, EngineSeries | undefined>> = {
  vllm: {
    waiting: ['vllm:num_requests_waiting'],
    running: ['vllm:num_requests_running'],
    kvCacheUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    cacheConfig: { name: 'vllm:cache_config_info', blockSize: 'block_size', blocks: 'num_gpu_blocks' },
  },
  sglang: {
    waiting: ['sglang:num_queue_reqs'],
    running: ['sglang:num_running_reqs'],
    kvCacheUsage: ['sglang:token_usage'],
    cacheConfig: { name: 'sglang:cache_config_info', blockSize: 'page_size', blocks: 'num_pages' },
  },
  tgi: { waiting: ['tgi_queue_size'], running: ['tgi_batch_current_size'], kvCacheUsage: [] },
  tei: { waiting: ['te_queue_size'], running: [], kvCacheUsage: [] },
  llamacpp: {
    waiting: ['llamacpp:requests_deferred'],
    running: ['llamacpp:requests_processing'],
    // Only some llama.cpp versions export it.
    kvCacheUsage: ['llamacpp:kv_cache_usage_ratio'],
  },
  openai: undefined,
};

/**
 * The load a `/metrics` page reports, or undefined when it is unparsable: none of the waiting or
 * running series is there (the replica runs another engine than its pool says, or has metrics off).
 * That is not a zero load, and callers must not treat it as one. Non-finite samples are ignored;
 * counts are floored at 0 and usage is clamped to 0..1.
 */
export function readEngineLoad(series: EngineSeries, text: string): ParsedLoad | undefined {
  const names = [...series.waiting, ...series.running, ...series.kvCacheUsage];
  const sums = new Float64Array(names.length);
  const counts = new Uint32Array(names.length);
  scanSamples(text, names, (i, value) => {
    if (!Number.isFinite(value)) return;
    sums[i] = (sums[i] as number) + value;
    counts[i] = (counts[i] as number) + 1;
  });
  const runningAt = series.waiting.length;
  const kvAt = runningAt + series.running.length;
  const waiting = firstPresent(sums, counts, 0, runningAt);
  const running = firstPresent(sums, counts, runningAt, kvAt);
  if (waiting === undefined && running === undefined) return undefined;
  const kv = firstPresent(sums, counts, kvAt, names.length);
  const load: ParsedLoad = { waiting: Math.max(0, waiting?.sum ?? 0), running: Math.max(0, running?.sum ?? 0) };
  if (kv !== undefined) load.kvCacheUsage = Math.min(1, Math.max(0, kv.sum / kv.count));
  const cacheTokens = series.cacheConfig && cacheSize(text, series.cacheConfig);
  if (cacheTokens !== undefined) load.cacheTokens = cacheTokens;
  return load;
}

/** KV-cache size in tokens from the first series of the info metric (one data-parallel rank's cache: prefixes do not cross ranks). */
function cacheSize(text: string, config: NonNullable<EngineSeries['cacheConfig']>): number | undefined {
  const [labels] = scanLabels(text, config.name);
  const tokens = Number(labels?.get(config.blockSize)) * Number(labels?.get(config.blocks));
  return Number.isFinite(tokens) && tokens > 0 ? tokens : undefined;
}

function firstPresent(sums: Float64Array, counts: Uint32Array, from: number, to: number): { sum: number; count: number } | undefined {
  for (let i = from; i < to; i++) {
    const count = counts[i] as number;
    if (count > 0) return { sum: sums[i] as number, count };
  }
  return undefined;
}
