/**
 * Every JSON-Schema validator of the router, compiled ahead of time.
 *
 * ajv turns a schema into JavaScript. Doing that when the router starts (the config schema, every
 * API's request schema, the keys file, routing overrides) grew the process by about 25 MiB that V8
 * then kept, and loading ajv's compiler by 8 more: the largest part of an idle router's memory. So
 * `npm run build` runs `scripts/precompile-validators.mjs` after `tsc`, which writes the same
 * validators as ajv's documented standalone code (`ajv/dist/standalone`), one CommonJS file per
 * {@link ValidatorKind} next to this module, with a fingerprint of the schema and options each was
 * made from. `validatorFor` takes the precompiled function when its fingerprint matches the schema it
 * is asked for, and otherwise compiles it with ajv as before: from `src/` (the unit tests), or when a
 * schema changed without a build. `test/startup/lazy-loading.test.ts` pins that a built router never
 * loads ajv's compiler.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Ajv, Options, ValidateFunction } from 'ajv';

/** ajv's options for each family of schemas; the precompile script builds each with the same. */
export const VALIDATOR_OPTIONS = {
  /**
   * API request bodies, the check every request takes: it stops at the first error (each branch of a
   * union at its own first), so a body of millions of items costs one pass over them, valid or not.
   * Collecting every error built several error objects an item (4.5 million bad items in an 8.6 MiB
   * body took 77 s of the event loop and then the heap), and a valid list that a union's earlier branch
   * rejects item by item built them too.
   */
  requestFirst: { allErrors: false, verbose: true, strict: true, strictTypes: false },
  /** API request bodies a check refused, when small enough: every error collected, each with its schema (`verbose`) for the messages. */
  request: { allErrors: true, verbose: true, strict: true, strictTypes: false },
  /** The config file: also fills in its defaults. */
  config: { allErrors: true, useDefaults: true, verbose: true, strict: true },
  /** The API keys file. */
  keys: { allErrors: true, verbose: true, strict: true },
  /** A pool's routing overrides: the first error is enough. */
  routing: { allErrors: false, strict: true },
} as const satisfies Record<string, Options>;

export type ValidatorKind = keyof typeof VALIDATOR_OPTIONS;

/** The file the precompile script writes for `kind`, next to this module. */
export const precompiledFile = (kind: ValidatorKind): string => `./precompiled-validators-${kind}.cjs`;

/** What ties a precompiled validator to the schema and options it was made from. */
export function validatorFingerprint(kind: ValidatorKind, schema: object): string {
  return createHash('sha256')
    .update(JSON.stringify([VALIDATOR_OPTIONS[kind], schema]))
    .digest('hex');
}

interface PrecompiledModule {
  /** Validators by name, and each one's fingerprint. */
  validators: Record<string, ValidateFunction>;
  fingerprints: Record<string, string>;
}

const requireCjs = createRequire(import.meta.url);
const precompiled = new Map<ValidatorKind, PrecompiledModule | null>();
let ajvs: Map<ValidatorKind, Ajv> | undefined;

function precompiledModule(kind: ValidatorKind): PrecompiledModule | null {
  let loaded = precompiled.get(kind);
  if (loaded === undefined) {
    try {
      loaded = requireCjs(precompiledFile(kind)) as PrecompiledModule;
    } catch {
      loaded = null; // not built (running from src/)
    }
    precompiled.set(kind, loaded);
  }
  return loaded;
}

/** ajv itself, loaded only when a validator has to be compiled here. */
function compile(kind: ValidatorKind, schema: object): ValidateFunction {
  if (!ajvs) {
    const { Ajv: AjvClass } = requireCjs('ajv') as { Ajv: new (options: Options) => Ajv };
    ajvs = new Map(Object.entries(VALIDATOR_OPTIONS).map(([k, options]) => [k as ValidatorKind, new AjvClass(options)]));
  }
  return (ajvs.get(kind) as Ajv).compile(schema);
}

/** The validator for `schema`, named `name` within its kind: precompiled when the build made it from this very schema. */
export function validatorFor(kind: ValidatorKind, name: string, schema: object): ValidateFunction {
  const module = precompiledModule(kind);
  const made = module?.validators[name];
  if (made && module?.fingerprints[name] === validatorFingerprint(kind, schema)) return made;
  return compile(kind, schema);
}
