import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ChoiceGenerator, type GenerationParams } from '../../src/sim/chat-generation.js';
import { parseChatRequest } from '../../src/sim/chat-request.js';
import { completionParams, parseCompletionRequest } from '../../src/sim/completions-request.js';
import { RequestError } from '../../src/sim/request-checks.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

const outputTokens = { min: 12, max: 12 };
const limits = { models: ['m'], maxModelLen: 500, outputTokens };
const user = { role: 'user', content: 'Tell me a story' };

/** Runs a choice to its end and returns its text, token count and finish reason. */
function run(params: GenerationParams, seed: number): { text: string; tokens: number; finish: string | null; pieces: string[] } {
  const choice = new ChoiceGenerator(params, 0, seed, outputTokens);
  const pieces: string[] = [];
  while (!choice.finished) {
    const step = choice.next();
    if (step.delta !== '') pieces.push(step.delta);
  }
  return { text: choice.text, tokens: choice.tokens, finish: choice.finishReason, pieces };
}

describe('continuing an answer (continue_final_message, an extended completions prompt)', () => {
  const full = parseChatRequest({ model: 'm', messages: [user], seed: 9 }, limits);
  const whole = run(full, 9);

  it.each([1, 5, 11])('chat: after %i delivered tokens, the rest of the same text, the same natural end, and the delivered tokens counted as prompt', (k) => {
    const delivered = whole.pieces.slice(0, k).join('');
    const job = parseChatRequest({ model: 'm', messages: [user, { role: 'assistant', content: delivered }], continue_final_message: true, add_generation_prompt: false, seed: 9 }, limits);
    const rest = run(job, 9);
    expect(delivered + rest.text).toBe(whole.text);
    expect([rest.tokens, rest.finish]).toEqual([whole.tokens - k, 'stop']);
    expect(job.promptTokens).toBe(full.promptTokens + k);
  });

  it('chat: a reduced max_tokens still ends where the uninterrupted run would', () => {
    const capped = run(parseChatRequest({ model: 'm', messages: [user], seed: 9, max_tokens: 7 }, limits), 9);
    const delivered = whole.pieces.slice(0, 3).join('');
    const job = parseChatRequest(
      { model: 'm', messages: [user, { role: 'assistant', content: delivered }], continue_final_message: true, add_generation_prompt: false, seed: 9, max_tokens: 4 },
      limits,
    );
    const rest = run(job, 9);
    expect([delivered + rest.text, rest.finish]).toEqual([capped.text, 'length']);
  });

  it('chat: an assistant prefix the seed would not produce starts a new answer after it (no resume point)', () => {
    const job = parseChatRequest({ model: 'm', messages: [user, { role: 'assistant', content: 'Sure,' }], continue_final_message: true, add_generation_prompt: false, seed: 9 }, limits);
    expect(job.resume).toBeUndefined();
    expect(job.promptText.endsWith('<|im_start|>assistant\nSure,')).toBe(true);
    expect(run(job, 9).tokens).toBe(12);
  });

  it.each([
    [{ continue_final_message: true }, /Cannot set both/],
    [{ continue_final_message: true, add_generation_prompt: false, messages: [user] }, /final message to be an assistant/],
  ])('chat: refuses %j as vLLM does', (extra, message) => {
    try {
      parseChatRequest({ model: 'm', messages: [user, { role: 'assistant', content: 'x' }], ...extra }, limits);
      throw new Error('expected a RequestError');
    } catch (err) {
      expect(err).toBeInstanceOf(RequestError);
      expect((err as RequestError).error.param).toBe('continue_final_message');
      expect((err as RequestError).message).toMatch(message);
    }
  });

  it('completions: a seeded prompt ending with the start of its answer goes on with the rest of it', () => {
    const original = parseCompletionRequest({ model: 'm', prompt: 'Once upon a time', seed: 4, max_tokens: 12, ignore_eos: true }, limits);
    const prompt = original.prompts[0]!;
    const answer = run(completionParams(original, prompt), 4);
    const delivered = answer.pieces.slice(0, 4).join('');
    const resumed = parseCompletionRequest({ model: 'm', prompt: `Once upon a time${delivered}`, seed: 4, max_tokens: 8, ignore_eos: true }, limits);
    const continued = resumed.prompts[0]!;
    expect(continued.tokens).toBe(prompt.tokens + 4);
    const rest = run(completionParams(resumed, continued), 4);
    expect([delivered + rest.text, rest.tokens]).toEqual([answer.text, 8]);
    // without a seed nothing is recognised: the prompt counts as text
    expect(parseCompletionRequest({ model: 'm', prompt: `Once upon a time${delivered}` }, limits).prompts[0]?.resume).toBeUndefined();
  });

  describe('over HTTP', () => {
    let sim: SimServer;
    beforeAll(async () => {
      sim = await startTestSim({ model: ['m'], outputMin: 12, outputMax: 12 });
    });
    afterAll(() => sim.close());

    it('answers only the continuation, with usage counting the continued text as prompt', async () => {
      const post = async (body: object): Promise<Record<string, unknown>> =>
        JSON.parse((await rawRequest(`${sim.url}/v1/chat/completions`, { body: JSON.stringify(body) })).body) as Record<string, unknown>;
      const content = (r: Record<string, unknown>): string => ((r.choices as Array<{ message: { content: string } }>)[0] as { message: { content: string } }).message.content;
      const first = await post({ model: 'm', messages: [user], seed: 21 });
      const text = content(first);
      const delivered = text.split(' ').slice(0, 4).join(' '); // the leading space and three words
      const rest = await post({ model: 'm', messages: [user, { role: 'assistant', content: delivered }], continue_final_message: true, add_generation_prompt: false, seed: 21 });
      expect(delivered + content(rest)).toBe(text);
      const [a, b] = [first.usage, rest.usage] as Array<{ prompt_tokens: number; completion_tokens: number }>;
      expect([b?.prompt_tokens, b?.completion_tokens]).toEqual([(a?.prompt_tokens ?? 0) + 3, (a?.completion_tokens ?? 0) - 3]);
    });
  });
});
