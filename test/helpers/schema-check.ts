/** Request schemas checked as the router checks them (the ajv options of src/api/validate.ts). */
import { Ajv } from 'ajv';
import { describeSchemaErrors, type DescribedError, type SchemaError } from '../../src/core/schema-errors.js';

const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, strictTypes: false });

/** The errors validation would report for `body`, most useful first ([] when it is valid). */
export function described(schema: object, body: unknown): DescribedError[] {
  const validate = ajv.compile(schema);
  return validate(body) ? [] : describeSchemaErrors(validate.errors as SchemaError[]);
}

/** The first error's param, as validation would report it; null when the body is valid. */
export function checker(schema: object): (body: unknown) => string | null {
  return (body) => described(schema, body)[0]?.path ?? null;
}
