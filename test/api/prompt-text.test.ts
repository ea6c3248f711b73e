/** The prompt text prefix affinity hashes. */
import { describe, expect, it } from '@jest/globals';
import { chatPromptText } from '../../src/api/prompt-text.js';
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
