/** The official openai client works through the router by changing only its base URL. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

let chatSims: SimServer[];
let embedSim: SimServer;
let gateway: TestRouter<RunningRouter>;
let client: OpenAI;

beforeAll(async () => {
  chatSims = await Promise.all([startTestSim({ model: ['meta/llama'] }), startTestSim({ model: ['meta/llama'] })]);
  embedSim = await startTestSim({ model: ['bge'], embeddingDim: 32 });
  gateway = await startTestRouter({
    pools: [
      { name: 'llama', servedModelName: 'meta/llama', capabilities: ['chat'], endpoints: chatSims.map((s) => s.url) },
      { name: 'bge', servedModelName: 'bge', capabilities: ['embeddings'], endpoints: [embedSim.url] },
    ],
    deployments: [
      { id: 'llama-prod', model: 'llama-3.1-8b', aliases: ['default'], targets: [{ pool: 'llama' }] },
      { id: 'bge-prod', model: 'bge-small', aliases: ['text-embedding-3-small'], targets: [{ pool: 'bge' }] },
    ],
  });
  client = new OpenAI({ apiKey: KEY, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gateway.close();
  await Promise.all([...chatSims, embedSim].map((s) => s.close()));
});

describe('openai client through the router', () => {
  it('completes a chat by model name, alias and deployment ID', async () => {
    for (const model of ['llama-3.1-8b', 'default', 'llama-prod']) {
      const completion = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
      expect(completion.choices[0]!.message.content).toMatch(/\w/);
      expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
    }
  });

  it('streams with include_usage: deltas, one finish per choice, then usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'default',
      messages: [{ role: 'user', content: 'stream' }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 6,
      seed: 4,
    });
    let text = '';
    let finishes = 0;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      if (chunk.choices.length === 0) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        if (c.finish_reason) finishes++;
      }
    }
    expect(finishes).toBe(1);
    expect(usage?.completion_tokens).toBe(text.split(' ').length - 1);
  });

  it('returns n > 1 choices, streamed and not', async () => {
    const whole = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }], n: 3, max_tokens: 3 });
    expect(whole.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const stream = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }], n: 2, max_tokens: 3, stream: true });
    const finished = new Set<number>();
    for await (const chunk of stream) for (const c of chunk.choices) if (c.finish_reason) finished.add(c.index);
    expect([...finished].sort()).toEqual([0, 1]);
  });

  it('embeds with the default base64 encoding and with floats, identically', async () => {
    const viaBase64 = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b'] });
    const viaFloat = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b'], encoding_format: 'float' });
    expect(viaBase64.data[0]!.embedding).toHaveLength(32);
    expect(viaBase64.data.map((d) => d.embedding)).toEqual(viaFloat.data.map((d) => d.embedding));
  });

  it('embeds token-id input', async () => {
    const result = await client.embeddings.create({ model: 'bge-small', input: [[1, 2, 3], [4]] });
    expect(result.data).toHaveLength(2);
    expect(result.usage.prompt_tokens).toBe(4);
  });

  it('surfaces router errors as the client’s error classes with OpenAI codes', async () => {
    const missing = await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.APIError>).code).toBe('model_not_found');
    expect((missing as InstanceType<typeof OpenAI.APIError>).requestID).toMatch(/\S/);
    const wrongKey = new OpenAI({ apiKey: 'sk-wrong-key-000', baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
    await expect(wrongKey.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    const invalid = await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }], top_logprobs: 50, logprobs: true }).catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect((invalid as InstanceType<typeof OpenAI.APIError>).param).toBe('top_logprobs');
  });

  it('lists the callable names', async () => {
    const ids = (await client.models.list()).data.map((m) => m.id).sort();
    expect(ids).toEqual(['bge-prod', 'bge-small', 'default', 'llama-3.1-8b', 'llama-prod', 'text-embedding-3-small']);
  });
});
