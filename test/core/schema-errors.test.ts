import { describe, expect, it } from '@jest/globals';
import { API_ROUTES, type ApiRoute } from '../../src/api/routes.js';
import { ALL_ERRORS_MAX_CHARS, validateRequest } from '../../src/api/validate.js';
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

describe('unions: which branch explains a refusal', () => {
  const route = (name: string): ApiRoute => API_ROUTES.find((r) => r.name === name) as ApiRoute;
  const message = (name: string, body: object, chars?: number): string => {
    try {
      validateRequest(route(name), body, chars);
    } catch (err) {
      return `${(err as RouterError).param} | ${(err as RouterError).message}`;
    }
    throw new Error('the body was accepted');
  };

  it.each([0, ALL_ERRORS_MAX_CHARS + 1])('a union nested in another (a rerank document that is a number, under an if/then) is named once, with its description (body %i chars)', (chars) => {
    // was "Invalid request: ." with param null: the if's error counted as the explanation, then was not said
    expect(message('rerank', { model: 'm', query: 'q', documents: [1] }, chars)).toBe('documents[0] | Invalid request: documents[0] must be a string or an object with a text or a content list.');
  });

  it.each([0, ALL_ERRORS_MAX_CHARS + 1])('an item that two or more branches refuse names the union, not each branch (body %i chars)', (chars) => {
    // was "prompt[0] must be string; prompt[0] must be integer; prompt[0] must be array"
    expect(message('completions', { model: 'm', prompt: [true] }, chars)).toBe(
      'prompt | Invalid request: prompt must be a string, a list of strings, a list of token ids, or a list of token-id lists.',
    );
    expect(message('embeddings', { model: 'm', input: [{}] }, chars)).toMatch(/^input \| Invalid request: input must be a non-empty string, a non-empty list/);
  });

  it('a branch that got past its type still explains its union (one branch only)', () => {
    expect(message('chat', { model: 'm', messages: [{ role: 'user', content: 'x' }], stop: ['a', 1] })).toBe('stop[1] | Invalid request: stop[1] must be string.');
    // a list of mixed items is none of the lists a prompt may be: every list branch refuses some item
    expect(message('completions', { model: 'm', prompt: ['a', 5] })).toBe('prompt | Invalid request: prompt must be a string, a list of strings, a list of token ids, or a list of token-id lists.');
    expect(message('chat', { model: 'm', messages: [{ role: 'user', content: [{ type: 'text' }] }] })).toMatch(/^messages\[0\]\.content\[0\]/);
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

  it('a body over ALL_ERRORS_MAX_CHARS is described by the first error found, without counting the rest (collecting every error of millions of items exhausted the heap)', () => {
    const body = { model: 'm', messages: Array.from({ length: 10_000 }, () => ({ role: 'x' })) };
    let err: RouterError | undefined;
    try {
      validateRequest(chat, body, ALL_ERRORS_MAX_CHARS + 1);
    } catch (e) {
      err = e as RouterError;
    }
    expect(err?.param).toBe('messages[0].role');
    expect(err?.message).toBe('Invalid request: messages[0].role must be one of: "system", "developer", "user", "assistant", "tool", "function".');
    // at the limit, every error is collected as before
    expect(() => validateRequest(chat, body, ALL_ERRORS_MAX_CHARS)).toThrow(/ \(and 9995 more\)\.$/);
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
