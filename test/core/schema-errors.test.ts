import { describe, expect, it } from '@jest/globals';
import { pointerToPath } from '../../src/core/schema-errors.js';

describe('pointerToPath', () => {
  it.each([
    ['', ''],
    ['/model', 'model'],
    ['/messages/0/content/1/text', 'messages[0].content[1].text'],
    ['/logit_bias/50256', 'logit_bias[50256]'],
    ['/a~1b/c~0d', 'a/b.c~d'],
    ['/0', '[0]'],
  ])('turns %j into %j', (pointer, path) => {
    expect(pointerToPath(pointer)).toBe(path);
  });
});
