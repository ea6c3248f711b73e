/**
 * `/metrics` of the simulated engine in Prometheus text format, in the dialect of the engine it plays
 * (`--engine`): that engine's series names and labels, written the way its exporter writes them, for
 * the simulator's real state. The router's scraper (src/engine-metrics/engine-maps.ts) reads these.
 */
import { type SimEngine } from './engine.js';
import { type SimLora } from './lora.js';
import { type SimEngineKind } from './options.js';
import { type Histogram } from './stats.js';

/** How an engine's Prometheus library writes a page. */
interface Exporter {
  value: (v: number) => string;
  /** `_count` before `_sum` in a histogram. */
  countFirst: boolean;
  /** An empty line after every family. */
  blankLines: boolean;
}

/** Python `prometheus_client` (vLLM, SGLang): floats always carry a fraction (`1.0`). */
const PYTHON: Exporter = { value: (v) => (Number.isInteger(v) ? `${v}.0` : String(v)), countFirst: true, blankLines: false };
/** Rust `metrics-exporter-prometheus` (TGI, TEI): counts as integers, gauges as Rust prints an f64 (`1`, `0.25`). */
const RUST: Exporter = { value: String, countFirst: false, blankLines: true };
/** llama.cpp: `std::ostream << double`, six significant digits. */
const CPP: Exporter = { value: cppDouble, countFirst: false, blankLines: false };

/** printf `%g` (what C++ streams print for a double by default). */
function cppDouble(v: number): string {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
  if (v === 0) return '0';
  const trim = (s: string): string => (s.includes('.') ? s.replace(/0+$/, '').replace(/\.$/, '') : s);
  const [mantissa = '', exponent = '0'] = v.toExponential(5).split('e');
  const exp = Number(exponent);
  if (exp < -4 || exp >= 6) return `${trim(mantissa)}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  return trim(v.toFixed(5 - exp));
}

/** `{a,b}` of the non-empty label parts; nothing at all when there are none. */
function labels(...parts: string[]): string {
  const set = parts.filter((p) => p !== '');
  return set.length === 0 ? '' : `{${set.join(',')}}`;
}

type Samples = ReadonlyArray<readonly [labels: string, value: number]>;

/** One page, family by family, in an exporter's style. */
class Page {
  private readonly lines: string[] = [];

  constructor(private readonly exporter: Exporter) {}

  /** HELP (when the engine describes the metric), TYPE, then one line per label set. */
  family(name: string, type: 'gauge' | 'counter', help: string | undefined, samples: Samples): this {
    this.head(name, type, help);
    for (const [set, value] of samples) this.lines.push(`${name}${set} ${this.exporter.value(value)}`);
    return this.end();
  }

  histogram(name: string, help: string | undefined, base: string, h: Histogram): this {
    const value = this.exporter.value;
    this.head(name, 'histogram', help);
    h.buckets.forEach((le, i) => this.lines.push(`${name}_bucket${labels(base, `le="${le}"`)} ${value(h.counts[i] ?? 0)}`));
    this.lines.push(`${name}_bucket${labels(base, 'le="+Inf"')} ${value(h.count)}`);
    const count = `${name}_count${labels(base)} ${value(h.count)}`;
    const sum = `${name}_sum${labels(base)} ${value(h.sum)}`;
    this.lines.push(...(this.exporter.countFirst ? [count, sum] : [sum, count]));
    return this.end();
  }

  toString(): string {
    return this.lines.join('\n') + '\n';
  }

  private head(name: string, type: string, help: string | undefined): void {
    if (help !== undefined) this.lines.push(`# HELP ${name} ${help}`);
    this.lines.push(`# TYPE ${name} ${type}`);
  }

  private end(): this {
    if (this.exporter.blankLines) this.lines.push('');
    return this;
  }
}

const finishedTotal = (engine: SimEngine): number => Object.values(engine.stats.finished).reduce((a, b) => a + b, 0);

/** vLLM (V1 engine): data-parallel rank and model on every series; `lora_requests_info` while LoRA is in use. */
function vllm(engine: SimEngine, modelName: string, lora?: SimLora): string {
  const base = `engine="0",model_name=${JSON.stringify(modelName)}`;
  const s = engine.stats;
  const page = new Page(PYTHON);
  const one = (value: number): Samples => [[labels(base), value]];
  page
    .family('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', one(engine.numRunning))
    .family('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', one(engine.numWaiting + (lora?.numWaiting ?? 0)))
    .family('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', one(engine.kvCacheUsage()))
    .family('vllm:cache_config_info', 'gauge', 'Information of the LLMEngine CacheConfig', [
      [labels(base, `block_size="${engine.blockSize}",enable_prefix_caching="True",num_gpu_blocks="${engine.kvCacheBlocks}"`), 1],
    ])
    .family('vllm:prefix_cache_queries_total', 'counter', 'Prefix cache queries, in terms of number of queried tokens.', one(s.prefixQueries))
    .family('vllm:prefix_cache_hits_total', 'counter', 'Prefix cache hits, in terms of number of cached tokens.', one(s.prefixHits))
    .family('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', one(s.promptTokens))
    .family('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.', one(s.generationTokens))
    .family(
      'vllm:request_success_total',
      'counter',
      'Count of successfully processed requests.',
      Object.entries(s.finished).map(([reason, value]) => [labels(base, `finished_reason="${reason}"`), value]),
    )
    .histogram('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', base, s.ttft)
    .histogram('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', base, s.e2e)
    .histogram('vllm:request_queue_time_seconds', 'Histogram of time spent in WAITING phase for request.', base, s.queueTime);
  if (lora) {
    // labels only (no engine or model_name, as vLLM writes it); the value is the time of the update, in seconds
    const info = lora.info();
    const set = `max_lora="${info.maxLora}",running_lora_adapters=${JSON.stringify(info.running.join(','))},waiting_lora_adapters=${JSON.stringify(info.waiting.join(','))}`;
    page.family('vllm:lora_requests_info', 'gauge', 'Running stats on lora requests.', [[labels(set), Date.now() / 1000]]);
  }
  return page.toString();
}

/**
 * SGLang: the scheduler's series carry its rank labels, the tokenizer manager's only the model. The
 * cache is `page_size` tokens × `num_pages` (`--block-size` × `--kv-cache-blocks`).
 */
function sglang(engine: SimEngine, modelName: string): string {
  const model = `model_name=${JSON.stringify(modelName)}`;
  const scheduler = `${model},engine_type="unified",tp_rank="0",pp_rank="0"`;
  const s = engine.stats;
  const page = new Page(PYTHON);
  const sched = (value: number): Samples => [[labels(scheduler), value]];
  const tokenizer = (value: number): Samples => [[labels(model), value]];
  page
    .family('sglang:num_running_reqs', 'gauge', 'The number of running requests.', sched(engine.numRunning))
    .family('sglang:num_used_tokens', 'gauge', 'The number of used tokens.', sched(engine.kvCacheTokens()))
    .family('sglang:token_usage', 'gauge', 'The token usage.', sched(engine.kvCacheUsage()))
    .family('sglang:num_queue_reqs', 'gauge', 'The number of requests in the waiting queue.', sched(engine.numWaiting))
    .family('sglang:cache_hit_rate', 'gauge', 'The prefix cache hit rate.', sched(s.prefixQueries === 0 ? 0 : s.prefixHits / s.prefixQueries))
    .family('sglang:max_total_num_tokens', 'gauge', 'Maximum total number of tokens in the KV cache pool.', sched(engine.blockSize * engine.kvCacheBlocks))
    .family('sglang:cache_config_info', 'gauge', 'Information about the cache configuration.', [[labels(scheduler, `num_pages="${engine.kvCacheBlocks}",page_size="${engine.blockSize}"`), 1]])
    .histogram('sglang:queue_time_seconds', 'Histogram of queueing time in seconds.', scheduler, s.queueTime)
    .family('sglang:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', tokenizer(s.promptTokens))
    .family('sglang:generation_tokens_total', 'counter', 'Number of generation tokens processed.', tokenizer(s.generationTokens))
    .family('sglang:cached_tokens_total', 'counter', 'Number of cached prompt tokens.', tokenizer(s.prefixHits))
    .family('sglang:num_requests_total', 'counter', 'Number of requests processed.', tokenizer(finishedTotal(engine)))
    .histogram('sglang:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', model, s.ttft)
    .histogram('sglang:e2e_request_latency_seconds', 'Histogram of End-to-end request latency in seconds', model, s.e2e);
  return page.toString();
}

/** TGI: unlabelled series, counters without `_total`; counters, then gauges, then histograms. */
function tgi(engine: SimEngine): string {
  const s = engine.stats;
  const page = new Page(RUST);
  const one = (value: number): Samples => [['', value]];
  page
    .family('tgi_request_count', 'counter', 'Total number of requests', one(finishedTotal(engine) + engine.numRunning + engine.numWaiting))
    .family('tgi_request_success', 'counter', 'Number of successful requests', one(s.finished.stop + s.finished.length))
    .family('tgi_batch_current_size', 'gauge', 'Current batch size', one(engine.numRunning))
    .family('tgi_queue_size', 'gauge', 'Current queue size', one(engine.numWaiting))
    .histogram('tgi_request_duration', 'Total time spent processing the request', '', s.e2e)
    .histogram('tgi_request_queue_duration', 'Time spent in the queue per request', '', s.queueTime);
  return page.toString();
}

/** TEI: like TGI's exporter, but TEI describes none of its metrics (no HELP lines) and reports no running batch. */
function tei(engine: SimEngine): string {
  const s = engine.stats;
  const page = new Page(RUST);
  const single = 'method="single"';
  page
    .family('te_request_count', 'counter', undefined, [[labels(single), finishedTotal(engine) + engine.numRunning + engine.numWaiting]])
    .family('te_request_success', 'counter', undefined, [[labels(single), s.finished.stop + s.finished.length]])
    .family('te_queue_size', 'gauge', undefined, [['', engine.numWaiting]])
    .histogram('te_request_duration', undefined, '', s.e2e)
    .histogram('te_request_queue_duration', undefined, '', s.queueTime);
  return page.toString();
}

/** llama.cpp (`--metrics`): unlabelled; "processing" are busy slots, "deferred" requests waiting for one. */
function llamacpp(engine: SimEngine): string {
  const s = engine.stats;
  const one = (value: number): Samples => [['', value]];
  return new Page(CPP)
    .family('llamacpp:prompt_tokens_total', 'counter', 'Number of prompt tokens processed.', one(s.promptTokens))
    .family('llamacpp:tokens_predicted_total', 'counter', 'Number of generation tokens processed.', one(s.generationTokens))
    .family('llamacpp:kv_cache_usage_ratio', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', one(engine.kvCacheUsage()))
    .family('llamacpp:kv_cache_tokens', 'gauge', 'KV-cache tokens.', one(engine.kvCacheTokens()))
    .family('llamacpp:requests_processing', 'gauge', 'Number of requests processing.', one(engine.numRunning))
    .family('llamacpp:requests_deferred', 'gauge', 'Number of requests deferred.', one(engine.numWaiting))
    .toString();
}

const DIALECTS: Record<SimEngineKind, (engine: SimEngine, modelName: string, lora?: SimLora) => string> = { vllm, sglang, tgi, tei, llamacpp };

/** The page; `lora` (vLLM only) adds `vllm:lora_requests_info` and counts requests waiting for their adapter as waiting. */
export function renderMetrics(engine: SimEngine, modelName: string, dialect: SimEngineKind = 'vllm', lora?: SimLora): string {
  return DIALECTS[dialect](engine, modelName, lora);
}
