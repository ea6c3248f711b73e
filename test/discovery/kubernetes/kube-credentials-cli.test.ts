/**
 * `modelgate serve` in Kubernetes mode without discovery.kubeconfig, run as a user runs it from a
 * laptop: the built dist/cli.js (which `npm test` builds first) as a child process whose environment
 * carries KUBECONFIG, or no credentials at all. Each child gets a minimal environment (PATH, an empty
 * HOME and what the test sets), so the machine's own KUBECONFIG, ~/.kube/config or service account
 * never play a part.
 */
import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';
import { rawRequest } from '../../helpers/http.js';
import { eventually, llamaCluster } from '../../helpers/kube-env.js';
import { KEY } from '../../helpers/router.js';

const cli = new URL('../../../dist/cli.js', import.meta.url).pathname;
const BOUND_MS = 10_000;

beforeAll(() => {
  if (!existsSync(cli)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it first)');
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A temp dir with a keys file and a Kubernetes-mode config without discovery.kubeconfig; plus an empty home. */
async function setup(): Promise<{ dir: string; configFile: string; home: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-kube-cli-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const home = join(dir, 'home');
  await mkdir(home);
  await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
  const configFile = join(dir, 'modelgate.yaml');
  await writeFile(
    configFile,
    [
      'server: { host: 127.0.0.1, port: 0, shutdownDelayMs: 0 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      'auth: { keysFile: keys.yaml }',
      'discovery:',
      '  mode: kubernetes',
      '  namespaces: [models]',
      '  leaderElection: { leaseNamespace: modelgate }',
      '',
    ].join('\n'),
  );
  return { dir, configFile, home };
}

/** What a child started with `env` may see: PATH and `env`, nothing else of this process's environment. */
const childEnv = (env: Record<string, string>): NodeJS.ProcessEnv => ({ PATH: process.env.PATH ?? '', ...env });

interface Served {
  child: ChildProcess;
  api: string;
  admin: string;
  stderr: () => string;
  exit: Promise<number | null>;
}

/** `node dist/cli.js serve --config FILE`, resolved once it logs that it listens; stopped after the test. */
async function serve(configFile: string, env: NodeJS.ProcessEnv): Promise<Served> {
  const child = spawn(process.execPath, [cli, 'serve', '--config', configFile], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exit;
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const urls = await new Promise<{ api: string; admin: string }>((resolve, reject) => {
    createInterface(child.stdout).on('line', (line) => {
      let entry: { msg?: string; api?: string; admin?: string };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        return; // not a log line
      }
      if (entry.msg === 'modelgate listening') resolve({ api: entry.api ?? '', admin: entry.admin ?? '' });
    });
    void exit.then((code) => reject(new Error(`modelgate exited early with ${code}: ${stderr}`)));
  });
  return { child, ...urls, stderr: () => stderr, exit };
}

/** Runs `node dist/cli.js serve --config FILE` to its exit; one still running after BOUND_MS is killed (code null). */
function serveToExit(configFile: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, 'serve', '--config', configFile], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const killer = setTimeout(() => child.kill('SIGKILL'), BOUND_MS);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('close', (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('modelgate serve in Kubernetes mode, credentials from the environment', () => {
  it('uses KUBECONFIG when discovery.kubeconfig is not set: ready, lists and serves the cluster’s models', async () => {
    const { fake } = await llamaCluster(['pod-a'], cleanups);

    const { dir, configFile, home } = await setup();
    const kubeconfig = join(dir, 'laptop', 'config');
    await mkdir(join(dir, 'laptop'));
    await writeFile(kubeconfig, fake.kubeconfig('laptop-token'));
    const router = await serve(configFile, childEnv({ HOME: home, KUBECONFIG: [join(dir, 'laptop', 'not-there'), kubeconfig].join(delimiter) }));

    await eventually(
      () => rawRequest(`${router.admin}/readyz`).then((r) => r.status),
      (s) => s === 200,
      'the router to become ready',
      BOUND_MS,
    );
    const models = await rawRequest(`${router.api}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect((JSON.parse(models.body) as { data: Array<{ id: string }> }).data.map((m) => m.id).sort()).toEqual(['default', 'llama-3', 'llama-prod']);
    const chat = (): Promise<string> =>
      rawRequest(`${router.api}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 } }).then(
        (r) => (r.status === 200 ? String(r.headers['x-sim-replica']) : `status ${r.status}`),
      );
    await eventually(chat, (answer) => answer === 'pod-a', 'pod-a to answer a chat request for "default"', BOUND_MS);
    // every call the router made to the API server carried the KUBECONFIG user's token
    expect(fake.requests.length).toBeGreaterThan(0);
    expect(new Set(fake.requests.map((r) => r.token))).toEqual(new Set(['laptop-token']));

    router.child.kill('SIGTERM');
    expect(await router.exit).toBe(0);
    expect(router.stderr()).toBe('');
  });
});

describe('modelgate serve in Kubernetes mode without credentials', () => {
  it('exits 2 with one line on stderr saying what it tried', async () => {
    const { configFile, home } = await setup();
    const result = await serveToExit(configFile, childEnv({ HOME: home }));
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      `modelgate: no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG not set; not in a cluster (KUBERNETES_SERVICE_HOST unset); ${join(home, '.kube', 'config')} not found\n`,
    );
  });

  it('exits 2 with one line naming a KUBECONFIG file it cannot use', async () => {
    const { dir, configFile, home } = await setup();
    const broken = join(dir, 'broken-kubeconfig');
    await writeFile(broken, 'apiVersion: v1\nkind: Config\nclusters: [{ name: x, cluster: { server: "https://x.example" } }]\ncontexts: [{ name: x, context: { cluster: x } }]\n');
    const result = await serveToExit(configFile, childEnv({ HOME: home, KUBECONFIG: broken }));
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(`modelgate: cannot use kubeconfig ${broken} from KUBECONFIG: no current context (current-context is not set)\n`);
  });
});
