/**
 * The Vercel AI SDK through the router, as an app built on it is configured (a provider's baseURL and
 * apiKey, nothing else): its OpenAI provider's default model speaks the Responses API, `.chat()` chat
 * completions, `.completion()` completions; its Anthropic provider speaks the Messages API with the key
 * as x-api-key. generateText and streamText on each, plus embed.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { embed, generateText, streamText, type LanguageModel } from 'ai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;
let openai: ReturnType<typeof createOpenAI>;
let anthropic: ReturnType<typeof createAnthropic>;

beforeAll(async () => {
  sims = await Promise.all([startTestSim({ model: ['meta/llama'] }), startTestSim({ model: ['meta/llama'] }), startTestSim({ model: ['bge'], embeddingDim: 16 })]);
  gateway = await startTestRouter({
    pools: [
      { name: 'llama', servedModelName: 'meta/llama', capabilities: ['chat', 'completions', 'responses', 'messages'], endpoints: [sims[0]?.url, sims[1]?.url] },
      { name: 'bge', servedModelName: 'bge', capabilities: ['embeddings'], endpoints: [sims[2]?.url] },
    ],
    deployments: [
      { id: 'llama-prod', model: 'llama', targets: [{ pool: 'llama' }] },
      { id: 'bge-prod', model: 'text-embedding-3-small', targets: [{ pool: 'bge' }] },
    ],
  });
  openai = createOpenAI({ baseURL: `${gateway.router.apiUrl}/v1`, apiKey: KEY });
  anthropic = createAnthropic({ baseURL: `${gateway.router.apiUrl}/v1`, apiKey: KEY });
});
afterAll(async () => {
  await gateway.close();
  await Promise.all(sims.map((s) => s.close()));
});

const routeCount = async (route: string): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_requests_total', { route, code: '200' });

describe('Vercel AI SDK through the router', () => {
  it.each<[string, () => LanguageModel, string]>([
    ['openai (Responses API, the default)', () => openai('llama'), 'responses'],
    ['openai.chat', () => openai.chat('llama'), 'chat'],
    ['openai.completion', () => openai.completion('llama'), 'completions'],
    ['anthropic (Messages API)', () => anthropic('llama'), 'messages'],
  ])('%s: generateText, then streamText', async (_case, model, route) => {
    const before = await routeCount(route);
    const generated = await generateText({ model: model(), prompt: 'Say something', maxOutputTokens: 6, maxRetries: 0 });
    expect(generated.text).toMatch(/\w/);
    expect(generated.usage.inputTokens).toBeGreaterThan(0);

    const streamed = streamText({ model: model(), prompt: 'Stream something', maxOutputTokens: 6, maxRetries: 0 });
    let text = '';
    for await (const delta of streamed.textStream) text += delta;
    expect(text).toMatch(/\w/);
    expect((await streamed.usage).outputTokens).toBeGreaterThan(0);
    expect((await routeCount(route)) - before).toBe(2);
  });

  it('embed', async () => {
    const { embedding } = await embed({ model: openai.embedding('text-embedding-3-small'), value: 'hello', maxRetries: 0 });
    expect(embedding).toHaveLength(16);
  });
});
