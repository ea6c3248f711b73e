/** The simulator driven by the official `openai` client, as every router test will use it. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
let client: OpenAI;

beforeAll(async () => {
  sim = await startTestSim({ model: ['llama-sim', 'embed-sim'], embeddingDim: 64 });
  client = new OpenAI({ apiKey: 'unused', baseURL: `${sim.url}/v1`, maxRetries: 0 });
});
afterAll(() => sim.close());

describe('simulator with the openai client', () => {
  it('answers a chat completion with consistent usage', async () => {
    const completion = await client.chat.completions.create({
      model: 'llama-sim',
      messages: [{ role: 'user', content: 'Say something.' }],
      max_completion_tokens: 6,
      seed: 42,
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('llama-sim');
    const choice = completion.choices[0]!;
    expect(choice.message.role).toBe('assistant');
    expect(typeof choice.message.content).toBe('string');
    const usage = completion.usage!;
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
    expect(usage.completion_tokens).toBe((choice.message.content ?? '').split(' ').length - 1);
    expect(usage.completion_tokens).toBeLessThanOrEqual(6);
  });

  it('streams chunks the client assembles, with the usage chunk last when asked', async () => {
    const stream = await client.chat.completions.create({
      model: 'llama-sim',
      messages: [{ role: 'user', content: 'Stream please.' }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 10,
      seed: 42,
    });
    let text = '';
    const finishReasons: string[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks += 1;
      expect(chunk.object).toBe('chat.completion.chunk');
      if (chunk.choices.length === 0) usage = chunk.usage;
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? '';
        if (choice.finish_reason) finishReasons.push(choice.finish_reason);
      }
    }
    expect(chunks).toBeGreaterThan(2);
    expect(finishReasons).toHaveLength(1);
    expect(usage?.completion_tokens).toBe(text.split(' ').length - 1);
    expect(usage?.total_tokens).toBe((usage?.prompt_tokens ?? 0) + (usage?.completion_tokens ?? 0));

    const same = await client.chat.completions.create({
      model: 'llama-sim',
      messages: [{ role: 'user', content: 'Stream please.' }],
      max_tokens: 10,
      seed: 42,
    });
    expect(same.choices[0]!.message.content).toBe(text);
  });

  it('returns embeddings through the default base64 path equal to explicit floats', async () => {
    const viaBase64 = await client.embeddings.create({ model: 'embed-sim', input: ['first text', 'second text'] });
    const viaFloat = await client.embeddings.create({ model: 'embed-sim', input: ['first text', 'second text'], encoding_format: 'float' });
    expect(viaBase64.data).toHaveLength(2);
    expect(viaBase64.data.map((d) => d.index)).toEqual([0, 1]);
    expect(viaBase64.data[0]!.embedding).toHaveLength(64);
    expect(viaBase64.data.map((d) => d.embedding)).toEqual(viaFloat.data.map((d) => d.embedding));
    expect(viaBase64.usage.total_tokens).toBe(viaBase64.usage.prompt_tokens);
  });

  it('embeds token-id input, one list or a batch of lists', async () => {
    const one = await client.embeddings.create({ model: 'embed-sim', input: [101, 2023, 2003] });
    const batch = await client.embeddings.create({
      model: 'embed-sim',
      input: [
        [101, 2023, 2003],
        [7, 8],
      ],
    });
    expect(one.data).toHaveLength(1);
    expect(batch.data).toHaveLength(2);
    expect(batch.data[0]!.embedding).toEqual(one.data[0]!.embedding);
    expect(batch.usage.prompt_tokens).toBe(5);
  });

  it('honours dimensions', async () => {
    const result = await client.embeddings.create({ model: 'embed-sim', input: 'x', dimensions: 16 });
    const vector = result.data[0]!.embedding;
    expect(vector).toHaveLength(16);
    expect(Math.hypot(...vector)).toBeCloseTo(1, 5);
  });

  it('surfaces an unknown model as the client NotFoundError with vLLM fields', async () => {
    const failure = client.chat.completions.create({ model: 'gpt-nope', messages: [{ role: 'user', content: 'hi' }] });
    await expect(failure).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await failure.catch((err: InstanceType<typeof OpenAI.APIError>) => {
      expect(err.status).toBe(404);
      expect(err.param).toBe('model');
      expect(err.type).toBe('NotFoundError');
    });
  });

  it('lists its served models', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['llama-sim', 'embed-sim']);
    expect(models.data[0]!.owned_by).toBe('vllm');
  });
});
