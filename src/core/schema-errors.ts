/**
 * Turns JSON-Schema validation errors (ajv's shape, typed structurally so core imports nothing) into
 * a field path in the request's own notation and a sentence that says how to fix it.
 */

export interface SchemaError {
  instancePath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
  /** Present with ajv's `verbose: true`; unions use its `description` in their message. */
  parentSchema?: { description?: string };
}

/** `/messages/0/role` → `messages[0].role`. */
export function pointerToPath(pointer: string): string {
  let out = '';
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    out += /^\d+$/.test(part) ? `[${part}]` : out === '' ? part : `.${part}`;
  }
  return out;
}

function join(path: string, child: string): string {
  return path === '' ? child : `${path}.${child}`;
}

export interface DescribedError {
  path: string;
  message: string;
}

export function describeSchemaError(err: SchemaError): DescribedError {
  const path = pointerToPath(err.instancePath);
  const p = err.params;
  switch (err.keyword) {
    case 'required':
      return { path: join(path, String(p.missingProperty)), message: `${join(path, String(p.missingProperty))} is required` };
    case 'additionalProperties':
      return { path: join(path, String(p.additionalProperty)), message: `${join(path, String(p.additionalProperty))} is not a known field` };
    case 'enum':
      return { path, message: `${path || 'value'} must be one of: ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}` };
    case 'const':
      return { path, message: `${path || 'value'} must be ${JSON.stringify(p.allowedValue)}` };
    case 'type':
      return { path, message: `${path || 'value'} must be ${String(p.type).replace(',', ' or ')}` };
    case 'minItems':
      return { path, message: `${path} must have at least ${String(p.limit)} item${p.limit === 1 ? '' : 's'}` };
    case 'maxItems':
      return { path, message: `${path} must have at most ${String(p.limit)} items` };
    case 'minLength':
      return { path, message: p.limit === 1 ? `${path} must not be empty` : `${path} must be at least ${String(p.limit)} characters` };
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return { path, message: `${path} must be ${String(p.comparison)} ${String(p.limit)}` };
    default:
      return { path, message: `${path || 'value'} ${err.message ?? 'is invalid'}` };
  }
}

/**
 * The most useful errors of a failed validation, most specific first. For a union (`anyOf`/`oneOf`):
 * when a branch got past its type check, its deeper errors explain the problem (`stop[1] must be
 * string`); when only the branch types (or a branch's one literal, `const`) mismatched, the union is reported once with its schema's
 * `description` (`stop must be a string or a list of at most 4 strings`). Needs ajv's `verbose` mode.
 */
export function describeSchemaErrors(errors: readonly SchemaError[]): DescribedError[] {
  return describeFirstSchemaErrors(errors, Infinity).described;
}

/**
 * The first `limit` of {@link describeSchemaErrors}, and how many more errors there are (counted, not
 * described: a request body of a million bad items has a million errors, and describing each cost the
 * router's event loop seconds). Linear in the errors.
 */
export function describeFirstSchemaErrors(errors: readonly SchemaError[], limit: number): { described: DescribedError[]; more: number } {
  const isUnion = (e: SchemaError): boolean => e.keyword === 'anyOf' || e.keyword === 'oneOf';
  const unionPaths = new Set<string>();
  for (const e of errors) if (isUnion(e)) unionPaths.add(e.instancePath);
  // a branch that is one literal (`const`) and was not given it mismatched like a type
  const branchTypeMismatch = (e: SchemaError): boolean => (e.keyword === 'type' || e.keyword === 'const') && unionPaths.has(e.instancePath);
  // a union is explained by an error of its own at its place or below it: every place such an error is at or below
  const explainedAt = new Set<string>();
  if (unionPaths.size > 0) {
    for (const o of errors) {
      if (isUnion(o) || branchTypeMismatch(o)) continue;
      for (let path = o.instancePath; !explainedAt.has(path); path = path.slice(0, Math.max(0, path.lastIndexOf('/')))) {
        explainedAt.add(path);
        if (path === '') break;
      }
    }
  }
  const described: DescribedError[] = [];
  const seen = new Set<string>();
  let more = 0;
  for (const err of errors) {
    if (err.keyword === 'if' || branchTypeMismatch(err)) continue;
    if (isUnion(err) && explainedAt.has(err.instancePath)) continue;
    if (described.length >= limit) {
      more += 1;
      continue;
    }
    let one: DescribedError;
    if (isUnion(err)) {
      const path = pointerToPath(err.instancePath);
      const expected = err.parentSchema?.description;
      one = { path, message: expected ? `${path || 'value'} must be ${expected}` : `${path || 'value'} has the wrong type` };
    } else {
      one = describeSchemaError(err);
    }
    if (seen.has(one.message)) continue;
    seen.add(one.message);
    described.push(one);
  }
  return { described, more };
}
