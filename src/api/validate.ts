/**
 * Request validation: every API's schema (routes.ts), compiled by the build (schema-validator.ts), every error
 * collected, the first one named in `param` and up to five in the message. The API's cross-field
 * rules follow the schema check.
 */
import type { ValidateFunction } from 'ajv';
import { RouterError } from '../core/errors.js';
import { describeFirstSchemaErrors, type SchemaError } from '../core/schema-errors.js';
import { API_ROUTES, type ApiRoute } from './routes.js';
import { validatorFor } from './schema-validator.js';
import { type ValidRequest } from './valid-request.js';

export { type ValidRequest } from './valid-request.js';

const validators = new Map<ApiRoute, ValidateFunction>(API_ROUTES.map((route) => [route, validatorFor('request', route.name, route.schema)]));

const MAX_REPORTED = 5;

/** Checks `body` (already JSON-parsed, or a form as fields) for `api`; returns it typed, or throws an INVALID_REQUEST RouterError. */
export function validateRequest(api: ApiRoute, body: unknown): ValidRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RouterError('INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  const validate = validators.get(api) as ValidateFunction;
  if (!validate(body)) {
    const { described, more } = describeFirstSchemaErrors(validate.errors as SchemaError[], MAX_REPORTED);
    const shown = described.map((d) => d.message);
    throw new RouterError('INVALID_REQUEST', `Invalid request: ${shown.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}.`, { param: described[0]?.path || null });
  }
  const valid = body as ValidRequest;
  api.check?.(valid);
  return valid;
}
