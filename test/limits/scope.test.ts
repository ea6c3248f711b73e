/**
 * Which of a key's per-deployment limits a request counts under (`scopeOf`): the deployment's ID, else
 * its model name, else an alias, each only if the deployment holds that name. In Kubernetes mode a
 * younger deployment of another namespace may share a name the older holds; it must not be counted
 * under the older's limit (checksFor then finds the entry and the two shared one count).
 */
import { describe, expect, it } from '@jest/globals';
import { checksFor, scopeOf } from '../../src/limits/limiter.js';
import { type KeyLimits } from '../../src/limits/settings.js';

const limits = (names: string[]): KeyLimits => ({ deployments: new Map(names.map((n) => [n, { requestsPerMinute: 2 }])) });
const llama = { id: 'llama', model: 'llama-b', aliases: ['fast'] };

describe('scopeOf', () => {
  it('takes the ID, the model name, then an alias, among the names the deployment holds', () => {
    expect(scopeOf(limits(['llama', 'llama-b']), llama, ['llama', 'llama-b', 'fast'])).toBe('llama');
    expect(scopeOf(limits(['llama-b', 'fast']), llama, ['llama', 'llama-b', 'fast'])).toBe('llama-b');
    expect(scopeOf(limits(['fast']), llama, ['llama', 'llama-b', 'fast'])).toBe('fast');
    // held names not given (static mode's callers before, tests): every name counts
    expect(scopeOf(limits(['llama']), llama)).toBe('llama');
  });

  it('skips a limited name the deployment does not hold (another namespace’s older deployment holds it)', () => {
    expect(scopeOf(limits(['llama', 'fast']), llama, ['llama-b', 'fast'])).toBe('fast');
    const none = scopeOf(limits(['llama']), llama, ['llama-b', 'fast']);
    expect(none).toBe('');
    // no per-deployment checks for it: the key-wide ones only
    expect(checksFor('key', limits(['llama']), none, Date.now()).rates).toEqual([]);
    expect(checksFor('key', limits(['llama']), scopeOf(limits(['llama']), llama, ['llama']), Date.now()).rates.map((r) => r.id)).toEqual(['requests:llama']);
  });

  it('is the ID when the key has no per-deployment limits', () => {
    expect(scopeOf(limits([]), llama, [])).toBe('llama');
  });
});
