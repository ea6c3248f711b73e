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
  it('gives serve and demo the semi-space flag, other commands nothing', () => {
    expect(routerNodeFlags('serve', [], undefined)).toEqual(['--max-semi-space-size=4']);
    expect(routerNodeFlags('demo', [], '')).toEqual(['--max-semi-space-size=4']);
    for (const command of ['validate', 'sim', '--help', undefined]) expect(routerNodeFlags(command, [], undefined)).toEqual([]);
  });

  it('leaves a flag the user set, on the command line or in NODE_OPTIONS, with any value or spelling', () => {
    expect(routerNodeFlags('serve', ['--max-semi-space-size=16'], undefined)).toEqual([]);
    expect(routerNodeFlags('serve', [], '--enable-source-maps --max_semi_space_size=8')).toEqual([]);
    expect(routerNodeFlags('serve', ['--enable-source-maps'], '--max-old-space-size=512')).toEqual(['--max-semi-space-size=4']);
  });
});
