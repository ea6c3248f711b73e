/** The README's reference tables are generated from code tables; this keeps them from drifting. */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { configSchema } from '../src/config/schema.js';
import { ERROR_CODES } from '../src/core/errors.js';
import { SIM_FLAGS } from '../src/sim/options.js';
import { RESILIENCE_DEFAULTS, resilienceOverridesSchema } from '../src/resilience/settings.js';
import { ROUTING_DEFAULTS, routingOverridesSchema } from '../src/balancer/settings.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());

function simFlagsTable(): string {
  const rows = Object.entries(SIM_FLAGS).map(([key, spec]) => {
    const def = Array.isArray(spec.default) ? spec.default.join(',') : String(spec.default);
    return `| \`--${kebab(key)}\` | ${def === '' ? '(none)' : '`' + def + '`'} | ${spec.help.replaceAll('|', '\\|')} |`;
  });
  return ['| flag | default | meaning |', '| --- | --- | --- |', ...rows].join('\n');
}

describe('README', () => {
  it('lists every simulator flag with the default from SIM_FLAGS', () => {
    const between = readme.split('<!-- sim-flags:start -->\n')[1]?.split('\n<!-- sim-flags:end -->')[0];
    expect(between).toBe(simFlagsTable());
  });

  it('documents every config field', () => {
    const table = readme.split('<!-- config-fields:start -->')[1]?.split('<!-- config-fields:end -->')[0] ?? '';
    const paths: string[] = [];
    const walk = (schema: { properties?: Record<string, unknown>; items?: unknown }, prefix: string): void => {
      for (const [name, child] of Object.entries(schema.properties ?? {})) {
        const sub = child as { properties?: Record<string, unknown>; items?: { properties?: Record<string, unknown> } };
        if (child === resilienceOverridesSchema || child === routingOverridesSchema) paths.push(`${prefix}${name}`); // its fields have their own table
        else if (sub.properties) walk(sub, `${prefix}${name}.`);
        else if (sub.items?.properties && prefix === '') walk(sub.items, `${prefix}${name}[].`);
        else paths.push(`${prefix}${name}`);
      }
    };
    walk(configSchema, '');
    expect(paths.length).toBeGreaterThan(15);
    for (const path of paths) expect(table).toContain(`\`${path}\``);
  });

  it('lists every resilience default with the value in RESILIENCE_DEFAULTS', () => {
    const table = readme.split('<!-- resilience-defaults:start -->')[1]?.split('<!-- resilience-defaults:end -->')[0] ?? '';
    const leaves: Array<[string, unknown]> = [];
    const walk = (value: object, prefix: string): void => {
      for (const [k, v] of Object.entries(value)) {
        if (typeof v === 'object' && v !== null) walk(v as object, `${prefix}${k}.`);
        else leaves.push([`${prefix}${k}`, v]);
      }
    };
    walk(RESILIENCE_DEFAULTS, '');
    expect(leaves.length).toBeGreaterThan(15);
    for (const [path, value] of leaves) expect(table).toContain(`| \`${path}\` | \`${String(value)}\` |`);
  });

  it('lists every routing default with the value in ROUTING_DEFAULTS', () => {
    const table = readme.split('<!-- routing-defaults:start -->')[1]?.split('<!-- routing-defaults:end -->')[0] ?? '';
    const profile = ROUTING_DEFAULTS.scorers.map((s) => `\`${s.name}\`×${s.weight}`).join(', ');
    expect(table).toContain(`| \`scorers\` | ${profile} |`);
    const { scorers: _profile, ...groups } = ROUTING_DEFAULTS;
    for (const [group, fields] of Object.entries(groups)) {
      for (const [field, value] of Object.entries(fields as object)) expect(table).toContain(`| \`${group}.${field}\` | \`${String(value)}\` |`);
    }
  });

  it('lists every error code the router can answer with', () => {
    for (const code of Object.keys(ERROR_CODES)) {
      if (code === 'INTERNAL_ERROR') continue;
      expect(readme).toContain(`\`${code.toLowerCase()}\``);
    }
  });

  it('shows the two commands a newcomer needs', () => {
    expect(readme).toContain('npm ci && npm start');
    expect(readme).toContain('npm test');
  });
});
