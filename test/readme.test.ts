/** The README's reference tables are generated from code tables; this keeps them from drifting. */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { SIM_FLAGS } from '../src/sim/options.js';

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

  it('shows the two commands a newcomer needs', () => {
    expect(readme).toContain('npm ci && npm start');
    expect(readme).toContain('npm test');
  });
});
