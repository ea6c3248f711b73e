/**
 * releaseStartupMemory leans on V8's gc extension (wiring/startup-memory.ts): these pin that it runs a
 * full collection and leaves no `gc` behind, so a Node upgrade that changes either fails here.
 */
import { describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { releaseStartupMemory } from '../../src/wiring/startup-memory.js';

const built = new URL('../../dist/wiring/startup-memory.js', import.meta.url);

/** A WeakRef to an object nothing else holds. */
function unreachable(): WeakRef<object> {
  return new WeakRef({ payload: 'x'.repeat(1024) });
}

/** A macrotask later: a WeakRef's target is kept alive until the job that made it ends. */
const nextTask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('releaseStartupMemory', () => {
  it('runs a full collection: an object only a WeakRef holds is gone after it', async () => {
    const ref = unreachable();
    await nextTask();
    releaseStartupMemory();
    expect(ref.deref()).toBeUndefined();
  });

  it('leaves no gc function in the process’s context or in contexts made after it', () => {
    // a fresh process: a test elsewhere in this worker may have turned --expose-gc on and left it on
    if (!existsSync(built)) throw new Error('dist/ is missing: run `npm run build` (npm test does it first)');
    const script = `import { runInNewContext } from 'node:vm'; const { releaseStartupMemory } = await import(${JSON.stringify(built.href)}); releaseStartupMemory(); process.stdout.write(typeof globalThis.gc + ' ' + runInNewContext('typeof gc'));`;
    expect(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })).toBe('undefined undefined');
  });
});
