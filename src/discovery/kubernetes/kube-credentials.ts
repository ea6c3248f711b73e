/**
 * Where the router's Kubernetes credentials come from, in the order controller-runtime (and so most
 * operators) uses, with kubectl's meaning for each source:
 *
 * 1. `discovery.kubeconfig` from the config file. It must be usable: nothing else is tried.
 * 2. `$KUBECONFIG`: a list of files (separated by ':', ';' on Windows) merged as client-go merges
 *    them: the first file to set a value wins (current-context, and each cluster, user and context
 *    by name); files that do not exist are skipped.
 * 3. In a cluster (`KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` set): the pod's service
 *    account token, re-read as the kubelet rotates it.
 * 4. `~/.kube/config` (HOME, else USERPROFILE), unless `$KUBECONFIG` is set: as for kubectl, it then
 *    replaces the default file.
 *
 * A file that exists but cannot be used (unreadable, not YAML, no current context, a context naming
 * a cluster or user it does not define, a server that is not an http(s) URL) is an error naming the
 * file, never skipped. When no source is usable the error is one line listing what was tried.
 *
 * @kubernetes/client-node's own `loadFromDefault` reads `process.env` itself, merges KUBECONFIG files
 * with the last current-context winning and throws on a name defined twice, and falls back to
 * http://localhost:8080; hence this module, built on its `loadFromString` and `loadFromOptions`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { delimiter, dirname, join, resolve } from 'node:path';
import { KubeConfig, type Cluster, type Context, type User } from '@kubernetes/client-node';
import { parse } from 'yaml';

/** Where the kubelet mounts a pod's service account. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface KubeCredentialsInput {
  /** `discovery.kubeconfig` (already resolved against the config file's folder), if set. */
  file?: string | undefined;
  /** The process environment: KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT, HOME (USERPROFILE). */
  env: Readonly<Record<string, string | undefined>>;
  /** Where the service account is mounted; tests point it at a temp dir. */
  serviceAccountDir?: string;
}

export type KubeCredentialsOrigin = 'discovery.kubeconfig' | 'KUBECONFIG' | 'in-cluster' | '~/.kube/config';

/** Which credentials were loaded: safe to log (no token, no key). */
export interface KubeCredentialsSource {
  from: KubeCredentialsOrigin;
  /** The kubeconfig files read, in merge order (in-cluster: the token file). */
  files: string[];
  context: string;
  server: string;
}

export interface KubeCredentials {
  kubeConfig: KubeConfig;
  source: KubeCredentialsSource;
}

/** No usable credentials, or an unusable kubeconfig; the message is one line. */
export class KubeCredentialsError extends Error {}

const firstLine = (text: string): string => (text.split('\n')[0] ?? '').replace(/:\s*$/, '').trim();

const isNotFound = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ENOENT';

function unusable(files: string[], from: KubeCredentialsOrigin, problem: string): KubeCredentialsError {
  const what = files.length === 1 ? `kubeconfig ${files[0]}` : `kubeconfig files ${files.join(', ')} (merged)`;
  return new KubeCredentialsError(`cannot use ${what} from ${from}: ${problem}`);
}

/** One kubeconfig file, its relative paths (certificates, keys) made absolute against its folder. */
function loadFile(file: string, from: KubeCredentialsOrigin): KubeConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw unusable([file], from, isNotFound(err) ? 'file not found' : `cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw unusable([file], from, `not valid YAML (${firstLine((err as Error).message)})`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw unusable([file], from, 'not a kubeconfig (expected a YAML mapping with clusters, users and contexts)');
  const kc = new KubeConfig();
  try {
    kc.loadFromString(text);
    kc.makePathsAbsolute(dirname(file));
  } catch (err) {
    throw unusable([file], from, firstLine((err as Error).message));
  }
  return kc;
}

/** client-go's merge: the first file to set current-context, or to define a name, wins. */
function merge(configs: KubeConfig[]): KubeConfig {
  const clusters: Cluster[] = [];
  const users: User[] = [];
  const contexts: Context[] = [];
  let currentContext = '';
  const addNew = <T extends { name: string }>(into: T[], items: T[] | undefined): void => {
    for (const item of items ?? []) if (!into.some((x) => x.name === item.name)) into.push(item);
  };
  for (const kc of configs) {
    currentContext ||= kc.currentContext ?? '';
    addNew(clusters, kc.clusters);
    addNew(users, kc.users);
    addNew(contexts, kc.contexts);
  }
  const merged = new KubeConfig();
  merged.loadFromOptions({ clusters, users, contexts, currentContext });
  return merged;
}

/** Loads and merges `files` and checks the current context leads to a server. */
function fromFiles(files: string[], from: KubeCredentialsOrigin): KubeCredentials {
  const kubeConfig = merge(files.map((file) => loadFile(file, from)));
  const fail = (problem: string): KubeCredentialsError => unusable(files, from, problem);
  const contextName = kubeConfig.getCurrentContext();
  if (!contextName) throw fail('no current context (current-context is not set)');
  const context = kubeConfig.getContextObject(contextName);
  if (!context) throw fail(`current-context "${contextName}" is not one of its contexts`);
  const cluster = kubeConfig.getCluster(context.cluster);
  if (!cluster) throw fail(`context "${contextName}" names cluster "${context.cluster}", which is not defined`);
  if (context.user && !kubeConfig.getUser(context.user)) throw fail(`context "${contextName}" names user "${context.user}", which is not defined`);
  let url: URL | undefined;
  try {
    url = new URL(cluster.server);
  } catch {
    url = undefined;
  }
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:') throw fail(`cluster "${cluster.name}" has server "${cluster.server}", which is not an http(s) URL`);
  return { kubeConfig, source: { from, files, context: contextName, server: cluster.server } };
}

/** The pod's service account, as client-node's loadFromCluster builds it but from `env`. */
function inCluster(host: string, port: string, dir: string): KubeCredentials {
  const tokenFile = join(dir, 'token');
  const caFile = join(dir, 'ca.crt');
  // client-node's loadFromCluster: plain HTTP on the usual proxy ports, HTTPS otherwise.
  const scheme = port === '80' || port === '8080' || port === '8001' ? 'http' : 'https';
  const server = `${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    // Without ca.crt the system CAs verify the server (client-go logs and carries on likewise).
    clusters: [{ name: 'inCluster', server, skipTLSVerify: false, ...(existsSync(caFile) ? { caFile } : {}) }],
    users: [{ name: 'inClusterUser', authProvider: { name: 'tokenFile', config: { tokenFile } } }],
    contexts: [{ name: 'inClusterContext', cluster: 'inCluster', user: 'inClusterUser' }],
    currentContext: 'inClusterContext',
  });
  return { kubeConfig, source: { from: 'in-cluster', files: [tokenFile], context: 'inClusterContext', server } };
}

/**
 * The credentials to use (see the module comment for the order). Throws {@link KubeCredentialsError}
 * with a one-line message naming the unusable file, or listing every source tried.
 */
export function resolveKubeCredentials(input: KubeCredentialsInput): KubeCredentials {
  const { env } = input;
  const tried: string[] = [];

  if (input.file) return fromFiles([resolve(input.file)], 'discovery.kubeconfig');
  tried.push('discovery.kubeconfig not set');

  const listed = [
    ...new Set(
      (env.KUBECONFIG ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((f) => resolve(f)),
    ),
  ];
  if (listed.length > 0) {
    const present = listed.filter((f) => existsSync(f));
    if (present.length > 0) return fromFiles(present, 'KUBECONFIG');
    tried.push(`KUBECONFIG=${env.KUBECONFIG ?? ''}: ${listed.length === 1 ? 'file not found' : 'none of its files exist'}`);
  } else {
    tried.push('KUBECONFIG not set');
  }

  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  const dir = input.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  if (!host || !port) tried.push(`not in a cluster (${host ? 'KUBERNETES_SERVICE_PORT' : 'KUBERNETES_SERVICE_HOST'} unset)`);
  else if (!existsSync(join(dir, 'token'))) tried.push(`in a cluster but ${join(dir, 'token')} not found (no service account token mounted)`);
  else return inCluster(host, port, dir);

  const home = env.HOME || env.USERPROFILE;
  if (listed.length > 0) tried.push('~/.kube/config not read (KUBECONFIG is set)');
  else if (!home) tried.push('~/.kube/config not tried (HOME not set)');
  else {
    const file = join(home, '.kube', 'config');
    if (existsSync(file)) return fromFiles([file], '~/.kube/config');
    tried.push(`${file} not found`);
  }
  throw new KubeCredentialsError(`no Kubernetes credentials: ${tried.join('; ')}`);
}
