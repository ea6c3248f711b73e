/** completionReserve: the completion tokens a request may produce, as the limits hold them at admission. */
import { describe, expect, it } from '@jest/globals';
import { completionReserve } from '../../src/server/inference.js';

const body = (fields: Record<string, unknown>) => ({ model: 'm', ...fields });

describe('completionReserve', () => {
  it("reads each API's own maximum: chat's max_completion_tokens before its max_tokens, responses' max_output_tokens, messages' max_tokens", () => {
    expect(completionReserve('chat', body({ max_tokens: 100 }))).toBe(100);
    expect(completionReserve('chat', body({ max_completion_tokens: 40, max_tokens: 100 }))).toBe(40);
    expect(completionReserve('completions', body({ prompt: 'x', max_tokens: 16 }))).toBe(16);
    expect(completionReserve('responses', body({ input: 'x', max_output_tokens: 300, max_tokens: 5 }))).toBe(300);
    expect(completionReserve('messages', body({ max_tokens: 64 }))).toBe(64);
  });

  it('multiplies by the choices: n, and each prompt of a completions request', () => {
    expect(completionReserve('chat', body({ max_tokens: 100, n: 3 }))).toBe(300);
    expect(completionReserve('completions', body({ prompt: ['a', 'b'], max_tokens: 10, n: 2 }))).toBe(40);
    expect(completionReserve('completions', body({ prompt: [[1, 2], [3]], max_tokens: 10 }))).toBe(20);
    // one prompt of token ids is one prompt
    expect(completionReserve('completions', body({ prompt: [1, 2, 3], max_tokens: 10 }))).toBe(10);
  });

  it('reserves at most a billion tokens, whatever integer the client sends (1e20 would not be one to Redis)', () => {
    expect(completionReserve('chat', body({ max_tokens: 1e20 }))).toBe(1_000_000_000);
    expect(completionReserve('chat', body({ max_tokens: 600_000_000, n: 2 }))).toBe(1_000_000_000);
  });

  it('reserves nothing when the request sets no maximum, sets it to null, or its API produces no completion', () => {
    expect(completionReserve('chat', body({}))).toBe(0);
    expect(completionReserve('chat', body({ max_tokens: null, max_completion_tokens: null }))).toBe(0);
    expect(completionReserve('embeddings', body({ input: 'x', max_tokens: 50 }))).toBe(0);
    expect(completionReserve('rerank', body({ query: 'q', documents: [] }))).toBe(0);
  });
});
