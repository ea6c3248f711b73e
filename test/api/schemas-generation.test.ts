/** The completions, Responses and Messages schemas: what the SDKs and vLLM's extras send passes; a bad field is named in param. */
import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { completionsRequestSchema, messagesRequestSchema, responsesRequestSchema } from '../../src/api/schemas-generation.js';
import { checker, described } from '../helpers/schema-check.js';

const completions = checker(completionsRequestSchema);
const responses = checker(responsesRequestSchema);
const messages = checker(messagesRequestSchema);

/** The JSON body an SDK call sends, caught by a fetch that answers `{}`. */
async function sentBody(call: (fetch: typeof globalThis.fetch) => Promise<unknown>): Promise<Record<string, unknown>> {
  let body: unknown;
  const fetch = (_url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    body = JSON.parse(init?.body as string);
    return Promise.resolve(new Response('{}', { headers: { 'content-type': 'application/json' } }));
  };
  await call(fetch);
  return body as Record<string, unknown>;
}
const openai = (fetch: typeof globalThis.fetch): OpenAI => new OpenAI({ apiKey: 'k', baseURL: 'http://router/v1', fetch, maxRetries: 0 });
const anthropic = (fetch: typeof globalThis.fetch): Anthropic => new Anthropic({ apiKey: 'k', baseURL: 'http://router', fetch, maxRetries: 0 });

describe('completionsRequestSchema', () => {
  it('accepts what the openai SDK sends', async () => {
    const plain = await sentBody((f) => openai(f).completions.create({ model: 'Qwen/Qwen3-8B', prompt: 'Say this is a test', max_tokens: 7, temperature: 0 }));
    const streamed = await sentBody((f) =>
      openai(f).completions.create({ model: 'm', prompt: ['a', 'b'], stream: true, stream_options: { include_usage: true }, n: 2, best_of: 3, logprobs: 2, echo: true, stop: ['\n'] }),
    );
    expect(plain).toEqual({ model: 'Qwen/Qwen3-8B', prompt: 'Say this is a test', max_tokens: 7, temperature: 0 });
    expect(completions(plain)).toBeNull();
    expect(completions(streamed)).toBeNull();
  });

  it.each([
    ['token ids', { prompt: [1, 2, 3] }],
    ['a batch of token-id lists', { prompt: [[1, 2], [3]] }],
    ['prompt_embeds instead of a prompt (vLLM)', { prompt_embeds: 'AAAA' }],
    ['an empty prompt beside prompt_embeds (vLLM)', { prompt: '', prompt_embeds: ['AAAA'] }],
    ['vLLM sampling extras', { prompt: 'x', top_k: 20, min_p: 0.05, repetition_penalty: 1.1, min_tokens: 4, prompt_logprobs: -1, truncate_prompt_tokens: -1 }],
    ['more than OpenAI allows where vLLM takes it', { prompt: 'x', logprobs: 50, n: 300, best_of: 400, stop: ['a', 'b', 'c', 'd', 'e', 'f'], logit_bias: { '50256': -150 } }],
    ['max_tokens 0 with echo (the prompt alone)', { prompt: 'x', echo: true, max_tokens: 0 }],
    ['nulls where OpenAI allows them', { prompt: 'x', suffix: null, logprobs: null, stop: null, stream_options: null, seed: null, user: null, temperature: null }],
    ['unknown fields, passed through', { prompt: 'x', structured_outputs: { regex: '\\d+' }, x_custom: [1] }],
  ])('accepts %s', (_name, over) => {
    expect(completions({ model: 'm', ...over })).toBeNull();
  });

  it.each([
    ['no prompt', 'prompt', {}],
    ['an empty prompt', 'prompt', { prompt: '' }],
    ['a null prompt without prompt_embeds', 'prompt', { prompt: null }],
    ['an empty list', 'prompt', { prompt: [] }],
    ['a number', 'prompt', { prompt: 5 }],
    ['temperature above 2', 'temperature', { prompt: 'x', temperature: 2.5 }],
    ['n 0', 'n', { prompt: 'x', n: 0 }],
    ['negative logprobs', 'logprobs', { prompt: 'x', logprobs: -1 }],
    ['negative max_tokens', 'max_tokens', { prompt: 'x', max_tokens: -1 }],
    ['a string for stream', 'stream', { prompt: 'x', stream: 'yes' }],
    ['a number in stop', 'stop[1]', { prompt: 'x', stop: ['a', 1] }],
    ['a string bias', 'logit_bias[50256]', { prompt: 'x', logit_bias: { '50256': 'high' } }],
    ['top_k below -1', 'top_k', { prompt: 'x', top_k: -2 }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(completions({ model: 'm', ...over })).toBe(param);
  });

  it('names an empty token-id list in a batch, and says what a prompt may be when it is none of them', () => {
    expect(described(completionsRequestSchema, { model: 'm', prompt: [[1], []] })).toContainEqual({ path: 'prompt[1]', message: 'prompt[1] must have at least 1 item' });
    expect(described(completionsRequestSchema, { model: 'm', prompt: { text: 'x' } })[0]?.message).toBe('prompt must be a string, a list of strings, a list of token ids, or a list of token-id lists');
  });
});

describe('responsesRequestSchema', () => {
  const imageQuestion = [
    { type: 'input_text' as const, text: 'What is this?' },
    { type: 'input_image' as const, image_url: 'https://x.test/a.png', detail: 'auto' as const },
  ];

  it('accepts what the openai SDK sends', async () => {
    const simple = await sentBody((f) => openai(f).responses.create({ model: 'openai/gpt-oss-20b', input: 'Tell me a three sentence bedtime story about a unicorn.' }));
    const rich = await sentBody((f) =>
      openai(f).responses.create({
        model: 'openai/gpt-oss-20b',
        instructions: 'Answer in French.',
        input: [
          { role: 'user', content: imageQuestion },
          { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: 'call_1', output: '{"temp":21}' },
        ],
        tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: true }],
        tool_choice: 'auto',
        reasoning: { effort: 'low' },
        text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true } },
        include: ['reasoning.encrypted_content'],
        metadata: { team: 'search' },
        max_output_tokens: 512,
        store: true,
        background: true,
      }),
    );
    expect(simple).toEqual({ model: 'openai/gpt-oss-20b', input: 'Tell me a three sentence bedtime story about a unicorn.' });
    expect(responses(simple)).toBeNull();
    expect(responses(rich)).toBeNull();
  });

  it.each([
    ['a continuation with previous_response_id', { input: [{ role: 'user', content: 'and then?' }], previous_response_id: 'resp_123' }],
    ['an empty item list', { input: [] }],
    ['a tool_choice object', { input: 'x', tool_choice: { type: 'function', name: 'f' } }],
    ['vLLM extras and a larger top_logprobs', { input: 'x', top_k: 40, top_logprobs: 50 }],
    ['nulls', { input: 'x', instructions: null, temperature: null, truncation: null, include: null, metadata: null, reasoning: null }],
    ['unknown fields', { input: 'x', prompt_cache_key: 'k', service_tier: 'auto' }],
  ])('accepts %s', (_name, over) => {
    expect(responses({ model: 'm', ...over })).toBeNull();
  });

  it.each([
    ['no input', 'input', {}],
    ['temperature 3', 'temperature', { input: 'x', temperature: 3 }],
    ['a number for input', 'input', { input: 5 }],
    ['an item with neither type nor role', 'input[0].type', { input: [{ content: 'x' }] }],
    ['a bare string item', 'input[0]', { input: ['hi'] }],
    ['an unknown truncation', 'truncation', { input: 'x', truncation: 'middle' }],
    ['include as a string', 'include', { input: 'x', include: 'reasoning.encrypted_content' }],
    ['a non-string metadata value', 'metadata.n', { input: 'x', metadata: { n: 1 } }],
    ['max_output_tokens 0', 'max_output_tokens', { input: 'x', max_output_tokens: 0 }],
    ['a tool without a type', 'tools[0].type', { input: 'x', tools: [{ name: 'f' }] }],
    ['a number for tool_choice', 'tool_choice', { input: 'x', tool_choice: 1 }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(responses({ model: 'm', ...over })).toBe(param);
  });
});

describe('messagesRequestSchema', () => {
  const base = { model: 'm', max_tokens: 256, messages: [{ role: 'user', content: 'Hello' }] };
  const photoQuestion = [
    { type: 'image' as const, source: { type: 'base64' as const, media_type: 'image/png' as const, data: 'iVBORw0KGgo=' } },
    { type: 'text' as const, text: 'Where was this taken?' },
  ];

  it('accepts what @anthropic-ai/sdk sends', async () => {
    const simple = await sentBody((f) => anthropic(f).messages.create({ model: 'Qwen/Qwen3-8B', max_tokens: 1024, messages: [{ role: 'user', content: 'Hello, Claude' }] }));
    const tools = await sentBody((f) =>
      anthropic(f).messages.create({
        model: 'Qwen/Qwen3-8B',
        max_tokens: 4096,
        system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
        tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }],
        tool_choice: { type: 'tool', name: 'get_weather' },
        thinking: { type: 'enabled', budget_tokens: 2048 },
        messages: [
          { role: 'user', content: photoQuestion },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21°C, sunny' }] },
        ],
        stop_sequences: ['\n\nHuman:'],
        metadata: { user_id: 'u-1' },
      }),
    );
    expect(simple).toEqual({ model: 'Qwen/Qwen3-8B', max_tokens: 1024, messages: [{ role: 'user', content: 'Hello, Claude' }] });
    expect(messages(simple)).toBeNull();
    expect(messages(tools)).toBeNull();
  });

  it.each([
    ['a system string and streaming', { system: 'Be brief.', stream: true }],
    ['any number of stop sequences', { stop_sequences: ['a', 'b', 'c', 'd', 'e'] }],
    ['temperature 1.5 and top_k -1, which vLLM samples with', { temperature: 1.5, top_k: -1, top_p: 0.9 }],
    ['tool_choice none', { tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'none' } }],
    ['a server tool (a type and a name)', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }],
    ['unknown fields', { service_tier: 'auto', anthropic_version: '2023-06-01' }],
  ])('accepts %s', (_name, over) => {
    expect(messages({ ...base, ...over })).toBeNull();
  });

  it.each([
    ['no max_tokens', 'max_tokens', { max_tokens: undefined }],
    ['max_tokens 0', 'max_tokens', { max_tokens: 0 }],
    ['no messages', 'messages', { messages: undefined }],
    ['no message', 'messages', { messages: [] }],
    ['a system role message', 'messages[0].role', { messages: [{ role: 'system', content: 'x' }] }],
    ['a message without content', 'messages[0].content', { messages: [{ role: 'user' }] }],
    ['an empty block list', 'messages[0].content', { messages: [{ role: 'user', content: [] }] }],
    ['a text block without text', 'messages[0].content[0].text', { messages: [{ role: 'user', content: [{ type: 'text' }] }] }],
    ['a block without a type', 'messages[0].content[0].type', { messages: [{ role: 'user', content: [{ text: 'x' }] }] }],
    ['temperature above 2', 'temperature', { temperature: 2.5 }],
    ['top_k below -1', 'top_k', { top_k: -2 }],
    ['a tool without a name', 'tools[0].name', { tools: [{ description: 'x', input_schema: {} }] }],
    ['tool_choice tool without a name', 'tool_choice.name', { tool_choice: { type: 'tool' } }],
    ['tool_choice as a string', 'tool_choice', { tool_choice: 'auto' }],
    ['a number for system', 'system', { system: 5 }],
    ['a system text block without text', 'system[0].text', { system: [{ type: 'text' }] }],
    ['stop_sequences as a string', 'stop_sequences', { stop_sequences: 'STOP' }],
    ['an empty model', 'model', { model: '' }],
  ])('rejects %s, naming %s', (_name, param, over) => {
    expect(messages({ ...base, ...over })).toBe(param);
  });
});

describe('the generation schemas', () => {
  it.each([
    ['completions', completionsRequestSchema],
    ['responses', responsesRequestSchema],
    ['messages', messagesRequestSchema],
  ])('%s: requires a non-empty model and closes no object to unknown fields', (_name, schema) => {
    expect(schema.required).toContain('model');
    expect(schema.properties.model).toEqual({ type: 'string', minLength: 1 });
    expect(JSON.stringify(schema)).not.toContain('"additionalProperties":false');
  });
});
