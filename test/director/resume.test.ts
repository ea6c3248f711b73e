import { describe, expect, it } from '@jest/globals';
import { type ValidRequest } from '../../src/api/validate.js';
import { MAX_RESUMPTIONS, requestRefusal, StreamSplice } from '../../src/director/resume.js';
import { SseTap } from '../../src/proxy/sse-tap.js';

/** Feeds SSE text through a tap and the splice's rewrite; returns what the client gets. */
function relay(splice: StreamSplice, text: string): string {
  return new SseTap()
    .segments(text)
    .map((s) => splice.rewrite(s))
    .join('');
}

const chunk = (id: string, delta: object, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: id === 'a' ? 100 : 200, model: `m-${id}`, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
const usage = (id: string, prompt: number, completion: number): string =>
  `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 200, model: `m-${id}`, choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: prompt } } })}\n\n`;

function events(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);
}

describe('requestRefusal', () => {
  it.each([
    ['chat', { messages: [], stream: true }, undefined],
    ['chat', { messages: [], n: 2 }, 'n'],
    ['chat', { messages: [], extra_body: { use_beam_search: true } }, 'n'],
    ['chat', { messages: [], tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
    ['chat', { messages: [], tools: [] }, undefined],
    ['chat', { messages: [], logprobs: true }, 'logprobs'],
    ['chat', { messages: [], logprobs: false }, undefined],
    ['chat', { messages: [], top_logprobs: 0 }, undefined],
    ['chat', { messages: [], logprobs: false, top_logprobs: 0 }, undefined],
    ['chat', { messages: [], extra_body: { top_logprobs: 0 } }, undefined],
    ['chat', { messages: [], logprobs: true, top_logprobs: 0 }, 'logprobs'],
    ['chat', { messages: [], logprobs: true, top_logprobs: 3 }, 'logprobs'],
    ['chat', { messages: [], response_format: { type: 'json_object' } }, 'guided_decoding'],
    ['chat', { messages: [], response_format: { type: 'text' } }, undefined],
    ['chat', { messages: [], extra_body: { guided_regex: 'a+' } }, 'guided_decoding'],
    ['chat', { messages: [{ role: 'assistant', content: [{ type: 'text', text: 'x' }] }], continue_final_message: true }, 'prompt'],
    ['chat', { messages: [], echo: true }, 'prompt'],
    ['chat', { messages: [], extra_body: { echo: true } }, 'prompt'],
    ['chat', { messages: [], echo: false }, undefined],
    ['completions', { prompt: 'p' }, undefined],
    ['completions', { prompt: ['p', 'q'] }, 'prompt'],
    ['completions', { prompt: [1, 2] }, 'prompt'],
    ['completions', { prompt: 'p', echo: true }, 'prompt'],
    ['completions', { prompt: 'p', best_of: 3 }, 'n'],
    ['completions', { prompt: 'p', logprobs: 2 }, 'logprobs'],
    ['completions', { prompt: 'p', logprobs: 0 }, 'logprobs'],
  ] as const)('%s %j → %s', (api, body, reason) => {
    expect(requestRefusal(api, body as unknown as ValidRequest)).toBe(reason);
  });
});

const CHAT: ValidRequest = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true };

describe('StreamSplice', () => {
  it('passes the first attempt through byte for byte while it records the text and content events delivered', () => {
    const splice = new StreamSplice('chat', CHAT);
    const first = chunk('a', { role: 'assistant', content: '' }) + chunk('a', { content: ' one' }) + chunk('a', { content: ' two' });
    expect(relay(splice, first)).toBe(first);
    expect([splice.text, splice.tokens, splice.refusal()]).toEqual([' one two', 2, undefined]);
  });

  it('splices a continuation: the first id, created and model, no second role chunk, usage from the answer’s start, one [DONE]', () => {
    const splice = new StreamSplice('chat', CHAT);
    relay(splice, chunk('a', { role: 'assistant', content: '' }) + chunk('a', { content: ' one' }) + chunk('a', { content: ' two' }));
    splice.begin();
    splice.resumed();
    const out = relay(splice, chunk('b', { role: 'assistant', content: '' }) + chunk('b', { content: ' three' }) + chunk('b', {}, 'stop') + usage('b', 12, 2) + 'data: [DONE]\n\n');
    const sent = events(out);
    expect(sent.map((e) => [e.id, e.created, e.model])).toEqual([
      ['a', 100, 'm-a'],
      ['a', 100, 'm-a'],
      ['a', 100, 'm-a'],
    ]);
    expect(out).not.toContain('"role"');
    expect(out.match(/\[DONE\]/g)).toHaveLength(1);
    // the continuation's prompt held the 2 delivered tokens: the client's prompt is 10, its completion 2 + 2
    expect(sent[2]?.usage).toEqual({ prompt_tokens: 10, completion_tokens: 4, total_tokens: 14, prompt_tokens_details: { cached_tokens: 10 } });
    expect(splice.usage({ promptTokens: 12, completionTokens: 2 })).toEqual({ promptTokens: 10, completionTokens: 4 });
    expect(splice.text).toBe(' one two three');
    expect(splice.refusal()).toBe('finished');
  });

  it('passes a continuation’s role chunk to a client that got none (the first attempt broke before its first whole event), and only that one', () => {
    const splice = new StreamSplice('chat', CHAT);
    splice.begin();
    splice.resumed();
    const out = relay(splice, chunk('b', { role: 'assistant', content: '' }) + chunk('b', { content: ' one' }));
    expect(events(out).map((e) => (e.choices as Array<{ delta: object }>)[0]?.delta)).toEqual([{ role: 'assistant', content: '' }, { content: ' one' }]);
    splice.begin();
    splice.resumed();
    expect(relay(splice, chunk('c', { role: 'assistant', content: '' }) + chunk('c', { content: ' two' }))).not.toContain('"role"');
  });

  it('holds back an engine’s error event and the [DONE] after it, and says the stream was cut', () => {
    const splice = new StreamSplice('chat', CHAT);
    const out = relay(splice, chunk('a', { content: ' one' }) + 'data: {"error":{"message":"boom","code":500}}\n\ndata: [DONE]\n\n');
    expect(out).toBe(chunk('a', { content: ' one' }));
    expect(splice.errored).toBe(true);
  });

  it('holds back an error sent as an `error:` block (llama.cpp’s server_sent_event) as it does `data: {"error": …}`', () => {
    const splice = new StreamSplice('chat', CHAT);
    const out = relay(splice, chunk('a', { content: ' one' }) + 'error: {"code":500,"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error"}\n\ndata: [DONE]\n\n');
    expect(out).toBe(chunk('a', { content: ' one' }));
    expect(splice.errored).toBe(true);
  });

  it.each([
    ['vLLM’s 400 (a ValueError raised while it streams)', 'data: {"error": {"message": "bad thing in your request", "type": "BadRequestError", "param": null, "code": 400}}\n\n'],
    ['llama.cpp’s `error:` block with a 400', 'error: {"code":400,"message":"the request exceeds the available context size","type":"invalid_request_error"}\n\n'],
    ['a TGI-style validation error', 'data: {"error":"Input validation error","error_type":"validation"}\n\n'],
  ])('passes on an error event the request caused (4xx), %s, and the [DONE] after it: the stream is not cut', (_what, error) => {
    const splice = new StreamSplice('chat', CHAT);
    const out = relay(splice, chunk('a', { content: ' one' }) + error + 'data: [DONE]\n\n');
    expect(out).toBe(chunk('a', { content: ' one' }) + error + 'data: [DONE]\n\n');
    expect(splice.errored).toBe(false);
  });

  it.each([
    ['a 500', 'data: {"error": {"message": "boom", "type": "InternalServerError", "param": null, "code": 500}}\n\n'],
    ['a 429 (the replica is busy, not the request wrong)', 'data: {"error": {"message": "busy", "type": "rate_limit_error", "param": null, "code": 429}}\n\n'],
    ['one without a status', 'data: {"error": {"message": "boom"}}\n\n'],
    ['one that is not JSON', 'error: the engine fell over\n\n'],
  ])('holds back %s error event: the stream goes on elsewhere', (_what, error) => {
    const splice = new StreamSplice('chat', CHAT);
    expect(relay(splice, chunk('a', { content: ' one' }) + error + 'data: [DONE]\n\n')).toBe(chunk('a', { content: ' one' }));
    expect(splice.errored).toBe(true);
  });

  it.each([
    ['a tool call', { tool_calls: [{ index: 0, function: { name: 'f' } }] }, 'tools'],
    ['reasoning', { reasoning_content: 'hmm' }, 'reasoning'],
  ])('refuses an answer that streamed %s', (_what, delta, reason) => {
    const splice = new StreamSplice('chat', CHAT);
    relay(splice, chunk('a', delta));
    expect(splice.refusal()).toBe(reason);
  });

  it.each([
    ['chat', { max_tokens: 2 }, 2, 'finished'],
    ['chat', { max_tokens: 3 }, 2, undefined],
    ['chat', { extra_body: { max_tokens: 2 } }, 2, 'finished'],
    // vLLM reads max_completion_tokens first
    ['chat', { max_tokens: 2, max_completion_tokens: 3 }, 2, undefined],
    ['chat', { max_tokens: 3, max_completion_tokens: 2 }, 2, 'finished'],
    ['chat', {}, 40, undefined],
    ['completions', {}, 16, 'finished'],
    ['completions', {}, 15, undefined],
    ['completions', { max_tokens: 4 }, 4, 'finished'],
    // null: vLLM generates up to the context, not its default of 16
    ['completions', { max_tokens: null }, 16, undefined],
  ] as const)('refuses (finished) an answer that delivered every token its request allows, finish chunk or not: %s %j after %i content events → %s', (api, limits, events, reason) => {
    const body = api === 'chat' ? { ...CHAT, ...limits } : { model: 'm', prompt: 'Once', ...limits };
    const splice = new StreamSplice(api, body);
    const piece = (i: number): string =>
      api === 'chat'
        ? chunk('a', { content: ` t${i}` })
        : `data: ${JSON.stringify({ id: 'a', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: ` t${i}`, logprobs: null, finish_reason: null }] })}\n\n`;
    relay(splice, Array.from({ length: events }, (_, i) => piece(i)).join(''));
    expect(splice.refusal()).toBe(reason);
  });

  // an engine with continuous usage stats (usage in every chunk) that packs several tokens into one event:
  // counted one per event, a continuation asked for more than the client's max_tokens allowed
  const counted = (id: string, content: string, completion: number): string =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 100, model: 'm', choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }], usage: { prompt_tokens: 5, completion_tokens: completion, total_tokens: 5 + completion } })}\n\n`;

  it('counts the delivered tokens from the engine’s per-chunk usage, not one per event: the continuation’s max_tokens shrinks by them', () => {
    const splice = new StreamSplice('chat', { ...CHAT, max_tokens: 10 });
    relay(splice, counted('a', ' one two three', 3) + counted('a', ' four five', 5));
    expect(splice.tokens).toBe(5);
    const body = JSON.parse(splice.continuationBody(Buffer.from('{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}')).toString()) as Record<string, unknown>;
    expect(body.max_tokens).toBe(5);
    // the continuation's chunks count from its own start: 2 more make 7
    splice.begin();
    splice.resumed();
    relay(splice, counted('b', ' six seven', 2));
    expect(splice.tokens).toBe(7);
    expect(splice.usage({ promptTokens: 10, completionTokens: 2 })).toEqual({ promptTokens: 5, completionTokens: 7 });
  });

  it('refuses (finished) an answer whose per-chunk usage says it delivered every token allowed, in fewer events', () => {
    const splice = new StreamSplice('chat', { ...CHAT, max_tokens: 6 });
    relay(splice, counted('a', ' one two three', 3) + counted('a', ' four five six', 6));
    expect(splice.refusal()).toBe('finished');
  });

  it('never counts fewer tokens than content events, whatever a chunk’s usage says (and ignores a count that is no count)', () => {
    const splice = new StreamSplice('chat', CHAT);
    relay(splice, counted('a', ' one', 0) + counted('a', ' two', 1) + counted('a', ' three', 1.5) + counted('a', ' four', 2 ** 30));
    expect(splice.tokens).toBe(4);
  });

  it(`refuses after ${MAX_RESUMPTIONS} resumptions`, () => {
    const splice = new StreamSplice('chat', CHAT);
    for (let i = 0; i < MAX_RESUMPTIONS; i++) {
      expect(splice.refusal()).toBeUndefined();
      splice.begin();
      splice.resumed();
    }
    expect(splice.refusal()).toBe('max_resumptions');
  });

  it('builds the chat continuation: the delivered text as the final assistant message, budgets reduced, every other member kept as written', () => {
    const splice = new StreamSplice('chat', CHAT);
    relay(splice, chunk('a', { content: ' one' }) + chunk('a', { content: ' "two"' }));
    const upstream = '{"model":"served","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"min_tokens":1,"temperature":1.0,"stream":true}';
    const body = splice.continuationBody(Buffer.from(upstream)).toString();
    expect(body).toContain('"temperature":1.0');
    expect(JSON.parse(body)).toEqual({
      model: 'served',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: ' one "two"' },
      ],
      max_tokens: 8,
      min_tokens: 0,
      temperature: 1,
      stream: true,
      continue_final_message: true,
      add_generation_prompt: false,
    });
  });

  it('appends to a final assistant message the request itself continued', () => {
    const splice = new StreamSplice('chat', CHAT);
    relay(splice, chunk('a', { content: ' more' }));
    const upstream = JSON.stringify({ messages: [{ role: 'assistant', content: 'Start' }], continue_final_message: true, add_generation_prompt: false, max_completion_tokens: 5 });
    const body = JSON.parse(splice.continuationBody(Buffer.from(upstream)).toString()) as Record<string, unknown>;
    expect(body.messages).toEqual([{ role: 'assistant', content: 'Start more' }]);
    expect(body.max_completion_tokens).toBe(4);
  });

  it('builds the completions continuation: the delivered text after the prompt, max_tokens from vLLM’s default when unset', () => {
    const splice = new StreamSplice('completions', { model: 'm', prompt: 'Once' });
    const text = (t: string): string =>
      `data: ${JSON.stringify({ id: 'c', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: t, logprobs: null, finish_reason: null }], usage: null })}\n\n`;
    relay(splice, text(' a') + text(' b') + text(' c'));
    expect(JSON.parse(splice.continuationBody(Buffer.from('{"prompt":"Once","stream":true}')).toString())).toEqual({ prompt: 'Once a b c', stream: true, max_tokens: 13 });
  });
});
