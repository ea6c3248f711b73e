/** The API keys file: a YAML list of `{name, key | keySha256, models?, priority?, weight?, limits?}`. */
import { keyLimitsSchema, type KeyLimitFields } from '../limits/settings.js';
import { PRIORITIES, type Priority } from '../core/types.js';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { describeSchemaErrors, type SchemaError } from '../core/schema-errors.js';
import { ConfigError, parseYaml } from './load.js';
import { validatorFor } from '../api/schema-validator.js';

export interface KeyEntry {
  /** Who the key belongs to; logged instead of the key. */
  name: string;
  /** The key itself, or … */
  key?: string;
  /** … its SHA-256 as 64 hex digits, so the file need not hold the secret. */
  keySha256?: string;
  /** Deployment IDs, model names or aliases this key may call; absent or `*` means all. */
  models?: string[];
  /** The class of this key's requests under saturation; `standard` when absent. */
  priority?: Priority;
  /** This key's share when requests queue: keys take turns in proportion to their weights (default 1). */
  weight?: number;
  /** What the key may spend (limits/settings.ts); unset fields come from the config's `limits.defaults`. */
  limits?: KeyLimitFields;
}

/** The keys file's JSON Schema. */
export const keysFileSchema = {
  type: 'array',
  items: {
    type: 'object',
    additionalProperties: false,
    required: ['name'],
    properties: {
      name: { type: 'string', minLength: 1 },
      key: { type: 'string', minLength: 8 },
      keySha256: { type: 'string', pattern: '^[0-9a-fA-F]{64}$' },
      models: { type: 'array', items: { type: 'string', minLength: 1 } },
      priority: { enum: PRIORITIES },
      weight: { type: 'number', exclusiveMinimum: 0, maximum: 1000 },
      limits: keyLimitsSchema,
    },
  },
};
const validateKeys = validatorFor('keys', 'keys', keysFileSchema);

/**
 * Parses and checks a keys file. A file with no keys (empty, comments only, `null`, `[]`) is an
 * error like any other bad file: accepting it would refuse every client, and a truncate-then-write
 * or an empty Secret would open exactly that window.
 */
export function parseKeysFile(text: string, source: string): KeyEntry[] {
  const data = parseYaml(text, source);
  if (data === null || data === undefined || (Array.isArray(data) && data.length === 0)) {
    throw new ConfigError(`${source}: has no keys; list at least one (a keys file without keys would refuse every client)`);
  }
  if (!validateKeys(data)) {
    const [first] = describeSchemaErrors(validateKeys.errors as SchemaError[]);
    throw new ConfigError(`${source}: ${(first?.message ?? 'invalid').replace(/^\[(\d+)\]/, 'entry $1')}`);
  }
  const entries = data as KeyEntry[];
  const names = new Set<string>();
  // each key's digest and the entry that has it: one key under two names would authenticate as the
  // first only, and the second's name and limits would silently never apply
  const digests = new Map<string, string>();
  entries.forEach((entry, i) => {
    if ((entry.key === undefined) === (entry.keySha256 === undefined)) throw new ConfigError(`${source}: entry ${i} ("${entry.name}") needs exactly one of key or keySha256`);
    if (names.has(entry.name)) throw new ConfigError(`${source}: key name "${entry.name}" is used twice`);
    names.add(entry.name);
    const digest =
      entry.keySha256 !== undefined
        ? entry.keySha256.toLowerCase()
        : createHash('sha256')
            .update(entry.key ?? '')
            .digest('hex');
    const first = digests.get(digest);
    if (first !== undefined) throw new ConfigError(`${source}: "${entry.name}" has the same key as "${first}"; give each name its own key`);
    digests.set(digest, entry.name);
  });
  // Copied out of the file's text: a string the YAML parser cut from it (a name of 13 characters or
  // more, say) is V8's slice of the whole text and keeps it alive, plaintext keys and all, for as long
  // as the router keeps the name (the owner of each remembered response, the limiter's learned
  // overhead): one more copy of the file for every reload.
  return structuredClone(entries);
}

export async function readKeysFile(path: string): Promise<KeyEntry[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read keys file ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  return parseKeysFile(text, path);
}

/** What a key may name a deployment by: its ID, its model name or one of its aliases. */
export interface NamedDeployment {
  id: string;
  model: string;
  aliases: readonly string[];
}

/** A name a key gives that no deployment answers to. */
export interface UnknownModelName {
  key: string;
  field: 'models' | 'limits.deployments';
  name: string;
}

/**
 * The names a key's `models` or `limits.deployments` gives that no deployment answers to: in static
 * mode every deployment is known, so such a name is a typo or a deployment not (yet) in the config, and
 * the key cannot use it (or the limit never applies). Said, not refused; `*` and absent fields name nothing.
 */
export function unknownModelNames(entries: readonly Pick<KeyEntry, 'name' | 'models' | 'limits'>[], deployments: readonly NamedDeployment[]): UnknownModelName[] {
  const known = new Set(deployments.flatMap((d) => [d.id, d.model, ...d.aliases]));
  const out: UnknownModelName[] = [];
  for (const entry of entries) {
    for (const name of entry.models ?? []) if (name !== '*' && !known.has(name)) out.push({ key: entry.name, field: 'models', name });
    for (const name of Object.keys(entry.limits?.deployments ?? {})) if (!known.has(name)) out.push({ key: entry.name, field: 'limits.deployments', name });
  }
  return out;
}

/** Two or more names in a key's `limits.deployments` for one deployment: only `applies` counts. */
export interface DoubledLimitName {
  key: string;
  /** The deployment's ID. */
  deployment: string;
  /** The names the key gives it, in the file's order. */
  names: string[];
  /** The one whose limits apply: the ID, else the model name, else the first alias (the limiter's order). */
  applies: string;
}

/**
 * Deployments a key's `limits.deployments` names more than once (by its ID, model name or aliases):
 * the limiter takes one entry (the ID's, else the model name's, else the first alias's) and the others
 * never apply. Said, not refused, like {@link unknownModelNames}.
 */
export function doubledLimitNames(entries: readonly Pick<KeyEntry, 'name' | 'limits'>[], deployments: readonly NamedDeployment[]): DoubledLimitName[] {
  const out: DoubledLimitName[] = [];
  for (const entry of entries) {
    const named = Object.keys(entry.limits?.deployments ?? {});
    if (named.length < 2) continue;
    for (const d of deployments) {
      const names = named.filter((n) => n === d.id || n === d.model || d.aliases.includes(n));
      if (names.length < 2) continue;
      const applies = names.includes(d.id) ? d.id : names.includes(d.model) ? d.model : (d.aliases.find((a) => names.includes(a)) as string);
      out.push({ key: entry.name, deployment: d.id, names, applies });
    }
  }
  return out;
}

/** One line for {@link DoubledLimitName}. */
export function describeDoubledLimitName(d: DoubledLimitName): string {
  const names = d.names.map((n) => `"${n}"`).join(', ');
  return `key "${d.key}": limits.deployments names deployment "${d.deployment}" ${d.names.length} times (${names}); only "${d.applies}"'s limits apply`;
}

/** One line for {@link UnknownModelName}. */
export function describeUnknownModelName(u: UnknownModelName): string {
  return `key "${u.key}": ${u.field} names "${u.name}", which is no deployment's ID, model name or alias`;
}
