/**
 * `routing.kvEvents.tokenizer: huggingface` needs the model's tokenizer files: a static config is
 * refused at load when the directory is missing or lacks a file (naming the field and the file), a
 * relative directory is read from the config file's directory; a ModelPool without the directory is
 * refused by the pool resolver.
 */
import { describe, expect, it } from '@jest/globals';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { exitFor, validateCommand } from '../../src/commands.js';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import { poolResolver } from '../../src/config/pool-settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const FIXTURE = join(process.cwd(), 'test/fixtures/hf-tokenizer');

const withPool = (kvEvents: object, where: 'pool' | 'router' = 'pool'): object => ({
  auth: { keysFile: 'keys.yaml' },
  ...(where === 'router' ? { routing: { kvEvents } } : {}),
  pools: [{ name: 'p', servedModelName: 'm', endpoints: ['http://10.0.0.1:8000'], ...(where === 'pool' ? { routing: { kvEvents } } : {}) }],
  deployments: [{ id: 'd', model: 'm', targets: [{ pool: 'p' }] }],
});

const hf = (tokenizerDir?: string): object => ({ enabled: true, tokenizer: 'huggingface', ...(tokenizerDir === undefined ? {} : { tokenizerDir }) });

describe('kvEvents.tokenizerDir in a config file', () => {
  it('resolves a relative directory against the config file and accepts it when both files are readable', () => {
    const config = buildConfig(withPool(hf('hf-tokenizer')), join(process.cwd(), 'test/fixtures'));
    expect((config.pools[0] as { routing?: { kvEvents?: { tokenizerDir?: string } } }).routing?.kvEvents?.tokenizerDir).toBe(FIXTURE);
    const routerWide = buildConfig(withPool(hf(FIXTURE), 'router'), '/etc/modelgate');
    expect(routerWide.routing.kvEvents).toMatchObject({ tokenizer: 'huggingface', tokenizerDir: FIXTURE });
  });

  it('refuses huggingface without a directory, naming the field', () => {
    expect(() => buildConfig(withPool(hf()), '/x')).toThrow(ConfigError);
    expect(() => buildConfig(withPool(hf()), '/x')).toThrow(/pools\[0\]\.routing\.kvEvents\.tokenizerDir.*needs kvEvents\.tokenizerDir/s);
    expect(() => buildConfig(withPool(hf(), 'router'), '/x')).toThrow(/routing\.kvEvents\.tokenizerDir/);
  });

  it('refuses a directory without tokenizer_config.json, naming the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tok-'));
    try {
      await writeFile(join(dir, 'tokenizer.json'), '{}');
      expect(() => buildConfig(withPool(hf(dir)), '/x')).toThrow(new RegExp(`cannot read ${join(dir, 'tokenizer_config.json')} \\(ENOENT\\)`));
      expect(() => buildConfig(withPool(hf(join(dir, 'nope'))), '/x')).toThrow(/tokenizer\.json \(ENOENT\): the directory must hold the model's tokenizer\.json and tokenizer_config\.json/);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it('fails `modelgate validate` (and the start) on files that are there but do not load, naming the field and the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tok-'));
    try {
      await writeFile(join(dir, 'tokenizer.json'), '{"not":');
      await copyFile(join(FIXTURE, 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
      await writeFile(join(dir, 'keys.yaml'), '- name: tester\n  key: sk-test-0123456789\n');
      const config = join(dir, 'modelgate.json');
      await writeFile(config, JSON.stringify(withPool(hf(dir))));
      const err = await validateCommand(['--config', config], {}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringMatching(/pools\[0\]\.routing\.kvEvents\.tokenizerDir.*tokenizer\.json is not a tokenizer file/s) as unknown });
      // the same files whole: validated
      await copyFile(join(FIXTURE, 'tokenizer.json'), join(dir, 'tokenizer.json'));
      expect(await validateCommand(['--config', config], {})).toMatch(/^config OK: 1 pool/);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it('does not look for the files of a pool that does not use them', () => {
    expect(() => buildConfig(withPool({ enabled: false, tokenizer: 'huggingface', tokenizerDir: '/nowhere' }), '/x')).not.toThrow();
    expect(() => buildConfig(withPool({ enabled: true, tokenizer: 'opaque' }), '/x')).not.toThrow();
  });

  it('refuses a tokenizer the schema does not know', () => {
    expect(() => buildConfig(withPool({ enabled: true, tokenizer: 'sentencepiece' }), '/x')).toThrow(/tokenizer/);
  });
});

describe('kvEvents.tokenizerDir in a ModelPool', () => {
  it('is required with huggingface', () => {
    const resolve = poolResolver({ resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS });
    const pool = { name: 'p', engine: 'vllm' as const, servedModelName: 'm', capabilities: ['chat' as const], overrides: { routing: { kvEvents: hf() } } };
    const resolved = resolve(pool, 'spec');
    expect('problem' in resolved && resolved.problem).toBe(
      "spec.routing: kvEvents.tokenizer huggingface needs kvEvents.tokenizerDir: the directory holding the model's tokenizer.json and tokenizer_config.json",
    );
    const ok = resolve({ ...pool, overrides: { routing: { kvEvents: hf('/models/qwen') } } }, 'spec');
    expect('spec' in ok && ok.spec.routing.kvEvents).toMatchObject({ tokenizer: 'huggingface', tokenizerDir: '/models/qwen' });
  });
});
