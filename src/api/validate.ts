/**
 * Request validation: the schemas compiled once at start-up, every error collected, the first one
 * named in `param` and up to five in the message. Cross-field rules follow the schema check.
 */
import { Ajv } from 'ajv';
import { RouterError } from '../core/errors.js';
import { describeSchemaErrors, type SchemaError } from '../core/schema-errors.js';
import { chatRequestSchema, embeddingsRequestSchema } from './schemas.js';

export type InferenceKind = 'chat' | 'embeddings';

/** A request body that passed validation: an object with a string `model`. */
export interface ValidRequest {
  model: string;
  stream?: boolean | null;
  extra_body?: Record<string, unknown> | null;
  [field: string]: unknown;
}

const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, strictTypes: false });
const validators = {
  chat: ajv.compile(chatRequestSchema),
  embeddings: ajv.compile(embeddingsRequestSchema),
};

const MAX_REPORTED = 5;

function crossFieldCheck(kind: InferenceKind, body: ValidRequest): void {
  if (kind !== 'chat') return;
  const topLogprobs = body.top_logprobs;
  if (topLogprobs !== undefined && topLogprobs !== null && topLogprobs !== 0 && body.logprobs !== true) {
    throw new RouterError('INVALID_REQUEST', 'top_logprobs is only allowed when logprobs is true', { param: 'top_logprobs' });
  }
}

/** Checks `body` (already JSON-parsed) for `kind`; returns it typed, or throws an INVALID_REQUEST RouterError. */
export function validateRequest(kind: InferenceKind, body: unknown): ValidRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new RouterError('INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  const validate = validators[kind];
  if (!validate(body)) {
    const described = describeSchemaErrors(validate.errors as SchemaError[]);
    const shown = described.slice(0, MAX_REPORTED).map((d) => d.message);
    const more = described.length > MAX_REPORTED ? ` (and ${described.length - MAX_REPORTED} more)` : '';
    throw new RouterError('INVALID_REQUEST', `Invalid request: ${shown.join('; ')}${more}.`, { param: described[0]?.path || null });
  }
  const valid = body as unknown as ValidRequest;
  crossFieldCheck(kind, valid);
  return valid;
}
