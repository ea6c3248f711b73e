import { describe, expect, it } from '@jest/globals';
import { ENGINE_SERIES, idlePage, readEngineLoad, type ParsedLoad } from '../../src/engine-metrics/engine-maps.js';
import { ENGINES, type Engine } from '../../src/core/types.js';

const MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"';

/** vLLM V1 with data parallelism: one series per engine core. */
const VLLM_DP = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",${MODEL}} 3.0
vllm:num_requests_running{engine="1",${MODEL}} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",${MODEL}} 1.0
vllm:num_requests_waiting{engine="1",${MODEL}} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",${MODEL}} 0.25
vllm:kv_cache_usage_perc{engine="1",${MODEL}} 0.75
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",${MODEL}} 12345.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",${MODEL}} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",${MODEL}} 57.0
vllm:time_to_first_token_seconds_count{engine="0",${MODEL}} 57.0
vllm:time_to_first_token_seconds_sum{engine="0",${MODEL}} 3.2140000000000004
`;

/** vLLM V0 (before 0.9): the KV gauge was `gpu_cache_usage_perc`. */
const VLLM_V0 = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{${MODEL}} 1.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{${MODEL}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{${MODEL}} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{${MODEL}} 0.031
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{${MODEL}} 0.0
`;

/** A vLLM that serves two models (LoRA adapters are labelled the same way). */
const VLLM_TWO_MODELS = `vllm:num_requests_running{engine="0",model_name="a"} 2.0
vllm:num_requests_running{engine="0",model_name="b"} 1.0
vllm:num_requests_waiting{engine="0",model_name="a"} 0.0
vllm:num_requests_waiting{engine="0",model_name="b"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5
vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.5
vllm:gpu_cache_usage_perc{engine="0",model_name="a"} 0.99
`;

const SGLANG = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{${MODEL}} 7.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{${MODEL}} 40960.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{${MODEL}} 0.28
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{${MODEL}} 351.2
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{${MODEL}} 2.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{${MODEL}} 0.61
`;

/** TGI (metrics-exporter-prometheus): no HELP, mostly no labels. */
const TGI = `# TYPE tgi_request_count counter
tgi_request_count 1543
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 16384
# TYPE tgi_batch_inference_duration histogram
tgi_batch_inference_duration_bucket{method="prefill",le="0.005"} 0
tgi_batch_inference_duration_bucket{method="prefill",le="+Inf"} 41
tgi_batch_inference_duration_sum{method="prefill"} 2.5
tgi_batch_inference_duration_count{method="prefill"} 41
`;

const TEI = `# TYPE te_request_count counter
te_request_count{method="single"} 20
te_request_count{method="batch"} 4
# TYPE te_queue_size gauge
te_queue_size 5
# TYPE te_batch_next_size histogram
te_batch_next_size_bucket{le="1"} 10
te_batch_next_size_bucket{le="+Inf"} 24
te_batch_next_size_sum 60
te_batch_next_size_count 24
`;

/** llama.cpp `llama-server --metrics`, a version that still exports the KV ratio. */
const LLAMACPP_WITH_KV = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1024
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 2048
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.125
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 512
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
`;

/** A newer llama.cpp, without the KV gauges. */
const LLAMACPP_NO_KV = `# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1.5
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
`;

function read(engine: Engine, text: string): ParsedLoad | undefined {
  const series = ENGINE_SERIES[engine];
  if (!series) throw new Error(`${engine} has no series`);
  return readEngineLoad(series, text);
}

describe('ENGINE_SERIES', () => {
  it('maps every engine but openai, which is never scraped', () => {
    for (const engine of ENGINES) expect(ENGINE_SERIES[engine] === undefined).toBe(engine === 'openai');
  });
});

describe('readEngineLoad', () => {
  const cases: Array<{ name: string; engine: Engine; text: string; expected: ParsedLoad | undefined }> = [
    { name: 'vLLM data parallel: sums counts over engines, averages usage', engine: 'vllm', text: VLLM_DP, expected: { waiting: 5, running: 5, kvCacheUsage: 0.5 } },
    { name: 'vLLM V0: falls back to gpu_cache_usage_perc', engine: 'vllm', text: VLLM_V0, expected: { waiting: 0, running: 1, kvCacheUsage: 0.031 } },
    { name: 'vLLM: the new KV name wins when both are present; several models summed', engine: 'vllm', text: VLLM_TWO_MODELS, expected: { waiting: 3, running: 3, kvCacheUsage: 0.5 } },
    { name: 'SGLang', engine: 'sglang', text: SGLANG, expected: { waiting: 2, running: 7, kvCacheUsage: 0.28 } },
    { name: 'TGI: no KV', engine: 'tgi', text: TGI, expected: { waiting: 3, running: 12 } },
    { name: 'TEI: a queue only, running 0', engine: 'tei', text: TEI, expected: { waiting: 5, running: 0 } },
    { name: 'llama.cpp with the KV ratio', engine: 'llamacpp', text: LLAMACPP_WITH_KV, expected: { waiting: 1, running: 2, kvCacheUsage: 0.125 } },
    { name: 'llama.cpp without the KV ratio', engine: 'llamacpp', text: LLAMACPP_NO_KV, expected: { waiting: 0, running: 4 } },
    { name: 'only one of waiting/running present: the other is 0', engine: 'vllm', text: 'vllm:num_requests_running 2\n', expected: { waiting: 0, running: 2 } },
    {
      name: 'non-finite samples ignored, counts floored at 0, usage clamped',
      engine: 'vllm',
      text: 'vllm:num_requests_waiting NaN\nvllm:num_requests_waiting 2\nvllm:num_requests_running -1\nvllm:kv_cache_usage_perc +Inf\nvllm:kv_cache_usage_perc 1.5\n',
      expected: { waiting: 2, running: 0, kvCacheUsage: 1 },
    },
    {
      name: 'vLLM: the KV cache size from cache_config_info (block_size × num_gpu_blocks, first rank)',
      engine: 'vllm',
      text: 'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2048"} 1.0\nvllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="4096"} 1.0\nvllm:num_requests_running 1\n',
      expected: { waiting: 0, running: 1, cacheTokens: 32768 },
    },
    {
      name: 'SGLang: the KV cache size from page_size × num_pages',
      engine: 'sglang',
      text: 'sglang:cache_config_info{page_size="1",num_pages="150000"} 1\nsglang:num_queue_reqs 0\n',
      expected: { waiting: 0, running: 0, cacheTokens: 150000 },
    },
    {
      // believed, the replica's share of the prefix index never evicted, and grew with every new prompt sent there
      name: 'a KV cache larger than any engine holds is not believed (num_gpu_blocks="1e12")',
      engine: 'vllm',
      text: 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1e12"} 1.0\nvllm:num_requests_running 1\n',
      expected: { waiting: 0, running: 1 },
    },
    {
      name: 'SGLang: nor one a block over 2^24 tokens',
      engine: 'sglang',
      text: 'sglang:cache_config_info{page_size="16",num_pages="1048577"} 1\nsglang:num_queue_reqs 0\n',
      expected: { waiting: 0, running: 0 },
    },
    {
      name: 'SGLang: a KV cache of 2^24 tokens is believed',
      engine: 'sglang',
      text: 'sglang:cache_config_info{page_size="16",num_pages="1048576"} 1\nsglang:num_queue_reqs 0\n',
      expected: { waiting: 0, running: 0, cacheTokens: 16777216 },
    },
    {
      name: 'a malformed cache_config_info is ignored',
      engine: 'vllm',
      text: 'vllm:cache_config_info{block_size="x",num_gpu_blocks="5"} 1\nvllm:num_requests_running 1\n',
      expected: { waiting: 0, running: 1 },
    },
    { name: 'unparsable: a TGI page read as vLLM', engine: 'vllm', text: TGI, expected: undefined },
    { name: 'unparsable: a vLLM page read as SGLang', engine: 'sglang', text: VLLM_DP, expected: undefined },
    // no signal, not idle: a broken replica serves the same page, and read as idle it drew its pool's traffic
    {
      name: 'no signal: TEI before its first queued request (no queue gauge yet)',
      engine: 'tei',
      text: '# TYPE te_request_count counter\nte_request_count{method="single"} 20\n',
      expected: undefined,
    },
    { name: 'no signal: TGI before its first request (an empty page)', engine: 'tgi', text: '', expected: undefined },
    { name: 'unparsable: a vLLM page read as TGI (another engine is not an idle TGI)', engine: 'tgi', text: VLLM_V0, expected: undefined },
    { name: 'unparsable: an HTML page read as TEI', engine: 'tei', text: '<html><body>metrics disabled</body></html>', expected: undefined },
    {
      name: 'SGLang with priority scheduling: the total (priority="") counted once, not again per priority',
      engine: 'sglang',
      text: 'sglang:num_queue_reqs{model_name="m",priority=""} 5\nsglang:num_queue_reqs{model_name="m",priority="0"} 2\nsglang:num_queue_reqs{model_name="m",priority="1"} 3\nsglang:num_running_reqs{model_name="m",priority=""} 4\nsglang:num_running_reqs{model_name="m",priority="1"} 4\nsglang:token_usage{model_name="m"} 0.5\n',
      expected: { waiting: 5, running: 4, kvCacheUsage: 0.5 },
    },
    {
      name: 'SGLang data-parallel attention: one series per group (its own tp_rank), summed',
      engine: 'sglang',
      text: 'sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 1\nsglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="4"} 2\nsglang:num_running_reqs{model_name="m",tp_rank="0"} 3\nsglang:num_running_reqs{model_name="m",tp_rank="4"} 3\n',
      expected: { waiting: 3, running: 6 },
    },
    { name: 'unparsable: KV usage alone is not a load', engine: 'vllm', text: 'vllm:kv_cache_usage_perc 0.5\n', expected: undefined },
    { name: 'unparsable: only NaN samples', engine: 'tgi', text: 'tgi_queue_size NaN\ntgi_batch_current_size NaN\n', expected: undefined },
    { name: 'unparsable: an HTML error page', engine: 'llamacpp', text: '<html><body>metrics disabled</body></html>', expected: undefined },
    { name: 'unparsable: empty', engine: 'vllm', text: '', expected: undefined },
  ];

  it.each(cases)('$name', ({ engine, text, expected }) => {
    expect(read(engine, text)).toEqual(expected);
  });
});

/** Each engine's page without its load series: empty, and holding only the engine's own other series (a counter). */
const LOADLESS: Record<Exclude<Engine, 'openai'>, string> = {
  vllm: '# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name="m"} 5.0\n',
  sglang: '# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name="m"} 5.0\n',
  tgi: '# TYPE tgi_request_count counter\ntgi_request_count 5\n',
  tei: '# TYPE te_request_count counter\nte_request_count{method="single"} 5\n',
  llamacpp: '# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 5\n',
};

describe('a page without the engine’s load series, for every engine', () => {
  const engines = Object.keys(LOADLESS) as Array<keyof typeof LOADLESS>;

  it.each(engines)('%s: an empty page, or one of its own counters only, gives no load (no signal, never an idle replica)', (engine) => {
    expect(read(engine, '')).toBeUndefined();
    expect(read(engine, '\n# HELP nothing here\n')).toBeUndefined();
    expect(read(engine, LOADLESS[engine])).toBeUndefined();
  });

  it.each(engines)('%s: is an idle page (counted empty, not unparsable) only for TGI and TEI, whose gauges appear at the first request', (engine) => {
    const series = ENGINE_SERIES[engine]!;
    const lateGauges = engine === 'tgi' || engine === 'tei';
    expect([idlePage(series, ''), idlePage(series, LOADLESS[engine])]).toEqual([lateGauges, lateGauges]);
    // another engine's page, an error page, or the engine's own load series with no usable value are never one
    expect(idlePage(series, '<html><body>metrics disabled</body></html>')).toBe(false);
    expect(idlePage(series, LOADLESS[engine === 'vllm' ? 'sglang' : 'vllm'])).toBe(false);
    expect(idlePage(series, `${series.waiting[0]} NaN\n`)).toBe(false);
  });
});
