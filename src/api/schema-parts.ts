/** Pieces every request schema is built from. */

/** `schema`, or `null` (OpenAI's optional fields may be sent as null). */
export const nullable = <T extends object>(schema: T, description?: string): object => ({
  ...(description ? { description } : {}),
  anyOf: [schema, { type: 'null' }],
});

/** `model`: the router routes by it, so it is always required and never empty. */
export const model = { type: 'string', minLength: 1 };
export const objectOrNull = nullable({ type: 'object' });
export const booleanOrNull = nullable({ type: 'boolean' });
