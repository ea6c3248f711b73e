import { describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearerToken, KeyStore, mayUse, sha256 } from '../../src/auth/key-store.js';
import { type Deployment } from '../../src/core/types.js';

async function withKeys(yaml: string, run: (store: KeyStore, file: string) => Promise<void> | void): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-keys-'));
  const file = join(dir, 'keys.yaml');
  await writeFile(file, yaml);
  const store = new KeyStore(file);
  try {
    await store.load();
    await run(store, file);
  } finally {
    store.close();
    await rm(dir, { recursive: true, force: true });
  }
}

const deployment: Deployment = { id: 'llama-prod', model: 'llama', aliases: ['default'], targets: [], fallbacks: [], created: 0 };

describe('KeyStore', () => {
  it('authenticates plain and pre-hashed keys, and nothing else', async () => {
    await withKeys(`- name: plain\n  key: sk-plain-key\n- name: hashed\n  keySha256: ${sha256('sk-hashed-key').toString('hex')}\n`, (store) => {
      expect(store.authenticate('sk-plain-key')?.name).toBe('plain');
      expect(store.authenticate('sk-hashed-key')?.name).toBe('hashed');
      expect(store.authenticate('sk-plain-ke')).toBeUndefined();
      expect(store.authenticate('')).toBeUndefined();
      expect(store.size).toBe(2);
    });
  });

  it('keeps the current keys, and their limits, when a reload finds a malformed limit', async () => {
    await withKeys('- name: a\n  key: sk-aaaaaaaa\n  limits: { requestsPerMinute: 60 }\n', async (store, file) => {
      await writeFile(file, '- name: a\n  key: sk-aaaaaaaa\n  limits: { requestsPerMinute: 0 }\n');
      expect(await store.reload()).toBe(false);
      expect(store.authenticate('sk-aaaaaaaa')).toMatchObject({ name: 'a', weight: 1, limits: { requestsPerMinute: 60 } });
    });
  });

  it('keeps the current keys when a reload finds a bad file', async () => {
    await withKeys('- name: a\n  key: sk-aaaaaaaa\n', async (store, file) => {
      await writeFile(file, 'not: [valid');
      expect(await store.reload()).toBe(false);
      expect(store.authenticate('sk-aaaaaaaa')?.name).toBe('a');
    });
  });
});

describe('bearerToken', () => {
  it.each([
    [undefined, undefined],
    ['Bearer sk-1', 'sk-1'],
    ['bearer   sk-1  ', 'sk-1'],
    ['Basic sk-1', undefined],
    ['Bearer', undefined],
    ['Bearer a b', undefined],
  ])('reads %j as %j', (header, token) => {
    expect(bearerToken(header)).toBe(token);
  });
});

describe('mayUse', () => {
  it.each([
    [undefined, true],
    [new Set(['llama-prod']), true],
    [new Set(['llama']), true],
    [new Set(['default']), true],
    [new Set(['other']), false],
  ])('with models %p → %p', (models, allowed) => {
    expect(mayUse({ name: 'k', models, priority: 'standard', weight: 1 }, deployment)).toBe(allowed);
  });
});
