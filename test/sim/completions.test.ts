/** `POST /v1/completions` through the official `openai` client and as raw vLLM bytes. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { countTokens } from '../../src/sim/text.js';
import { tokenize } from '../../src/sim/tokenizer.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
let client: OpenAI;

beforeAll(async () => {
  sim = await startTestSim({ model: ['base-sim'] });
  client = new OpenAI({ apiKey: 'unused', baseURL: `${sim.url}/v1`, maxRetries: 0 });
});
afterAll(() => sim.close());

const completions = (body: object): ReturnType<typeof rawRequest> => rawRequest(`${sim.url}/v1/completions`, { body: { model: 'base-sim', ...body } });

interface Chunk {
  id: string;
  object: string;
  choices: Array<{ index: number; text: string; logprobs: unknown; finish_reason: string | null; stop_reason: unknown }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
}

describe('completions with the openai client', () => {
  it('answers a prompt with vLLM’s text_completion body and consistent usage', async () => {
    const completion = await client.completions.create({ model: 'base-sim', prompt: 'Once upon a time', max_tokens: 5, seed: 3 });
    expect(completion.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(completion.object).toBe('text_completion');
    const choice = completion.choices[0]!;
    expect(choice.index).toBe(0);
    expect(choice.logprobs).toBeNull();
    expect(completion.usage!.prompt_tokens).toBe(countTokens('Once upon a time'));
    expect(completion.usage!.completion_tokens).toBe(choice.text.split(' ').length - 1);
    expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
  });

  it('streams text the client assembles into the non-streamed answer, usage last', async () => {
    const stream = await client.completions.create({ model: 'base-sim', prompt: 'Hello', max_tokens: 8, seed: 4, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    const finishes: string[] = [];
    for await (const chunk of stream) {
      expect(chunk.object).toBe('text_completion');
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) finishes.push(choice.finish_reason);
      }
    }
    expect(finishes).toHaveLength(1);
    const whole = await client.completions.create({ model: 'base-sim', prompt: 'Hello', max_tokens: 8, seed: 4 });
    expect(whole.choices[0]!.text).toBe(text);
    expect(usage?.completion_tokens).toBe(whole.usage!.completion_tokens);
  });

  it('gives one choice per prompt × n, indexed prompt-major, and counts each prompt once', async () => {
    const completion = await client.completions.create({ model: 'base-sim', prompt: ['first prompt', 'second one'], n: 2, max_tokens: 3, seed: 1 });
    expect(completion.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(new Set(completion.choices.map((c) => c.text)).size).toBe(4);
    expect(completion.usage!.prompt_tokens).toBe(countTokens('first prompt') + countTokens('second one'));
  });

  it('surfaces an unknown model as NotFoundError', async () => {
    await expect(client.completions.create({ model: 'nope', prompt: 'x' })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe('completions in vLLM’s exact shapes', () => {
  it('writes every field vLLM writes, nulls included, and defaults max_tokens to 16', async () => {
    const res = await completions({ prompt: 'abc', ignore_eos: true });
    const body = JSON.parse(res.body) as Record<string, unknown> & { choices: Array<Record<string, unknown>>; usage: { completion_tokens: number } };
    expect(Object.keys(body)).toEqual(['id', 'object', 'created', 'model', 'choices', 'service_tier', 'system_fingerprint', 'usage', 'kv_transfer_params']);
    expect(Object.keys(body.choices[0]!)).toEqual(['index', 'text', 'logprobs', 'finish_reason', 'stop_reason', 'prompt_logprobs']);
    expect(body.choices[0]!.finish_reason).toBe('length');
    expect(body.usage.completion_tokens).toBe(16);
  });

  it('streams data events with usage null, a usage chunk with empty choices, then [DONE]', async () => {
    const res = await completions({ prompt: 'abc', max_tokens: 4, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(chunks).toHaveLength(5);
    expect(chunks.slice(0, 4).every((c) => c.usage === null && c.choices.length === 1 && c.object === 'text_completion')).toBe(true);
    expect(chunks[3]!.choices[0]).toMatchObject({ finish_reason: 'length', stop_reason: null });
    expect(chunks[4]!.choices).toEqual([]);
    expect(chunks[4]!.usage).toMatchObject({ completion_tokens: 4, total_tokens: chunks[4]!.usage!.prompt_tokens + 4 });
  });

  it('echoes the prompt in front of the text, in the first chunk when streaming', async () => {
    const plain = JSON.parse((await completions({ prompt: 'Echo me', max_tokens: 3, seed: 8 })).body) as { choices: Array<{ text: string }> };
    const echoed = JSON.parse((await completions({ prompt: 'Echo me', max_tokens: 3, seed: 8, echo: true })).body) as { choices: Array<{ text: string }> };
    expect(echoed.choices[0]!.text).toBe('Echo me' + plain.choices[0]!.text);
    const stream = await completions({ prompt: 'Echo me', max_tokens: 3, seed: 8, echo: true, stream: true });
    const texts = sseData(stream.body)
      .slice(0, -1)
      .map((e) => (JSON.parse(e) as Chunk).choices[0]!.text);
    expect(texts[0]!.startsWith('Echo me')).toBe(true);
    expect(texts.join('')).toBe(echoed.choices[0]!.text);
  });

  it('returns legacy logprobs whose tokens and offsets spell the text, echoed prompt tokens first', async () => {
    const res = await completions({ prompt: 'Tell me', max_tokens: 4, ignore_eos: true, logprobs: 2, echo: true, seed: 2 });
    const choice = (
      JSON.parse(res.body) as {
        choices: Array<{ text: string; logprobs: { tokens: string[]; token_logprobs: Array<number | null>; top_logprobs: Array<Record<string, number> | null>; text_offset: number[] } }>;
      }
    ).choices[0]!;
    const lp = choice.logprobs;
    expect(lp.tokens.join('')).toBe(choice.text);
    lp.text_offset.forEach((offset, i) => expect(choice.text.slice(offset, offset + lp.tokens[i]!.length)).toBe(lp.tokens[i]));
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
    const generated = lp.top_logprobs.slice(-4);
    generated.forEach((top, i) => {
      expect(Object.keys(top!)).toHaveLength(2);
      expect(top![lp.tokens.at(-4 + i)!]).toBe(lp.token_logprobs.at(-4 + i));
    });
  });

  it('takes token ids as the prompt, one list or several', async () => {
    const ids = tokenize('Token prompt');
    const one = JSON.parse((await completions({ prompt: ids, max_tokens: 2, echo: true })).body) as { choices: Array<{ text: string }>; usage: { prompt_tokens: number } };
    expect(one.choices[0]!.text.startsWith('Token prompt')).toBe(true);
    expect(one.usage.prompt_tokens).toBe(ids.length);
    const two = JSON.parse((await completions({ prompt: [ids, [72, 105]], max_tokens: 2 })).body) as { choices: unknown[]; usage: { prompt_tokens: number } };
    expect(two.choices).toHaveLength(2);
    expect(two.usage.prompt_tokens).toBe(ids.length + 2);
  });

  it.each([
    [{ prompt: 'x', suffix: 'tail' }, 400, null],
    [{ prompt: '' }, 400, 'prompt'],
    [{ prompt: [] }, 400, 'prompt'],
    [{ prompt: [1, -1] }, 400, 'prompt'],
    [{ prompt: ['ok', 3] }, 400, 'prompt[1]'],
    [{ prompt: 'x', logprobs: 21 }, 400, 'logprobs'],
    [{ prompt: 'x', max_tokens: 9000 }, 400, 'max_tokens'],
    [{ prompt: 'x', stream_options: {} }, 400, 'stream_options'],
    [{ prompt: 'x', model: 'other' }, 404, 'model'],
  ])('refuses %j like vLLM', async (body, status, param) => {
    const res = await completions(body);
    expect(res.status).toBe(status);
    expect((JSON.parse(res.body) as { error: { param: string | null; code: number } }).error).toMatchObject({ param, code: status });
  });
});

describe('a batch of many prompts', () => {
  it('is read without a stack overflow (Math.min over 150,000 prompts answered 500)', async () => {
    const res = await completions({ prompt: Array.from({ length: 150_000 }, () => 'a'), max_tokens: 1, min_tokens: 2 });
    // min_tokens over the smallest max_tokens: vLLM's 400, reached only once every prompt was read
    expect(res.status).toBe(400);
    expect(res.body).toContain('min_tokens must be less than or equal to max_tokens=1');
  });
});
