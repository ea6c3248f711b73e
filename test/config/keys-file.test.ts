import { describe, expect, it } from '@jest/globals';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parseKeysFile } from '../../src/config/keys-file.js';
import { ConfigError } from '../../src/config/load.js';

describe('parseKeysFile', () => {
  it('reads names, keys or their SHA-256, and model lists', () => {
    const entries = parseKeysFile(`- name: a\n  key: sk-aaaaaaaa\n- name: b\n  keySha256: ${'ab'.repeat(32)}\n  models: [x, y]\n`, 'keys.yaml');
    expect(entries).toEqual([
      { name: 'a', key: 'sk-aaaaaaaa' },
      { name: 'b', keySha256: 'ab'.repeat(32), models: ['x', 'y'] },
    ]);
  });

  it('reads a key’s priority class', () => {
    expect(parseKeysFile('- name: batch\n  key: sk-aaaaaaaa\n  priority: sheddable\n', 'keys.yaml')).toEqual([{ name: 'batch', key: 'sk-aaaaaaaa', priority: 'sheddable' }]);
  });

  it('reads a key’s weight and limits, with per-deployment limits and `unlimited`', () => {
    const text = [
      '- name: team',
      '  key: sk-aaaaaaaa',
      '  weight: 2.5',
      '  limits:',
      '    requestsPerMinute: 600',
      '    tokensPerMinute: unlimited',
      '    concurrentRequests: 8',
      '    tokensPerDay: 1000000',
      '    tokensPerMonth: 20000000',
      '    deployments: { llama-70b: { requestsPerMinute: 60, concurrentRequests: 2 } }',
    ].join('\n');
    expect(parseKeysFile(text, 'keys.yaml')).toEqual([
      {
        name: 'team',
        key: 'sk-aaaaaaaa',
        weight: 2.5,
        limits: {
          requestsPerMinute: 600,
          tokensPerMinute: 'unlimited',
          concurrentRequests: 8,
          tokensPerDay: 1000000,
          tokensPerMonth: 20000000,
          deployments: { 'llama-70b': { requestsPerMinute: 60, concurrentRequests: 2 } },
        },
      },
    ]);
  });

  it.each([
    ['- key: sk-aaaaaaaa\n', 'entry 0.name is required'],
    ['- name: a\n', 'needs exactly one of key or keySha256'],
    [`- name: a\n  key: sk-aaaaaaaa\n  keySha256: ${'ab'.repeat(32)}\n`, 'needs exactly one of key or keySha256'],
    ['- name: a\n  key: short\n', 'must be at least 8 characters'],
    ['- name: a\n  keySha256: xyz\n', 'keySha256'],
    ['- name: a\n  key: sk-aaaaaaaa\n- name: a\n  key: sk-bbbbbbbb\n', 'key name "a" is used twice'],
    // one key under two names: the second's name and limits would never apply
    ['- name: a\n  key: sk-aaaaaaaa\n- name: b\n  key: sk-aaaaaaaa\n  limits: {requestsPerMinute: 2}\n', '"b" has the same key as "a"'],
    ['- name: a\n  key: sk-aaaaaaaa\n- name: b\n  keySha256: 961B15A4201D10537E9D7A75D46AB24CD864790031A467FC8389A51B9E79BE00\n', '"b" has the same key as "a"'],
    ['- name: a\n  key: sk-aaaaaaaa\n  role: admin\n', 'entry 0.role is not a known field'],
    ['name: a\n', 'must be array'],
    ['', 'keys.yaml: has no keys'],
    ['# every key was removed\n', 'keys.yaml: has no keys'],
    ['null\n', 'keys.yaml: has no keys'],
    ['[]\n', 'keys.yaml: has no keys'],
    ['---\n', 'keys.yaml: has no keys'],
    ['- name: a\n  key: sk-aaaaaaaa\n  priority: urgent\n', 'entry 0.priority must be one of: "critical", "standard", "sheddable"'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { requestsPerMinute: 0 }\n', 'entry 0.limits.requestsPerMinute'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { tokensPerMinute: -5 }\n', 'entry 0.limits.tokensPerMinute'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { tokensPerDay: lots }\n', 'entry 0.limits.tokensPerDay'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { tokensPerDay: 1.5 }\n', 'entry 0.limits.tokensPerDay'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { rpm: 10 }\n', 'entry 0.limits.rpm is not a known field'],
    ['- name: a\n  key: sk-aaaaaaaa\n  limits: { deployments: { llama: { tokensPerDay: 10 } } }\n', 'entry 0.limits.deployments.llama.tokensPerDay is not a known field'],
    ['- name: a\n  key: sk-aaaaaaaa\n  weight: 0\n', 'entry 0.weight'],
  ])('rejects %j without echoing keys', (text, message) => {
    expect(() => parseKeysFile(text, 'keys.yaml')).toThrow(ConfigError);
    expect(() => parseKeysFile(text, 'keys.yaml')).toThrow(message);
    try {
      parseKeysFile(text, 'keys.yaml');
    } catch (err) {
      expect((err as Error).message).not.toContain('sk-aaaaaaaa');
    }
  });
});

describe('parseKeysFile and memory', () => {
  it('keeps nothing of the file once parsed: names kept from 200 reloads of a 45 KB file hold no copy of it', () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const file = Array.from({ length: 500 }, (_, i) => `- name: team-number-${String(i).padStart(4, '0')}-service\n  key: sk-${String(i).padStart(8, '0')}-${'x'.repeat(40)}\n`).join('');
    expect(file.length).toBeGreaterThan(45_000);
    const kept: string[] = [];
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 200; i++) {
      // each reload's text is a fresh string, as each read of the file is
      const text = `${file}# reload ${i}\n`;
      kept.push((parseKeysFile(text, 'keys.yaml')[0] as { name: string }).name); // as a map keeps a key's name
    }
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    expect(kept.every((name) => name === 'team-number-0000-service')).toBe(true);
    // 200 retained copies of the text would be 9 MB and more
    expect(grown).toBeLessThan(3 * 1024 * 1024);
  });
});
