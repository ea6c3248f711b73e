/** Small type checks shared by the simulator's request parsers (vLLM-style 400s). */
import { badRequest, modelNotFound, type VllmError } from './errors.js';

export type Body = Record<string, unknown>;

export class RequestError extends Error {
  constructor(readonly error: VllmError) {
    super(error.message);
  }
}

export function fail(message: string, param: string | null = null): never {
  throw new RequestError(badRequest(message, param));
}

export function asObject(body: unknown): Body {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) fail('The request body must be a JSON object.');
  return body as Body;
}

/** An optional integer field within [min, max]; `null` counts as absent, as in vLLM. */
export function optionalInt(body: Body, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value)) fail(`${field} must be an integer, got ${JSON.stringify(value)}.`, field);
  if (value < min || value > max) {
    fail(max === Number.MAX_SAFE_INTEGER ? `${field} must be at least ${min}, got ${value}.` : `${field} must be between ${min} and ${max}, got ${value}.`, field);
  }
  return value;
}

export function optionalBool(body: Body, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') fail(`${field} must be a boolean, got ${JSON.stringify(value)}.`, field);
  return value;
}

export function optionalString(body: Body, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') fail(`${field} must be a string.`, field);
  return value;
}

/** The request's `model` (the first served one when absent); 404 like vLLM when this replica does not serve it. */
export function servedModel(body: Body, models: readonly string[]): string {
  const model = body.model ?? models[0];
  if (typeof model !== 'string') fail('model must be a string.', 'model');
  if (!models.includes(model)) throw new RequestError(modelNotFound(model));
  return model;
}

/** vLLM's `cache_salt`: a non-empty string, else a 400 like vLLM's. */
export function cacheSaltOf(body: Body): { cacheSalt?: string } {
  if (body.cache_salt === undefined || body.cache_salt === null) return {};
  if (typeof body.cache_salt !== 'string' || body.cache_salt === '') fail('Parameter cache_salt must be a non-empty string if provided.', 'cache_salt');
  return { cacheSalt: body.cache_salt };
}
