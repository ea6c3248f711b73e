/**
 * `--engine`: the simulator's `/metrics` in each engine's dialect, read back through the router's own
 * scraper map (ENGINE_SERIES + readEngineLoad), so the simulator and the scraper cannot drift apart.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { ENGINE_SERIES, readEngineLoad } from '../../src/engine-metrics/engine-maps.js';
import { SIM_ENGINES, type SimEngineKind, type SimOptions } from '../../src/sim/options.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const sims: SimServer[] = [];
/** Aborts every client request of the current test. */
let abortClients = new AbortController();
async function sim(overrides: Partial<SimOptions>): Promise<SimServer> {
  const s = await startTestSim(overrides);
  sims.push(s);
  return s;
}
afterEach(async () => {
  abortClients.abort();
  abortClients = new AbortController();
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

const chat = (s: SimServer, body: object = {}, headers: Record<string, string> = {}): Promise<RawResponse> =>
  rawRequest(`${s.url}/v1/chat/completions`, { body: { messages: [{ role: 'user', content: 'hello there' }], ...body }, headers, signal: abortClients.signal });

async function scrape(s: SimServer): Promise<string> {
  const res = await rawRequest(`${s.url}/metrics`);
  expect(res.status).toBe(200);
  return res.body;
}

/** Takes a batch slot and keeps it: the request stalls right after its first token (KV state then fixed). */
async function holdSlot(s: SimServer): Promise<void> {
  let holding!: () => void;
  const held = new Promise<void>((resolve) => (holding = resolve));
  const res = rawRequest(`${s.url}/v1/chat/completions`, {
    body: { messages: [{ role: 'user', content: 'hold this slot' }], stream: true },
    headers: { 'x-sim-fault': 'stall-after=0' },
    signal: abortClients.signal,
    // The role chunk is written just before the stall, in the same tick that accounts the first token.
    onChunk: (_data, all) => void (all.includes('"role":"assistant"') && holding()),
  });
  await Promise.race([held, res.then((r) => Promise.reject(new Error(`the held request ended (status ${r.status})`)))]);
}

describe.each(SIM_ENGINES)('--engine %s', (engine: SimEngineKind) => {
  const series = ENGINE_SERIES[engine]!;

  it("reports the real queue, batch and KV cache through the scraper's map for the engine", async () => {
    const s = await sim({ engine, maxNumSeqs: 2, blockSize: 16, kvCacheBlocks: 64 });
    const withCache = series.cacheConfig ? { cacheTokens: 16 * 64 } : {};
    const withKv = (usage: number): object => (series.kvCacheUsage.length > 0 ? { kvCacheUsage: usage } : {});
    expect(readEngineLoad(series, await scrape(s))).toEqual({ waiting: 0, running: 0, ...withKv(0), ...withCache });

    await Promise.all([holdSlot(s), holdSlot(s)]);
    const queued = [chat(s), chat(s), chat(s)];
    await waitFor(() => s.engine.numWaiting === 3, 'three requests to queue behind the batch');
    expect(s.engine.numRunning).toBe(2);
    const usage = s.engine.kvCacheUsage();
    expect(usage).toBeGreaterThan(0);
    // TEI reports no running batch: the map has no series for it, and the load then says 0.
    expect(readEngineLoad(series, await scrape(s))).toEqual({ waiting: 3, running: series.running.length > 0 ? 2 : 0, ...withKv(usage), ...withCache });

    abortClients.abort();
    await Promise.all(queued);
    await waitFor(() => s.engine.numRunning === 0 && s.engine.numWaiting === 0, 'the engine to drain');
    expect(readEngineLoad(series, await scrape(s))).toEqual({ waiting: 0, running: 0, ...withKv(0), ...withCache });
  });

  it('writes well-formed exposition text after traffic', async () => {
    const s = await sim({ engine, jitter: 0.3 });
    const done = await Promise.all([chat(s, { max_tokens: 3 }), chat(s, { max_tokens: 50, ignore_eos: true }), chat(s, {}, { 'x-sim-fault': 'error-after=1' })]);
    expect(done.map((r) => r.status)).toEqual([200, 200, 500]);
    const text = await scrape(s);
    // TEI registers no descriptions, so its exporter writes TYPE lines only; every other engine writes HELP too.
    expect(expositionProblems(text, { help: engine !== 'tei' })).toEqual([]);
    for (const name of [...series.waiting, ...series.running, ...series.kvCacheUsage.slice(0, 1)]) {
      expect(text).toMatch(new RegExp(`^# TYPE ${name} gauge$`, 'm'));
    }
  });
});

describe('the metrics dialect', () => {
  it('speaks vLLM by default, with the model and rank labels vLLM puts on every series', async () => {
    const s = await sim({ model: ['m1', 'm2'] });
    expect(await scrape(s)).toMatch(/^vllm:num_requests_waiting\{engine="0",model_name="m1"\} 0\.0$/m);
  });

  it('writes each engine its own way: labels, counter names and value format', async () => {
    const texts = Object.fromEntries(await Promise.all(SIM_ENGINES.map(async (engine) => [engine, await scrape(await sim({ engine, model: ['m'] }))] as const)));
    expect(texts.sglang).toMatch(/^sglang:num_queue_reqs\{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"\} 0\.0$/m);
    expect(texts.sglang).toMatch(/^sglang:cache_config_info\{[^}]*num_pages="4096",page_size="16"\} 1\.0$/m);
    expect(texts.tgi).toMatch(/^tgi_queue_size 0$/m);
    expect(texts.tgi).toMatch(/^# TYPE tgi_request_count counter\ntgi_request_count 0$/m);
    expect(texts.tei).toMatch(/^te_request_count\{method="single"\} 0$/m);
    expect(texts.llamacpp).toMatch(/^# HELP llamacpp:requests_deferred Number of requests deferred\.\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0$/m);
    for (const engine of SIM_ENGINES.filter((e) => e !== 'vllm')) expect(texts[engine]).not.toContain('vllm:');
  });

  it('switches at run time through POST /sim/config', async () => {
    const s = await sim({});
    const set = await rawRequest(`${s.url}/sim/config`, { body: { engine: 'llamacpp' } });
    expect(JSON.parse(set.body)).toMatchObject({ engine: 'llamacpp' });
    expect(readEngineLoad(ENGINE_SERIES.llamacpp!, await scrape(s))).toEqual({ waiting: 0, running: 0, kvCacheUsage: 0 });
    const bad = await rawRequest(`${s.url}/sim/config`, { body: { engine: 'triton' } });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body)).toMatchObject({ error: { param: 'engine', message: expect.stringContaining('vllm, sglang, tgi, tei, llamacpp') } });
  });
});

describe('the exposition checker used above', () => {
  it('catches what promtool would', () => {
    const text = [
      'x_total 1',
      '# TYPE y gauge',
      'y{a="1"} 1',
      'y{a="1"} 2',
      'z{1a="b"} one',
      '# HELP y late',
      '# HELP h latency',
      '# TYPE h histogram',
      'h_bucket{le="1"} 2',
      'h_bucket{le="2"} 1',
      'h_bucket{le="+Inf"} 3',
      'h_sum 1.5',
      'h_count 4',
      '',
    ].join('\n');
    expect(expositionProblems(text, { help: true })).toEqual([
      'x_total: sample before its TYPE line',
      'y: no HELP line',
      'y{a="1"}: duplicate series',
      'malformed sample: z{1a="b"} one',
      'y: HELP line after its samples',
      'h: buckets not cumulative',
      'h: +Inf bucket differs from _count',
    ]);
    expect(expositionProblems(text.replace('# TYPE y gauge', '# HELP y y\n# TYPE y gauge'), { help: false })).not.toContain('y: no HELP line');
  });
});

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? (\S+)$/;
const VALUE = /^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|NaN|[+-]Inf)$/;

/**
 * The basics of the text format that `promtool check metrics` enforces: one TYPE per family before its
 * samples, HELP (when asked for) before them too, families contiguous, valid names, labels and values,
 * no duplicate series, and histograms whose buckets are cumulative and end in `+Inf` = `_count`.
 */
function expositionProblems(text: string, options: { help: boolean }): string[] {
  const problems: string[] = [];
  const types = new Map<string, string>();
  const helped = new Set<string>();
  const sampled = new Set<string>();
  const series = new Set<string>();
  const buckets = new Map<string, number[]>();
  const counts = new Map<string, number>();
  let current = '';
  const familyOf = (name: string): string => {
    const base = name.replace(/_(bucket|sum|count)$/, '');
    return types.get(base) === 'histogram' ? base : name;
  };
  const enter = (family: string): void => {
    if (family === current) return;
    if (sampled.has(family)) problems.push(`${family}: family split into several groups`);
    if (options.help && types.has(family) && !helped.has(family)) problems.push(`${family}: no HELP line`);
    current = family;
  };
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta) {
      const [, kind, name = '', rest = ''] = meta;
      if (!NAME.test(name)) problems.push(`bad metric name: ${name}`);
      if (sampled.has(name)) problems.push(`${name}: ${kind} line after its samples`);
      if (kind === 'HELP') helped.add(name);
      else if (types.has(name)) problems.push(`${name}: second TYPE line`);
      else if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) problems.push(`${name}: unknown type ${rest}`);
      else types.set(name, rest);
      continue;
    }
    if (line.startsWith('#')) continue;
    const sample = SAMPLE.exec(line);
    if (!sample || !VALUE.test(sample[3] ?? '')) {
      problems.push(`malformed sample: ${line}`);
      continue;
    }
    const [, name = '', labels = '', value = ''] = sample;
    const family = familyOf(name);
    if (!types.has(family)) {
      problems.push(`${name}: sample before its TYPE line`);
      sampled.add(family);
      continue;
    }
    enter(family);
    sampled.add(family);
    if (series.has(name + labels)) problems.push(`${name}${labels}: duplicate series`);
    series.add(name + labels);
    const v = Number(value.replace('Inf', 'Infinity'));
    if (types.get(family) === 'counter' && !(v >= 0)) problems.push(`${name}${labels}: negative counter`);
    const key = `${family}${labels
      .replace(/,?le="[^"]*"/, '')
      .replace('{,', '{')
      .replace('{}', '')}`;
    if (name.endsWith('_bucket')) {
      if (!/le="/.test(labels)) problems.push(`${name}${labels}: bucket without le`);
      buckets.set(key, [...(buckets.get(key) ?? []), v]);
      if (labels.includes('le="+Inf"')) counts.set(`${key}/inf`, v);
    } else if (name.endsWith('_count') && types.get(family) === 'histogram') counts.set(key, v);
  }
  for (const [key, values] of buckets) {
    if (values.some((v, i) => i > 0 && v < (values[i - 1] as number))) problems.push(`${key}: buckets not cumulative`);
    if (!counts.has(`${key}/inf`)) problems.push(`${key}: no +Inf bucket`);
    else if (counts.get(`${key}/inf`) !== counts.get(key)) problems.push(`${key}: +Inf bucket differs from _count`);
  }
  return problems;
}
