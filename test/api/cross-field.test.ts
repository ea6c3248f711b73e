/** Rules across fields: each passes the bodies it should, and rejects a breach as INVALID_REQUEST naming the field to fix. */
import { describe, expect, it } from '@jest/globals';
import { chatCrossField, completionsCrossField, messagesCrossField, responsesCrossField, tokenizeCrossField } from '../../src/api/cross-field.js';
import { RouterError } from '../../src/core/errors.js';

type Check = (body: Record<string, unknown>) => void;

/** The RouterError `check` throws for `body` (fails the test when it throws none). */
function rejection(check: Check, body: Record<string, unknown>): RouterError {
  try {
    check(body);
  } catch (err) {
    expect(err).toBeInstanceOf(RouterError);
    return err as RouterError;
  }
  throw new Error(`expected ${JSON.stringify(body)} to be rejected`);
}

const weather = { name: 'get_weather', input_schema: { type: 'object' } };

describe('cross-field rules', () => {
  it.each<[string, Check, Record<string, unknown>]>([
    ['chat: top_logprobs with logprobs', chatCrossField, { top_logprobs: 5, logprobs: true }],
    ['chat: top_logprobs 0 or null alone', chatCrossField, { top_logprobs: 0, logprobs: null }],
    ['chat: neither', chatCrossField, {}],
    ['completions: best_of equal to n', completionsCrossField, { best_of: 2, n: 2 }],
    ['completions: best_of above n', completionsCrossField, { best_of: 5, n: 2 }],
    ['completions: best_of without n', completionsCrossField, { best_of: 3 }],
    ['completions: n with best_of null', completionsCrossField, { n: 4, best_of: null }],
    ['completions: best_of below n (vLLM ignores best_of)', completionsCrossField, { best_of: 1, n: 3 }],
    ['tokenize: prompt and messages (the engine picks one form)', tokenizeCrossField, { prompt: 'x', messages: [{ role: 'user', content: 'x' }] }],
    ['completions: stream_options when streaming', completionsCrossField, { stream: true, stream_options: { include_usage: true } }],
    ['completions: an empty stream_options without stream (vLLM lets it pass)', completionsCrossField, { stream_options: {} }],
    ['completions: null stream_options', completionsCrossField, { stream: false, stream_options: null }],
    ['responses: background with store', responsesCrossField, { background: true, store: true }],
    ['responses: background with store unset (true by default)', responsesCrossField, { background: true }],
    ['responses: store false in the foreground', responsesCrossField, { background: false, store: false }],
    ['messages: tool_choice naming a defined tool', messagesCrossField, { tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' } }],
    ['messages: tool_choice auto without tools', messagesCrossField, { tool_choice: { type: 'auto' } }],
    ['messages: no tool_choice', messagesCrossField, { tools: [weather] }],
    ['tokenize: a prompt', tokenizeCrossField, { prompt: 'Hello', add_special_tokens: true }],
    ['tokenize: a chat continuing its last message', tokenizeCrossField, { messages: [], continue_final_message: true }],
    ['tokenize: a chat with a generation prompt', tokenizeCrossField, { messages: [], add_generation_prompt: true, continue_final_message: false }],
  ])('passes %s', (_name, check, body) => {
    expect(() => check(body)).not.toThrow();
  });

  it.each<[string, Check, Record<string, unknown>, string, RegExp]>([
    ['chat: top_logprobs without logprobs', chatCrossField, { top_logprobs: 3 }, 'top_logprobs', /top_logprobs is only allowed when logprobs is true/],
    ['chat: top_logprobs with logprobs false', chatCrossField, { top_logprobs: 3, logprobs: false }, 'top_logprobs', /logprobs is true/],
    ['completions: stream_options without stream', completionsCrossField, { stream_options: { include_usage: true } }, 'stream_options', /only allowed when stream is true/],
    ['completions: stream_options with stream false', completionsCrossField, { stream: false, stream_options: { include_usage: true } }, 'stream_options', /stream is true/],
    ['responses: background with store false', responsesCrossField, { background: true, store: false }, 'background', /background is only allowed when store is true/],
    [
      'messages: tool_choice naming an undefined tool',
      messagesCrossField,
      { tools: [weather], tool_choice: { type: 'tool', name: 'get_time' } },
      'tool_choice.name',
      /"get_time", which tools does not define/,
    ],
    ['messages: tool_choice naming a tool with no tools', messagesCrossField, { tool_choice: { type: 'tool', name: 'get_time' } }, 'tool_choice.name', /tools does not define/],
    ['tokenize: continue and a generation prompt', tokenizeCrossField, { messages: [], continue_final_message: true, add_generation_prompt: true }, 'continue_final_message', /cannot both be true/],
  ])('rejects %s', (_name, check, body, param, message) => {
    const err = rejection(check, body);
    expect(err.code).toBe('INVALID_REQUEST');
    expect(err.status).toBe(400);
    expect(err.param).toBe(param);
    expect(err.message).toMatch(message);
  });
});
