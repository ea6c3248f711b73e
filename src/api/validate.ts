/**
 * Request validation: every API's schema (routes.ts), compiled by the build (schema-validator.ts). A body
 * is checked by a validator that stops at its first error, so what a body costs is one pass over it
 * whatever it holds. A refused body of at most {@link ALL_ERRORS_MAX_CHARS} is checked again with every
 * error collected, for a message that names up to five and counts the rest; a larger one is described
 * by the first error found (collecting every error of millions of bad items exhausted the heap). The
 * first error is named in `param`. The API's cross-field rules follow the schema check.
 */
import type { ValidateFunction } from 'ajv';
import { RouterError } from '../core/errors.js';
import { describeFirstSchemaErrors, type SchemaError } from '../core/schema-errors.js';
import { API_ROUTES, type ApiRoute } from './routes.js';
import { validatorFor } from './schema-validator.js';
import { type ValidRequest } from './valid-request.js';

export { type ValidRequest } from './valid-request.js';

const validators = new Map<ApiRoute, ValidateFunction>(API_ROUTES.map((route) => [route, validatorFor('requestFirst', route.name, route.schema)]));
/** The validators that collect every error, made (or loaded) at the first refusal that asks for one. */
const allErrorValidators = new Map<ApiRoute, ValidateFunction>();

const MAX_REPORTED = 5;
/**
 * The largest body (its JSON text's length) checked again for every error: a few thousand items at
 * most, a few milliseconds. Past it the message describes the first error found.
 */
export const ALL_ERRORS_MAX_CHARS = 4 * 1024;

/**
 * Checks `body` (already JSON-parsed, or a form as fields) for `api`; returns it typed, or throws an
 * INVALID_REQUEST RouterError. `chars`: the length of the body's text (a form's fields are short).
 */
export function validateRequest(api: ApiRoute, body: unknown, chars = 0): ValidRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RouterError('INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  const validate = validators.get(api) as ValidateFunction;
  if (!validate(body)) {
    let errors = validate.errors as SchemaError[];
    if (chars <= ALL_ERRORS_MAX_CHARS) {
      let all = allErrorValidators.get(api);
      if (!all) allErrorValidators.set(api, (all = validatorFor('request', api.name, api.schema)));
      if (!all(body)) errors = all.errors as SchemaError[];
    }
    const { described, more } = describeFirstSchemaErrors(errors, MAX_REPORTED);
    const shown = described.map((d) => d.message);
    throw new RouterError('INVALID_REQUEST', `Invalid request: ${shown.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}.`, { param: described[0]?.path || null });
  }
  const valid = body as ValidRequest;
  api.check?.(valid);
  return valid;
}
