/**
 * The simulator is honest about time and load: these tests measure real sockets and real time.
 * Lower bounds are tight (timers never fire much early); upper bounds are generous for a busy machine.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { type SimServer } from '../../src/sim/server.js';
import { contentTimes, rawRequest, sseData, type RawResponse } from '../helpers/http.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { type SimOptions } from '../../src/sim/options.js';

const sims: SimServer[] = [];
async function sim(overrides: Partial<SimOptions>): Promise<SimServer> {
  const s = await startTestSim(overrides);
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

const message = (content: string): object => ({ messages: [{ role: 'user', content }] });
const chat = (s: SimServer, body: object, extra: Parameters<typeof rawRequest>[1] = {}): Promise<RawResponse> =>
  rawRequest(`${s.url}/v1/chat/completions`, { ...extra, body: { ...message('hello'), ...body } });

async function metric(s: SimServer, name: string): Promise<number> {
  const text = (await rawRequest(`${s.url}/metrics`)).body;
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  if (!line) throw new Error(`metric ${name} not found`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('latency model, measured', () => {
  it('delivers the first token after the prefill time and the rest one ITL apart', async () => {
    const s = await sim({ ttftMs: 60, prefillMsPerToken: 0, itlMs: 20, loadFactor: 1 });
    const res = await chat(s, { stream: true, max_tokens: 6, ignore_eos: true });
    const times = contentTimes(res);
    expect(times).toHaveLength(6);
    const ttft = times[0]!;
    const decode = times.at(-1)! - ttft;
    expect(ttft).toBeGreaterThanOrEqual(58);
    expect(ttft).toBeLessThan(60 + 400);
    expect(decode).toBeGreaterThanOrEqual(5 * 20 - 5);
    expect(decode).toBeLessThan(5 * 20 + 500);
  });

  it('charges prefill per uncached prompt token', async () => {
    const s = await sim({ ttftMs: 0, prefillMsPerToken: 0.5, itlMs: 0, loadFactor: 1 });
    const res = await chat(s, { ...message('x'.repeat(800)), stream: true, max_tokens: 1 });
    // about 212 tokens (800 characters + template) × 0.5 ms
    expect(contentTimes(res)[0]).toBeGreaterThanOrEqual(100);
  });

  it('slows every running request as the batch fills, up to --load-factor', async () => {
    const s = await sim({ ttftMs: 0, prefillMsPerToken: 0, itlMs: 10, loadFactor: 3, maxNumSeqs: 4 });
    const runs = await Promise.all([0, 1, 2, 3].map(() => chat(s, { stream: true, max_tokens: 11, ignore_eos: true })));
    for (const run of runs) {
      const times = contentTimes(run);
      const meanItl = (times.at(-1)! - times[0]!) / (times.length - 1);
      // 10 ms alone; 30 ms with all 4 slots busy (the batch fills within the first interval)
      expect(meanItl).toBeGreaterThanOrEqual(24);
      expect(meanItl).toBeLessThan(30 + 100);
    }
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
  it('prefills a repeated prompt from cache: cached_tokens reported, first token much sooner', async () => {
    const s = await sim({ ttftMs: 2, prefillMsPerToken: 0.2, itlMs: 0 });
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(90); // ~1,000 tokens
    const ask = async (content: string): Promise<{ ttft: number; cached: number }> => {
      const res = await chat(s, { ...message(content), stream: true, stream_options: { include_usage: true }, max_tokens: 2 });
      const usage = JSON.parse(sseData(res.body).at(-2)!) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
      return { ttft: contentTimes(res)[0]!, cached: usage.usage.prompt_tokens_details.cached_tokens };
    };
    const cold = await ask(long);
    const warm = await ask(long);
    const other = await ask('Another start. ' + long);
    expect(cold.cached).toBe(0);
    expect(cold.ttft).toBeGreaterThanOrEqual(190);
    expect(warm.cached).toBeGreaterThan(950);
    expect(warm.ttft).toBeLessThan(cold.ttft / 2);
    expect(other.cached).toBe(0);
    expect(await metric(s, 'vllm:prefix_cache_hits_total')).toBe(warm.cached);
  });
});

describe('cancellation', () => {
  it('stops generating when a streaming client disconnects, and counts it as aborted', async () => {
    const s = await sim({ itlMs: 5 });
    const res = await chat(s, { stream: true, max_tokens: 4000, ignore_eos: true }, { onChunk: (_d, all) => all.includes('"content":" ') });
    expect(res.error?.code).toBe('CLIENT_ABORT');
    await waitFor(() => s.engine.numRunning === 0, 'the slot to be freed');
    expect(await metric(s, 'vllm:request_success_total{engine="0",model_name="sim-model",finished_reason="abort"}')).toBe(1);
    const generated = await metric(s, 'vllm:generation_tokens_total');
    expect(generated).toBeLessThan(200);
    await new Promise((resolve) => setTimeout(resolve, 50));
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
