import { describe, expect, it } from '@jest/globals';
import { apiRoute } from '../../src/api/routes.js';
import { type ApiName } from '../../src/core/types.js';

const limitOf = (api: ApiName, body: Record<string, unknown>): number | undefined => apiRoute(api).completionLimit?.({ model: 'm', ...body });

describe('the completion tokens an honest answer may report, per API', () => {
  it.each([
    // chat: the larger of max_completion_tokens and max_tokens (engines differ on which wins), per choice
    ['chat', { max_tokens: 5 }, 5],
    ['chat', { max_completion_tokens: 5 }, 5],
    ['chat', { max_tokens: 9, max_completion_tokens: 5 }, 9],
    ['chat', { max_tokens: 5, max_completion_tokens: 9 }, 9],
    ['chat', { max_tokens: 5, n: 3 }, 15],
    ['chat', { max_tokens: null, max_completion_tokens: 4 }, 4],
    ['chat', {}, undefined],
    ['chat', { max_tokens: null }, undefined],
    ['chat', { n: 4 }, undefined],
    // completions: max_tokens per choice per prompt, best_of's discarded sequences too
    ['completions', { prompt: 'p', max_tokens: 16 }, 16],
    ['completions', { prompt: ['a', 'b', 'c'], max_tokens: 10, n: 2 }, 60],
    ['completions', { prompt: [[1, 2], [3]], max_tokens: 10 }, 20],
    ['completions', { prompt: [1, 2, 3], max_tokens: 10 }, 10],
    ['completions', { prompt: 'p', max_tokens: 10, n: 2, best_of: 4 }, 80],
    ['completions', { prompt: 'p', max_tokens: 0 }, 0],
    // none: engines' defaults differ, null is up to the context, an echoed prompt may count
    ['completions', { prompt: 'p' }, undefined],
    ['completions', { prompt: 'p', max_tokens: null }, undefined],
    ['completions', { prompt: 'p', max_tokens: 10, echo: true }, undefined],
    ['completions', { prompt: 'p', max_tokens: 10, echo: false }, 10],
    // responses: max_output_tokens, unless a built-in tool may make the engine generate several turns
    ['responses', { input: 'hi', max_output_tokens: 100 }, 100],
    ['responses', { input: 'hi', max_output_tokens: 100, tools: [{ type: 'function', name: 'f' }] }, 100],
    ['responses', { input: 'hi', max_output_tokens: 100, tools: [{ type: 'function', name: 'f' }, { type: 'web_search_preview' }] }, undefined],
    ['responses', { input: 'hi', max_output_tokens: 100, tools: [{ type: 'mcp', server_label: 's' }] }, undefined],
    ['responses', { input: 'hi' }, undefined],
    // messages: max_tokens, required
    ['messages', { max_tokens: 1024, messages: [] }, 1024],
    // no completion to bound
    ['embeddings', { input: 'x' }, undefined],
    ['transcriptions', {}, undefined],
  ] as const)('%s %j → %s', (api, body, limit) => {
    expect(limitOf(api, body)).toBe(limit);
  });
});
