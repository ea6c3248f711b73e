/** `/metrics` of the simulated engine in Prometheus text format, with vLLM's metric names and labels. */
import { type SimEngine } from './engine.js';
import { type Histogram } from './stats.js';

function labels(base: string, extra = ''): string {
  return `{${base}${extra ? ',' + extra : ''}}`;
}

function num(value: number): string {
  return Number.isInteger(value) ? `${value}.0` : String(value);
}

function histogram(out: string[], name: string, help: string, base: string, h: Histogram): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
  h.buckets.forEach((le, i) => out.push(`${name}_bucket${labels(base, `le="${le}"`)} ${num(h.counts[i] ?? 0)}`));
  out.push(`${name}_bucket${labels(base, 'le="+Inf"')} ${num(h.count)}`);
  out.push(`${name}_count${labels(base)} ${num(h.count)}`, `${name}_sum${labels(base)} ${num(h.sum)}`);
}

export function renderMetrics(engine: SimEngine, modelName: string): string {
  const base = `engine="0",model_name=${JSON.stringify(modelName)}`;
  const s = engine.stats;
  const out: string[] = [];
  const gauge = (name: string, help: string, value: number): void => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name}${labels(base)} ${num(value)}`);
  };
  const counter = (name: string, help: string, value: number): void => {
    out.push(`# HELP ${name}_total ${help}`, `# TYPE ${name}_total counter`, `${name}_total${labels(base)} ${num(value)}`);
  };
  gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', engine.numRunning);
  gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', engine.numWaiting);
  gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', engine.kvCacheUsage());
  out.push(
    '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig',
    '# TYPE vllm:cache_config_info gauge',
    `vllm:cache_config_info${labels(base, `block_size="${engine.blockSize}",enable_prefix_caching="True",num_gpu_blocks="${engine.kvCacheBlocks}"`)} 1.0`,
  );
  counter('vllm:prefix_cache_queries', 'Prefix cache queries, in terms of number of queried tokens.', s.prefixQueries);
  counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens.', s.prefixHits);
  counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', s.promptTokens);
  counter('vllm:generation_tokens', 'Number of generation tokens processed.', s.generationTokens);
  out.push('# HELP vllm:request_success_total Count of successfully processed requests.', '# TYPE vllm:request_success_total counter');
  for (const [reason, value] of Object.entries(s.finished)) {
    out.push(`vllm:request_success_total${labels(base, `finished_reason="${reason}"`)} ${num(value)}`);
  }
  histogram(out, 'vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', base, s.ttft);
  histogram(out, 'vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', base, s.e2e);
  histogram(out, 'vllm:request_queue_time_seconds', 'Histogram of time spent in WAITING phase for request.', base, s.queueTime);
  return out.join('\n') + '\n';
}
