/**
 * The simulator's latency model and load, over real sockets on fake time: every wait the engine
 * schedules goes through a recording sleep, so the tests assert the delays the model chose (and the
 * engine's own clock-based figures) rather than wall-clock times on a busy machine.
 */
import { describe, expect, it } from '@jest/globals';
import { type Sleep } from '../../src/core/clock.js';
import { type SimServer } from '../../src/sim/server.js';
import { FakeTime, runOnFakeTime } from '../helpers/fake-time.js';
import { contentTimes, rawRequest, sseData, type RawResponse } from '../helpers/http.js';
import { simsClosedAfterEach, waitFor } from '../helpers/sim.js';
import { type SimOptions } from '../../src/sim/options.js';

const sim = simsClosedAfterEach();

/** One wait the engine scheduled: its length and how many requests were running at the time. */
interface Wait {
  ms: number;
  running: number;
}

/** A simulator on fake time; `waits` records every delay its engine scheduled. */
async function timedSim(overrides: Partial<SimOptions>): Promise<{ s: SimServer; time: FakeTime; waits: Wait[] }> {
  const time = new FakeTime();
  const waits: Wait[] = [];
  const started: { server?: SimServer } = {};
  const sleep: Sleep = (ms, signal) => {
    waits.push({ ms, running: started.server?.engine.numRunning ?? 0 });
    return time.sleep(ms, signal);
  };
  started.server = await sim({ jitter: 0, ...overrides }, { clock: time, sleep });
  return { s: started.server, time, waits };
}

const message = (content: string): object => ({ messages: [{ role: 'user', content }] });
const chat = (s: SimServer, body: object, extra: Parameters<typeof rawRequest>[1] = {}): Promise<RawResponse> =>
  rawRequest(`${s.url}/v1/chat/completions`, { ...extra, body: { ...message('hello'), ...body } });

async function metric(s: SimServer, name: string): Promise<number> {
  const text = (await rawRequest(`${s.url}/metrics`)).body;
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  if (!line) throw new Error(`metric ${name} not found`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

interface Usage {
  prompt_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

describe('latency model', () => {
  it('waits the prefill time before the first token and one ITL before each of the rest', async () => {
    const { s, time, waits } = await timedSim({ ttftMs: 60, prefillMsPerToken: 0, itlMs: 20, loadFactor: 1 });
    const res = await runOnFakeTime(time, chat(s, { stream: true, max_tokens: 6, ignore_eos: true }));
    expect(contentTimes(res)).toHaveLength(6);
    expect(waits.map((w) => w.ms)).toEqual([60, 20, 20, 20, 20, 20]);
    // the engine's own figures, on its clock: first token at 60 ms, the whole request 160 ms
    expect(s.engine.stats.ttft.sum).toBeCloseTo(0.06, 9);
    expect(s.engine.stats.e2e.sum).toBeCloseTo(0.16, 9);
  });

  it('charges prefill per uncached prompt token', async () => {
    const { s, time, waits } = await timedSim({ ttftMs: 3, prefillMsPerToken: 0.5, itlMs: 0, loadFactor: 1 });
    const res = await runOnFakeTime(time, chat(s, { ...message('x'.repeat(800)), max_tokens: 1 }));
    const usage = (JSON.parse(res.body) as { usage: Usage }).usage;
    expect(usage.prompt_tokens).toBeGreaterThan(200); // 800 characters + the chat template
    expect(waits).toHaveLength(1);
    expect(waits[0]!.ms).toBeCloseTo(3 + usage.prompt_tokens * 0.5, 9);
  });

  it('slows every running request as the batch fills, up to --load-factor', async () => {
    const { s, time, waits } = await timedSim({ ttftMs: 0, prefillMsPerToken: 0, itlMs: 10, loadFactor: 3, maxNumSeqs: 4 });
    const runs = [0, 1, 2, 3].map(() => chat(s, { stream: true, max_tokens: 11, ignore_eos: true }));
    // time stands still until all four hold a batch slot, each waiting for its second token
    await waitFor(() => s.engine.numRunning === 4 && time.pendingTimers === 4, 'all four requests to be running');
    const results = await runOnFakeTime(time, Promise.all(runs));
    for (const run of results) expect(contentTimes(run)).toHaveLength(11);
    expect(waits).toHaveLength(4 * 10); // ten inter-token waits per request
    // 10 ms alone, 30 ms with all 4 slots busy, linear in between: 10 × (1 + 2 × (running − 1) / 3)
    for (const { ms, running } of waits) expect(ms).toBeCloseTo(10 * (1 + (2 * (running - 1)) / 3), 9);
    expect(waits.filter((w) => w.running === 4).length).toBeGreaterThanOrEqual(4 * 8);
  });
});

describe('batch slots and the waiting queue', () => {
  it('queues beyond --max-num-seqs, answers 429 beyond --max-waiting, and serves the queue in order', async () => {
    const s = await sim({ maxNumSeqs: 1, maxWaiting: 1 });
    const holder = new AbortController();
    let holding!: () => void;
    const holdingSlot = new Promise<void>((resolve) => (holding = resolve));
    const first = chat(s, { stream: true }, { headers: { 'x-sim-fault': 'stall-after=1' }, signal: holder.signal, onChunk: (_d, all) => void (all.includes('"content":" ') && holding()) });
    await holdingSlot;
    const second = chat(s, { stream: true, max_tokens: 3 });
    await waitFor(() => s.engine.numWaiting === 1, 'the second request to queue');

    const third = await chat(s, {});
    expect(third.status).toBe(429);
    expect(JSON.parse(third.body)).toEqual({ error: { message: expect.stringContaining('waiting queue is full'), type: 'RateLimitError', param: null, code: 429 } });
    expect(await metric(s, 'vllm:num_requests_running')).toBe(1);
    expect(await metric(s, 'vllm:num_requests_waiting')).toBe(1);

    holder.abort();
    const served = await second;
    expect(served.status).toBe(200);
    expect(sseData(served.body).at(-1)).toBe('[DONE]');
    expect((await first).error?.code).toBe('CLIENT_ABORT');
  });
});

describe('prefix cache', () => {
  it('prefills a repeated prompt from cache: cached_tokens reported, only the uncached rest charged', async () => {
    const { s, time, waits } = await timedSim({ ttftMs: 2, prefillMsPerToken: 0.2, itlMs: 0 });
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(90); // ~1,000 tokens
    const ask = async (content: string): Promise<{ prefillMs: number; prompt: number; cached: number }> => {
      const before = waits.length;
      const res = await runOnFakeTime(time, chat(s, { ...message(content), stream: true, stream_options: { include_usage: true }, max_tokens: 2 }));
      const { usage } = JSON.parse(sseData(res.body).at(-2)!) as { usage: Usage };
      expect(waits.length).toBe(before + 1); // the prefill; at itlMs 0 decoding waits for nothing
      return { prefillMs: waits[before]!.ms, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? -1 };
    };
    const cold = await ask(long);
    const warm = await ask(long);
    const other = await ask('Another start. ' + long);
    expect(cold.cached).toBe(0);
    expect(cold.prefillMs).toBeCloseTo(2 + cold.prompt * 0.2, 9);
    expect(warm.cached).toBeGreaterThan(950);
    expect(warm.prefillMs).toBeCloseTo(2 + (warm.prompt - warm.cached) * 0.2, 9);
    expect(warm.prefillMs).toBeLessThan(cold.prefillMs / 2);
    expect(other.cached).toBe(0);
    expect(await metric(s, 'vllm:prefix_cache_hits_total')).toBe(warm.cached);
  });

  it('keeps prompts under another cache_salt apart, like vLLM (the salt goes into the first block’s hash)', async () => {
    const { s, time } = await timedSim({ ttftMs: 0, prefillMsPerToken: 0, itlMs: 0 });
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(20);
    const cachedFor = async (extra: object): Promise<number> => {
      const res = await runOnFakeTime(time, chat(s, { ...message(long), max_tokens: 1, ...extra }));
      return (JSON.parse(res.body) as { usage: Usage }).usage.prompt_tokens_details?.cached_tokens ?? -1;
    };
    expect(await cachedFor({ cache_salt: 'team-a' })).toBe(0);
    expect(await cachedFor({ cache_salt: 'team-a' })).toBeGreaterThan(0);
    expect(await cachedFor({ cache_salt: 'team-b' })).toBe(0);
    expect(await cachedFor({})).toBe(0);
    const bad = await runOnFakeTime(time, chat(s, { ...message(long), cache_salt: 7 }));
    expect(bad.status).toBe(400);
    expect((JSON.parse(bad.body) as { error: { param: string } }).error.param).toBe('cache_salt');
  });
});

describe('cancellation', () => {
  it('stops generating when a streaming client disconnects, and counts it as aborted', async () => {
    const { s, time } = await timedSim({ itlMs: 5 });
    const res = await runOnFakeTime(time, chat(s, { stream: true, max_tokens: 4000, ignore_eos: true }, { onChunk: (_d, all) => all.includes('"content":" ') }));
    expect(res.error?.code).toBe('CLIENT_ABORT');
    await waitFor(() => s.engine.numRunning === 0, 'the slot to be freed');
    expect(await metric(s, 'vllm:request_success_total{engine="0",model_name="sim-model",finished_reason="abort"}')).toBe(1);
    const generated = await metric(s, 'vllm:generation_tokens_total');
    expect(generated).toBeLessThan(200);
    // nothing is left waiting to produce another token, however much time passes
    expect(time.pendingTimers).toBe(0);
    await time.advance(60_000);
    expect(await metric(s, 'vllm:generation_tokens_total')).toBe(generated);
  });

  it('stops a non-streamed generation whose client gave up', async () => {
    const s = await sim({ itlMs: 5 });
    const res = await chat(s, { max_tokens: 4000, ignore_eos: true }, { abortAfterMs: 50 });
    expect(res.status).toBe(0);
    await waitFor(() => s.engine.numRunning === 0, 'the slot to be freed');
    expect(s.engine.stats.finished.abort).toBe(1);
  });
});
