import { describe, expect, it, jest } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearerToken, KeyStore, mayUse, sha256 } from '../../src/auth/key-store.js';
import { type KeyEntry } from '../../src/config/keys-file.js';
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

  // What a key costs as the keys file grows (a lookup, against the loop over every digest earlier versions ran)
  // is measured by the scale benchmark (bench/results/scale.md), not timed here.
  it('finds a key among 20,000 by its digest, plain or pre-hashed, and nothing for a wrong one', async () => {
    const entries: KeyEntry[] = Array.from({ length: 20_000 }, (_, i) => ({ name: `k${i}`, key: `sk-key-${i}-0123456789` }));
    entries.push({ name: 'hashed', keySha256: sha256('sk-hashed-key-0123').toString('hex') });
    const store = new KeyStore('unused.yaml', {}, () => Promise.resolve(entries));
    await store.load();
    expect(store.authenticate('sk-key-19999-0123456789')?.name).toBe('k19999');
    expect(store.authenticate('sk-key-0-0123456789')?.name).toBe('k0');
    expect(store.authenticate('sk-hashed-key-0123')?.name).toBe('hashed');
    expect(store.authenticate('sk-key-20000-0123456789')).toBeUndefined();
    expect(store.authenticate('')).toBeUndefined();
  });

  it('lands overlapping reloads in the order they began: a slow older read never puts back a key the newer file removed', async () => {
    const entry = (name: string): KeyEntry => ({ name, key: `sk-${name}-0123456789` });
    // two reads of the file, before and after mallory's key was removed; whichever are under way at
    // once answer newest first (the older read was the slow one)
    const contents = [[entry('alice'), entry('mallory')], [entry('alice')]];
    const pending: Array<() => void> = [];
    let begun = 0;
    const store = new KeyStore('keys.yaml', {}, () => {
      const entries = contents[begun++] as KeyEntry[];
      return new Promise<KeyEntry[]>((resolve) => pending.push(() => resolve(entries)));
    });
    const both = Promise.all([store.reload(), store.reload()]);
    while (begun < 2 || pending.length > 0) {
      await new Promise((resolve) => setImmediate(resolve));
      while (pending.length > 0) (pending.pop() as () => void)();
    }
    expect(await both).toEqual([true, true]);
    expect(store.authenticate('sk-mallory-0123456789')).toBeUndefined();
    expect(store.authenticate('sk-alice-0123456789')?.name).toBe('alice');
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

describe('KeyStore.authenticateOn (a connection remembers its key)', () => {
  const KEYS = '- name: a\n  key: sk-aaaaaaaa\n- name: b\n  key: sk-bbbbbbbb\n- name: utf\n  key: sk-café-key\n';

  /** Whose key `store` finds each presented key on its connection to be, and how many keys it has hashed in full. */
  function watch(store: KeyStore): { nameOf: (key: string, connection: object) => string | undefined; hashed: () => number } {
    const full = jest.spyOn(store, 'authenticate');
    return { nameOf: (key, connection) => store.authenticateOn(key, connection)?.name, hashed: () => full.mock.calls.length };
  }

  it('hashes a key once per connection: the next request presenting it is compared with it', async () => {
    await withKeys(KEYS, (store) => {
      const { nameOf, hashed } = watch(store);
      const connection = {};
      expect([nameOf('sk-aaaaaaaa', connection), nameOf('sk-aaaaaaaa', connection), nameOf('sk-café-key', {})]).toEqual(['a', 'a', 'utf']);
      expect(hashed()).toBe(2); // the first on each connection
      // another connection remembers nothing of the first
      expect(nameOf('sk-aaaaaaaa', {})).toBe('a');
      expect(hashed()).toBe(3);
    });
  });

  it('authenticates in full any other key on the connection: another tenant’s, a near miss, a wrong length', async () => {
    await withKeys(KEYS, (store) => {
      const { nameOf, hashed } = watch(store);
      const connection = {};
      // a proxy in front may carry several tenants on one connection; a refused key leaves the last good one remembered
      const presented = ['sk-aaaaaaaa', 'sk-bbbbbbbb', 'sk-bbbbbbba', 'sk-bbbbbbbbb', 'sk-bbbbbbb', '', 'sk-bbbbbbbb'];
      expect(presented.map((key) => nameOf(key, connection))).toEqual(['a', 'b', undefined, undefined, undefined, undefined, 'b']);
      expect(hashed()).toBe(6);
    });
  });

  it('keeps a remembered key in memory of its own, not a slice of a shared Buffer pool it would hold for the connection’s life', async () => {
    await withKeys(KEYS, (store) => {
      const connection = {};
      store.authenticateOn('sk-café-key', connection);
      const held = Object.getOwnPropertySymbols(connection).map((s) => (connection as Record<symbol, { key: Uint8Array }>)[s]!.key);
      expect(held).toHaveLength(1);
      expect(Buffer.from(held[0]!).toString('utf8')).toBe('sk-café-key');
      expect(held[0]!.buffer.byteLength).toBe(held[0]!.byteLength);
    });
  });

  it.each([
    ['forgets every remembered key once the file is loaded again: a removed key is refused on its own connection', '- name: b\n  key: sk-bbbbbbbb\n', true, undefined, 2],
    ['keeps remembering across a reload that failed (the keys did not change)', 'not: [valid', false, 'a', 1],
  ])('%s', async (_title, next, reloaded, after, hashedInFull) => {
    await withKeys(KEYS, async (store, file) => {
      const { nameOf, hashed } = watch(store);
      const connection = {};
      expect(nameOf('sk-aaaaaaaa', connection)).toBe('a');
      await writeFile(file, next);
      expect(await store.reload()).toBe(reloaded);
      expect(nameOf('sk-aaaaaaaa', connection)).toBe(after);
      expect(hashed()).toBe(hashedInFull);
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
    expect(mayUse({ name: 'k', models, priority: 'standard', weight: 1, cacheSalt: 's' }, [deployment.id, deployment.model, ...deployment.aliases])).toBe(allowed);
  });

  it('counts only the names it is given (those the deployment holds), not every name the deployment claims', () => {
    expect(mayUse({ name: 'k', models: new Set(['llama-prod']), priority: 'standard', weight: 1, cacheSalt: 's' }, ['llama', 'default'])).toBe(false);
  });
});
