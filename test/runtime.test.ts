import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { MIN_NODE, routerNodeFlags, unsupportedNode } from '../src/runtime.js';

describe('unsupportedNode', () => {
  it.each([
    ['20.20.2', true],
    ['v22.18.9', true],
    ['22.19.0', false],
    ['22.20.1', false],
    ['24.21.0', false],
    ['25.0.0', false],
  ])('%s unsupported: %s', (version, unsupported) => {
    expect(unsupportedNode(version) !== undefined).toBe(unsupported);
  });

  it('says what is needed and what this is, on one line', () => {
    const message = unsupportedNode('20.20.2') ?? '';
    expect(message).toContain(`needs Node.js ${MIN_NODE} or later (this is v20.20.2)`);
    expect(message).not.toContain('\n');
  });

  it('matches the engines field of package.json', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(`>=${MIN_NODE.replace(/\.0$/, '')}`);
  });
});

describe('routerNodeFlags', () => {
  const ALL = ['--max-semi-space-size=4', '--no-parallel-scavenge', '--no-allocation-site-pretenuring', '--liftoff-only'];

  it('gives serve and demo the GC flags, other commands nothing', () => {
    expect(routerNodeFlags('serve', [], undefined)).toEqual(ALL);
    expect(routerNodeFlags('demo', [], '')).toEqual(ALL);
    for (const command of ['validate', 'sim', '--help', undefined]) expect(routerNodeFlags(command, [], undefined)).toEqual([]);
  });

  it('leaves a flag the user set, on the command line or in NODE_OPTIONS, with any value or spelling', () => {
    expect(routerNodeFlags('serve', ['--max-semi-space-size=16'], undefined)).toEqual(ALL.slice(1));
    expect(routerNodeFlags('serve', [], '--enable-source-maps --max_semi_space_size=8')).toEqual(ALL.slice(1));
    expect(routerNodeFlags('serve', ['--enable-source-maps'], '--max-old-space-size=512')).toEqual(ALL);
  });

  it('leaves a boolean flag the user set either way: --x and --no-x are one flag', () => {
    expect(routerNodeFlags('serve', ['--parallel-scavenge'], undefined)).toEqual(['--max-semi-space-size=4', '--no-allocation-site-pretenuring', '--liftoff-only']);
    expect(routerNodeFlags('serve', [], '--no_allocation_site_pretenuring')).toEqual(['--max-semi-space-size=4', '--no-parallel-scavenge', '--liftoff-only']);
    expect(routerNodeFlags('serve', ['--allocation-site-pretenuring', '--no-parallel-scavenge', '--max-semi-space-size=2', '--no-liftoff-only'], undefined)).toEqual([]);
  });
});
