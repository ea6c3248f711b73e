import { describe, expect, it } from '@jest/globals';
import { ChoiceGenerator } from '../../src/sim/chat-generation.js';
import { parseChatRequest, type ChatJob } from '../../src/sim/chat-request.js';
import { RequestError } from '../../src/sim/request-checks.js';

const limits = { models: ['m'], maxModelLen: 200, outputTokens: { min: 4, max: 4 } };
const user = [{ role: 'user', content: 'hello' }];

function job(body: object): ChatJob {
  return parseChatRequest({ model: 'm', messages: user, ...body }, limits);
}

function runChoice(j: ChatJob, seed = 7, index = 0, outputTokens = limits.outputTokens): ChoiceGenerator {
  const choice = new ChoiceGenerator(j, index, seed, outputTokens);
  while (!choice.finished) choice.next();
  return choice;
}

describe('parseChatRequest (vLLM checks)', () => {
  it.each([
    [{ messages: [] }, 400, 'messages'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, 400, 'messages[0].role'],
    [{ messages: [{ role: 'user', content: [{ type: 'text', text: 3 }] }] }, 400, 'messages[0].content[0].text'],
    [{ model: 'nope' }, 404, 'model'],
    [{ max_tokens: 0 }, 400, 'max_tokens'],
    [{ n: 0 }, 400, 'n'],
    [{ top_logprobs: 21, logprobs: true }, 400, 'top_logprobs'],
    [{ top_logprobs: 2 }, 400, 'top_logprobs'],
    [{ stream_options: { include_usage: true } }, 400, 'stream_options'],
    [{ stop: [1] }, 400, 'stop'],
    [{ max_tokens: 190 }, 400, 'max_tokens'],
    [{ messages: [{ role: 'user', content: 'x'.repeat(1000) }] }, 400, 'input_tokens'],
    [{ min_tokens: 50, max_tokens: 10 }, 400, 'min_tokens'],
  ])('rejects %j with status %i and param %s', (body, status, param) => {
    try {
      job(body);
      throw new Error('expected a RequestError');
    } catch (err) {
      expect(err).toBeInstanceOf(RequestError);
      expect((err as RequestError).error.status).toBe(status);
      expect((err as RequestError).error.param).toBe(param);
    }
  });

  it('takes max_completion_tokens over max_tokens and defaults to the rest of the context', () => {
    expect(job({ max_tokens: 9, max_completion_tokens: 3 }).maxTokens).toBe(3);
    const j = job({});
    expect(j.maxTokens).toBe(200 - j.promptTokens);
  });

  it('turns on usage when stream_options is present without include_usage, as vLLM does', () => {
    expect(job({ stream: true, stream_options: {} }).includeUsage).toBe(true);
    expect(job({ stream: true, stream_options: { include_usage: false } }).includeUsage).toBe(false);
    expect(job({ stream: true }).includeUsage).toBe(false);
  });

  it('counts text parts of multimodal content and a fixed placeholder for other parts', () => {
    const parts = job({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }] });
    expect(parts.promptText).toContain('hello');
  });
});

describe('ChoiceGenerator', () => {
  it('gives the same text for the same seed and another for another seed', () => {
    const j = job({ ignore_eos: true, max_tokens: 12 });
    expect(runChoice(j, 1).text).toBe(runChoice(j, 1).text);
    expect(runChoice(j, 1).text).not.toBe(runChoice(j, 2).text);
    expect(runChoice(j, 1, 0).text).not.toBe(runChoice(j, 1, 1).text);
  });

  it('does not change the text when log-probs are requested', () => {
    const plain = runChoice(job({ ignore_eos: true, max_tokens: 12 }), 5).text;
    expect(runChoice(job({ ignore_eos: true, max_tokens: 12, logprobs: true, top_logprobs: 5 }), 5).text).toBe(plain);
  });

  it('ends at the natural EOS, at max_tokens, after min_tokens, or never with ignore_eos', () => {
    const natural = runChoice(job({ max_tokens: 10 }));
    expect([natural.tokens, natural.finishReason]).toEqual([4, 'stop']);
    const capped = runChoice(job({ max_tokens: 3 }));
    expect([capped.tokens, capped.finishReason]).toEqual([3, 'length']);
    const atLeast = runChoice(job({ max_tokens: 10, min_tokens: 7 }));
    expect([atLeast.tokens, atLeast.finishReason]).toEqual([7, 'stop']);
    const ignoring = runChoice(job({ max_tokens: 10, ignore_eos: true }));
    expect([ignoring.tokens, ignoring.finishReason]).toEqual([10, 'length']);
  });

  it('cuts the text before the first stop string and reports it as stop_reason', () => {
    const full = runChoice(job({ ignore_eos: true, max_tokens: 20 }), 11).text;
    const stop = full.split(' ')[6] ?? '';
    const stopped = runChoice(job({ ignore_eos: true, max_tokens: 20, stop }), 11);
    expect(stopped.text).toBe(full.slice(0, full.indexOf(stop)));
    expect(stopped.finishReason).toBe('stop');
    expect(stopped.stopReason).toBe(stop);
  });

  it('never releases streamed text that a stop string could still complete', () => {
    const full = runChoice(job({ ignore_eos: true, max_tokens: 20 }), 11).text;
    const stop = full.split(' ')[6] ?? '';
    const choice = new ChoiceGenerator(job({ ignore_eos: true, max_tokens: 20, stop }), 0, 11, limits.outputTokens);
    let streamed = '';
    while (!choice.finished) streamed += choice.next().delta;
    expect(streamed).toBe(choice.text);
    expect(streamed).not.toContain(stop);
  });

  it('gives one log-prob entry per token with top_logprobs alternatives, the chosen token first', () => {
    const choice = new ChoiceGenerator(job({ ignore_eos: true, max_tokens: 3, logprobs: true, top_logprobs: 4 }), 0, 3, limits.outputTokens);
    const step = choice.next();
    expect(step.logprobs).toHaveLength(1);
    const entry = step.logprobs[0]!;
    expect(entry.token).toBe(step.delta);
    expect(entry.bytes).toEqual([...Buffer.from(entry.token)]);
    expect(entry.top_logprobs).toHaveLength(4);
    expect(entry.top_logprobs[0]!.token).toBe(entry.token);
    const values = entry.top_logprobs.map((t) => t.logprob);
    expect([...values].sort((a, b) => b - a)).toEqual(values);
    expect(Math.max(...values)).toBeLessThanOrEqual(0);
  });
});
