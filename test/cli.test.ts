import { describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exitFor, validateCommand } from '../src/commands.js';
import { startTestRouter } from './helpers/router.js';

async function withFiles(files: Record<string, string>, run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-cli-'));
  try {
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    await run(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const config = `
auth: { keysFile: keys.yaml }
pools:
  - name: llama
    servedModelName: meta-llama/Llama-3.1-8B-Instruct
    endpoints: [http://10.0.0.7:8000, http://10.0.0.8:8000]
deployments:
  - id: llama-prod
    model: llama-3.1-8b-instruct
    aliases: [default]
    targets: [{ pool: llama }]
`;

describe('modelgate validate', () => {
  it('summarises a good config and its keys', async () => {
    await withFiles({ 'modelgate.yaml': config, 'keys.yaml': '- name: a\n  key: sk-aaaaaaaa\n' }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe('config OK: 1 pool, 2 endpoints, 1 deployment, 1 key\n');
      expect(await validateCommand([], { MODELGATE_CONFIG: join(dir, 'modelgate.yaml') })).toContain('config OK');
    });
  });

  it('warns of a key that names no deployment (static mode, where every deployment is known), and still passes', async () => {
    const keys = [
      '- name: a',
      '  key: sk-aaaaaaaa',
      '  models: [llama-prod, default, llama-3.1-8b-instruct, llama-70b-prod]', // ID, alias, model name; and a typo
      '  limits:',
      '    deployments: { default: { requestsPerMinute: 5 }, text-embedding-3-small: { requestsPerMinute: 5 } }',
      "- name: b\n  key: sk-bbbbbbbb\n  models: ['*']",
      '',
    ].join('\n');
    await withFiles({ 'modelgate.yaml': config, 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe(
        'config OK: 1 pool, 2 endpoints, 1 deployment, 2 keys\n' +
          'warning: key "a": models names "llama-70b-prod", which is no deployment\'s ID, model name or alias\n' +
          'warning: key "a": limits.deployments names "text-embedding-3-small", which is no deployment\'s ID, model name or alias\n',
      );
    });
  });

  it('warns of a key that limits one deployment under two of its names (only one entry applies), and still passes', async () => {
    const keys = [
      '- name: a',
      '  key: sk-aaaaaaaa',
      '  limits:',
      '    deployments: { default: { requestsPerMinute: 50 }, llama-3.1-8b-instruct: { requestsPerMinute: 9 }, llama-prod: { requestsPerMinute: 5 } }',
      '- name: b',
      '  key: sk-bbbbbbbb',
      '  limits: { deployments: { default: { requestsPerMinute: 50 } } }',
      '',
    ].join('\n');
    await withFiles({ 'modelgate.yaml': config, 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe(
        'config OK: 1 pool, 2 endpoints, 1 deployment, 2 keys\n' +
          'warning: key "a": limits.deployments names deployment "llama-prod" 3 times ("default", "llama-3.1-8b-instruct", "llama-prod"); only "llama-prod"\'s limits apply\n',
      );
    });
  });

  it('warns of an API a pool declares that its engine takes in another shape (TEI rerank, TGI and llama.cpp tokenize), and still passes', async () => {
    const keys = '- name: a\n  key: sk-aaaaaaaa\n';
    const declared = config.replace('    endpoints:', '    engine: tgi\n    capabilities: [chat, tokenize]\n    endpoints:');
    await withFiles({ 'modelgate.yaml': declared, 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe(
        'config OK: 1 pool, 2 endpoints, 1 deployment, 1 key\n' +
          "warning: pool llama declares tokenize, which its engine (tgi) does not serve as the router sends it: TGI's /tokenize takes `inputs`, not vLLM's `prompt` or `messages`; every such request would fail at the engine\n",
      );
    });
  });

  it('exits 2 with a message naming the field', async () => {
    await withFiles({ 'modelgate.yaml': config.replace('servedModelName', 'servedModel'), 'keys.yaml': '[]' }, async (dir) => {
      const err = await validateCommand(['--config', join(dir, 'modelgate.yaml')], {}).catch((e: unknown) => e);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringContaining('pools[0].servedModel is not a known field') });
    });
  });

  it('refuses a pool serve would refuse: scale from zero without health checks (static mode)', async () => {
    const keys = '- name: a\n  key: sk-aaaaaaaa\n';
    const scaleFromZero = config.replace('    endpoints:', '    resilience: { scaleFromZero: { enabled: true } }\n    endpoints:');
    await withFiles({ 'modelgate.yaml': scaleFromZero, 'keys.yaml': keys }, async (dir) => {
      const err = await validateCommand(['--config', join(dir, 'modelgate.yaml')], {}).catch((e: unknown) => e);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringContaining('scaleFromZero needs resilience.healthCheck.enabled in static mode') });
    });
    // with the health checks it needs, the same pool passes
    const withChecks = config.replace('    endpoints:', '    resilience: { scaleFromZero: { enabled: true }, healthCheck: { enabled: true } }\n    endpoints:');
    await withFiles({ 'modelgate.yaml': withChecks, 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe('config OK: 1 pool, 2 endpoints, 1 deployment, 1 key\n');
    });
  });

  it('exits 2 for a bad keys file and for unknown flags', async () => {
    await withFiles({ 'modelgate.yaml': config, 'keys.yaml': '- name: a\n' }, async (dir) => {
      const err = await validateCommand(['--config', join(dir, 'modelgate.yaml')], {}).catch((e: unknown) => e);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringContaining('needs exactly one of key or keySha256') });
    });
    const flagErr = await validateCommand(['--conf', 'x'], {}).catch((e: unknown) => e);
    expect(exitFor(flagErr).code).toBe(2);
  });

  it('in Kubernetes mode reads the kubeconfig file the config names, as serve does (the environment’s credentials are not its to check)', async () => {
    const keys = '- name: a\n  key: sk-aaaaaaaa\n';
    const kube = (file?: string): string => `auth: { keysFile: keys.yaml }\ndiscovery: { mode: kubernetes${file ? `, kubeconfig: ${file}` : ''} }\n`;
    const good = [
      'apiVersion: v1',
      'kind: Config',
      'clusters: [{ name: c, cluster: { server: "https://127.0.0.1:6443" } }]',
      'users: [{ name: u, user: { token: t } }]',
      'contexts: [{ name: x, context: { cluster: c, user: u } }]',
      'current-context: x',
      '',
    ].join('\n');
    await withFiles({ 'modelgate.yaml': kube('missing.yaml'), 'keys.yaml': keys }, async (dir) => {
      const err = await validateCommand(['--config', join(dir, 'modelgate.yaml')], {}).catch((e: unknown) => e);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringMatching(/kubeconfig .*missing\.yaml from discovery\.kubeconfig: file not found/) });
    });
    await withFiles({ 'modelgate.yaml': kube('broken.yaml'), 'broken.yaml': 'clusters: [: :\n', 'keys.yaml': keys }, async (dir) => {
      const err = await validateCommand(['--config', join(dir, 'modelgate.yaml')], {}).catch((e: unknown) => e);
      expect(exitFor(err)).toEqual({ code: 2, message: expect.stringContaining('broken.yaml') });
    });
    await withFiles({ 'modelgate.yaml': kube('kube.yaml'), 'kube.yaml': good, 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toBe('config OK: 0 pools, 0 endpoints, 0 deployments, 1 key\n');
    });
    await withFiles({ 'modelgate.yaml': kube(), 'keys.yaml': keys }, async (dir) => {
      expect(await validateCommand(['--config', join(dir, 'modelgate.yaml')], {})).toContain('config OK');
    });
  });
});

describe('modelgate serve', () => {
  it('logs at start, as validate says it, an API a pool declares that its engine takes in another shape', async () => {
    const g = await startTestRouter({
      pools: [{ name: 'bge', engine: 'tei', servedModelName: 'bge', capabilities: ['embeddings', 'rerank'], endpoints: ['http://127.0.0.1:9'] }],
      deployments: [{ id: 'bge', model: 'bge', targets: [{ pool: 'bge' }] }],
    });
    try {
      const warned = g.logs.map((l) => JSON.parse(l) as { level: number; pool?: string; msg: string }).filter((l) => l.pool === 'bge' && l.msg.includes('declares rerank'));
      expect(warned).toEqual([expect.objectContaining({ level: 40, msg: expect.stringContaining("TEI's /rerank takes `texts`") as unknown })]);
    } finally {
      await g.close();
    }
  });
});
