/** The exact bytes of the simulator's SSE stream, read with raw HTTP. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
const chat = (body: object): Promise<Awaited<ReturnType<typeof rawRequest>>> => rawRequest(`${sim.url}/v1/chat/completions`, { body: { messages: [{ role: 'user', content: 'hello' }], ...body } });

interface Chunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: Array<{ index: number; delta: { role?: string; content?: string }; logprobs: unknown; finish_reason: string | null; stop_reason?: unknown }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

beforeAll(async () => {
  sim = await startTestSim();
});
afterAll(() => sim.close());

describe('simulator stream format', () => {
  it('frames vLLM chunks as data events: role first, finish_reason last, usage with empty choices, then [DONE]', async () => {
    const res = await chat({ stream: true, stream_options: { include_usage: true }, max_tokens: 5, ignore_eos: true, seed: 1 });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(res.body).toMatch(/^(data: [^\n]+\n\n)+$/);
    expect(res.body.endsWith('data: [DONE]\n\n')).toBe(true);

    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'sim-model')).toBe(true);
    expect(chunks[0]!.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);

    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' });
    const content = chunks.slice(1, -1);
    expect(content).toHaveLength(5);
    expect(content.slice(0, -1).every((c) => c.choices[0]!.finish_reason === null && !('stop_reason' in c.choices[0]!))).toBe(true);
    expect(content.at(-1)!.choices[0]!.finish_reason).toBe('length');
    expect(content.at(-1)!.choices[0]!.stop_reason).toBeNull();

    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage!.completion_tokens).toBe(5);
    expect(usage.usage!.total_tokens).toBe(usage.usage!.prompt_tokens + 5);
    // vLLM puts no usage key on the other chunks
    expect(chunks.slice(0, -1).some((c) => 'usage' in c)).toBe(false);
  });

  it('sends no usage chunk unless asked', async () => {
    const res = await chat({ stream: true, max_tokens: 3, ignore_eos: true });
    const events = sseData(res.body);
    expect(events.some((e) => e.includes('"choices":[]'))).toBe(false);
    expect(events).toHaveLength(1 + 3 + 1);
  });

  it('streams the same text the non-streamed answer has for the same seed', async () => {
    const streamed = await chat({ stream: true, max_tokens: 12, seed: 9 });
    const text = sseData(streamed.body)
      .slice(0, -1)
      .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta.content ?? '')
      .join('');
    const whole = await chat({ max_tokens: 12, seed: 9 });
    const body = JSON.parse(whole.body) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]!.message.content).toBe(text);
  });

  it('interleaves n choices, each with its own role chunk and one finish chunk', async () => {
    const res = await chat({ stream: true, n: 3, max_tokens: 4, seed: 5 });
    const chunks = sseData(res.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e) as Chunk);
    for (const index of [0, 1, 2]) {
      const mine = chunks.filter((c) => c.choices[0]!.index === index);
      expect(mine[0]!.choices[0]!.delta.role).toBe('assistant');
      expect(mine.filter((c) => c.choices[0]!.finish_reason !== null)).toHaveLength(1);
      expect(mine.at(-1)!.choices[0]!.finish_reason).not.toBeNull();
    }
    expect(chunks.slice(0, 3).map((c) => c.choices[0]!.index)).toEqual([0, 1, 2]);
  });

  it('returns the non-streamed shape of vLLM, nulls included', async () => {
    const res = await chat({ max_tokens: 3, ignore_eos: true, logprobs: true, top_logprobs: 2 });
    expect(res.headers['content-type']).toBe('application/json');
    const body = JSON.parse(res.body) as Record<string, unknown> & { choices: Array<Record<string, unknown>> };
    expect(Object.keys(body)).toEqual(['id', 'object', 'created', 'model', 'choices', 'service_tier', 'system_fingerprint', 'usage', 'prompt_logprobs', 'kv_transfer_params']);
    const choice = body.choices[0]!;
    expect(choice.finish_reason).toBe('length');
    expect((choice.logprobs as { content: unknown[] }).content).toHaveLength(3);
    expect(body.usage).toMatchObject({ completion_tokens: 3, prompt_tokens_details: { cached_tokens: expect.any(Number) } });
  });

  it('ends a streamed answer at a stop string with stop_reason set', async () => {
    const whole = JSON.parse((await chat({ max_tokens: 20, ignore_eos: true, seed: 3 })).body) as { choices: Array<{ message: { content: string } }> };
    const text = whole.choices[0]!.message.content;
    const stop = text.split(' ')[5]!;
    const res = await chat({ stream: true, max_tokens: 20, ignore_eos: true, seed: 3, stop: [stop] });
    const chunks = sseData(res.body)
      .slice(0, -1)
      .map((e) => JSON.parse(e) as Chunk);
    const streamed = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(streamed).toBe(text.slice(0, text.indexOf(stop)));
    expect(chunks.at(-1)!.choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: stop });
  });

  it('writes base64 embeddings as float32 little-endian of the float vector', async () => {
    const b64 = JSON.parse((await rawRequest(`${sim.url}/v1/embeddings`, { body: { input: 'hello', encoding_format: 'base64' } })).body) as { data: Array<{ embedding: string }> };
    const floats = JSON.parse((await rawRequest(`${sim.url}/v1/embeddings`, { body: { input: 'hello' } })).body) as { data: Array<{ embedding: number[] }> };
    const bytes = Buffer.from(b64.data[0]!.embedding, 'base64');
    const decoded = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(decoded).toEqual(floats.data[0]!.embedding);
  });
});
