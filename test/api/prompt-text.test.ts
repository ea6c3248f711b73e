/** The prompt text prefix affinity hashes. */
import { describe, expect, it } from '@jest/globals';
import { chatPromptText, completionsPromptText, completionsPromptTokens, messagesPromptText, responsesPromptText } from '../../src/api/prompt-text.js';
import { estimatePromptTokens } from '../../src/server/inference.js';
import { type ValidRequest } from '../../src/api/validate.js';

const chat = (over: Record<string, unknown>): ValidRequest => ({ model: 'm', ...over });

describe('chatPromptText', () => {
  it.each([
    [
      'roles and text in order',
      {
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi' },
        ],
      },
      'system\nBe brief.\nuser\nHi\n',
    ],
    [
      'text parts joined, other parts skipped',
      {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a' },
              { type: 'image_url', image_url: { url: 'x' } },
              { type: 'text', text: 'b' },
            ],
          },
        ],
      },
      'user\nab\n',
    ],
    ['null content (an assistant tool call) as empty text', { messages: [{ role: 'assistant', content: null }] }, 'assistant\n\n'],
    [
      'tool definitions first, as chat templates put them',
      { tools: [{ type: 'function', function: { name: 'f' } }], messages: [{ role: 'user', content: 'q' }] },
      'tools\n[{"type":"function","function":{"name":"f"}}]\nuser\nq\n',
    ],
  ])('%s', (_name, body, expected) => {
    expect(chatPromptText(chat(body))).toBe(expected);
  });

  it('is prefix-preserving: a later turn starts with the text of the earlier one', () => {
    const turn1 = [
      { role: 'system', content: 'S' },
      { role: 'user', content: 'first' },
    ];
    const turn2 = [...turn1, { role: 'assistant', content: 'answer' }, { role: 'user', content: 'second' }];
    expect(chatPromptText(chat({ messages: turn2 })).startsWith(chatPromptText(chat({ messages: turn1 })))).toBe(true);
  });
});

describe('completionsPromptText', () => {
  it.each([
    ['a string prompt, as it is', { prompt: 'Once upon a time' }, 'Once upon a time'],
    ['the first of a list of prompts', { prompt: ['first', 'second'] }, 'first'],
    ['token ids: no text', { prompt: [1, 2, 3] }, ''],
    ['a batch of token-id lists: no text', { prompt: [[1, 2], [3]] }, ''],
    ['prompt_embeds alone: no text', { prompt_embeds: 'AAAA' }, ''],
  ])('%s', (_name, body, expected) => {
    expect(completionsPromptText(chat(body))).toBe(expected);
  });
});

describe('completionsPromptTokens: what the limits charge up front for a prompt of token ids (charged nothing) or a batch (charged its first)', () => {
  it.each([
    ['token ids: that many', { prompt: [5, 6, 7] }, 3],
    ['a batch of token-id lists: their sum', { prompt: [[1, 2], [3], [4, 5, 6]] }, 6],
    ['a string: estimated from its text instead', { prompt: 'Once upon a time' }, undefined],
    ['a list of strings: all of their text, at four characters a token (its first alone was charged)', { prompt: ['abcd', 'efghij', 'k'] }, 3],
    ['prompt_embeds alone', { prompt_embeds: 'AAAA' }, undefined],
  ])('%s', (_name, body, expected) => {
    expect(completionsPromptTokens(chat(body))).toBe(expected);
  });

  it('estimatePromptTokens takes them over the text', () => {
    expect(estimatePromptTokens(() => '', '{"model":"m","prompt":[5,6,7]}', 3)).toBe(3);
    expect(estimatePromptTokens(() => 'x'.repeat(40), '{}')).toBe(10);
  });
});

describe('responsesPromptText', () => {
  it.each([
    ['instructions as a system message, then a string input as a user message', { instructions: 'Be brief.', input: 'Hi' }, 'system\nBe brief.\nuser\nHi\n'],
    [
      'items in order: roles and text parts, a call’s arguments and a tool’s output under their types, other parts skipped',
      {
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'a' },
              { type: 'input_image', image_url: 'x' },
              { type: 'input_text', text: 'b' },
            ],
          },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"x":1}' },
          { type: 'function_call_output', call_id: 'c1', output: '42' },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'done' }] },
        ],
      },
      'user\nab\nfunction_call\n{"x":1}\nfunction_call_output\n42\nassistant\ndone\n',
    ],
    ['tool definitions first, as templates put them', { tools: [{ type: 'function', name: 'f' }], input: 'q' }, 'tools\n[{"type":"function","name":"f"}]\nuser\nq\n'],
  ])('%s', (_name, body, expected) => {
    expect(responsesPromptText(chat(body))).toBe(expected);
  });

  it('renders a chat’s system prompt and turns as chatPromptText does, so the two APIs share a prefix', () => {
    const viaChat = chatPromptText(
      chat({
        messages: [
          { role: 'system', content: 'S' },
          { role: 'user', content: 'q' },
        ],
      }),
    );
    expect(responsesPromptText(chat({ instructions: 'S', input: 'q' }))).toBe(viaChat);
    expect(responsesPromptText(chat({ instructions: 'S', input: [{ role: 'user', content: 'q' }] }))).toBe(viaChat);
  });

  it('is prefix-preserving: a later turn starts with the text of the earlier one', () => {
    const turn1 = [{ role: 'user', content: 'first' }];
    const turn2 = [...turn1, { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'answer' }] }, { role: 'user', content: 'second' }];
    expect(responsesPromptText(chat({ instructions: 'S', input: turn2 })).startsWith(responsesPromptText(chat({ instructions: 'S', input: turn1 })))).toBe(true);
  });
});

describe('messagesPromptText', () => {
  it.each([
    ['a system string, then each message’s role and text', { system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] }, 'system\nBe brief.\nuser\nHi\n'],
    [
      'system text blocks joined; text and tool results counted, images and tool calls skipped',
      {
        system: [
          { type: 'text', text: 'You are ' },
          { type: 'text', text: 'terse.', cache_control: { type: 'ephemeral' } },
        ],
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'x' } },
              { type: 'text', text: 'Weather?' },
            ],
          },
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: { city: 'Paris' } }] },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't1', content: '21°C' },
              { type: 'tool_result', tool_use_id: 't2', content: [{ type: 'text', text: 'sunny' }] },
            ],
          },
        ],
      },
      'system\nYou are terse.\nuser\nWeather?\nassistant\n\nuser\n21°Csunny\n',
    ],
    ['no system: messages only', { messages: [{ role: 'user', content: 'q' }] }, 'user\nq\n'],
    ['tool definitions first', { tools: [{ name: 'f', input_schema: {} }], messages: [{ role: 'user', content: 'q' }] }, 'tools\n[{"name":"f","input_schema":{}}]\nuser\nq\n'],
  ])('%s', (_name, body, expected) => {
    expect(messagesPromptText(chat(body))).toBe(expected);
  });

  it('renders the same conversation as chatPromptText does', () => {
    const viaChat = chatPromptText(
      chat({
        messages: [
          { role: 'system', content: 'S' },
          { role: 'user', content: 'q' },
          { role: 'assistant', content: 'a' },
        ],
      }),
    );
    expect(
      messagesPromptText(
        chat({
          system: 'S',
          messages: [
            { role: 'user', content: 'q' },
            { role: 'assistant', content: [{ type: 'text', text: 'a' }] },
          ],
        }),
      ),
    ).toBe(viaChat);
  });

  it('is prefix-preserving: a later turn starts with the text of the earlier one', () => {
    const turn1 = [{ role: 'user', content: 'first' }];
    const turn2 = [...turn1, { role: 'assistant', content: 'answer' }, { role: 'user', content: [{ type: 'text', text: 'second' }] }];
    expect(messagesPromptText(chat({ system: 'S', messages: turn2 })).startsWith(messagesPromptText(chat({ system: 'S', messages: turn1 })))).toBe(true);
  });
});
