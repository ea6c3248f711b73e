import { describe, expect, it } from '@jest/globals';
import { API_ROUTES, type ApiRoute } from '../../src/api/routes.js';
import { validateRequest } from '../../src/api/validate.js';
import { type RouterError } from '../../src/core/errors.js';
import { describeFirstSchemaErrors, describeSchemaErrors, pointerToPath } from '../../src/core/schema-errors.js';

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

describe('request validation errors: the first five described, the rest counted', () => {
  const chat = API_ROUTES.find((route) => route.name === 'chat') as ApiRoute;
  const refused = (body: object): RouterError => {
    try {
      validateRequest(chat, body);
    } catch (err) {
      return err as RouterError;
    }
    throw new Error('the body was accepted');
  };

  it('a body of ten thousand bad items: five messages, the count of the rest, the first one as param', () => {
    const err = refused({ model: 'm', messages: Array.from({ length: 10_000 }, () => ({ role: 'x' })) });
    expect(err.code).toBe('INVALID_REQUEST');
    expect(err.param).toBe('messages[0].role');
    expect(err.message.startsWith('Invalid request: messages[0].role must be one of: "system"')).toBe(true);
    expect(err.message.match(/messages\[\d+\]\.role must be one of/g)).toHaveLength(5);
    expect(err.message.endsWith(' (and 9995 more).')).toBe(true);
  });

  it('a union whose branch got past its type is explained by that branch; one whose branches all mismatched is named with its description', () => {
    expect(refused({ model: 'm', messages: [{ role: 'user', content: 'x' }], stop: ['a', 1] }).message).toBe('Invalid request: stop[1] must be string.');
    expect(refused({ model: 'm', messages: [{ role: 'user', content: 'x' }], stop: 5 }).message).toMatch(/^Invalid request: stop must be a string or a list of/);
  });

  it('describeFirstSchemaErrors: the same errors as describeSchemaErrors, cut at the limit, with the rest counted', () => {
    const errors = [
      { instancePath: '/a', keyword: 'type', params: { type: 'string' } },
      { instancePath: '/a', keyword: 'type', params: { type: 'string' } },
      { instancePath: '/b', keyword: 'required', params: { missingProperty: 'c' } },
      { instancePath: '/d', keyword: 'anyOf', params: {}, parentSchema: { description: 'a number or a list' } },
      { instancePath: '/d', keyword: 'type', params: { type: 'number' } },
      { instancePath: '/e', keyword: 'anyOf', params: {} },
      { instancePath: '/e/0', keyword: 'minimum', params: { comparison: '>=', limit: 0 } },
    ];
    const all = describeSchemaErrors(errors);
    expect(all.map((d) => d.message)).toEqual(['a must be string', 'b.c is required', 'd must be a number or a list', 'e[0] must be >= 0']);
    expect(describeFirstSchemaErrors(errors, 2)).toEqual({ described: all.slice(0, 2), more: 2 });
    expect(describeFirstSchemaErrors(errors, 10)).toEqual({ described: all, more: 0 });
  });
});
