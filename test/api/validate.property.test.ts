/** The validator under arbitrary input: it answers every value with a verdict, never a crash. */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { API_ROUTES, apiRoute } from '../../src/api/routes.js';
import { validateRequest } from '../../src/api/validate.js';
import { RouterError } from '../../src/core/errors.js';

describe('validateRequest (property)', () => {
  it('accepts or rejects any JSON value on every API with an INVALID_REQUEST RouterError, never anything else', () => {
    fc.assert(
      fc.property(fc.constantFrom(...API_ROUTES), fc.jsonValue({ maxDepth: 6 }), (api, value) => {
        try {
          validateRequest(api, value);
        } catch (err) {
          expect(err).toBeInstanceOf(RouterError);
          expect((err as RouterError).code).toBe('INVALID_REQUEST');
          expect((err as RouterError).message.length).toBeLessThan(2000);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('accepts every well-formed chat request with arbitrary extra fields', () => {
    const message = fc.record({ role: fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool'), content: fc.oneof(fc.string(), fc.constant(null)) });
    fc.assert(
      fc.property(
        fc.string({ minLength: 1 }),
        fc.array(message, { minLength: 1, maxLength: 4 }),
        fc.dictionary(fc.stringMatching(/^x_[a-z]{1,8}$/), fc.jsonValue({ maxDepth: 2 })),
        (model, messages, extra) => {
          expect(() => validateRequest(apiRoute('chat'), { ...extra, model, messages })).not.toThrow();
        },
      ),
      { numRuns: 300 },
    );
  });

  it('names a field of the request in param when it rejects a chat request', () => {
    fc.assert(
      fc.property(fc.record({ model: fc.string({ minLength: 1 }), messages: fc.constant([{ role: 'user', content: 'x' }]), n: fc.integer({ max: 0 }) }), (body) => {
        try {
          validateRequest(apiRoute('chat'), body);
          throw new Error('expected a rejection');
        } catch (err) {
          expect((err as RouterError).param).toBe('n');
        }
      }),
      { numRuns: 100 },
    );
  });
});
