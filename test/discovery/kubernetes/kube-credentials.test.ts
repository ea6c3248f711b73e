/**
 * Where Kubernetes credentials come from: discovery.kubeconfig, then $KUBECONFIG (client-go's merge),
 * then the in-cluster service account, then ~/.kube/config. Every test builds its files in a temp dir
 * and passes the environment in; nothing reads the real environment, home or service account.
 */
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { stringify } from 'yaml';
import { createKubeApi } from '../../../src/discovery/kubernetes/kube-api.js';
import { KubeCredentialsError, resolveKubeCredentials, type KubeCredentials, type KubeCredentialsInput } from '../../../src/discovery/kubernetes/kube-credentials.js';
import { FakeKubeApi } from '../../helpers/fake-kube-api.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-kube-credentials-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

interface KubeconfigParts {
  clusters?: Array<{ name: string; server?: string; ca?: string }>;
  users?: Array<{ name: string; token: string }>;
  contexts?: Array<{ name: string; cluster: string; user?: string }>;
  current?: string;
}

/** A kubeconfig in kubectl's format. */
function kubeconfig(parts: KubeconfigParts): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: (parts.clusters ?? []).map((c) => ({ name: c.name, cluster: { ...(c.server ? { server: c.server } : {}), ...(c.ca ? { 'certificate-authority': c.ca } : {}) } })),
    users: (parts.users ?? []).map((u) => ({ name: u.name, user: { token: u.token } })),
    contexts: (parts.contexts ?? []).map((c) => ({ name: c.name, context: { cluster: c.cluster, ...(c.user ? { user: c.user } : {}) } })),
    ...(parts.current ? { 'current-context': parts.current } : {}),
  });
}

/** One cluster, user and context, all named `name`, for `server`. */
const single = (name: string, server: string): string =>
  kubeconfig({ clusters: [{ name, server }], users: [{ name, token: `${name}-token` }], contexts: [{ name, cluster: name, user: name }], current: name });

async function file(path: string, text: string): Promise<string> {
  const full = join(dir, path);
  await mkdir(join(full, '..'), { recursive: true });
  await writeFile(full, text);
  return full;
}

/** Resolves, or returns the error thrown (always a KubeCredentialsError with a one-line message). */
function attempt(input: KubeCredentialsInput): KubeCredentials | KubeCredentialsError {
  try {
    return resolveKubeCredentials(input);
  } catch (err) {
    expect(err).toBeInstanceOf(KubeCredentialsError);
    expect((err as Error).message).not.toContain('\n');
    return err as KubeCredentialsError;
  }
}

function resolved(input: KubeCredentialsInput): KubeCredentials {
  const result = attempt(input);
  if (result instanceof Error) throw new Error(`expected credentials, got: ${result.message}`);
  return result;
}

function failure(input: KubeCredentialsInput): string {
  const result = attempt(input);
  if (!(result instanceof Error)) throw new Error(`expected an error, got credentials from ${result.source.from}`);
  return result.message;
}

/** Every source set up at once: the field's file, a KUBECONFIG file, a service account and ~/.kube/config. */
async function everySource(): Promise<{ field: string; kubeconfigEnv: string; home: string; serviceAccountDir: string; inClusterEnv: Record<string, string> }> {
  const field = await file('config/kube.yaml', single('field', 'https://field.example:6443'));
  const kubeconfigEnv = await file('env/kubeconfig', single('env', 'https://env.example:6443'));
  const home = join(dir, 'home');
  await file('home/.kube/config', single('home', 'https://home.example:6443'));
  const serviceAccountDir = join(dir, 'sa');
  await file('sa/token', 'sa-token');
  return { field, kubeconfigEnv, home, serviceAccountDir, inClusterEnv: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' } };
}

describe('the order of credential sources', () => {
  it('discovery.kubeconfig beats KUBECONFIG, which beats in-cluster, which beats ~/.kube/config', async () => {
    const s = await everySource();
    const env = { KUBECONFIG: s.kubeconfigEnv, HOME: s.home, ...s.inClusterEnv };
    const field = resolved({ file: s.field, env, serviceAccountDir: s.serviceAccountDir }).source;
    expect(field).toEqual({ from: 'discovery.kubeconfig', files: [s.field], context: 'field', server: 'https://field.example:6443' });

    const fromEnv = resolved({ env, serviceAccountDir: s.serviceAccountDir }).source;
    expect(fromEnv).toEqual({ from: 'KUBECONFIG', files: [s.kubeconfigEnv], context: 'env', server: 'https://env.example:6443' });

    const inCluster = resolved({ env: { HOME: s.home, ...s.inClusterEnv }, serviceAccountDir: s.serviceAccountDir }).source;
    expect(inCluster).toEqual({ from: 'in-cluster', files: [join(s.serviceAccountDir, 'token')], context: 'inClusterContext', server: 'https://10.96.0.1:443' });

    const home = resolved({ env: { HOME: s.home }, serviceAccountDir: s.serviceAccountDir }).source;
    expect(home).toEqual({ from: '~/.kube/config', files: [join(s.home, '.kube', 'config')], context: 'home', server: 'https://home.example:6443' });
  });

  it('does not fall back when discovery.kubeconfig names a missing file', async () => {
    const s = await everySource();
    const missing = join(dir, 'config', 'nope.yaml');
    expect(failure({ file: missing, env: { KUBECONFIG: s.kubeconfigEnv, HOME: s.home } })).toBe(`cannot use kubeconfig ${missing} from discovery.kubeconfig: file not found`);
  });

  it('skips the in-cluster source without a mounted token, and says so when nothing else works', async () => {
    const s = await everySource();
    const noToken = join(dir, 'no-sa');
    expect(resolved({ env: { HOME: s.home, ...s.inClusterEnv }, serviceAccountDir: noToken }).source.from).toBe('~/.kube/config');
    const empty = join(dir, 'empty-home');
    expect(failure({ env: { HOME: empty, ...s.inClusterEnv }, serviceAccountDir: noToken })).toBe(
      `no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG not set; in a cluster but ${join(noToken, 'token')} not found (no service account token mounted); ${join(empty, '.kube', 'config')} not found`,
    );
  });

  it('reads ~/.kube/config only when KUBECONFIG is not set, as kubectl does', async () => {
    const s = await everySource();
    const missing = join(dir, 'env', 'missing');
    expect(failure({ env: { KUBECONFIG: missing, HOME: s.home }, serviceAccountDir: join(dir, 'no-sa') })).toBe(
      `no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG=${missing}: file not found; not in a cluster (KUBERNETES_SERVICE_HOST unset); ~/.kube/config not read (KUBECONFIG is set)`,
    );
    // …while the in-cluster source still comes before it
    expect(resolved({ env: { KUBECONFIG: missing, HOME: s.home, ...s.inClusterEnv }, serviceAccountDir: s.serviceAccountDir }).source.from).toBe('in-cluster');
  });
});

describe('KUBECONFIG with several files', () => {
  it('merges them: the first to set current-context, or to define a name, wins; missing files are skipped', async () => {
    const first = await file('a/first.yaml', kubeconfig({ clusters: [{ name: 'dev', server: 'https://dev-first.example' }], contexts: [{ name: 'dev', cluster: 'dev', user: 'me' }], current: 'dev' }));
    const second = await file(
      'b/second.yaml',
      kubeconfig({
        clusters: [
          { name: 'dev', server: 'https://dev-second.example' },
          { name: 'prod', server: 'https://prod.example', ca: 'certs/prod-ca.crt' },
        ],
        users: [{ name: 'me', token: 'me-token' }],
        contexts: [
          { name: 'dev', cluster: 'prod' },
          { name: 'prod', cluster: 'prod', user: 'me' },
        ],
        current: 'prod',
      }),
    );
    const missing = join(dir, 'c', 'missing.yaml');
    const { kubeConfig, source } = resolved({ env: { KUBECONFIG: [first, missing, second].join(delimiter) } });
    expect(source).toEqual({ from: 'KUBECONFIG', files: [first, second], context: 'dev', server: 'https://dev-first.example' });
    expect(kubeConfig.getCurrentUser()?.token).toBe('me-token'); // the user comes from the second file
    expect(kubeConfig.getContexts().map((c) => `${c.name}→${c.cluster}`)).toEqual(['dev→dev', 'prod→prod']);
    // a relative path is relative to the file that holds it
    expect(kubeConfig.getCluster('prod')?.caFile).toBe(join(dir, 'b', 'certs', 'prod-ca.crt'));

    const reversed = resolved({ env: { KUBECONFIG: [second, first].join(delimiter) } }).source;
    expect(reversed).toEqual({ from: 'KUBECONFIG', files: [second, first], context: 'prod', server: 'https://prod.example' });
  });

  it('ignores empty entries and repeats', async () => {
    const only = await file('only.yaml', single('only', 'https://only.example'));
    expect(resolved({ env: { KUBECONFIG: ['', only, only, ''].join(delimiter) } }).source.files).toEqual([only]);
  });

  it('lists what was tried when none of its files exist', () => {
    const a = join(dir, 'a.yaml');
    const b = join(dir, 'b.yaml');
    const home = join(dir, 'home');
    expect(failure({ env: { KUBECONFIG: [a, b].join(delimiter), HOME: home } })).toBe(
      `no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG=${[a, b].join(delimiter)}: none of its files exist; not in a cluster (KUBERNETES_SERVICE_HOST unset); ~/.kube/config not read (KUBECONFIG is set)`,
    );
  });

  it('names every merged file when the merged result is unusable', async () => {
    const a = await file('a.yaml', kubeconfig({ clusters: [{ name: 'x', server: 'https://x.example' }] }));
    const b = await file('b.yaml', kubeconfig({ users: [{ name: 'u', token: 't' }] }));
    expect(failure({ env: { KUBECONFIG: [a, b].join(delimiter) } })).toBe(`cannot use kubeconfig files ${a}, ${b} (merged) from KUBECONFIG: no current context (current-context is not set)`);
  });
});

describe('an unusable kubeconfig is an error naming the file, never skipped', () => {
  const cases: Array<[string, string, string]> = [
    ['bad YAML', 'clusters: [\n  - name: x\n    cluster: {server: https://x\n', 'not valid YAML ('],
    ['an empty file', '', 'not a kubeconfig (expected a YAML mapping with clusters, users and contexts)'],
    ['a YAML list', '- a\n- b\n', 'not a kubeconfig (expected a YAML mapping with clusters, users and contexts)'],
    ['no current context', kubeconfig({ clusters: [{ name: 'x', server: 'https://x.example' }], contexts: [{ name: 'x', cluster: 'x' }] }), 'no current context (current-context is not set)'],
    [
      'a current context it does not define',
      kubeconfig({ clusters: [{ name: 'x', server: 'https://x.example' }], contexts: [{ name: 'x', cluster: 'x' }], current: 'y' }),
      'current-context "y" is not one of its contexts',
    ],
    ['a context naming an undefined cluster', kubeconfig({ contexts: [{ name: 'x', cluster: 'gone' }], current: 'x' }), 'context "x" names cluster "gone", which is not defined'],
    [
      'a context naming an undefined user',
      kubeconfig({ clusters: [{ name: 'x', server: 'https://x.example' }], contexts: [{ name: 'x', cluster: 'x', user: 'gone' }], current: 'x' }),
      'context "x" names user "gone", which is not defined',
    ],
    ['a cluster without a server URL', kubeconfig({ clusters: [{ name: 'x' }], contexts: [{ name: 'x', cluster: 'x' }], current: 'x' }), 'clusters[0].cluster.server is missing'],
    [
      'a server that is not a URL',
      kubeconfig({ clusters: [{ name: 'x', server: 'x.example:6443' }], contexts: [{ name: 'x', cluster: 'x' }], current: 'x' }),
      'cluster "x" has server "x.example:6443", which is not an http(s) URL',
    ],
  ];

  /** The message for `problem` in `file` from `from`; a problem ending in "(" is followed by the parser's words. */
  const expectProblem = (message: string, file: string, from: string, problem: string): void => {
    const expected = `cannot use kubeconfig ${file} from ${from}: ${problem}`;
    if (problem.endsWith('(')) expect(message.startsWith(expected)).toBe(true);
    else expect(message).toBe(expected);
  };

  it.each(cases)('%s: from discovery.kubeconfig, KUBECONFIG and ~/.kube/config', async (_name, text, problem) => {
    const good = await file('good.yaml', single('good', 'https://good.example'));
    const bad = await file('bad.yaml', text);
    expectProblem(failure({ file: bad, env: { KUBECONFIG: good } }), bad, 'discovery.kubeconfig', problem);
    expectProblem(failure({ env: { KUBECONFIG: bad, HOME: dir } }), bad, 'KUBECONFIG', problem);
    const homeFile = await file('home/.kube/config', text);
    expectProblem(failure({ env: { HOME: join(dir, 'home') } }), homeFile, '~/.kube/config', problem);
  });

  it('a bad file among several in KUBECONFIG is an error even when another is fine', async () => {
    const good = await file('good.yaml', single('good', 'https://good.example'));
    const bad = await file('bad.yaml', 'clusters: [\n');
    expectProblem(failure({ env: { KUBECONFIG: [good, bad].join(delimiter) } }), bad, 'KUBECONFIG', 'not valid YAML (');
  });

  it('says why a file cannot be read', async () => {
    const folder = join(dir, 'a-folder');
    await mkdir(folder);
    expect(failure({ file: folder, env: {} })).toBe(`cannot use kubeconfig ${folder} from discovery.kubeconfig: cannot read it (EISDIR)`);
  });
});

describe('nothing usable', () => {
  it('is one line saying what was tried', () => {
    const home = join(dir, 'home');
    expect(failure({ env: { HOME: home }, serviceAccountDir: join(dir, 'sa') })).toBe(
      `no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG not set; not in a cluster (KUBERNETES_SERVICE_HOST unset); ${join(home, '.kube', 'config')} not found`,
    );
    expect(failure({ env: { KUBERNETES_SERVICE_HOST: '10.96.0.1' } })).toBe(
      'no Kubernetes credentials: discovery.kubeconfig not set; KUBECONFIG not set; not in a cluster (KUBERNETES_SERVICE_PORT unset); ~/.kube/config not tried (HOME not set)',
    );
  });
});

describe('in-cluster credentials', () => {
  it('use the mounted token (re-read from its file), the CA and the service host', async () => {
    const sa = join(dir, 'sa');
    await file('sa/token', 'sa-token-1');
    await file('sa/ca.crt', 'not really a certificate');
    const { kubeConfig, source } = resolved({ env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' }, serviceAccountDir: sa });
    expect(source.server).toBe('https://[fd00::1]:6443');
    expect(kubeConfig.getCurrentCluster()?.caFile).toBe(join(sa, 'ca.crt'));
    const opts: { headers: Record<string, string> } = { headers: {} };
    await kubeConfig.applyToHTTPSOptions(opts);
    expect(opts.headers.Authorization).toBe('Bearer sa-token-1');
  });
});

describe('createKubeApi', () => {
  let fake: FakeKubeApi;
  beforeEach(async () => {
    fake = await FakeKubeApi.start();
  });
  afterEach(() => fake.close());

  it('gives up on a call the API server never answers, after its timeout (a LIST, a Lease, a status write)', async () => {
    // an API server that takes every request and answers none
    const silent = http.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    try {
      const config = await file('silent/config', fake.kubeconfig('t').replaceAll(fake.url, url));
      const api = createKubeApi({ env: { KUBECONFIG: config, HOME: join(dir, 'home') } }, { listMs: 150, requestMs: 100 });
      const failed = (call: Promise<unknown>): Promise<unknown> =>
        call.then(
          () => 'answered',
          (err: unknown) => err,
        );
      for (const call of [
        api.readLease('n', 'l'),
        api.replaceLease('n', 'l', { holderIdentity: 'a', leaseDurationSeconds: 1, leaseTransitions: 0, resourceVersion: '1' }),
        api.patchStatus('modelpools', 'n', 'p', {}),
      ]) {
        expect(String(await failed(call))).toMatch(/abort|timeout/i);
      }
      // an informer's LIST too (its watch, long-lived, never starts)
      const informer = api.informer('modelpools', 'n');
      const listFailed = new Promise<unknown>((resolve) => informer.on('error', resolve));
      void informer.start();
      expect(String(await listFailed)).toMatch(/abort|timeout/i);
      await informer.stop();
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('talks to the API server of the KUBECONFIG file with its token, and says where the credentials came from', async () => {
    const config = await file('laptop/config', fake.kubeconfig('laptop-token'));
    const api = createKubeApi({ env: { KUBECONFIG: config, HOME: join(dir, 'home') } });
    expect(api.credentials).toEqual({ from: 'KUBECONFIG', files: [config], context: 'fake', server: fake.url });
    expect(await api.readLease('modelgate', 'modelgate')).toBeUndefined();
    expect(fake.requests.map((r) => `${r.method} ${r.path} ${r.token ?? '-'}`)).toEqual(['GET /apis/coordination.k8s.io/v1/namespaces/modelgate/leases/modelgate laptop-token']);
  });
});
