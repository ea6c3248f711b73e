/**
 * Turns JSON-Schema validation errors (ajv's shape, typed structurally so core imports nothing) into
 * a field path in the request's own notation and a sentence that says how to fix it.
 */

export interface SchemaError {
  instancePath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
  /** Where in the schema it failed (`#/properties/prompt/anyOf/2/items/type`): which branch of a union. */
  schemaPath?: string;
  /** Present with ajv's `verbose: true`; unions use its `description` in their message. */
  parentSchema?: { description?: string };
  /** The value that failed (ajv's `verbose: true`). */
  data?: unknown;
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

/** The pattern of the config's and the CRDs' names (pools, deployment IDs, model names, aliases): one or more characters, none of them whitespace. */
export const NAME_PATTERN = '^\\S+$';

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
    case 'pattern':
      // a name (a pool's, a deployment's ID, model name or alias): the regular expression says less than this
      if (p.pattern === NAME_PATTERN)
        return { path, message: `${path} must be a name without spaces, tabs or line breaks (got ${JSON.stringify(typeof err.data === 'string' ? err.data.slice(0, 80) : err.data)})` };
      return { path, message: `${path || 'value'} ${err.message ?? 'is invalid'}` };
    default:
      return { path, message: `${path || 'value'} ${err.message ?? 'is invalid'}` };
  }
}

/**
 * The most useful errors of a failed validation, most specific first. For a union (`anyOf`/`oneOf`):
 * when one branch got past its type check, its deeper errors explain the problem (`stop[1] must be
 * string`); when only the branch types (or a branch's one literal, `const`) mismatched, or the errors
 * beneath come from two or more branches (none is the one the value was meant for), the union is
 * reported once with its schema's `description` (`stop must be a string or a list of at most 4
 * strings`). A union nested in another is the outer one's explanation. Needs ajv's `verbose` mode.
 */
export function describeSchemaErrors(errors: readonly SchemaError[]): DescribedError[] {
  return describeFirstSchemaErrors(errors, Infinity).described;
}

/** The parent of a JSON pointer (`/a/0` → `/a`; `/a` → ``). */
const parentPointer = (pointer: string): string => pointer.slice(0, Math.max(0, pointer.lastIndexOf('/')));

/**
 * The first `limit` of {@link describeSchemaErrors}, and how many more errors there are (counted, not
 * described: a request body of a million bad items has a million errors, and describing each cost the
 * router's event loop seconds). Linear in the errors (times the nesting depth).
 */
export function describeFirstSchemaErrors(errors: readonly SchemaError[], limit: number): { described: DescribedError[]; more: number } {
  const isUnion = (e: SchemaError): boolean => e.keyword === 'anyOf' || e.keyword === 'oneOf';
  const unionsAt = new Map<string, SchemaError[]>();
  for (const e of errors) if (isUnion(e)) unionsAt.set(e.instancePath, [...(unionsAt.get(e.instancePath) ?? []), e]);
  // a branch that is one literal (`const`) and was not given it mismatched like a type
  const branchTypeMismatch = (e: SchemaError): boolean => (e.keyword === 'type' || e.keyword === 'const') && unionsAt.has(e.instancePath);
  // an error that says what is wrong beneath a union (`if` only says its `then` or `else` failed, which say it themselves)
  const explains = (e: SchemaError): boolean => !isUnion(e) && e.keyword !== 'if' && !branchTypeMismatch(e);
  // each explaining error's nearest union (at its place or above, its schema within the union's) and which branch it is in
  const ownerOf = new Map<SchemaError, { union: SchemaError; branch: string }>();
  /** Per union, its branches that errors beneath it come from: true for a branch with an error past an item's type. */
  const branchesOf = new Map<SchemaError, Map<string, boolean>>();
  const weak = (e: SchemaError): boolean => e.keyword === 'type' || e.keyword === 'const';
  if (unionsAt.size > 0) {
    for (const e of errors) {
      if (!explains(e) || e.schemaPath === undefined) continue;
      for (let path = e.instancePath; ; path = parentPointer(path)) {
        const union = unionsAt.get(path)?.find((u) => u.schemaPath !== undefined && e.schemaPath!.startsWith(`${u.schemaPath}/`));
        if (union) {
          const branch = e.schemaPath.slice(union.schemaPath!.length + 1).split('/', 1)[0] as string;
          ownerOf.set(e, { union, branch });
          const branches = branchesOf.get(union) ?? new Map<string, boolean>();
          branches.set(branch, (branches.get(branch) ?? false) || !weak(e));
          branchesOf.set(union, branches);
          break;
        }
        if (path === '') break;
      }
    }
  }
  // A branch with an error past an item's type (a minimum, a missing field) is the one the value was
  // meant for: it explains the union, and the other branches' item type mismatches are not said. When
  // every branch beneath refused items by their type alone and two or more did, none is the one: the
  // union is named by its description (when it has one).
  const named = new Set<SchemaError>();
  const unsaid = (e: SchemaError): boolean => {
    const owner = ownerOf.get(e);
    if (!owner) return false;
    if (named.has(owner.union)) return true;
    const branches = branchesOf.get(owner.union) as Map<string, boolean>;
    return !branches.get(owner.branch) && [...branches.values()].some(Boolean);
  };
  for (const [union, branches] of branchesOf) {
    if (branches.size >= 2 && ![...branches.values()].some(Boolean) && union.parentSchema?.description) named.add(union);
  }
  // a union is explained by what is said at its place or below it: every place such an error is at or below
  const explainedAt = new Set<string>();
  const mark = (from: string): void => {
    for (let path = from; !explainedAt.has(path); path = parentPointer(path)) {
      explainedAt.add(path);
      if (path === '') break;
    }
  };
  if (unionsAt.size > 0) {
    for (const e of errors) {
      if (explains(e) && !unsaid(e)) mark(e.instancePath);
      // a union is said (named, or explained) at its place, so the places above it are explained
      else if (isUnion(e) && e.instancePath !== '') mark(parentPointer(e.instancePath));
    }
  }
  const described: DescribedError[] = [];
  const seen = new Set<string>();
  let more = 0;
  for (const err of errors) {
    if (err.keyword === 'if' || branchTypeMismatch(err) || unsaid(err)) continue;
    if (isUnion(err) && !named.has(err) && explainedAt.has(err.instancePath)) continue;
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
