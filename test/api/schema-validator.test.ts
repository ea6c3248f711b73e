/**
 * The validators the build compiles ahead of time (scripts/precompile-validators.mjs, run by
 * `npm run build`, which `npm test` runs first) against the ones ajv compiles at run time from the
 * schemas in src/: the build made one for every schema the router validates, from these very
 * schemas, and each gives the same verdict, the same errors and (for the config) the same defaults.
 */
import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { ValidateFunction } from 'ajv';
import { API_ROUTES } from '../../src/api/routes.js';
import { precompiledFile, validatorFingerprint, validatorFor, VALIDATOR_OPTIONS, type ValidatorKind } from '../../src/api/schema-validator.js';
import type * as SchemaValidator from '../../src/api/schema-validator.js';
import { routingOverridesSchema } from '../../src/balancer/settings.js';
import { keysFileSchema } from '../../src/config/keys-file.js';
import { configSchema } from '../../src/config/schema.js';

const dist = new URL('../../dist/api/', import.meta.url);
const requireCjs = createRequire(import.meta.url);

/** Every validator the router asks for, as src/ declares them. */
const SCHEMAS: Record<ValidatorKind, [string, object][]> = {
  requestFirst: API_ROUTES.map((route) => [route.name, route.schema]),
  request: API_ROUTES.map((route) => [route.name, route.schema]),
  config: [['config', configSchema]],
  keys: [['keys', keysFileSchema]],
  routing: [['routing', routingOverridesSchema]],
};

interface Built {
  validators: Record<string, ValidateFunction>;
  fingerprints: Record<string, string>;
}

function built(kind: ValidatorKind): Built {
  const file = new URL(precompiledFile(kind), dist);
  if (!existsSync(file)) throw new Error(`${file.pathname} is missing: run \`npm run build\` (npm test does it first)`);
  return requireCjs(file.pathname) as Built;
}

/** Objects with the schema's own top-level fields (and a stray one) holding arbitrary JSON. */
function bodies(schema: object): fc.Arbitrary<Record<string, unknown>> {
  const fields = Object.keys((schema as { properties?: object }).properties ?? {});
  return fc.dictionary(fc.constantFrom(...fields, 'unknown_field'), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 6 });
}

describe('precompiled validators', () => {
  it('cover every schema the router validates, made from the schemas in src/', () => {
    expect(Object.keys(SCHEMAS).sort()).toEqual(Object.keys(VALIDATOR_OPTIONS).sort());
    for (const [kind, entries] of Object.entries(SCHEMAS) as [ValidatorKind, [string, object][]][]) {
      const { validators, fingerprints } = built(kind);
      for (const [name, schema] of entries) {
        expect(typeof validators[name]).toBe('function');
        expect({ kind, name, fingerprint: fingerprints[name] }).toEqual({ kind, name, fingerprint: validatorFingerprint(kind, schema) });
      }
    }
  });

  it.each(Object.keys(SCHEMAS) as ValidatorKind[])('give the verdicts and errors of a run-time compile (%s)', (kind) => {
    const { validators } = built(kind);
    for (const [name, schema] of SCHEMAS[kind]) {
      const precompiled = validators[name] as ValidateFunction;
      // the module is loaded from src/ here, where no precompiled file sits next to it: ajv compiles
      const compiled = validatorFor(kind, name, schema);
      expect(compiled).not.toBe(precompiled);
      const inputs = kind === 'keys' ? fc.array(bodies((schema as { items: object }).items), { maxLength: 3 }) : bodies(schema);
      fc.assert(
        fc.property(inputs, (input) => {
          const a = structuredClone(input);
          const b = structuredClone(input);
          const verdict = precompiled(a);
          expect(compiled(b)).toBe(verdict);
          expect(compiled.errors ?? null).toEqual(precompiled.errors ?? null);
          expect(b).toEqual(a); // defaults filled in alike (the config's useDefaults)
        }),
        { numRuns: kind === 'request' ? 60 : 300 },
      );
    }
  });

  it('fill in the config defaults ahead of time as at run time', () => {
    const precompiled = built('config').validators.config as ValidateFunction;
    const config = {
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'p', servedModelName: 'm', endpoints: ['http://127.0.0.1:1'] }],
      deployments: [{ id: 'd', model: 'm', targets: [{ pool: 'p' }] }],
    };
    const a = structuredClone(config);
    const b = structuredClone(config);
    expect(precompiled(a)).toBe(true);
    expect(validatorFor('config', 'config', configSchema)(b)).toBe(true);
    expect(a).toEqual(b);
    expect(Object.keys(a).length).toBeGreaterThan(Object.keys(config).length);
  });

  it('are what the built router takes for the schema they were made from, and only for it', async () => {
    const builtModule = (await import(new URL('schema-validator.js', dist).href)) as typeof SchemaValidator;
    expect(builtModule.validatorFor('routing', 'routing', routingOverridesSchema)).toBe(built('routing').validators.routing);
    const changed = { ...routingOverridesSchema, description: 'edited after the build' };
    const validate = builtModule.validatorFor('routing', 'routing', changed);
    expect(validate).not.toBe(built('routing').validators.routing);
    expect(validate({ scorers: 'not a list' })).toBe(false);
  });
});
